"""SQL store of fabrics: one row per fabric, node and link, so a restart loses nothing.

Routes are recomputed on load from the stored engine name, root GUIDs and link states (routing is
deterministic for a given fabric, link states, engine and roots), and `routing_version` is kept so
clients see the same version after a restart. A running subnet manager's sweep keeps forwarding
entries of the tables before it, so its LFTs depend on the fabric's history: when they differ from a
fresh routing they are stored too (`routing_tables`, one compressed array per fabric, for its
current routing version) and put back on load. Link state changes update the link row, the stored
LFTs and the fabric's version in one transaction. The `file` engine's opensm-lfts.dump text is kept
in its own table (one row per fabric routed by it); the routing settings a fabric was given (root
GUIDs, the reroute mode) in another.
Rows are written in bulk (Core `insert()` with lists of dicts) inside one transaction, so a fabric
is either stored whole or not at all. Tables are created on start (`metadata.create_all`; a new
table appears in an old database, no existing table changes); migrations arrive with Alembic.
Works on SQLite and PostgreSQL.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    DateTime,
    Engine,
    Float,
    ForeignKey,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    delete,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from services.common.errors import AlreadyExists, NotFound
from services.topology.fabric import Fabric

__all__ = ["FabricRecord", "RoutingOutcome", "TopologyStore"]


@dataclasses.dataclass
class FabricRecord:
    """What the store keeps about a fabric besides its nodes and links."""

    id: str
    display_name: str
    spec: dict[str, Any] | None  # normalised FabricSpec dict when generated
    imported_format: str | None  # e.g. "ibnetdiscover" when imported (issue #3)
    labels: dict[str, str]
    routing_engine: str
    routing_version: int
    host_count: int
    switch_count: int
    link_count: int
    create_time: dt.datetime
    update_time: dt.datetime
    import_notes: list[str] = dataclasses.field(default_factory=list)  # what the import noticed
    routing_roots: list[int] = dataclasses.field(default_factory=list)  # updn/ftree root GUIDs (empty: found)
    reroute: str = "incremental"  # how link state changes reroute: "incremental" or "fresh"
    outcome: RoutingOutcome | None = None  # how the current tables were made (None: not recorded)


@dataclasses.dataclass(frozen=True)
class RoutingOutcome:
    """How a fabric's current tables were made: the engine used (the one asked for, or minhop where
    it fell back, and why) and updn's or ftree's roots (GUIDs) with how they were chosen."""

    engine_used: str
    fallback_reason: str = ""
    roots: tuple[int, ...] = ()
    root_selection: str = ""  # "detected", "given" or "" (no roots)


def _outcome(settings: Any) -> RoutingOutcome:
    """The RoutingOutcome of a routing_settings row."""
    return RoutingOutcome(
        engine_used=settings.engine_used,
        fallback_reason=settings.fallback_reason,
        roots=tuple(int(guid, 16) for guid in settings.roots_used),
        root_selection=settings.root_selection,
    )


def _utc(value: dt.datetime) -> dt.datetime:
    """SQLite hands back naive datetimes; everything stored is UTC."""
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


class TopologyStore:
    """Fabrics, their nodes and links in SQL; `table_prefix` keeps tests' tables apart."""

    def __init__(self, engine: Engine, table_prefix: str = "topology_") -> None:
        self.engine = engine
        self.metadata = MetaData()
        p = table_prefix
        self.fabrics = Table(
            f"{p}fabrics",
            self.metadata,
            Column("id", String(63), primary_key=True),
            Column("display_name", String(256), nullable=False),
            Column("spec", JSON, nullable=True),
            Column("imported_format", String(32), nullable=True),
            Column("labels", JSON, nullable=False),
            Column("routing_engine", String(32), nullable=False),
            Column("routing_version", BigInteger, nullable=False),
            Column("host_count", Integer, nullable=False),
            Column("switch_count", Integer, nullable=False),
            Column("link_count", Integer, nullable=False),
            Column("create_time", DateTime(timezone=True), nullable=False, index=True),
            Column("update_time", DateTime(timezone=True), nullable=False),
        )
        fabric_fk = ForeignKey(f"{p}fabrics.id", ondelete="CASCADE")
        self.nodes = Table(
            f"{p}nodes",
            self.metadata,
            Column("fabric_id", String(63), fabric_fk, primary_key=True),
            Column("idx", Integer, primary_key=True),
            Column("name", String(256), nullable=False),
            Column("kind", SmallInteger, nullable=False),
            Column("tier", SmallInteger, nullable=False),
            Column("radix", Integer, nullable=False),
            Column("node_group", Integer, nullable=False),
            Column("rail", Integer, nullable=False),
            Column("guid", BigInteger, nullable=False),  # uint64 stored as its signed twin
            Column("lid", Integer, nullable=False),
            Column("ip", BigInteger, nullable=False),  # uint32
        )
        self.links = Table(
            f"{p}links",
            self.metadata,
            Column(
                "fabric_id", String(63), ForeignKey(f"{p}fabrics.id", ondelete="CASCADE"), primary_key=True
            ),
            Column("idx", Integer, primary_key=True),
            Column("name", String(600), nullable=False),
            Column("a", Integer, nullable=False),
            Column("port_a", Integer, nullable=False),
            Column("b", Integer, nullable=False),
            Column("port_b", Integer, nullable=False),
            Column("rate_bps", BigInteger, nullable=False),
            Column("latency_ns", BigInteger, nullable=False),
            Column("state", SmallInteger, nullable=False),
            Column("ber", Float, nullable=False),
        )
        self.routing_files = Table(
            f"{p}routing_files",
            self.metadata,
            Column(
                "fabric_id", String(63), ForeignKey(f"{p}fabrics.id", ondelete="CASCADE"), primary_key=True
            ),
            Column("content", Text, nullable=False),
        )
        # What an importer knew beyond the arrays (interface names of link ends, notes), one row per
        # imported fabric that has any: a table of its own, so older databases gain it on start.
        self.imports = Table(
            f"{p}fabric_imports",
            self.metadata,
            Column(
                "fabric_id", String(63), ForeignKey(f"{p}fabrics.id", ondelete="CASCADE"), primary_key=True
            ),
            Column("port_names", JSON, nullable=True),  # [names of a ends, names of b ends]
            Column("notes", JSON, nullable=False),
        )

        # Routing settings (root GUIDs, reroute mode) and how the current tables were made, one row
        # per fabric (fabrics stored before this table existed have none: the defaults).
        self.routing_settings = Table(
            f"{p}routing_settings",
            self.metadata,
            Column(
                "fabric_id", String(63), ForeignKey(f"{p}fabrics.id", ondelete="CASCADE"), primary_key=True
            ),
            Column("roots", JSON, nullable=False),  # given GUIDs as "0x..." strings
            Column("reroute", String(16), nullable=False),
            Column("engine_used", String(32), nullable=False),
            Column("fallback_reason", Text, nullable=False),
            Column("roots_used", JSON, nullable=False),  # GUIDs as "0x..." strings
            Column("root_selection", String(16), nullable=False),
        )
        # LFTs that kept entries of earlier tables (a running subnet manager's sweep), for the
        # fabric's routing version they were made for: np.save'd int array, zlib-compressed.
        self.lft_tables = Table(
            f"{p}routing_tables",
            self.metadata,
            Column(
                "fabric_id", String(63), ForeignKey(f"{p}fabrics.id", ondelete="CASCADE"), primary_key=True
            ),
            Column("routing_version", BigInteger, nullable=False),
            Column("lft", LargeBinary, nullable=False),
        )

    def create_tables(self) -> None:
        self.metadata.create_all(self.engine)

    def drop_tables(self) -> None:
        self.metadata.drop_all(self.engine)

    def _record(self, row: Any, notes: list[str] | None = None, settings: Any = None) -> FabricRecord:
        values = row._asdict()
        values["create_time"] = _utc(values["create_time"])
        values["update_time"] = _utc(values["update_time"])
        values["labels"] = dict(values["labels"] or {})
        if settings is not None:
            values["routing_roots"] = [int(guid, 16) for guid in settings.roots]
            values["reroute"] = settings.reroute
            values["outcome"] = _outcome(settings)
        return FabricRecord(**values, import_notes=list(notes or []))

    def _settings(self, conn: Any, fabric_ids: list[str]) -> dict[str, Any]:
        if not fabric_ids:
            return {}
        t = self.routing_settings
        return {row.fabric_id: row for row in conn.execute(select(t).where(t.c.fabric_id.in_(fabric_ids)))}

    def _write_settings(
        self,
        conn: Any,
        fabric_id: str,
        outcome: RoutingOutcome | None,
        roots: Sequence[int] | None = None,
        reroute: str | None = None,
    ) -> None:
        """Replace the fabric's settings row: `roots`, `reroute` and `outcome` where given, else as
        stored (or the defaults)."""
        t = self.routing_settings
        current = self._settings(conn, [fabric_id]).get(fabric_id)
        if roots is None:
            roots = [] if current is None else [int(g, 16) for g in current.roots]
        if reroute is None:
            reroute = "incremental" if current is None else current.reroute
        if outcome is None:
            outcome = RoutingOutcome(engine_used="") if current is None else _outcome(current)
        conn.execute(delete(t).where(t.c.fabric_id == fabric_id))
        conn.execute(
            insert(t).values(
                fabric_id=fabric_id,
                roots=[f"{g:#018x}" for g in roots],
                reroute=reroute,
                engine_used=outcome.engine_used,
                fallback_reason=outcome.fallback_reason,
                roots_used=[f"{g:#018x}" for g in outcome.roots],
                root_selection=outcome.root_selection,
            )
        )

    def _notes(self, conn: Any, fabric_ids: list[str]) -> dict[str, list[str]]:
        if not fabric_ids:
            return {}
        rows = conn.execute(
            select(self.imports.c.fabric_id, self.imports.c.notes).where(
                self.imports.c.fabric_id.in_(fabric_ids)
            )
        )
        return {fabric_id: list(notes or []) for fabric_id, notes in rows}

    def add(self, record: FabricRecord, fabric: Fabric) -> None:
        """Store a new fabric whole, in one transaction; AlreadyExists if the id is taken."""
        fid = record.id
        node_rows = [
            {"fabric_id": fid, "idx": i, "name": name, "kind": kind, "tier": tier, "radix": radix,
             "node_group": group, "rail": rail, "guid": guid, "lid": lid, "ip": ip}
            for i, (name, kind, tier, radix, group, rail, guid, lid, ip) in enumerate(zip(
                fabric.node_names, fabric.node_kind.tolist(), fabric.node_tier.tolist(),
                fabric.node_radix.tolist(), fabric.node_group.tolist(), fabric.node_rail.tolist(),
                fabric.node_guid.view(np.int64).tolist(), fabric.node_lid.tolist(),
                fabric.node_ip.tolist(), strict=True))
        ]  # fmt: skip
        link_rows = [
            {"fabric_id": fid, "idx": i, "name": name, "a": a, "port_a": pa, "b": b, "port_b": pb,
             "rate_bps": rate, "latency_ns": latency, "state": state, "ber": ber}
            for i, (name, a, pa, b, pb, rate, latency, state, ber) in enumerate(zip(
                fabric.link_names, fabric.link_a.tolist(), fabric.link_port_a.tolist(),
                fabric.link_b.tolist(), fabric.link_port_b.tolist(), fabric.link_rate_bps.tolist(),
                fabric.link_latency_ns.tolist(), fabric.link_state.tolist(), fabric.link_ber.tolist(),
                strict=True))
        ]  # fmt: skip
        try:
            with self.engine.begin() as conn:
                row = dataclasses.asdict(record)
                notes = row.pop("import_notes")
                roots, reroute = row.pop("routing_roots"), row.pop("reroute")
                row.pop("outcome")
                conn.execute(insert(self.fabrics).values(**row))
                self._write_settings(conn, fid, record.outcome, roots, reroute)
                if notes or fabric.link_port_names is not None:
                    names = (
                        None if fabric.link_port_names is None else [list(s) for s in fabric.link_port_names]
                    )
                    conn.execute(insert(self.imports).values(fabric_id=fid, port_names=names, notes=notes))
                if node_rows:
                    conn.execute(insert(self.nodes), node_rows)
                if link_rows:
                    conn.execute(insert(self.links), link_rows)
        except IntegrityError as exc:
            if self.exists(fid):
                raise AlreadyExists(f"fabrics/{fid} already exists") from exc
            raise

    def exists(self, fabric_id: str) -> bool:
        with self.engine.connect() as conn:
            return (
                conn.execute(select(self.fabrics.c.id).where(self.fabrics.c.id == fabric_id)).first()
                is not None
            )

    def get(self, fabric_id: str) -> FabricRecord:
        """The fabric's record; NotFound if there is none."""
        with self.engine.connect() as conn:
            row = conn.execute(select(self.fabrics).where(self.fabrics.c.id == fabric_id)).first()
            notes = self._notes(conn, [fabric_id])
            settings = self._settings(conn, [fabric_id])
        if row is None:
            raise NotFound(f"fabrics/{fabric_id} does not exist")
        return self._record(row, notes.get(fabric_id), settings.get(fabric_id))

    def list(self, offset: int, limit: int) -> list[FabricRecord]:
        """Records in creation order (then id), `limit` of them from `offset`."""
        query = (
            select(self.fabrics)
            .order_by(self.fabrics.c.create_time, self.fabrics.c.id)
            .offset(offset)
            .limit(limit)
        )
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
            notes = self._notes(conn, [row.id for row in rows])
            settings = self._settings(conn, [row.id for row in rows])
        return [self._record(row, notes.get(row.id), settings.get(row.id)) for row in rows]

    def count(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(self.fabrics)).scalar_one())

    def delete(self, fabric_id: str) -> None:
        """Delete the fabric with its nodes and links; NotFound if there is none."""
        with self.engine.begin() as conn:
            conn.execute(delete(self.routing_files).where(self.routing_files.c.fabric_id == fabric_id))
            conn.execute(delete(self.routing_settings).where(self.routing_settings.c.fabric_id == fabric_id))
            conn.execute(delete(self.lft_tables).where(self.lft_tables.c.fabric_id == fabric_id))
            conn.execute(delete(self.imports).where(self.imports.c.fabric_id == fabric_id))
            conn.execute(delete(self.links).where(self.links.c.fabric_id == fabric_id))
            conn.execute(delete(self.nodes).where(self.nodes.c.fabric_id == fabric_id))
            gone = conn.execute(delete(self.fabrics).where(self.fabrics.c.id == fabric_id)).rowcount
            if not gone:
                raise NotFound(f"fabrics/{fabric_id} does not exist")

    def set_routing(
        self,
        fabric_id: str,
        engine: str,
        version: int,
        when: dt.datetime,
        lfts_dump: str | None = None,
        *,
        outcome: RoutingOutcome | None = None,
        roots: Sequence[int] | None = None,
        reroute: str | None = None,
    ) -> FabricRecord:
        """Record a new routing engine/version (and the dump the file engine reads, how the tables were
        made, the root GUIDs and reroute mode where given), routed afresh: no stored LFTs; the updated
        record."""
        with self.engine.begin() as conn:
            changed = conn.execute(
                update(self.fabrics)
                .where(self.fabrics.c.id == fabric_id)
                .values(routing_engine=engine, routing_version=version, update_time=when)
            ).rowcount
            if changed and lfts_dump is not None:
                conn.execute(delete(self.routing_files).where(self.routing_files.c.fabric_id == fabric_id))
                conn.execute(insert(self.routing_files).values(fabric_id=fabric_id, content=lfts_dump))
            if changed:
                conn.execute(delete(self.lft_tables).where(self.lft_tables.c.fabric_id == fabric_id))
                self._write_settings(conn, fabric_id, outcome, roots, reroute)
        if not changed:
            raise NotFound(f"fabrics/{fabric_id} does not exist")
        return self.get(fabric_id)

    def routing_file(self, fabric_id: str) -> str | None:
        """The opensm-lfts.dump the file engine routes this fabric with, if any."""
        with self.engine.connect() as conn:
            row = conn.execute(
                select(self.routing_files.c.content).where(self.routing_files.c.fabric_id == fabric_id)
            ).first()
        return None if row is None else row[0]

    def set_link_states(
        self,
        fabric_id: str,
        changes: Sequence[tuple[int, int, float]],
        version: int,
        when: dt.datetime,
        lft: np.ndarray | None = None,
        outcome: RoutingOutcome | None = None,
    ) -> FabricRecord:
        """Store links' states `(index, state, ber)`, the fabric's new routing version, how its tables
        were made and its LFTs when they kept entries of earlier ones (`lft`; None: a fresh routing
        gives them) in one transaction: all of them or (NotFound for a missing link) none."""
        with self.engine.begin() as conn:
            self._write_tables(conn, fabric_id, version, lft)
            if outcome is not None:
                self._write_settings(conn, fabric_id, outcome)
            for link, state, ber in changes:
                changed = conn.execute(
                    update(self.links)
                    .where(self.links.c.fabric_id == fabric_id, self.links.c.idx == link)
                    .values(state=state, ber=ber)
                ).rowcount
                if not changed:  # rolls the whole transaction back
                    raise NotFound(f"fabrics/{fabric_id}/links/{link} does not exist")
            conn.execute(
                update(self.fabrics)
                .where(self.fabrics.c.id == fabric_id)
                .values(routing_version=version, update_time=when)
            )
        return self.get(fabric_id)

    def _write_tables(self, conn: Any, fabric_id: str, version: int, lft: np.ndarray | None) -> None:
        t = self.lft_tables
        conn.execute(delete(t).where(t.c.fabric_id == fabric_id))
        if lft is not None:
            buffer = io.BytesIO()
            np.save(buffer, np.ascontiguousarray(lft), allow_pickle=False)
            data = zlib.compress(buffer.getvalue(), 6)
            conn.execute(insert(t).values(fabric_id=fabric_id, routing_version=version, lft=data))

    def stored_lft(self, fabric_id: str, version: int) -> np.ndarray | None:
        """The stored LFTs of `version` (a sweep that kept entries), None when a fresh routing gives them."""
        t = self.lft_tables
        with self.engine.connect() as conn:
            row = conn.execute(
                select(t.c.lft).where(t.c.fabric_id == fabric_id, t.c.routing_version == version)
            ).first()
        if row is None:
            return None
        return np.load(io.BytesIO(zlib.decompress(row[0])), allow_pickle=False)

    def update_fabric(self, fabric_id: str, values: dict[str, Any], when: dt.datetime) -> FabricRecord:
        """Change `display_name` and/or `labels`; the updated record."""
        with self.engine.begin() as conn:
            changed = conn.execute(
                update(self.fabrics).where(self.fabrics.c.id == fabric_id).values(**values, update_time=when)
            ).rowcount
        if not changed:
            raise NotFound(f"fabrics/{fabric_id} does not exist")
        return self.get(fabric_id)

    def load_fabric(self, fabric_id: str) -> Fabric:
        """The stored nodes and links as a Fabric; NotFound if there is no such fabric."""
        n, lk = self.nodes.c, self.links.c
        with self.engine.connect() as conn:
            if conn.execute(select(self.fabrics.c.id).where(self.fabrics.c.id == fabric_id)).first() is None:
                raise NotFound(f"fabrics/{fabric_id} does not exist")
            nodes = conn.execute(
                select(n.name, n.kind, n.tier, n.radix, n.node_group, n.rail, n.guid, n.lid, n.ip)
                .where(n.fabric_id == fabric_id)
                .order_by(n.idx)
            ).all()
            links = conn.execute(
                select(
                    lk.name, lk.a, lk.port_a, lk.b, lk.port_b, lk.rate_bps, lk.latency_ns, lk.state, lk.ber
                )
                .where(lk.fabric_id == fabric_id)
                .order_by(lk.idx)
            ).all()
            imported = conn.execute(
                select(self.imports.c.port_names, self.imports.c.notes).where(
                    self.imports.c.fabric_id == fabric_id
                )
            ).first()
        node_cols: list[Sequence[Any]] = list(zip(*nodes, strict=True)) if nodes else [[] for _ in range(9)]
        link_cols: list[Sequence[Any]] = list(zip(*links, strict=True)) if links else [[] for _ in range(9)]
        return Fabric(
            node_kind=np.array(node_cols[1], dtype=np.int8),
            node_tier=np.array(node_cols[2], dtype=np.int8),
            node_names=list(node_cols[0]),
            node_radix=np.array(node_cols[3], dtype=np.int32),
            node_group=np.array(node_cols[4], dtype=np.int32),
            node_rail=np.array(node_cols[5], dtype=np.int32),
            node_guid=np.array(node_cols[6], dtype=np.int64).view(np.uint64),
            node_lid=np.array(node_cols[7], dtype=np.int32),
            node_ip=np.array(node_cols[8], dtype=np.uint32),
            link_a=np.array(link_cols[1], dtype=np.int32),
            link_port_a=np.array(link_cols[2], dtype=np.int32),
            link_b=np.array(link_cols[3], dtype=np.int32),
            link_port_b=np.array(link_cols[4], dtype=np.int32),
            link_rate_bps=np.array(link_cols[5], dtype=np.int64),
            link_latency_ns=np.array(link_cols[6], dtype=np.int64),
            link_state=np.array(link_cols[7], dtype=np.int8),
            link_ber=np.array(link_cols[8], dtype=np.float64),
            link_names=list(link_cols[0]),
            link_port_names=None
            if imported is None or imported.port_names is None
            else (list(imported.port_names[0]), list(imported.port_names[1])),
            import_notes=[] if imported is None else list(imported.notes or []),
        )
