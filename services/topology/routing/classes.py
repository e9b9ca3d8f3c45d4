"""Destination classes: hosts grouped by the set of switches they are cabled to (over usable links).

Every routing engine here gives the same equal-cost group toward two hosts of one class at every
switch except the last hop (the switches of the class itself, which deliver straight to the host),
so groups are computed per class, not per host: 1,024 classes instead of 8,192 hosts at k=32.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from services.topology.fabric import Fabric
from services.topology.routing.graph import ChannelGraph

__all__ = ["DestinationClasses"]


@dataclasses.dataclass(frozen=True, eq=False)
class DestinationClasses:
    """Classes of hosts; each class is identified by its sorted tuple of switches (`keys`)."""

    host_class: np.ndarray  # int32 [H], -1 for hosts with no usable link to a switch
    keys: list[tuple[int, ...]]  # [C] the switches of each class, sorted
    switch_offsets: np.ndarray  # int64 [C+1]
    switches: np.ndarray  # int64, switch nodes of each class (CSR by class)
    size: np.ndarray  # int64 [C], hosts per class

    @property
    def num_classes(self) -> int:
        return len(self.keys)

    @classmethod
    def of(cls, fabric: Fabric, graph: ChannelGraph, previous: DestinationClasses | None = None):
        """Classes of the current link states; with `previous`, its classes keep their indices (new
        sets of switches are appended, emptied classes stay as empty columns)."""
        hosts = fabric.num_hosts
        up = np.flatnonzero(graph.usable & graph.is_host[graph.source] & ~graph.is_host[graph.target])
        host = fabric.node_host[graph.source[up]].astype(np.int64)
        switch = graph.target[up]
        pairs = np.unique(host * graph.num_nodes + switch)
        host, switch = pairs // graph.num_nodes, pairs % graph.num_nodes
        count = np.bincount(host, minlength=hosts)
        keys: list[tuple[int, ...]] = list(previous.keys) if previous is not None else []
        index = {key: i for i, key in enumerate(keys)}
        host_class = np.full(hosts, -1, dtype=np.int32)
        # Hosts on one switch (nearly all): vectorised, classes in switch order.
        single = count[host] == 1
        leaves, inverse = np.unique(switch[single], return_inverse=True)
        leaf_class = np.empty(leaves.shape[0], dtype=np.int32)
        for i, leaf in enumerate(leaves.tolist()):
            key = (leaf,)
            if key not in index:
                index[key] = len(keys)
                keys.append(key)
            leaf_class[i] = index[key]
        host_class[host[single]] = leaf_class[inverse]
        # Hosts cabled to several switches: rare, a loop is fine.
        starts = np.cumsum(count) - count
        for h in np.unique(host[~single]).tolist():
            key = tuple(switch[starts[h] : starts[h] + count[h]].tolist())
            if key not in index:
                index[key] = len(keys)
                keys.append(key)
            host_class[h] = index[key]
        lengths = np.array([len(k) for k in keys], dtype=np.int64)
        offsets = np.zeros(len(keys) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        flat = np.fromiter((s for key in keys for s in key), dtype=np.int64, count=int(offsets[-1]))
        size = np.bincount(host_class[host_class >= 0], minlength=len(keys)).astype(np.int64)
        return cls(host_class, keys, offsets, flat, size)

    def members(self, c: int) -> np.ndarray:
        """Switch nodes of class c."""
        return self.switches[self.switch_offsets[c] : self.switch_offsets[c + 1]]

    def attachment(self, switch_index: np.ndarray, num_switches: int, columns: np.ndarray) -> np.ndarray:
        """[len(columns), S] bool: which switches each of the given classes is cabled to."""
        out = np.zeros((columns.shape[0], num_switches), dtype=bool)
        lengths = self.switch_offsets[columns + 1] - self.switch_offsets[columns]
        rows = np.repeat(np.arange(columns.shape[0]), lengths)
        member = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        out[rows, switch_index[self.switches[np.repeat(self.switch_offsets[columns], lengths) + member]]] = (
            True
        )
        return out
