"""Port groups of a fabric: which ports carry uplinks, downlinks, host links, tier a -> tier b.

A port is one direction of a link: the port of node X toward its peer Y. Names match the fabric two
ways: `X/p<N>` (port N of node X, as live counters name ports) and `X->Y` (the direction X to Y, as
simulated runs name channels). Tiers are the topology's: 0 host, 1 leaf/edge, 2 spine/aggregation,
3 core. Groups:

- `group:uplinks`       switch ports toward a higher tier (leaf->spine, edge->aggregation->core)
- `group:downlinks`     switch ports toward a lower-tier switch
- `group:switch-links`  both directions of every switch-to-switch link
- `group:host-links`    both directions of every host-to-switch link
- `group:tier:<a>-><b>` ports of tier-a nodes toward tier-b nodes (`group:tier:1->2`)

A port whose name matches no link of the fabric belongs to no group.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Sequence

from services.common.errors import InvalidArgument

__all__ = ["GROUPS", "FabricLinks", "group_members", "is_group"]

GroupTest = Callable[[int, int], bool]

GROUPS: dict[str, GroupTest] = {
    "uplinks": lambda own, peer: own >= 1 and peer > own,
    "downlinks": lambda own, peer: peer >= 1 and peer < own,
    "switch-links": lambda own, peer: own >= 1 and peer >= 1,
    "host-links": lambda own, peer: own == 0 or peer == 0,
}
_TIER_GROUP = re.compile(r"tier:(\d+)->(\d+)")
_PORT_NAME = re.compile(r"(?P<node>.+)/p(?P<port>\d+)")


@dataclasses.dataclass(frozen=True)
class FabricLinks:
    """The links of one fabric version: ends (node display names), port numbers and tiers."""

    fabric: str
    version: int
    node_a: list[str]
    port_a: list[int]
    tier_a: list[int]
    node_b: list[str]
    port_b: list[int]
    tier_b: list[int]

    @functools.cached_property
    def _by_port(self) -> dict[tuple[str, int], tuple[int, int]]:
        ends: dict[tuple[str, int], tuple[int, int]] = {}
        for a, pa, ta, b, pb, tb in zip(
            self.node_a, self.port_a, self.tier_a, self.node_b, self.port_b, self.tier_b, strict=True
        ):
            ends[(a, pa)] = (ta, tb)
            ends[(b, pb)] = (tb, ta)
        return ends

    @functools.cached_property
    def _by_direction(self) -> dict[tuple[str, str], tuple[int, int]]:
        ends: dict[tuple[str, str], tuple[int, int]] = {}
        for a, ta, b, tb in zip(self.node_a, self.tier_a, self.node_b, self.tier_b, strict=True):
            ends[(a, b)] = (ta, tb)
            ends[(b, a)] = (tb, ta)
        return ends

    def tiers(self, port: str) -> tuple[int, int] | None:
        """(tier of the port's node, tier of its peer), or None if the name matches no link."""
        if "->" in port:
            own, _, peer = port.partition("->")
            return self._by_direction.get((own, peer))
        match = _PORT_NAME.fullmatch(port)
        if match is None:
            return None
        return self._by_port.get((match["node"], int(match["port"])))


def is_group(pattern: str) -> bool:
    """True for a `group:` pattern."""
    return pattern.startswith("group:")


def _group_test(pattern: str, field: str) -> GroupTest:
    name = pattern.removeprefix("group:")
    if name in GROUPS:
        return GROUPS[name]
    tiers = _TIER_GROUP.fullmatch(name)
    if tiers is not None:
        own, peer = int(tiers[1]), int(tiers[2])
        return lambda a, b: a == own and b == peer
    known = ", ".join(f"group:{g}" for g in GROUPS)
    raise InvalidArgument(field, f"unknown group {pattern!r}; groups are {known}, group:tier:<a>-><b>")


def group_members(pattern: str, field: str, names: Sequence[str], links: FabricLinks) -> list[bool]:
    """For each port name, whether it belongs to the group `pattern` of the fabric `links`.

    >>> links = FabricLinks("fabrics/f", 1, ["leaf-0"], [3], [1], ["spine-0"], [1], [2])
    >>> group_members("group:uplinks", "ports", ["leaf-0/p3", "spine-0->leaf-0", "x"], links)
    [True, False, False]
    """
    test = _group_test(pattern, field)
    members = []
    for name in names:
        tiers = links.tiers(name)
        members.append(tiers is not None and test(*tiers))
    return members
