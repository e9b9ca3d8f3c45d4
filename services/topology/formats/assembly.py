"""Building a `Fabric` from what an importer parsed: tiers, LIDs, link names, validation.

Every importer ends here, so that the rules below are the same for every format:

- **tiers** (when the format gives none): hosts are tier 0; a switch with at least one host
  neighbour is a leaf, tier 1; every other switch is 1 + its hop distance (over switch-switch
  links) from the nearest leaf, so a fat-tree's aggregation switches are tier 2 and its cores
  tier 3. A switch that reaches no leaf (a fabric without hosts) is tier 1. Tiers above 127 are
  capped at 127 (the array is int8).
- **LIDs**: a LID of 0 means "not given"; such nodes get fresh LIDs above the highest given one,
  in node order (so a dump without LIDs gets 1..N, as generators do).
- **link names** are `link_display_names` of the node names, as for generated fabrics.
- **size**: the fabric is admitted by the service's `FabricLimits` (nodes, links, ports per switch)
  before its arrays are assembled; importers that know the size earlier (a header) check it there.
- the result passes `Fabric.validate()`; an importer that got this far has already named the line
  of any problem it could pin to one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from services.common.errors import InvalidArgument, quote
from services.topology.fabric import Fabric, LinkState, NodeKind, link_display_names
from services.topology.limits import (
    DEFAULT_LIMITS,
    MAX_LINK_LATENCY_NS,
    MAX_NAME_CHARS,
    FabricLimits,
    FabricSize,
    check_latency_ns,
    check_speed_gbps,
)

__all__ = [
    "assemble_fabric",
    "check_defaults",
    "check_name",
    "infer_tiers",
    "orient_upper_tier_first",
]

_MAX_TIER = 127


def check_defaults(default_link_speed_gbps: Any, default_link_latency_ns: Any) -> tuple[int, int]:
    """(rate in bit/s, latency in ns) from the importers' defaults; InvalidArgument naming the bad one."""
    speed = check_speed_gbps(default_link_speed_gbps, "default_link_speed_gbps")
    latency = default_link_latency_ns
    if isinstance(latency, bool) or not isinstance(latency, int | np.integer):
        raise InvalidArgument(
            "default_link_latency_ns",
            f"must be a whole number of ns in 0..{MAX_LINK_LATENCY_NS:,}, got {quote(latency, 40)}",
        )
    return round(speed * 1e9), check_latency_ns(latency, "default_link_latency_ns")


def check_name(name: str, where: str) -> str:
    """A node name of at most MAX_NAME_CHARS characters; InvalidArgument naming `where` otherwise."""
    if len(name) > MAX_NAME_CHARS:
        raise InvalidArgument(
            where,
            f"a node name has at most {MAX_NAME_CHARS} characters, got {len(name):,}: {quote(name, 60)}",
        )
    return name


def infer_tiers(kind: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[N] int8 tiers from node kinds and link ends (rules in the module docstring).

    >>> kind = np.array([NodeKind.HOST, NodeKind.SWITCH, NodeKind.SWITCH, NodeKind.SWITCH])
    >>> infer_tiers(kind, np.array([1, 2, 3]), np.array([0, 1, 2])).tolist()
    [0, 1, 2, 3]
    """
    n = kind.shape[0]
    is_switch = kind == NodeKind.SWITCH
    is_host = ~is_switch
    distance = np.full(n, -1, dtype=np.int64)
    leaf = np.zeros(n, dtype=bool)
    leaf[a[is_host[b]]] = True
    leaf[b[is_host[a]]] = True
    leaf &= is_switch
    distance[leaf] = 0
    # Level-synchronous BFS over switch-switch links: one vectorised step per tier, so the cost is
    # O(links x depth) with depth 2-3 in real fabrics, instead of a Python loop over nodes.
    between_switches = is_switch[a] & is_switch[b]
    sa, sb = a[between_switches], b[between_switches]
    frontier, level = leaf, 0
    while frontier.any():
        reached = np.concatenate([sb[frontier[sa]], sa[frontier[sb]]])
        reached = reached[distance[reached] < 0]
        level += 1
        distance[reached] = level
        frontier = np.zeros(n, dtype=bool)
        frontier[reached] = True
    tier = np.where(distance >= 0, np.minimum(distance + 1, _MAX_TIER), 1)
    tier[is_host] = 0
    return tier.astype(np.int8)


def orient_upper_tier_first(
    tier: np.ndarray, a: np.ndarray, port_a: np.ndarray, b: np.ndarray, port_b: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Swap link ends so the upper tier is on the a side (the generators' convention); ties keep order."""
    swap = tier[a] < tier[b]
    return (
        np.where(swap, b, a),
        np.where(swap, port_b, port_a),
        np.where(swap, a, b),
        np.where(swap, port_a, port_b),
    )


def _fill_lids(lid: np.ndarray) -> np.ndarray:
    lid = lid.astype(np.int64)
    missing = lid <= 0
    lid[missing] = int(lid.max(initial=0)) + 1 + np.arange(int(missing.sum()))
    return lid.astype(np.int32)


def assemble_fabric(
    *,
    kind: np.ndarray,
    names: list[str],
    radix: np.ndarray,
    links: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    rate_bps: np.ndarray,
    latency_ns: np.ndarray,
    tier: np.ndarray | None = None,
    guid: np.ndarray | None = None,
    lid: np.ndarray | None = None,
    group: np.ndarray | None = None,
    rail: np.ndarray | None = None,
    ip: np.ndarray | None = None,
    state: np.ndarray | None = None,
    ber: np.ndarray | None = None,
    orient: bool = False,
    port_names: tuple[list[str], list[str]] | None = None,
    import_notes: list[str] | None = None,
    limits: FabricLimits = DEFAULT_LIMITS,
) -> Fabric:
    """A validated Fabric from parsed arrays; missing optional arrays take the defaults above.

    `links` is (a, port_a, b, port_b). With `orient=True` (formats without a link direction) the
    upper-tier end of every link is put on the a side, and `port_names` (the interface names of the
    a and b ends) move with their ends.
    """
    n = kind.shape[0]
    radix = np.asarray(radix, dtype=np.int64)
    widest = int(radix.max(initial=0))
    what = (
        f"the fabric ({names[int(np.argmax(radix))]})"
        if widest > limits.max_ports_per_switch
        else "the fabric"
    )
    limits.admit(FabricSize(n, len(links[0]), widest), what)
    kind = kind.astype(np.int8)
    a, port_a, b, port_b = (np.asarray(x, dtype=np.int32) for x in links)
    num_links = a.shape[0]
    if tier is None:
        tier = infer_tiers(kind, a, b)
    if orient:
        if port_names is not None:
            swap = (tier[a] < tier[b]).tolist()
            names_a, names_b = port_names
            port_names = (
                [nb if s else na for s, na, nb in zip(swap, names_a, names_b, strict=True)],
                [na if s else nb for s, na, nb in zip(swap, names_a, names_b, strict=True)],
            )
        a, port_a, b, port_b = orient_upper_tier_first(tier, a, port_a, b, port_b)
    fabric = Fabric(
        node_kind=kind,
        node_tier=tier.astype(np.int8),
        node_names=names,
        node_radix=radix.astype(np.int32),
        node_group=np.full(n, -1, dtype=np.int32) if group is None else group.astype(np.int32),
        node_rail=np.full(n, -1, dtype=np.int32) if rail is None else rail.astype(np.int32),
        node_guid=np.zeros(n, dtype=np.uint64) if guid is None else guid.astype(np.uint64),
        node_lid=_fill_lids(np.zeros(n, dtype=np.int64) if lid is None else lid),
        node_ip=np.zeros(n, dtype=np.uint32) if ip is None else ip.astype(np.uint32),
        link_a=a,
        link_port_a=port_a,
        link_b=b,
        link_port_b=port_b,
        link_rate_bps=rate_bps.astype(np.int64),
        link_latency_ns=latency_ns.astype(np.int64),
        link_state=np.full(num_links, LinkState.UP, dtype=np.int8)
        if state is None
        else state.astype(np.int8),
        link_ber=np.zeros(num_links, dtype=np.float64) if ber is None else ber.astype(np.float64),
        link_names=link_display_names(names, a, port_a, b, port_b),
        link_port_names=port_names,
        import_notes=list(import_notes or []),
    )
    fabric.validate()
    return fabric
