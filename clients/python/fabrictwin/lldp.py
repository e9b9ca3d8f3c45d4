"""LLDP neighbour tables: gathering them, and reading the cabling they describe.

A fabric's cabling is the set of `lldpcli -f json show neighbors` outputs of all its nodes, one per
node. They come as a directory of `*.json` files, a tar archive of them, or (node, text) pairs
gathered by a command run per node (`ssh NODE lldpcli -f json show neighbors`).

`read_cabling` turns them into nodes and cables (standard library only): the topology service
builds fabrics from it (`services/topology/formats/lldp.py`, where the rules are written down), and
the mirror compares a fresh reading with the fabric it keeps. lldpcli's JSON collapses
one-element lists: `interface`, `capability` and `mgmt-ip` are a single value or a list; both
parse, and so does `-f json0` (every list kept, names as `"name"` keys), which is brought to the
`-f json` shape by lldpd's own rules. A document is one JSON value or several printed one after the
other (`lldpcli -f json show chassis; lldpcli -f json show neighbors`), or merged into one object.

Which node a document describes (`show neighbors` alone never says: lldpd writes only the
neighbours' chassis there): the system name of its own chassis when the document holds one, from
`show chassis` (`local-chassis`) or `show interfaces` (the local ports, each with the local chassis
and a `status` instead of `via`); else its file name, without directories, without `.json`, and
without an `lldp` word at its start or end (`lldp.leaf0.json`, `lldp-leaf0.json`,
`leaf0.lldp.json`, `leaf0.json` and `leaf0` all name `leaf0`) unless the neighbours call the node by
the name with that word (`lldp-relay.json` is `lldp-relay` when a neighbour sees `lldp-relay`).

Sizes are checked before anything is parsed: one document at most MAX_DOCUMENT_BYTES (8 MiB; a
64-port switch's `show neighbors` is a few hundred kB), all together at most MAX_TOTAL_BYTES
(256 MiB), an archive at most MAX_ARCHIVE_BYTES (64 MiB) packed.
"""

from __future__ import annotations

import concurrent.futures
import io
import ipaddress
import json
import os
import re
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fabrictwin.errors import InvalidArgumentError

__all__ = [
    "MAX_ARCHIVE_BYTES",
    "MAX_DOCUMENT_BYTES",
    "MAX_TOTAL_BYTES",
    "Cabling",
    "LldpError",
    "LldpInput",
    "cable_name",
    "check_sizes",
    "collect_documents",
    "documents_from_archive",
    "interface_ports",
    "quote",
    "read_cabling",
    "read_documents",
]

# (name, text) pairs, or a tar archive's bytes.
LldpInput = list[tuple[str, str]] | bytes


def read_documents(path: str) -> LldpInput:
    """The LLDP documents at `path`: a directory's `*.json` files as pairs, or a tar archive's bytes.

    Files over the size limits (module docstring) are refused by their size, before they are read.
    """
    if os.path.isdir(path):
        names = sorted(name for name in os.listdir(path) if name.endswith(".json"))
        if not names:
            raise InvalidArgumentError(f"{path}: holds no *.json file (one per node, any name)")
        sizes = [(os.path.join(path, name), os.path.getsize(os.path.join(path, name))) for name in names]
        check_sizes(sizes, "bytes")
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
        size = os.path.getsize(path)
        if size > MAX_ARCHIVE_BYTES:
            raise LldpError(
                path, f"{size:,} bytes; an archive may have at most {MAX_ARCHIVE_BYTES:,} (64 MiB)"
            )
        with open(path, "rb") as stream:
            return stream.read()
    if os.path.isfile(path):
        raise InvalidArgumentError(f"{path}: neither a directory of *.json files nor a tar archive")
    raise InvalidArgumentError(f"{path}: no such file or directory")


def collect_documents(
    commands: Mapping[str, str], *, timeout_s: float = 30.0
) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """Run one shell command per node (its stdout is that node's document), all at once.

    Returns the documents of the nodes whose command succeeded and, per failed node, why. Each runs
    as a mirror's `command` target does (`fabrictwin.scrape.fetch_command`): in a session of its
    own, its output read as it comes and stopped past MAX_DOCUMENT_BYTES, and everything it started
    killed when it times out, prints too much or is done.
    """
    from fabrictwin.scrape import ScrapeError, fetch_command  # the mirror's, not the service's

    def run(command: str) -> str:
        output = fetch_command(command, timeout_s, MAX_DOCUMENT_BYTES)
        try:
            return output.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ScrapeError(f"not UTF-8 text (byte {exc.start})") from None

    documents: list[tuple[str, str]] = []
    failed: dict[str, str] = {}
    if not commands:
        return documents, failed
    with concurrent.futures.ThreadPoolExecutor(min(len(commands), 64)) as pool:
        running = {node: pool.submit(run, command) for node, command in commands.items()}
        for node, future in running.items():
            try:
                documents.append((node, future.result()))
            except ScrapeError as exc:
                failed[node] = str(exc)
            except OSError as exc:  # /bin/sh itself could not be started
                failed[node] = f"cannot run: {exc.strerror or exc}"
    return documents, failed


class LldpError(InvalidArgumentError):
    """A document that cannot be read, or documents that disagree; `field` names the document."""

    def __init__(self, field: str, problem: str) -> None:
        # Names come from the documents: at most a few hundred characters of either in a message.
        self.field = field if len(field) <= 300 else f"{field[:300]}..."
        self.problem = problem if len(problem) <= 700 else f"{problem[:700]}..."
        super().__init__(f"{self.field}: {self.problem}")


MAX_ARCHIVE_BYTES = 64 * 1024 * 1024  # an archive, packed
MAX_DOCUMENT_BYTES = 8 * 1024 * 1024  # one node's document (a 64-port switch's is a few hundred kB)
MAX_TOTAL_BYTES = 256 * 1024 * 1024  # all documents together (an archive, unpacked)
_SWITCH_CAPABILITIES = frozenset({"router", "bridge"})
_QUOTE = 200


def quote(text: str, limit: int = _QUOTE) -> str:
    """`repr` of at most `limit` (200) characters of `text`, for error messages."""
    text = str(text)
    return repr(text if len(text) <= limit else text[:limit] + "...")


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
    """The `*.json` members of a tar archive (plain or gzip/bz2/xz), as (name, text) pairs.

    Directories and members not ending in `.json` are skipped; an archive holding no `.json` file,
    one that is not tar at all, or one past the size limits (a member over MAX_DOCUMENT_BYTES, all
    of them over MAX_TOTAL_BYTES: judged by the sizes the archive declares, before unpacking) is
    refused.
    """
    if len(archive) > MAX_ARCHIVE_BYTES:
        raise LldpError(
            field, f"{len(archive):,} bytes; an archive may have at most {MAX_ARCHIVE_BYTES:,} (64 MiB)"
        )
    documents: list[tuple[str, str]] = []
    extracted = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:*") as tar:
            for member in tar:
                if not member.isfile() or not member.name.endswith(".json"):
                    continue
                _check_size(f"{field}: {quote(member.name)}", member.size, "bytes")
                extracted += member.size
                if extracted > MAX_TOTAL_BYTES:
                    raise LldpError(field, _over_total(extracted, "bytes", "unpacks to"))
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
        raise LldpError(field, "holds no *.json file (one per node, any name)")
    return documents


def _check_size(where: str, size: int, unit: str) -> None:
    if size > MAX_DOCUMENT_BYTES:
        raise LldpError(
            where,
            f"{size:,} {unit}; one node's document may have at most {MAX_DOCUMENT_BYTES:,} (8 MiB: a "
            "64-port switch's `lldpcli -f json show neighbors` is a few hundred kB)",
        )


def _over_total(size: int, unit: str, verb: str = "are") -> str:
    limit = f"{MAX_TOTAL_BYTES:,} (256 MiB)"
    return f"{verb} {size:,} {unit} in all; the documents of one fabric may have at most {limit}"


def check_sizes(sizes: Iterable[tuple[str, int]], unit: str = "characters") -> None:
    """Refuse (LldpError naming the document) a document over MAX_DOCUMENT_BYTES, or all of them
    over MAX_TOTAL_BYTES: `sizes` are (document name, size), known before anything is parsed."""
    total = 0
    for name, size in sizes:
        _check_size(f"documents[{quote(name)}]", size, unit)
        total += size
    if total > MAX_TOTAL_BYTES:
        raise LldpError("documents", _over_total(total, unit))


_LLDP_WORD = re.compile(r"^lldp[._-](?=.)|(?<=.)[._-]lldp$", re.IGNORECASE)


def _file_names(document_name: str) -> tuple[str, str]:
    """(the file's name, that without an `lldp` word): `dumps/lldp.leaf0.json` -> (`lldp.leaf0`, `leaf0`).

    Directories and a `.json` suffix go; the second is the first when there is no `lldp` word to drop.
    """
    base = document_name.replace("\\", "/").rsplit("/", 1)[-1]
    if base.lower().endswith(".json"):
        base = base[: -len(".json")]
    return base, _LLDP_WORD.sub("", base, count=1)


def _cleanup(value: Any) -> Any:
    """lldpd's own clean-up of its JSON (json_writer.c), turning `-f json0` into the `-f json` shape.

    A one-element list becomes its element, an object holding only `value` becomes that value, and
    an object with a string `name` becomes `{name: the object without it}`. `-f json` output is
    already so, and comes back unchanged.
    """
    if isinstance(value, list):
        if len(value) == 1:
            return _cleanup(value[0])
        return [_cleanup(item) for item in value]
    if isinstance(value, dict):
        if len(value) == 1 and "value" in value:
            return _cleanup(value["value"])
        cleaned = {key: _cleanup(item) for key, item in value.items()}
        name = cleaned.get("name")
        if isinstance(name, str):
            del cleaned["name"]
            return {name: cleaned}
        return cleaned
    return value


def _load(name: str, text: str) -> list[dict[str, Any]]:
    """The document's JSON objects (lldpcli may print several, one after the other), cleaned up."""
    decoder = json.JSONDecoder()
    where = f"documents[{quote(name)}]"
    values: list[dict[str, Any]] = []
    position = 0
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position >= len(text):
            break
        try:
            value, position = decoder.raw_decode(text, position)
            value = _cleanup(value)
        except json.JSONDecodeError as exc:
            hint = "" if text[position] in "{[" else " (is it `lldpcli -f json` output?)"
            raise LldpError(
                where, f"line {exc.lineno}: not JSON: {exc.msg} (column {exc.colno}){hint}"
            ) from None
        except RecursionError:
            raise LldpError(where, "JSON nested too deeply") from None
        if not isinstance(value, dict):
            raise LldpError(where, f"expected a JSON object as lldpcli prints, got {type(value).__name__}")
        values.append(value)
    if not values:
        raise LldpError(where, "is empty")
    return values


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


@dataclass
class _Document:
    """One document read: the node it names itself ('' when it does not), and its neighbour entries."""

    name: str
    own: str = ""
    own_switch: bool = False
    own_ipv4: int = 0
    entries: list[tuple[str, str, str, str]] = field(default_factory=list)  # (port, peer, peer port, where)


_HOW_TO_NAME = (
    "add `lldpcli -f json show chassis` output to it (`lldpcli -f json show chassis; lldpcli -f json "
    "show neighbors` prints both), or name the file after its node"
)


class _Parsed:
    """Every document read: neighbour entries, node descriptions, which document names which node."""

    def __init__(self) -> None:
        self.entries: list[_Neighbour] = []
        self.described: dict[str, _Description] = {}
        self.document_of: dict[str, str] = {}
        self.by_file_name: dict[str, str] = {}  # node -> document, for nodes named only by a file name

    def describe(self, node: str, switch: bool, ipv4: int) -> None:
        description = self.described.setdefault(node, _Description())
        description.switch |= switch
        if ipv4 and not description.ipv4:
            description.ipv4 = ipv4

    def read(self, document: str, text: str) -> _Document:
        """What one document says, its node still unnamed when the document does not name it."""
        values = _load(document, text)
        where = f"documents[{quote(document)}]"
        read = _Document(document)
        own: dict[str, Mapping[str, Any]] = {}  # the names the document gives its own chassis
        tables, local_only = 0, 0
        for value in values:
            if "local-chassis" in value:
                local = value["local-chassis"]
                fields = local.get("chassis") if isinstance(local, dict) else None
                if fields is None:
                    raise LldpError(f"{where}.local-chassis", "has no chassis")
                name, chassis = _chassis(fields, f"{where}.local-chassis.chassis")
                own.setdefault(name, chassis)
            if "lldp" not in value:
                continue
            neighbours, local_ports = 0, 0
            for table in _as_list(value["lldp"]):  # lldpcli prints {} or [{}] for a node without neighbours
                if not isinstance(table, dict):
                    raise LldpError(f"{where}.lldp", "must be an object")
                for port, entry in _pairs(table.get("interface"), f"{where}.lldp.interface"):
                    at = f"{where}.lldp.interface.{port}"
                    if isinstance(entry, dict) and "status" in entry and "via" not in entry:
                        # `show interfaces`: a local port, described by the local chassis.
                        if "chassis" not in entry:
                            raise LldpError(at, "a local interface (`show interfaces`) needs `chassis`")
                        name, chassis = _chassis(entry["chassis"], f"{at}.chassis")
                        own.setdefault(name, chassis)
                        local_ports += 1
                        continue
                    read.entries.append(self._entry(str(port), entry, at))
                    neighbours += 1
            tables += 1
            local_only += local_ports > 0 and neighbours == 0
        if not tables and not own:
            raise LldpError(where, "has no `lldp` key: not `lldpcli -f json show neighbors` output")
        if tables and local_only == tables:
            raise LldpError(
                where,
                "holds `show interfaces` output but no `show neighbors`: collect "
                "`lldpcli -f json show neighbors` (with `show chassis` or `show interfaces` if you like)",
            )
        names = sorted(name for name in own if name)
        if len(names) > 1:
            raise LldpError(
                where,
                f"names two nodes itself: {quote(names[0])} and {quote(names[1])} (one document per node)",
            )
        if names:
            read.own = names[0]
        for described in own.values():
            read.own_switch |= _capable_switch(described)
            read.own_ipv4 = read.own_ipv4 or _first_ipv4(described)
        return read

    def _entry(self, port: str, entry: Any, where: str) -> tuple[str, str, str, str]:
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
        return port, peer, _port_name(entry["port"], f"{where}.port"), where

    def name_nodes(self, documents: Sequence[_Document]) -> None:
        """Give every document its node (module docstring) and its entries that node."""
        seen = {peer for document in documents for _, peer, _, _ in document.entries}
        for document in documents:
            where = f"documents[{quote(document.name)}]"
            node = document.own
            if not node:
                whole, without_lldp = _file_names(document.name)
                node = whole if whole in seen else without_lldp
                if not node:
                    raise LldpError(where, f"names no node: {_HOW_TO_NAME} (NODE.json)")
                self.by_file_name[node] = document.name
            if node in self.document_of:
                raise LldpError(
                    where, f"describes node {quote(node)}, as does document {quote(self.document_of[node])}"
                )
            self.document_of[node] = document.name
            self.describe(node, document.own_switch, document.own_ipv4)
            self.entries += [
                _Neighbour(document.name, node, port, peer, peer_port)
                for port, peer, peer_port, _ in document.entries
            ]

    def check_described(self) -> None:
        """Every neighbour has a document; first, as a misnamed document makes other errors too."""
        for entry in self.entries:
            if entry.peer not in self.document_of:
                raise LldpError(
                    f"documents[{quote(entry.document)}]",
                    f"{entry.node}:{entry.port} sees {quote(entry.peer)}:{entry.peer_port}, which no "
                    f"document describes{self.naming_hint(entry.peer)}",
                )

    def naming_hint(self, missing: str) -> str:
        """Why no document describes `missing` when documents named by their file names may be its."""
        seen = {entry.peer for entry in self.entries}
        unseen = [document for node, document in self.by_file_name.items() if node not in seen]
        if not unseen:
            return " (give one document per node, hosts included)"
        names = ", ".join(quote(document, 60) for document in unseen[:3])
        more = f" and {len(unseen) - 3} more" if len(unseen) > 3 else ""
        how = _HOW_TO_NAME
        if len(unseen) == 1:
            start = f"Document {names} does not say which node it is"
        else:
            start = f"Documents {names}{more} do not say which node each is"
            how = how.replace("to it", "to each").replace("name the file", "name each file")
        return (
            f". {start}, and no neighbour sees the node its file name gives: {how} "
            f"({quote(missing + '.json', 60)})"
        )


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


def interface_ports(links: Iterable[Any]) -> dict[str, dict[str, str]]:
    """node -> interface name -> its port in the twin (`leaf0` -> {`swp3`: `leaf0/p3`}), from a fabric's
    links (`topology_pb2.Link`s) where they keep the interface names LLDP gave them.

    How an exporter's interfaces are named as the fabric's ports, by the mirror and by `fabrictwin
    telemetry import` alike (an interface the fabric does not name is no fabric port).
    """
    interfaces: dict[str, dict[str, str]] = {}
    for link in links:
        for node, port, name in (
            (link.node_a, link.port_a, link.port_name_a),
            (link.node_b, link.port_b, link.port_name_b),
        ):
            node = node.rsplit("/", 1)[-1]  # `fabrics/f/nodes/leaf0` or `leaf0`
            if name:
                interfaces.setdefault(node, {})[name] = f"{node}/p{port}"
    return interfaces


def cable_name(node: str, port: str, peer: str, peer_port: str) -> str:
    """`leaf0:swp3 <-> spine0:swp1`, the ends sorted, so both ends name a cable the same way."""
    ends = sorted([f"{node}:{port}", f"{peer}:{peer_port}"])
    return f"{ends[0]} <-> {ends[1]}"


def read_cabling(documents: Sequence[tuple[str, str]]) -> Cabling:
    """The nodes and cables of one LLDP document per node; LldpError names the first problem."""
    if not documents:
        raise LldpError("documents", "give one LLDP document per node")
    check_sizes((str(name), len(text)) for name, text in documents)
    parsed = _Parsed()
    parsed.name_nodes([parsed.read(str(name), text) for name, text in documents])
    parsed.check_described()
    cables, notes = _pair_links(parsed)
    nodes = list(parsed.document_of)
    return Cabling(
        nodes=nodes,
        switch={node: parsed.described[node].switch for node in nodes},
        ipv4={node: parsed.described[node].ipv4 for node in nodes},
        cables=cables,
        notes=notes,
    )
