"""Routing engines: each computes Routes (CSR of next channels per node and destination host).

An engine is anything with a `name` and `compute(fabric) -> Routes` (the `RoutingEngine` protocol);
adding one is adding a module and a line in `ENGINES`. Names follow OpenSM's `-R` choices.
"""

from __future__ import annotations

from typing import Protocol

from services.common.errors import InvalidArgument
from services.topology.fabric import Fabric
from services.topology.routing.minhop import MinHop
from services.topology.routing.paths import Path, PathListing, list_paths
from services.topology.routing.routes import Routes, diff_routes

__all__ = [
    "ENGINES",
    "PLANNED_ENGINES",
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


ENGINES: dict[str, type[RoutingEngine]] = {"minhop": MinHop}
PLANNED_ENGINES = ("updn", "ftree", "file")  # issue #3


def engine_named(name: str, field: str = "routing_engine") -> RoutingEngine:
    """An instance of the engine called `name`; InvalidArgument naming `field` otherwise."""
    if name in ENGINES:
        return ENGINES[name]()
    if name in PLANNED_ENGINES:
        raise InvalidArgument(
            field, f"the {name} routing engine is not implemented yet (issue #3); use minhop"
        )
    raise InvalidArgument(field, f"unknown routing engine {name!r}; known: {', '.join(ENGINES)}")
