"""The LFT (single-port) choice among equal-cost ports, balanced the way OpenSM's minhop does.

OpenSM walks destinations in LID order and, at each switch, gives the destination the equal-cost
port with the fewest routes assigned so far on that switch (lowest port number on a tie). That is
sequential per switch, so it is computed in two ways that give the same answer:

- fast path: when the candidate sets of a node's destinations are pairwise disjoint or identical
  (every healthy Clos: all uplinks, or the one port toward a child), the greedy choice within a
  set is plain round robin in port order, so the r-th destination using a set gets its (r mod size)-th
  port, all vectorised;
- otherwise (overlapping sets, e.g. after failures) the greedy runs destination by destination,
  vectorised over the affected nodes only.
"""

from __future__ import annotations

import numpy as np

__all__ = ["choose_lft_columns"]


def _first_and_size(valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First candidate port column (width if none) and number of candidates, both [n, H]."""
    width = valid.shape[1]
    size = valid.sum(axis=1, dtype=np.int32)
    if width <= 255:
        # argmax along a middle axis copies the array; a weighted max over it does not.
        weight = (width - np.arange(width)).astype(np.uint8)
        first = width - (valid.view(np.uint8) * weight[None, :, None]).max(axis=1).astype(np.int32)
    else:
        first = np.where(size > 0, valid.argmax(axis=1), width).astype(np.int32)
    return first, size


def _gather(table: np.ndarray, index: np.ndarray) -> np.ndarray:
    """table[i, index[i, j]] for a small per-node table; one flat take instead of take_along_axis."""
    rows = np.arange(table.shape[0], dtype=np.int64)[:, None] * table.shape[1]
    return table.ravel()[index + rows]


def _round_robin(valid: np.ndarray, first: np.ndarray, size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """LFT columns assuming disjoint candidate sets, and which nodes really have disjoint sets."""
    n, width, hosts = valid.shape
    rows = np.arange(n)[:, None]
    # Each port's class is the first port of any destination using it (width if unused).
    used = valid.any(axis=2)
    port_class = np.where(used, _gather(first, valid.argmax(axis=2)), width)
    class_size = np.bincount((port_class + rows * (width + 1)).ravel(), minlength=n * (width + 1))
    class_size = class_size.reshape(n, width + 1)
    class_size[:, width] = 0
    # Disjoint iff every candidate port of a destination belongs to its class and covers it whole.
    strays = (valid & (first[:, None, :] != port_class[:, :, None])).any(axis=(1, 2))
    partial = ((size > 0) & (size != _gather(class_size, first))).any(axis=1)
    disjoint = ~strays & ~partial
    # Rank of each destination among the earlier ones of its class (a radix sort on small keys).
    key = first.astype(np.int16)
    order = np.argsort(key, axis=1, kind="stable")
    ordered = _gather(key, order)
    position = np.arange(hosts)
    boundary = np.ones((n, hosts), dtype=bool)
    boundary[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    start = np.maximum.accumulate(np.where(boundary, position, 0), axis=1)
    rank = np.empty(n * hosts, dtype=np.int64)
    rank[(order + rows * hosts).ravel()] = (position - start).ravel()
    rank = rank.reshape(n, hosts)
    # The (rank mod size)-th port of the class, ports sorted by (class, port).
    by_class = np.argsort(port_class * (width + 1) + np.arange(width), axis=1, kind="stable")
    class_start = np.cumsum(class_size, axis=1) - class_size
    slot = _gather(class_start, first) + rank % np.maximum(size, 1)
    lft = _gather(by_class, np.minimum(slot, width - 1))
    return np.where(size > 0, lft, 0), disjoint


def _greedy(valid: np.ndarray) -> np.ndarray:
    """OpenSM's choice destination by destination: fewest routes so far, lowest port on a tie."""
    n, width, hosts = valid.shape
    assigned = np.zeros((n, width), dtype=np.int64)
    rows = np.arange(n)
    out = np.zeros((n, hosts), dtype=np.int64)
    never = np.iinfo(np.int64).max
    for host in range(hosts):
        candidates = valid[:, :, host]
        column = np.where(candidates, assigned, never).argmin(axis=1)
        assigned[rows, column] += candidates[rows, column]
        out[:, host] = column
    return out


def choose_lft_columns(valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For candidates `valid` [nodes, ports in port order, destinations in LID order], the chosen
    port column per (node, destination) [nodes, destinations] (0 where there is no candidate), and
    the number of candidates per (node, destination)."""
    n, width, hosts = valid.shape
    if width == 0 or hosts == 0:
        return np.zeros((n, hosts), dtype=np.int64), np.zeros((n, hosts), dtype=np.int32)
    first, size = _first_and_size(valid)
    if size.max(initial=0) <= 1:  # hosts with one uplink, cores: nothing to balance
        return np.minimum(first, width - 1), size
    lft, disjoint = _round_robin(valid, first, size)
    overlapping = np.flatnonzero(~disjoint)
    if overlapping.size:
        lft[overlapping] = _greedy(valid[overlapping])
    return lft, size
