"""OpenSM's unicast balancing done the slow, obvious way, to check the vectorised one against.

From osm_ucast_mgr.c (OpenSM 3.3.23, read to learn the behaviour and checked on ibsim by tests/lab):
the switches in node-GUID order, stably sorted by their count of cabled end ports (CAs), most
first; each switch's CAs in port order, a CA only once; then per switch, each destination in that
order takes the equal-cost port with the fewest routes so far, lowest port on a tie.
"""

from __future__ import annotations

import collections

import numpy as np

from services.topology.fabric import Fabric, LinkState, NodeKind

SYNTHETIC_GUID_BASE = 0xFAB0_0000_0000_0000  # what the exporters give a node without a GUID


def effective_guid(fabric: Fabric, node: int) -> int:
    guid = int(fabric.node_guid[node])
    return guid if guid else SYNTHETIC_GUID_BASE + ((node + 1) << 8)


def opensm_destination_order(fabric: Fabric) -> list[int]:
    """Host indices in the order OpenSM's unicast manager routes them."""
    cables: dict[int, list[tuple[int, int]]] = collections.defaultdict(list)  # switch -> (port, host)
    for link in range(fabric.num_links):
        if fabric.link_state[link] == LinkState.DOWN:
            continue
        ends = [(int(fabric.link_a[link]), int(fabric.link_port_a[link])),
                (int(fabric.link_b[link]), int(fabric.link_port_b[link]))]  # fmt: skip
        for (node, port), (peer, _) in (ends, ends[::-1]):
            if fabric.node_kind[node] == NodeKind.SWITCH and fabric.node_kind[peer] == NodeKind.HOST:
                cables[node].append((port, peer))
    switches = sorted(  # OpenSM's switch map is keyed by the GUID in network byte order
        (n for n in range(fabric.num_nodes) if fabric.node_kind[n] == NodeKind.SWITCH),
        key=lambda n: int.from_bytes(effective_guid(fabric, n).to_bytes(8, "little"), "big"),
    )
    switches.sort(key=lambda n: -len(cables[n]))  # stable: GUID order among equal loads
    order: list[int] = []
    for switch in switches:
        for _, host in sorted(cables[switch]):
            h = int(fabric.node_host[host])
            if h not in order:
                order.append(h)
    rest = [h for h in range(fabric.num_hosts) if h not in order]
    return order + sorted(rest, key=lambda h: effective_guid(fabric, int(fabric.host_nodes[h])))


def opensm_greedy_lft(fabric: Fabric, routes, node: int) -> np.ndarray:
    """[H] ports of switch `node`: destinations in OpenSM's order, each to the least-used equal port."""
    assigned: collections.Counter[int] = collections.Counter()
    out = np.zeros(fabric.num_hosts, dtype=np.int64)
    port = fabric.channel_port()
    for h in opensm_destination_order(fabric):
        ports = sorted(int(port[c]) for c in routes.group(fabric, node, h))
        if ports:
            out[h] = min(ports, key=lambda p: (assigned[p], p))
            assigned[out[h]] += 1
    return out
