"""Routing engines: each computes Routes (LFT ports and equal-cost groups) for a fabric's link states.

An engine is anything with a `name`, `compute(fabric) -> Routes` and `reroute(fabric, previous) ->
Routes` (the `RoutingEngine` protocol; `reroute` may recompute only what changed since `previous`).
Adding one is adding a module and a line in `ENGINES`. Names follow OpenSM's `-R` choices.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from services.common.errors import InvalidArgument
from services.topology.fabric import Fabric
from services.topology.routing.file import FileRouting
from services.topology.routing.ftree import FatTree
from services.topology.routing.minhop import MinHop
from services.topology.routing.paths import Path, PathListing, list_paths
from services.topology.routing.routes import Routes, diff_routes
from services.topology.routing.updn import UpDown

__all__ = [
    "ENGINES",
    "FILE_ENGINE",
    "ROOTED_ENGINES",
    "Path",
    "PathListing",
    "Routes",
    "RoutingEngine",
    "diff_routes",
    "engine_named",
    "list_paths",
]


class RoutingEngine(Protocol):
    """What every routing engine offers."""

    name: str

    def compute(self, fabric: Fabric) -> Routes:
        """Forwarding state of `fabric` for its current link states."""
        ...

    def reroute(self, fabric: Fabric, previous: Routes) -> Routes:
        """Forwarding state after link states changed from those `previous` was computed for; equal to
        `compute(fabric)` entry for entry, recomputing only what must change where it can."""
        ...


ENGINES: dict[str, type[RoutingEngine]] = {"minhop": MinHop, "updn": UpDown, "ftree": FatTree}
ROOTED_ENGINES: dict[str, type[UpDown] | type[FatTree]] = {"updn": UpDown, "ftree": FatTree}
FILE_ENGINE = "file"  # needs a dump: engine_named("file", lfts_dump=...)


def engine_named(
    name: str, field: str = "routing_engine", *, lfts_dump: str | None = None, roots: Sequence[int] = ()
) -> RoutingEngine:
    """An instance of the engine called `name`; InvalidArgument naming `field` otherwise.

    The `file` engine needs `lfts_dump` (opensm-lfts.dump text; errors name `lfts_dump` and the line).
    `roots` (switch GUIDs, as OpenSM's root GUID file) are for updn and ftree; empty: each finds its own.
    """
    if roots and name not in ROOTED_ENGINES:
        raise InvalidArgument(
            "routing_roots", f"only {' and '.join(ROOTED_ENGINES)} take root switches, not {name}"
        )
    if name in ROOTED_ENGINES:
        return ROOTED_ENGINES[name](roots)
    if name in ENGINES:
        return ENGINES[name]()
    if name == FILE_ENGINE:
        if not lfts_dump:
            raise InvalidArgument("lfts_dump", "the file routing engine needs an opensm-lfts.dump text")
        return FileRouting(lfts_dump)
    known = ", ".join([*ENGINES, FILE_ENGINE])
    raise InvalidArgument(field, f"unknown routing engine {name!r}; known: {known}")
