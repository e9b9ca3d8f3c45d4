"""Rank placement: which host each rank of a job runs on.

Policies (when a job lists no hosts):

- PACKED: free hosts in index order, so neighbouring ranks share a leaf;
- SCATTERED: round-robin over leaves (first free host of every leaf, then the second, ...), so
  consecutive ranks sit on different leaves and every ring hop crosses the spine;
- RANDOM: a sample of free hosts drawn with numpy's PCG64 seeded by (spec seed, job index);
- RAIL_ALIGNED: free hosts of one rail (the lowest-numbered rail with enough of them).

Concurrent jobs do not share hosts: a job placed by policy only uses hosts that no earlier job
(placed or listed) took. Hosts listed by name are used as given.
"""

from __future__ import annotations

import numpy as np

from services.common.errors import InvalidArgument, quote
from services.common.snapshot import FabricSnapshot
from services.simulator.spec import JobSpec, Placement

__all__ = ["HostDirectory", "place_job"]


class HostDirectory:
    """Host names, leaves and rails of a snapshot, looked up by the placement and the workload."""

    def __init__(self, snapshot: FabricSnapshot) -> None:
        self.snapshot = snapshot
        self.names = [snapshot.node_names[int(n)] for n in snapshot.host_nodes]
        self.index = {name: h for h, name in enumerate(self.names)}
        # The leaf of a host is the node at the far end of its first channel.
        sources, targets = snapshot.channel_source(), snapshot.channel_target()
        first_neighbour = np.full(snapshot.num_nodes, -1, dtype=np.int64)
        first_neighbour[sources[::-1]] = targets[::-1]
        self.leaf = first_neighbour[snapshot.host_nodes]
        self.rail = np.asarray(snapshot.host_rail, dtype=np.int64)

    def lookup(self, name: str, field: str) -> int:
        """Host index of `name`; InvalidArgument naming the field and the host if there is none."""
        host = self.index.get(name)
        if host is None:
            raise InvalidArgument(field, f"no host named {quote(name)} in {self.snapshot.fabric}")
        return host


def _scattered(directory: HostDirectory, free: np.ndarray) -> np.ndarray:
    leaves = directory.leaf[free]
    order = np.lexsort((free, leaves))  # by leaf, then host index
    sorted_leaves = leaves[order]
    starts = np.flatnonzero(np.r_[True, sorted_leaves[1:] != sorted_leaves[:-1]])
    group_start = np.repeat(starts, np.diff(np.r_[starts, len(order)]))
    position = np.arange(len(order)) - group_start  # position of the host within its leaf
    leaf_rank = np.cumsum(np.r_[True, sorted_leaves[1:] != sorted_leaves[:-1]]) - 1
    round_robin = np.lexsort((leaf_rank, position))
    return free[order[round_robin]]


def _rail_aligned(directory: HostDirectory, free: np.ndarray, count: int, field: str) -> np.ndarray:
    rails = directory.rail[free]
    if not (rails >= 0).any():
        raise InvalidArgument(f"{field}.placement", "RAIL_ALIGNED needs a fabric whose hosts have rails")
    for rail in np.unique(rails[rails >= 0]):
        hosts = free[rails == rail]
        if len(hosts) >= count:
            return hosts[:count]
    raise InvalidArgument(f"{field}.rank_count", f"no rail has {count} free hosts")


def place_job(
    directory: HostDirectory, job_index: int, job: JobSpec, taken: np.ndarray, seed: int
) -> np.ndarray:
    """Host index of every rank of a ring job; marks the hosts in `taken` (bool [H])."""
    field = f"jobs[{job_index}]"
    if job.hosts:
        hosts = np.array(
            [directory.lookup(name, f"{field}.hosts[{j}]") for j, name in enumerate(job.hosts)],
            dtype=np.int64,
        )
        taken[hosts] = True
        return hosts
    count = job.rank_count
    free = np.flatnonzero(~taken)
    if len(free) < count:
        raise InvalidArgument(
            f"{field}.rank_count",
            f"needs {count} hosts but only {len(free)} are free in {directory.snapshot.fabric}",
        )
    if job.placement == Placement.PACKED:
        hosts = free[:count]
    elif job.placement == Placement.SCATTERED:
        hosts = _scattered(directory, free)[:count]
    elif job.placement == Placement.RANDOM:
        rng = np.random.default_rng([seed & 0xFFFFFFFFFFFFFFFF, job_index])
        hosts = rng.choice(free, size=count, replace=False)
    elif job.placement == Placement.RAIL_ALIGNED:
        hosts = _rail_aligned(directory, free, count, field)
    else:  # pragma: no cover - the enum is closed
        raise InvalidArgument(f"{field}.placement", f"unknown placement {job.placement!r}")
    taken[hosts] = True
    return np.asarray(hosts, dtype=np.int64)
