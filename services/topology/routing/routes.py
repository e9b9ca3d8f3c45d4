"""Routes: the forwarding state of a fabric as CSR over (node, destination host), and how engines build it.

The layout is the snapshot's (services/common/snapshot.py): the equal-cost next channels of node n
toward host h are `next_channels[offsets[n*H+h] : offsets[n*H+h+1]]`, the first one being the LFT
(single-port) choice and the rest in port order. An empty group means no route, or n is h itself.

Engines describe their candidates chunk by chunk as a boolean array [nodes, out channels, hosts];
`routes_from_candidates` balances the LFT choice (balance.py) and writes the CSR, so no engine ever
loops over (node, host) pairs in Python.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator

import numpy as np

from services.topology.routing.balance import choose_lft_columns
from services.topology.routing.graph import ChannelGraph

__all__ = ["Candidates", "Routes", "diff_routes", "routes_from_candidates"]

# Elements of [nodes, channels, hosts] handled per chunk: bounds temporary memory (~100 MB).
CHUNK_ELEMENTS = 1 << 22

# candidates(start, stop, padded_out_channels) -> bool [stop-start, width, H]
Candidates = Callable[[int, int, np.ndarray], np.ndarray]


@dataclasses.dataclass(eq=False)
class Routes:
    """Forwarding state computed by one engine for one fabric."""

    engine: str
    num_nodes: int
    num_hosts: int
    offsets: np.ndarray  # int64 [N*H+1]
    next_channels: np.ndarray  # int32 [offsets[-1]]
    unreachable_pairs: int  # ordered host pairs (src != dst) without a route
    compute_ns: int

    def group(self, node: int, host: int) -> np.ndarray:
        """Equal-cost next channels of `node` toward host index `host` (LFT choice first)."""
        i = node * self.num_hosts + host
        return self.next_channels[self.offsets[i] : self.offsets[i + 1]]

    def group_sizes(self) -> np.ndarray:
        """[N, H] number of equal-cost next channels per (node, destination host)."""
        return np.diff(self.offsets).reshape(self.num_nodes, self.num_hosts)

    def lft_channels(self, node: int) -> np.ndarray:
        """[H] the LFT channel of `node` toward every host, -1 where there is none."""
        row = slice(node * self.num_hosts, (node + 1) * self.num_hosts + 1)
        offsets = self.offsets[row]
        out = np.full(self.num_hosts, -1, dtype=np.int32)
        has = offsets[1:] > offsets[:-1]
        out[has] = self.next_channels[offsets[:-1][has]]
        return out


def _chunks(degree: np.ndarray, num_hosts: int, budget: int) -> Iterator[tuple[int, int]]:
    """Consecutive node ranges whose padded [nodes, max degree, hosts] stays within `budget`."""
    start, width = 0, 0
    for node, d in enumerate(degree.tolist()):
        wider = max(width, d, 1)
        if node > start and (node - start + 1) * wider * num_hosts > budget:
            yield start, node
            start, wider = node, max(d, 1)
        width = wider
    if start < degree.shape[0]:
        yield start, int(degree.shape[0])


def _csr_rows(padded: np.ndarray, valid: np.ndarray, lft: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The flattened groups of a chunk: per (node, host), the LFT channel then the others in port order."""
    n, width, _ = valid.shape
    if width == 0:
        return np.empty(0, dtype=np.int32)
    rows = np.arange(n, dtype=np.int64)[:, None]
    if sizes.max(initial=0) <= 1:  # single-candidate groups: just the LFT channels
        return padded.ravel()[(lft + rows * width).ravel()[sizes.ravel() > 0]]
    others = valid & (np.arange(width)[None, :, None] != lft[:, None, :])
    # The CSR is row-major over (node, host, port): one transposed copy of the mask, then extract.
    others = np.ascontiguousarray(others.transpose(0, 2, 1))
    rest = np.broadcast_to(padded[:, None, :], others.shape)[others]
    has = sizes.ravel() > 0
    chosen = padded.ravel()[(lft + rows * width).ravel()[has]]
    # Each group's LFT channel goes in front of its others: at the cumulative count of others so far.
    before = np.cumsum(sizes.ravel() - has, dtype=np.int64) - (sizes.ravel() - has)
    return np.insert(rest, before[has], chosen)


def routes_from_candidates(
    engine: str,
    graph: ChannelGraph,
    num_hosts: int,
    candidates: Candidates,
    unreachable_pairs: int,
    started_ns: int,
) -> Routes:
    """Assemble Routes from an engine's candidate channels, chunk by chunk of nodes."""
    n = graph.num_nodes
    sizes = np.zeros((n, num_hosts), dtype=np.int32)
    pieces: list[np.ndarray] = []
    for start, stop in _chunks(graph.out_degree, num_hosts, CHUNK_ELEMENTS):
        padded = graph.padded_out_channels(start, stop)
        valid = candidates(start, stop, padded)
        lft, sizes[start:stop] = choose_lft_columns(valid)
        pieces.append(_csr_rows(padded, valid, lft, sizes[start:stop]))
    offsets = np.empty(n * num_hosts + 1, dtype=np.int64)
    offsets[0] = 0
    offsets[1:] = sizes.ravel()
    np.cumsum(offsets, out=offsets)
    next_channels = np.concatenate(pieces) if pieces else np.empty(0, dtype=np.int32)
    return Routes(
        engine=engine,
        num_nodes=n,
        num_hosts=num_hosts,
        offsets=offsets,
        next_channels=next_channels,
        unreachable_pairs=unreachable_pairs,
        compute_ns=time.perf_counter_ns() - started_ns,
    )


def diff_routes(old: Routes, new: Routes, nodes: np.ndarray) -> tuple[int, int]:
    """(entries, nodes) among `nodes` whose group toward some host differs between `old` and `new`."""
    if (old.num_nodes, old.num_hosts) != (new.num_nodes, new.num_hosts):
        sizes = new.group_sizes()[nodes]
        return int(sizes.size), int(nodes.shape[0])
    old_sizes, new_sizes = old.group_sizes()[nodes], new.group_sizes()[nodes]
    changed = old_sizes != new_sizes
    pairs = (nodes[:, None].astype(np.int64) * old.num_hosts + np.arange(old.num_hosts)).ravel()
    same = np.flatnonzero(~changed.ravel() & (old_sizes.ravel() > 0))
    lengths = old_sizes.ravel()[same].astype(np.int64)
    if lengths.size:
        owner = np.repeat(np.arange(same.shape[0]), lengths)
        within = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        at_old = old.offsets[pairs[same]][owner] + within
        at_new = new.offsets[pairs[same]][owner] + within
        differs = old.next_channels[at_old] != new.next_channels[at_new]
        pair_differs = np.bincount(owner, weights=differs, minlength=same.shape[0]) > 0
        changed.ravel()[same[pair_differs]] = True
    return int(changed.sum()), int(changed.any(axis=1).sum())
