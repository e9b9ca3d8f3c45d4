"""Which ports of a source a query reads: exact names, globs and fabric groups.

Patterns are matched case-sensitively over the whole port name: an exact name (`leaf-1/p3`), an
fnmatch glob (`spine-*/p1?`, `leaf-*->spine-*`), or a group of the source's fabric (`group:uplinks`,
see `groups`). A port matching any pattern is selected; no patterns select every port. An exact name
that is no port of the source is NOT_FOUND; a glob or group that matches nothing selects nothing.
Ports are few (thousands), so they are matched here rather than in SQL.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy import Connection

from services.common.errors import InvalidArgument, NotFound
from services.telemetry.groups import FabricLinks, group_members, is_group
from services.telemetry.schema import ports

__all__ = ["Selection", "is_glob", "select_ports"]

_GLOB_CHARACTERS = re.compile(r"[*?\[]")

Selection = tuple[list[tuple[int, str]], bool]  # (id, name) sorted by name; True if every port


def is_glob(pattern: str) -> bool:
    """True if `pattern` has fnmatch wildcards."""
    return _GLOB_CHARACTERS.search(pattern) is not None


def select_ports(
    connection: Connection,
    source_key: int,
    source_name: str,
    patterns: Sequence[str],
    links: FabricLinks | None,
    field: str = "ports.patterns",
    port_count: int | None = None,
) -> Selection:
    """The source's ports matching `patterns`, sorted by name, and whether that is all of them.

    `links` are the fabric links group patterns resolve against (None: the source has none, and a
    group pattern is INVALID_ARGUMENT naming it). `port_count`, the source's ports if the caller
    has counted them already, spares exact names a second count.
    """
    if patterns and not any(is_glob(p) or is_group(p) or not p for p in patterns):
        return _exact(connection, source_key, source_name, patterns, field, port_count)
    query = sa.select(ports.c.id, ports.c.name).where(ports.c.source_key == source_key)
    result = connection.execute(query)
    try:
        rows = result.cursor.fetchall()  # plain tuples: thousands of ports in a few milliseconds
    finally:
        result.close()
    # Sorted here, not by SQL, so the order (and paging) is the same on every database collation.
    found = sorted(rows, key=lambda row: row[1])
    if not patterns:
        return found, True
    names = [name for _, name in found]
    chosen = [False] * len(found)
    by_name = {name: i for i, name in enumerate(names)}
    for i, pattern in enumerate(patterns):
        where = f"{field}[{i}]"
        if not pattern:
            raise InvalidArgument(where, "a pattern must not be empty")
        if is_group(pattern):
            if links is None:
                raise InvalidArgument(
                    where, f"{source_name} has no fabric, so its ports have no groups (create it with one)"
                )
            members = group_members(pattern, where, names, links)
        elif is_glob(pattern):
            matcher = re.compile(fnmatch.translate(pattern))
            members = [matcher.match(name) is not None for name in names]
        else:
            if pattern not in by_name:
                raise NotFound(f"{where}: {source_name} has no port {pattern!r}")
            members = [False] * len(names)
            members[by_name[pattern]] = True
        chosen = [a or b for a, b in zip(chosen, members, strict=True)]
    selected = [row for row, keep in zip(found, chosen, strict=True) if keep]
    return selected, len(selected) == len(found)


def _exact(
    connection: Connection,
    source_key: int,
    source_name: str,
    names: Sequence[str],
    field: str,
    port_count: int | None,
) -> Selection:
    """Exact names only: read just those ports (a one-link query must not read every port)."""
    wanted = list(dict.fromkeys(names))
    query = sa.select(ports.c.id, ports.c.name).where(
        ports.c.source_key == source_key, ports.c.name.in_(wanted)
    )
    found = {name: port_id for port_id, name in connection.execute(query)}
    for i, name in enumerate(names):
        if name not in found:
            raise NotFound(f"{field}[{i}]: {source_name} has no port {name!r}")
    total = port_count
    if total is None:
        total = connection.execute(
            sa.select(sa.func.count()).select_from(ports).where(ports.c.source_key == source_key)
        ).scalar_one()
    selected = sorted(((found[name], name) for name in wanted), key=lambda row: row[1])
    return selected, len(selected) == total
