"""Telemetry sources as stored: the record, and creating, reading, updating and deleting them in SQL.

A source is a live cluster or a simulated run (`sources/{id}`). Besides its id it has an integer
key that its samples carry, and the marks kept by ingest and the sweep (newest sample, roll-ups,
retention horizon). On PostgreSQL it owns one partition of the sample and roll-up tables.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from collections.abc import Mapping

import sqlalchemy as sa
from sqlalchemy import Connection

from services.common.errors import AlreadyExists, InvalidArgument, NotFound
from services.common.resources import parse_name, validate_id
from services.telemetry.fabric_links import delete_unused_links
from services.telemetry.partitions import create_partitions, drop_partitions
from services.telemetry.queries import QuerySource
from services.telemetry.schema import counter_log, ports, rollups, samples, sources

__all__ = [
    "SourceKind",
    "SourceRecord",
    "delete_source",
    "insert_source",
    "list_sources",
    "read_source",
    "update_source",
]


class SourceKind(enum.Enum):
    """Where a source's samples come from."""

    LIVE = "live"
    SIMULATED = "simulated"


@dataclasses.dataclass(frozen=True)
class SourceRecord:
    """A telemetry source (`sources/{id}`) as stored."""

    id: str
    kind: SourceKind
    display_name: str = ""
    fabric: str = ""  # fabrics/{fabric}, or "" when unknown
    simulation: str = ""  # simulations/{simulation} for simulated sources
    retention_ns: int = 0  # 0 keeps raw samples forever
    create_time_ns: int = 0
    sample_count: int = 0
    newest_time_ns: int | None = None
    retained_from_ns: int = 0
    rolled_up_until_ns: int = 0
    port_count: int = 0
    key: int = 0
    fabric_version: int = 0

    @property
    def name(self) -> str:
        """`sources/{id}`."""
        return f"sources/{self.id}"

    def for_query(self) -> QuerySource:
        """What queries need of this source."""
        return QuerySource(
            self.key, self.name, self.newest_time_ns, self.rolled_up_until_ns, self.retained_from_ns
        )


_STORED = (
    "id",
    "kind",
    "display_name",
    "fabric",
    "simulation",
    "retention_ns",
    "create_time_ns",
    "sample_count",
    "newest_time_ns",
    "retained_from_ns",
    "rolled_up_until_ns",
    "key",
    "fabric_version",
)


def _record(row: Mapping, port_count: int) -> SourceRecord:
    values = {name: row[name] for name in _STORED}
    return SourceRecord(**(values | {"kind": SourceKind(row["kind"]), "port_count": port_count}))


def _port_counts(connection: Connection, keys: list[int]) -> dict[int, int]:
    if not keys:
        return {}
    query = (
        sa.select(ports.c.source_key, sa.func.count())
        .where(ports.c.source_key.in_(keys))
        .group_by(ports.c.source_key)
    )
    return {int(key): int(count) for key, count in connection.execute(query)}


def insert_source(connection: Connection, source: SourceRecord) -> SourceRecord:
    """Store a new source and its partitions; its create time is now. ALREADY_EXISTS if the id is taken."""
    validate_id(source.id, "source_id")
    if source.fabric:
        parse_name(source.fabric, "fabrics/{fabric}", "source.fabric")
    if source.simulation:
        parse_name(source.simulation, "simulations/{simulation}", "source.simulation")
    if source.retention_ns < 0:
        raise InvalidArgument("source.retention_ns", f"{source.retention_ns} is negative")
    taken = connection.execute(sa.select(sources.c.key).where(sources.c.id == source.id)).first()
    if taken is not None:
        raise AlreadyExists(f"sources/{source.id} already exists")
    row = {
        "id": source.id,
        "kind": source.kind.value,
        "display_name": source.display_name or source.id,
        "fabric": source.fabric,
        "simulation": source.simulation,
        "retention_ns": source.retention_ns,
        "create_time_ns": time.time_ns(),
        "sample_count": 0,
        "newest_time_ns": None,
        "metrics_mask": 0,
        "rolled_up_until_ns": 0,
        "retained_from_ns": 0,
        "fabric_version": 0,
        "port_rates_version": 0,
    }
    key = connection.execute(sa.insert(sources).values(**row).returning(sources.c.key)).scalar_one()
    create_partitions(connection, key)
    return _record(row | {"key": key}, 0)


def read_source(connection: Connection, source_id: str, *, lock: bool = False) -> SourceRecord:
    """The source with its counts; NOT_FOUND if there is none."""
    query = sa.select(sources).where(sources.c.id == source_id)
    row = connection.execute(query.with_for_update() if lock else query).mappings().first()
    if row is None:
        raise NotFound(f"sources/{source_id} does not exist")
    return _record(row, _port_counts(connection, [row["key"]]).get(row["key"], 0))


def list_sources(connection: Connection, offset: int, limit: int) -> tuple[list[SourceRecord], int | None]:
    """Sources by id from `offset`; returns them and the next offset (None on the last page)."""
    query = sa.select(sources).order_by(sources.c.id).offset(offset).limit(limit + 1)
    rows = connection.execute(query).mappings().all()
    counts = _port_counts(connection, [row["key"] for row in rows[:limit]])
    found = [_record(row, counts.get(row["key"], 0)) for row in rows[:limit]]
    return found, (offset + limit if len(rows) > limit else None)


def update_source(connection: Connection, source_id: str, changes: Mapping[str, str | int]) -> SourceRecord:
    """Change `display_name` and/or `retention_ns` of a source."""
    current = read_source(connection, source_id, lock=True)
    values = dict(changes)
    if "retention_ns" in values and int(values["retention_ns"]) < 0:
        raise InvalidArgument("source.retention_ns", f"{values['retention_ns']} is negative")
    if values.get("display_name") == "":
        values["display_name"] = current.id
    if values:
        connection.execute(sa.update(sources).where(sources.c.key == current.key).values(**values))
    return read_source(connection, source_id)


def delete_source(connection: Connection, source_id: str) -> int:
    """Delete a source, its ports, samples and roll-ups; returns its key."""
    current = read_source(connection, source_id, lock=True)
    if not drop_partitions(connection, current.key):
        for table in (samples, rollups):
            connection.execute(sa.delete(table).where(table.c.source_key == current.key))
    for table in (counter_log, ports):
        connection.execute(sa.delete(table).where(table.c.source_key == current.key))
    connection.execute(sa.delete(sources).where(sources.c.key == current.key))
    if current.fabric_version:
        delete_unused_links(connection, current.fabric, current.fabric_version)
    return current.key
