"""The rail-optimised DGX SuperPOD generator: scalable units of 32 nodes x 8 GPUs, one NIC per GPU.

Each GPU's NIC is a host node whose rail is its GPU index; each scalable unit (SU) has one *rail
leaf* per GPU index, cabled to that GPU of every node of the SU. Switches have 2 x nodes_per_su ports
(64: NDR QM9700), half down and half up, so every tier is non-blocking:

- below 16 SU, two tiers: ceil(leaves / 2) spines, and the uplinks of leaf L (all SUs, rail-major
  within an SU) are dealt round robin, uplink u to spine (L * nodes_per_su + u) mod spines;
- from 16 SU (or earlier for small SUs, once two leaves might share no spine), three tiers built
  as a fat-tree whose pods are rails: the leaves of one rail in a block of up to nodes_per_su SUs,
  with as many spines, each leaf's uplinks dealt over its pod's spines (so same-rail traffic between
  SUs turns at a spine and never reaches the cores); the spines of one local index l, one per pod,
  deal their uplinks over core group l of ceil(pods / 2) cores.

With the defaults this gives the B200 SuperPOD table (NVIDIA DGX SuperPOD B200 reference
architecture): 4 SU = 128 nodes, 1024 GPUs, 32 leaves, 16 spines; 16 SU = 128 leaves, 128 spines,
64 cores; 32 SU = 256 / 256 / 128; as many cables per tier as GPUs.

Names: hosts `su{s}-dgx{n:02d}-gpu{g}`, leaves `su{s}-rail{g}`, spines `spine-{i}` (two tiers) or
`rail{g}-spine{j}` (three tiers), cores `core-{c}`. Host IPv4 is 10.<su>.<node>.<gpu + 1>; a node's
group is its SU (-1 for spines and cores). Links are host links, then leaf-spine, then spine-core.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from services.common.errors import InvalidArgument
from services.topology.cabling import (
    DEFAULT_LINK_LATENCY_NS,
    DEFAULT_LINK_SPEED_GBPS,
    Admit,
    FieldName,
    assemble,
    check_routable_size,
    ipv4,
    link_parameters,
    same_name,
    whole_number,
)
from services.topology.fabric import Fabric
from services.topology.limits import DEFAULT_LIMITS, FabricSize

__all__ = ["CORE_TIER_FROM_SU", "build_superpod", "superpod"]

CORE_TIER_FROM_SU = 16


def superpod(
    scalable_units: int,
    *,
    nodes_per_su: int = 32,
    gpus_per_node: int = 8,
    link_speed_gbps: float = DEFAULT_LINK_SPEED_GBPS,
    host_link_speed_gbps: float | None = None,
    link_latency_ns: int = DEFAULT_LINK_LATENCY_NS,
) -> Fabric:
    """A rail-optimised SuperPOD of `scalable_units` SUs (module docstring); NDR 400 Gb/s by default.

    Raises InvalidArgument naming the parameter that is wrong.

    >>> f = superpod(4)
    >>> f.num_hosts, f.num_switches
    (1024, 48)
    """
    return build_superpod(
        scalable_units, nodes_per_su, gpus_per_node, link_speed_gbps, host_link_speed_gbps, link_latency_ns
    )


def _deal(position: np.ndarray, per_sender: int, receivers: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each sender's `per_sender` uplinks dealt round robin over the `receivers` of its group, where
    `position` [senders] is each sender's place in its group: uplink u of the sender at place p goes
    to receiver (p * per_sender + u) mod receivers.

    Returns (sender, uplink index, receiver within the group) per cable, in (sender, uplink) order.
    """
    sender = np.repeat(np.arange(position.shape[0]), per_sender)
    uplink = np.tile(np.arange(per_sender), position.shape[0])
    return sender, uplink, (position[sender] * per_sender + uplink) % receivers


def _ports_by_arrival(receiver: np.ndarray, count: int, first_port: int) -> np.ndarray:
    """Port of each cable on its receiver, numbered from `first_port` in cable order."""
    order = np.argsort(receiver, kind="stable")
    rank = np.empty(receiver.shape[0], dtype=np.int64)
    starts = np.searchsorted(receiver[order], np.arange(count))
    rank[order] = np.arange(receiver.shape[0]) - np.repeat(starts, np.bincount(receiver, minlength=count))
    return first_port + rank


def build_superpod(
    scalable_units: Any,
    nodes_per_su: Any,
    gpus_per_node: Any,
    link_speed_gbps: Any,
    host_link_speed_gbps: Any,
    link_latency_ns: Any,
    field: FieldName = same_name,
    admit: Admit = DEFAULT_LIMITS.admit,
) -> Fabric:
    """`superpod` with every parameter checked and errors named through `field` (for `spec.superpod.*`),
    and its size passed to `admit` before anything is built."""
    units = whole_number(scalable_units, field("scalable_units"), 1)
    nodes = whole_number(nodes_per_su, field("nodes_per_su"), 1)
    gpus = whole_number(gpus_per_node, field("gpus_per_node"), 1)
    rate, host_rate, latency = link_parameters(link_speed_gbps, host_link_speed_gbps, link_latency_ns, field)
    for value, limit, name in (
        (units, 255, "scalable_units"),
        (nodes, 255, "nodes_per_su"),
        (gpus, 254, "gpus_per_node"),
    ):
        if value > limit:
            raise InvalidArgument(field(name), f"at most {limit} (one IPv4 octet), got {value}")
    radix = 2 * nodes
    hosts, leaves = units * nodes * gpus, units * gpus
    # Two tiers while every two leaves still share a spine (their uplinks cover more than half of them).
    three_tier = units >= CORE_TIER_FROM_SU or -(-leaves // 2) >= 2 * nodes
    spines = gpus * units if three_tier else -(-leaves // 2)
    block = min(units, nodes)  # SUs per pod: a leaf reaches every spine of its pod
    if three_tier:
        spine_rail, spine_slot = np.divmod(np.arange(spines), units)
        local = spine_slot % block  # spines of one local index share a core group
        per_group = np.bincount(local, minlength=block)
        cores_of_group = -(-per_group // 2)
        if (cores_of_group > nodes).any():
            raise InvalidArgument(
                field("scalable_units"), f"too many for three tiers of {radix}-port switches"
            )
        cores = int(cores_of_group.sum())
    else:
        cores = 0
    # Every GPU has one cable up from each tier but the top: to its leaf, leaf to spine, spine to core.
    link_count = hosts + leaves * nodes + (spines * nodes if three_tier else 0)
    check_routable_size(leaves + spines + cores, hosts, field("scalable_units"))
    admit(FabricSize(hosts + leaves + spines + cores, link_count, radix))

    # Hosts in (SU, node, GPU) order; leaf (su, g) is leaf number su * gpus + g.
    su, node, gpu = (
        x.ravel() for x in np.meshgrid(np.arange(units), np.arange(nodes), np.arange(gpus), indexing="ij")
    )
    leaf0, spine0 = hosts, hosts + leaves
    core0 = spine0 + spines
    host_leaf = su * gpus + gpu
    a = [leaf0 + host_leaf]
    port_a = [node + 1]
    b = [np.arange(hosts)]
    port_b = [np.ones(hosts, dtype=np.int64)]
    leaf_ids = np.arange(leaves)
    if three_tier:  # pods: the leaves of one rail in a block of SUs, with as many spines
        leaf_su, leaf_rail = np.divmod(leaf_ids, gpus)
        first = leaf_su - leaf_su % block
        size = np.minimum(block, units - first)
        sender, uplink, _ = _deal(np.zeros(leaves, dtype=np.int64), nodes, 1)
        slot = ((leaf_su - first)[sender] * nodes + uplink) % size[sender]
        spine = leaf_rail[sender] * units + first[sender] + slot
    else:
        sender, uplink, spine = _deal(leaf_ids, nodes, spines)  # one group: every leaf, every spine
    a.append(spine0 + spine)
    port_a.append(_ports_by_arrival(spine, spines, 1))
    b.append(leaf0 + sender)
    port_b.append(nodes + 1 + uplink)
    if three_tier:  # spines of local index l (one per pod) deal their uplinks over core group l
        order = np.argsort(local, kind="stable")
        place = np.empty(spines, dtype=np.int64)
        place[order] = np.arange(spines) - np.repeat(np.cumsum(per_group) - per_group, per_group)
        sender, uplink, _ = _deal(np.zeros(spines, dtype=np.int64), nodes, 1)
        group_base = np.cumsum(cores_of_group) - cores_of_group
        core = group_base[local[sender]] + (place[sender] * nodes + uplink) % cores_of_group[local[sender]]
        a.append(core0 + core)
        port_a.append(_ports_by_arrival(core, cores, 1))
        b.append(spine0 + sender)
        port_b.append(nodes + 1 + uplink)
    links = (np.concatenate(a), np.concatenate(port_a), np.concatenate(b), np.concatenate(port_b))
    switch_links = links[0].shape[0] - hosts

    tier = np.concatenate([np.zeros(hosts), np.ones(leaves), np.full(spines, 2), np.full(cores, 3)])
    names = [
        f"su{s}-dgx{n:02d}-gpu{g}" for s, n, g in zip(su.tolist(), node.tolist(), gpu.tolist(), strict=True)
    ]
    names += [f"su{s}-rail{g}" for s in range(units) for g in range(gpus)]
    if three_tier:
        names += [f"rail{g}-spine{j}" for g, j in zip(spine_rail.tolist(), spine_slot.tolist(), strict=True)]
    else:
        names += [f"spine-{i}" for i in range(spines)]
    names += [f"core-{c}" for c in range(cores)]
    group = np.concatenate([su, np.repeat(np.arange(units), gpus), np.full(spines + cores, -1)])
    return assemble(
        tier=tier,
        names=names,
        radix=np.concatenate([np.ones(hosts), np.full(leaves + spines + cores, radix)]),
        group=group,
        host_ip=ipv4(10, su, node, gpu + 1),
        host_rail=gpu,
        links=links,
        link_rate_bps=np.concatenate([np.full(hosts, host_rate), np.full(switch_links, rate)]),
        latency_ns=latency,
    )
