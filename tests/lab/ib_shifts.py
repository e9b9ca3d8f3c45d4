"""Shift permutations over a set of forwarding tables: which shifts cross no channel twice.

The shift permutation s sends host order[i] to host order[(i + s) mod H], every host at once (the
all-to-all's steps, and what ftree is built for). It is contention-free when no channel (one
direction of a cable, the hosts' own included) carries two of its flows. The walk follows the
tables exactly as the switches would: port by port from the source's first cable to the destination.
"""

from __future__ import annotations

import numpy as np

from services.topology.fabric import Fabric

__all__ = ["contention_free_shifts"]


def contention_free_shifts(
    fabric: Fabric, switches: np.ndarray, ports: np.ndarray, order: np.ndarray
) -> list[int]:
    """Shifts s in 1..H-1 whose permutation over host indices `order` is contention-free under the
    LFT `ports` [K, H] of `switches` [K]; AssertionError on a dead end or a loop."""
    hosts = order.shape[0]
    channel_port = fabric.channel_port()
    source = np.stack([fabric.link_a, fabric.link_b], axis=1).ravel()
    target = np.stack([fabric.link_b, fabric.link_a], axis=1).ravel()
    out_channel = np.full((fabric.num_nodes, int(channel_port.max()) + 1), -1, dtype=np.int64)
    out_channel[source[::-1], channel_port[::-1]] = np.arange(source.shape[0])[::-1]  # lowest wins
    row = np.full(fabric.num_nodes, -1, dtype=np.int64)
    row[switches] = np.arange(switches.shape[0])
    first_cable = np.full(fabric.num_nodes, -1, dtype=np.int64)
    for channel in np.argsort(channel_port, kind="stable")[::-1].tolist():
        first_cable[source[channel]] = channel
    free = []
    for shift in range(1, hosts):
        destination = order[(np.arange(hosts) + shift) % hosts]
        goal = fabric.host_nodes[destination]
        used = [first_cable[fabric.host_nodes[order]]]
        node = target[used[0]]
        for _ in range(fabric.num_nodes):
            moving = node != goal
            if not moving.any():
                break
            at = row[node[moving]]
            assert (at >= 0).all(), "a flow reached a node without a table"
            port = ports[at, destination[moving]]
            channel = out_channel[node[moving], port]
            assert (channel >= 0).all(), "a table points at a port without a cable"
            used.append(channel)
            node = node.copy()
            node[moving] = target[channel]
        else:
            raise AssertionError("the tables loop")
        if np.bincount(np.concatenate(used)).max() <= 1:
            free.append(shift)
    return free
