"""Whether OpenSM's ftree accepts a fabric as a fat-tree, and its ranks when it does.

OpenSM 3.3's `construct_fabric` (`osm_ucast_ftree.c`) checks a fabric before routing it; when a
check fails it logs why and OpenSM routes with its fallback engine, minhop. `check_fat_tree` runs
the same checks in the same order over the usable links, with no CN or I/O GUID files and LMC 0
(OpenSM's defaults), and raises `EngineRefused` with OpenSM's reason (its ERR code where it logs
one, the GUIDs as it prints them, and the twin's node names):

1. at least 2 switches, 2 nodes besides them and 2 CAs; no CA cabled straight to a CA (AB0F);
2. ranks: the switches cabled to CAs are ranked first (distance 0) and the rest breadth-first; the
   switches furthest from every CA become the roots, and ranks are then hop distances from them
   (with a root GUID list: from those roots). Switches no root reaches are left out. Only one rank
   with several switches: AB2B;
3. the leaf rank is the deepest rank (with roots given: the rank of the first CA's switch); the tree
   has leaf rank + 1 levels, 2 to 8;
4. every switch with a CA must sit at the leaf rank (AB26: "CN port ... is connected to switch ...
   with rank r, while FatTree leaf rank is l"); at least two such leaves;
5. without a root list, every switch of a rank looks like the first switch of that rank in OpenSM's
   switch table (GUIDs in network byte order): as many up-going port groups (one per neighbour
   above, AB09), as many down-going ones except at the leaf rank (AB0A), and port groups of the
   same size (AB0B up; AB0C down, where OpenSM compares each switch's first down-going group) after
   OpenSM sorts a switch's groups by the far switch's tuple index; else AB0D.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from services.topology.fabric import Fabric, LinkState, NodeKind
from services.topology.routing.balance import node_guid_keys
from services.topology.routing.classbased import EngineRefused
from services.topology.routing.ftree_indexing import net_order_keys, tuple_indexing
from services.topology.routing.graph import ChannelGraph

__all__ = ["FatTreeRanks", "check_fat_tree"]

MIN_RANK, MAX_RANK = 2, 8  # OpenSM's FAT_TREE_MIN_RANK / FAT_TREE_MAX_RANK (levels of the tree)
_UNRANKED = -1


@dataclasses.dataclass(frozen=True, eq=False)
class FatTreeRanks:
    """What OpenSM's ftree found: its roots and every switch's rank (-1: left out)."""

    roots: np.ndarray  # int64 switch nodes of rank 0
    rank: np.ndarray  # int64 [N], rank of each switch (-1 for hosts and switches left out)
    leaf_rank: int


def _name(fabric: Fabric, guids: np.ndarray, node: int) -> str:
    return f"0x{int(guids[node]):016x} ({fabric.node_names[node]})"


def _bfs(adjacency: dict[int, list[int]], seeds: list[int], rank: dict[int, int]) -> int:
    """OpenSM's ranking walk: seeds at their rank, each neighbour one more unless already lower.
    Returns the highest rank given to a switch reached from a seed (0 when none)."""
    queue, highest = list(seeds), 0
    for switch in queue:  # the list grows as the walk goes
        for other in adjacency.get(switch, []):
            known = rank.get(other)
            if known is not None and known <= rank[switch] + 1:
                continue
            rank[other] = rank[switch] + 1
            highest = rank[other]
            queue.append(other)
    return highest


def check_fat_tree(fabric: Fabric, graph: ChannelGraph, roots: np.ndarray | None = None) -> FatTreeRanks:
    """OpenSM's ftree verdict on `fabric`'s usable links (see the module docstring): its ranks, or
    EngineRefused with the reason OpenSM gives."""
    guids = node_guid_keys(fabric)
    net = net_order_keys(fabric)
    is_switch = fabric.node_kind == NodeKind.SWITCH
    usable = graph.usable & (graph.source != graph.target)
    source, target, port = graph.source[usable], graph.target[usable], graph.port[usable]
    # OpenSM sees the nodes it can reach: those with a usable cable.
    seen = np.zeros(fabric.num_nodes, dtype=bool)
    seen[source] = True
    switches = np.flatnonzero(seen & is_switch)
    if switches.shape[0] < 2:
        raise EngineRefused(f"Fabric has {switches.shape[0]} switches - topology is not fat-tree")
    cas = np.flatnonzero(seen & ~is_switch)
    if cas.shape[0] < 2:
        raise EngineRefused(
            f"Fabric has {switches.shape[0] + cas.shape[0]} nodes ({switches.shape[0]} switches) - "
            "topology is not fat-tree"
        )
    # CA to CA cables are no routing links (graph.usable leaves them out); OpenSM refuses them.
    up = (fabric.link_state != LinkState.DOWN) & (fabric.link_a != fabric.link_b)
    ca_to_ca = np.flatnonzero(up & ~is_switch[fabric.link_a] & ~is_switch[fabric.link_b])
    if ca_to_ca.size:
        cas_with = np.concatenate([fabric.link_a[ca_to_ca], fabric.link_b[ca_to_ca]])
        first = int(cas_with[np.argmin(net[cas_with])])
        link = ca_to_ca[(fabric.link_a[ca_to_ca] == first) | (fabric.link_b[ca_to_ca] == first)][0]
        other = int(fabric.link_b[link] if fabric.link_a[link] == first else fabric.link_a[link])
        raise EngineRefused(
            f"ERR AB0F: CA connected directly to another CA: {_name(fabric, guids, first)} <---> "
            f"{_name(fabric, guids, other)}"
        )
    by_switch = np.lexsort((port, source))
    adjacency: dict[int, list[int]] = {}
    ca_ports: dict[int, list[tuple[int, int]]] = {}  # CA -> [(its port, switch)] in port order
    for s, t, p in zip(
        source[by_switch].tolist(), target[by_switch].tolist(), port[by_switch].tolist(), strict=True
    ):
        if is_switch[s] and is_switch[t]:
            adjacency.setdefault(s, []).append(t)
        elif not is_switch[s] and is_switch[t]:
            ca_ports.setdefault(s, []).append((p, t))
    hca_order = sorted(ca_ports, key=lambda n: int(net[n]))
    switch_order = sorted(switches.tolist(), key=lambda n: int(net[n]))

    rank: dict[int, int] = {}
    if roots is None:
        leaves = []
        for ca in hca_order:  # OpenSM's hca table order, each CA's ports in order
            for _, switch in ca_ports[ca]:
                if switch not in rank:
                    rank[switch] = 0
                    leaves.append(switch)
        deepest = _bfs(adjacency, leaves, rank)
        root_list = [s for s in switch_order if s in rank and deepest - rank[s] == 0]
    else:
        root_list = [int(s) for s in roots]
    rank = {s: 0 for s in root_list}
    max_rank = _bfs(adjacency, root_list, rank)
    ranked = [s for s in switch_order if s in rank]
    if max_rank == 0 and len(ranked) > 1:
        raise EngineRefused("ERR AB2B: Found more than one root on fabric with maximum rank 0")
    cn_ports = [(ca, p, s) for ca in hca_order for p, s in ca_ports[ca] if s in rank]
    if not cn_ports:
        raise EngineRefused("Fabric has no valid compute nodes")
    leaf_rank = max_rank if roots is None else rank[cn_ports[0][2]]
    if not MIN_RANK <= leaf_rank + 1 <= MAX_RANK:
        raise EngineRefused(f"Fabric rank is {leaf_rank + 1} (should be between {MIN_RANK} and {MAX_RANK})")
    leaves_with_cns: list[int] = []
    for ca, ca_port, switch in cn_ports:
        if switch in leaves_with_cns:
            continue
        leaves_with_cns.append(switch)
        if rank[switch] != leaf_rank:
            raise EngineRefused(
                f"ERR AB26: CN port 0x{int(guids[ca]) + ca_port:016x} ({fabric.node_names[ca]} port "
                f"{ca_port}) is connected to switch {_name(fabric, guids, switch)} with rank "
                f"{rank[switch]}, while FatTree leaf rank is {leaf_rank}"
            )
    if len(leaves_with_cns) < 2:
        raise EngineRefused("Failed to find leaf switches - topology is not fat-tree")
    if roots is None:
        _check_alike(fabric, guids, ranked, rank, leaf_rank, adjacency, ca_ports, leaves_with_cns)
    out = np.full(fabric.num_nodes, _UNRANKED, dtype=np.int64)
    for switch, r in rank.items():
        out[switch] = r
    return FatTreeRanks(roots=np.array(root_list, dtype=np.int64), rank=out, leaf_rank=leaf_rank)


def _check_alike(
    fabric: Fabric,
    guids: np.ndarray,
    ranked: list[int],
    rank: dict[int, int],
    leaf_rank: int,
    adjacency: dict[int, list[int]],
    ca_ports: dict[int, list[tuple[int, int]]],
    leaves: list[int],
) -> None:
    """OpenSM's fabric_validate_topology: every switch of a rank like the first of that rank."""
    # Port groups: one per neighbour switch above / below (its cables), one per CA port below.
    up: dict[int, dict[int, int]] = {s: {} for s in ranked}
    down: dict[int, dict[object, int]] = {s: {} for s in ranked}
    for s in ranked:
        for t in adjacency.get(s, []):
            if t not in rank or t == s:
                continue
            if rank[t] < rank[s]:
                up[s][t] = up[s].get(t, 0) + 1
            elif rank[t] > rank[s]:
                down[s][t] = down[s].get(t, 0) + 1
    for ca, ports in ca_ports.items():
        for p, s in ports:
            if s in down:
                down[s][("ca", ca, p)] = 1
    # Group order: OpenSM sorts a switch's groups by the far switch's tuple index (its indexing walk
    # starts at the first leaf with CAs in its switch table).
    neighbours = {s: [t for t in adjacency.get(s, []) if t in rank] for s in ranked}
    start = next(s for s in ranked if s in leaves)
    tuples = tuple_indexing(start, rank, leaf_rank, neighbours)
    missing = (255,) * 8

    def first_size(groups: dict) -> int:
        switches = [k for k in groups if not isinstance(k, tuple)]
        if not switches:
            return next(iter(groups.values()))
        return groups[min(switches, key=lambda t: tuples.get(t, missing))]

    reference: dict[int, int] = {}
    for s in ranked:
        r = rank[s]
        if r not in reference:
            reference[r] = s
            continue
        ref = reference[r]

        def refused(
            code: str, what: str, theirs: int, ours: int, ref: int = ref, s: int = s
        ) -> EngineRefused:
            return EngineRefused(
                f"ERR {code}: Different number of {what} on switches {_name(fabric, guids, ref)} "
                f"({theirs}) and {_name(fabric, guids, s)} ({ours}); ERR AB0D: Fabric topology hasn't "
                "been identified as FatTree"
            )

        if len(up[ref]) != len(up[s]):
            raise refused("AB09", "upward port groups", len(up[ref]), len(up[s]))
        if r != leaf_rank and len(down[ref]) != len(down[s]):
            raise refused("AB0A", "downward port groups", len(down[ref]), len(down[s]))
        if up[ref]:
            size = first_size(up[ref])
            for cables in up[s].values():
                if cables != size:
                    raise refused("AB0B", "ports in an upward port group", size, cables)
        if down[ref] and r != leaf_rank and down[s]:
            size, cables = first_size(down[ref]), first_size(down[s])
            if cables != size:
                raise refused("AB0C", "ports in a downward port group", size, cables)
