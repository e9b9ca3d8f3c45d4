"""LLDP neighbour tables: gathering them, and reading the cabling they describe.

A fabric's cabling is the set of `lldpcli -f json show neighbors` outputs of all its nodes, one per
node. They come as a directory of `NODE.json` files, a tar archive of them, or (node, text) pairs
gathered by a command run per node (`ssh NODE lldpcli -f json show neighbors`).

`read_cabling` turns them into nodes and cables (standard library only): the topology service
builds fabrics from it (`services/topology/formats/lldp.py`, where the rules are written down), and
the mirror compares a fresh reading with the fabric it keeps. lldpcli's JSON collapses
one-element lists: `interface`, `capability` and `mgmt-ip` are a single value or a list; both
parse. A document may also hold `show chassis` output (`local-chassis`), merged or printed first.
"""

from __future__ import annotations

import io
import ipaddress
import json
import os
import subprocess
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fabrictwin.errors import InvalidArgumentError

__all__ = [
    "MAX_ARCHIVE_BYTES",
    "Cabling",
    "LldpError",
    "LldpInput",
    "cable_name",
    "collect_documents",
    "documents_from_archive",
    "quote",
    "read_cabling",
    "read_documents",
]

# (name, text) pairs, or a tar archive's bytes.
LldpInput = list[tuple[str, str]] | bytes


def read_documents(path: str) -> LldpInput:
    """The LLDP documents at `path`: a directory's `*.json` files as pairs, or a tar archive's bytes."""
    if os.path.isdir(path):
        names = sorted(name for name in os.listdir(path) if name.endswith(".json"))
        if not names:
            raise InvalidArgumentError(f"{path}: holds no NODE.json file")
        pairs = []
        for name in names:
            try:
                with open(os.path.join(path, name), encoding="utf-8") as stream:
                    pairs.append((name, stream.read()))
            except UnicodeDecodeError as exc:
                raise InvalidArgumentError(
                    f"{os.path.join(path, name)}: not UTF-8 text (byte {exc.start})"
                ) from None
        return pairs
    if os.path.isfile(path) and tarfile.is_tarfile(path):
        with open(path, "rb") as stream:
            return stream.read()
    if os.path.isfile(path):
        raise InvalidArgumentError(f"{path}: neither a directory of NODE.json files nor a tar archive")
    raise InvalidArgumentError(f"{path}: no such file or directory")


def collect_documents(
    commands: Mapping[str, str], *, timeout_s: float = 30.0
) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """Run one shell command per node (its stdout is that node's document), all at once.

    Returns the documents of the nodes whose command succeeded and, per failed node, why.
    """
    started = {
        node: subprocess.Popen(
            ["/bin/sh", "-c", command], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for node, command in commands.items()
    }
    documents: list[tuple[str, str]] = []
    failed: dict[str, str] = {}
    for node, process in started.items():
        try:
            out, err = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            failed[node] = f"timed out after {timeout_s:g} s"
            continue
        if process.returncode != 0:
            failed[node] = f"exited with {process.returncode}: {(err.strip().splitlines() or [''])[-1][:200]}"
            continue
        documents.append((node, out))
    return documents, failed


class LldpError(InvalidArgumentError):
    """A document that cannot be read, or documents that disagree; `field` names the document."""

    def __init__(self, field: str, problem: str) -> None:
        # Names come from the documents: at most a few hundred characters of either in a message.
        self.field = field if len(field) <= 300 else f"{field[:300]}..."
        self.problem = problem if len(problem) <= 700 else f"{problem[:700]}..."
        super().__init__(f"{self.field}: {self.problem}")


MAX_ARCHIVE_BYTES = 64 * 1024 * 1024
_MAX_EXTRACTED_BYTES = 256 * 1024 * 1024
_SWITCH_CAPABILITIES = frozenset({"router", "bridge"})
_QUOTE = 200


def quote(text: str) -> str:
    """`repr` of at most 200 characters of `text`, for error messages."""
    text = str(text)
    return repr(text if len(text) <= _QUOTE else text[:_QUOTE] + "...")


@dataclass(frozen=True)
class _Neighbour:
    """One entry of a neighbour table: `node`'s interface `port` sees `peer`'s port `peer_port`."""

    document: str
    node: str
    port: str
    peer: str
    peer_port: str


@dataclass
class _Description:
    """What is known of a node: does anyone see it as a switch, and its IPv4 addresses."""

    switch: bool = False
    ipv4: int = 0


def documents_from_archive(archive: bytes, field: str = "archive") -> list[tuple[str, str]]:
    """The `NODE.json` members of a tar archive (plain or gzip/bz2/xz), as (name, text) pairs.

    Directories and members not ending in `.json` are skipped; an archive holding no `.json` file,
    one that is not tar at all, or one that unpacks past 256 MiB is refused.
    """
    if len(archive) > MAX_ARCHIVE_BYTES:
        raise LldpError(field, f"{len(archive)} bytes; at most {MAX_ARCHIVE_BYTES} are accepted")
    documents: list[tuple[str, str]] = []
    extracted = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:*") as tar:
            for member in tar:
                if not member.isfile() or not member.name.endswith(".json"):
                    continue
                extracted += member.size
                if extracted > _MAX_EXTRACTED_BYTES:
                    raise LldpError(field, f"unpacks to more than {_MAX_EXTRACTED_BYTES} bytes")
                stream = tar.extractfile(member)
                data = stream.read() if stream is not None else b""
                try:
                    documents.append((member.name, data.decode("utf-8")))
                except UnicodeDecodeError as exc:
                    raise LldpError(
                        f"{field}: {quote(member.name)}", f"not UTF-8 text (byte {exc.start})"
                    ) from None
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise LldpError(field, f"not a readable tar archive: {exc}") from None
    if not documents:
        raise LldpError(field, "holds no NODE.json file")
    return documents


def _node_name_of(document_name: str) -> str:
    """`dumps/leaf0.json` -> `leaf0`."""
    base = document_name.replace("\\", "/").rsplit("/", 1)[-1]
    return base[: -len(".json")] if base.endswith(".json") else base


def _load(name: str, text: str) -> dict[str, Any]:
    """The document's JSON values merged into one object (lldpcli may print two, one after the other)."""
    decoder = json.JSONDecoder()
    merged: dict[str, Any] = {}
    position, values = 0, 0
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position >= len(text):
            break
        try:
            value, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError as exc:
            raise LldpError(
                f"documents[{quote(name)}]", f"line {exc.lineno}: not JSON: {exc.msg} (column {exc.colno})"
            ) from None
        except RecursionError:
            raise LldpError(f"documents[{quote(name)}]", "JSON nested too deeply") from None
        if not isinstance(value, dict):
            raise LldpError(
                f"documents[{quote(name)}]",
                f"expected a JSON object as lldpcli prints, got {type(value).__name__}",
            )
        merged.update(value)
        values += 1
    if not values:
        raise LldpError(f"documents[{quote(name)}]", "is empty")
    return merged


def _as_list(value: Any) -> list[Any]:
    """lldpcli's one-or-many: a list stays, anything else becomes a one-element list, None none."""
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _pairs(value: Any, where: str) -> list[tuple[str, Any]]:
    """`{"a": x, "b": y}` or `[{"a": x}, {"b": y}]` -> [("a", x), ("b", y)] (repeated keys kept)."""
    pairs: list[tuple[str, Any]] = []
    for item in _as_list(value):
        if not isinstance(item, dict):
            raise LldpError(where, f"expected objects keyed by name, got {type(item).__name__}")
        pairs.extend(item.items())
    return pairs


def _chassis(value: Any, where: str) -> tuple[str, dict[str, Any]]:
    """(system name, chassis fields) of a `chassis` object; the name is '' when none is advertised."""
    if not isinstance(value, dict):
        raise LldpError(where, "chassis must be an object")
    if "id" in value:  # no system name: the fields sit directly under `chassis`
        return "", value
    named = _pairs(value, where)
    if len(named) != 1 or not isinstance(named[0][1], dict):
        raise LldpError(where, "expected one chassis, keyed by its system name")
    return str(named[0][0]), named[0][1]


def _capable_switch(fields: Mapping[str, Any]) -> bool:
    for capability in _as_list(fields.get("capability")):
        if (
            isinstance(capability, dict)
            and str(capability.get("type", "")).lower() in _SWITCH_CAPABILITIES
            and capability.get("enabled") in (True, "on", "true", "yes")
        ):
            return True
    return False


def _first_ipv4(fields: Mapping[str, Any]) -> int:
    for address in _as_list(fields.get("mgmt-ip")):
        try:
            parsed = ipaddress.ip_address(str(address))
        except ValueError:
            continue
        if parsed.version == 4:
            return int(parsed)
    return 0


def _port_name(port: Any, where: str) -> str:
    """The neighbour's port: its ID when typed ifname, else its description, else the raw ID."""
    if not isinstance(port, dict):
        raise LldpError(where, "port must be an object")
    port_id = port.get("id")
    id_type, id_value = "", ""
    if isinstance(port_id, dict):
        id_type, id_value = str(port_id.get("type", "")), str(port_id.get("value", ""))
    elif port_id is not None:
        id_value = str(port_id)
    if id_type == "ifname" and id_value:
        return id_value
    description = port.get("descr")
    if isinstance(description, str) and description:
        return description
    if id_value:
        return id_value
    raise LldpError(where, "the neighbour's port has neither an ID nor a description")


class _Parsed:
    """Every document read: neighbour entries, node descriptions, which document names which node."""

    def __init__(self) -> None:
        self.entries: list[_Neighbour] = []
        self.described: dict[str, _Description] = {}
        self.document_of: dict[str, str] = {}

    def describe(self, node: str, switch: bool, ipv4: int) -> None:
        description = self.described.setdefault(node, _Description())
        description.switch |= switch
        if ipv4 and not description.ipv4:
            description.ipv4 = ipv4

    def read(self, document: str, text: str) -> None:
        value = _load(document, text)
        where = f"documents[{quote(document)}]"
        node = _node_name_of(document)
        local = value.get("local-chassis")
        if local is not None:
            fields = local.get("chassis") if isinstance(local, dict) else None
            if fields is None:
                raise LldpError(f"{where}.local-chassis", "has no chassis")
            name, chassis = _chassis(fields, f"{where}.local-chassis.chassis")
            node = name or node
            self.describe(node, _capable_switch(chassis), _first_ipv4(chassis))
        if not node:
            raise LldpError(where, "names no node (give the document a file name or `show chassis`)")
        if node in self.document_of:
            raise LldpError(
                where, f"describes node {quote(node)}, as does document {quote(self.document_of[node])}"
            )
        self.document_of[node] = document
        self.described.setdefault(node, _Description())
        if "lldp" not in value:
            if local is None:
                raise LldpError(where, "has no `lldp` key: not `lldpcli -f json show neighbors` output")
            return
        lldp = value["lldp"]
        for table in _as_list(lldp):  # lldpcli prints {} or [{}] for a node without neighbours
            if not isinstance(table, dict):
                raise LldpError(f"{where}.lldp", "must be an object")
            for port, entry in _pairs(table.get("interface"), f"{where}.lldp.interface"):
                self._entry(document, node, str(port), entry, f"{where}.lldp.interface.{port}")

    def _entry(self, document: str, node: str, port: str, entry: Any, where: str) -> None:
        if not isinstance(entry, dict):
            raise LldpError(where, "must be an object")
        if "chassis" not in entry or "port" not in entry:
            raise LldpError(where, "needs `chassis` and `port`")
        peer, chassis = _chassis(entry["chassis"], f"{where}.chassis")
        if not peer:
            raise LldpError(
                f"{where}.chassis", "the neighbour advertises no system name (enable it in its lldpd)"
            )
        self.describe(peer, _capable_switch(chassis), _first_ipv4(chassis))
        peer_port = _port_name(entry["port"], f"{where}.port")
        self.entries.append(_Neighbour(document, node, port, peer, peer_port))


def _pair_links(parsed: _Parsed) -> tuple[list[tuple[str, str, str, str]], list[str]]:
    """Links (node, port, peer, peer port), each once, and notes about the one-sided ones."""
    by_port: dict[tuple[str, str], _Neighbour] = {}
    pointing_at: dict[tuple[str, str], list[_Neighbour]] = {}  # (node, peer) -> entries of node seeing peer
    for entry in parsed.entries:
        key = (entry.node, entry.port)
        if key in by_port:
            raise LldpError(
                f"documents[{quote(entry.document)}]",
                f"interface {entry.port} of {entry.node} lists two neighbours ({by_port[key].peer} and "
                f"{entry.peer}): not a point-to-point link",
            )
        by_port[key] = entry
        pointing_at.setdefault((entry.node, entry.peer), []).append(entry)
    links: list[tuple[str, str, str, str]] = []
    notes: list[str] = []
    cabled: dict[tuple[str, str], _Neighbour] = {}  # port end -> the entry whose link took it
    for entry in parsed.entries:
        if (entry.node, entry.port) in cabled:
            continue
        where = f"documents[{quote(entry.document)}]"
        if entry.peer not in parsed.document_of:
            raise LldpError(
                where,
                f"{entry.node}:{entry.port} sees {quote(entry.peer)}:{entry.peer_port}, which no document "
                "describes (give one document per node, hosts included)",
            )
        other = by_port.get((entry.peer, entry.peer_port))
        if other is not None and (other.peer, other.peer_port) != (entry.node, entry.port):
            raise LldpError(
                where,
                f"{entry.node}:{entry.port} says its neighbour is {entry.peer}:{entry.peer_port}, but "
                f"document {quote(other.document)} says {other.node}:{other.port} sees "
                f"{other.peer}:{other.peer_port}",
            )
        if other is None:
            # The peer may know the port by another name (its ID a MAC, say): its entry pointing back.
            back = [
                candidate
                for candidate in pointing_at.get((entry.peer, entry.node), [])
                if candidate.peer_port == entry.port and (candidate.node, candidate.port) not in cabled
            ]
            other = back[0] if len(back) == 1 else None
        peer_end = (other.node, other.port) if other is not None else (entry.peer, entry.peer_port)
        if peer_end in cabled:
            taken = cabled[peer_end]
            raise LldpError(
                where,
                f"{entry.node}:{entry.port} sees {peer_end[0]}:{peer_end[1]}, which document "
                f"{quote(taken.document)} already cables to {taken.node}:{taken.port}",
            )
        links.append((entry.node, entry.port, *peer_end))
        cabled[(entry.node, entry.port)] = entry
        cabled[peer_end] = entry
        if other is None:
            notes.append(
                f"one-sided link {entry.node}:{entry.port} <-> {entry.peer}:{entry.peer_port}: only "
                f"document {quote(entry.document)} lists it"
            )
    return links, notes


@dataclass
class Cabling:
    """What a set of neighbour tables says: the nodes (in document order) and the cables."""

    nodes: list[str]
    switch: dict[str, bool]  # node -> seen as a switch (Router/Bridge enabled) by anyone
    ipv4: dict[str, int]  # node -> first IPv4 management address (0: none)
    cables: list[tuple[str, str, str, str]]  # (node, ifname, peer, peer ifname), each once
    notes: list[str] = field(default_factory=list)  # one-sided cables

    def cable_names(self) -> set[str]:
        """Every cable as `a:if <-> b:if`, the ends in sorted order."""
        return {cable_name(*cable) for cable in self.cables}


def cable_name(node: str, port: str, peer: str, peer_port: str) -> str:
    """`leaf0:swp3 <-> spine0:swp1`, the ends sorted, so both ends name a cable the same way."""
    ends = sorted([f"{node}:{port}", f"{peer}:{peer_port}"])
    return f"{ends[0]} <-> {ends[1]}"


def read_cabling(documents: Sequence[tuple[str, str]]) -> Cabling:
    """The nodes and cables of one LLDP document per node; LldpError names the first problem."""
    if not documents:
        raise LldpError("documents", "give one LLDP document per node")
    parsed = _Parsed()
    for name, text in documents:
        parsed.read(str(name), text)
    cables, notes = _pair_links(parsed)
    nodes = list(parsed.document_of)
    return Cabling(
        nodes=nodes,
        switch={node: parsed.described[node].switch for node in nodes},
        ipv4={node: parsed.described[node].ipv4 for node in nodes},
        cables=cables,
        notes=notes,
    )
