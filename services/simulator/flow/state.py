"""The FLOW loop's groups of arrays, by name (loop.py reads their fields; model.py builds them).

numba passes a namedtuple of arrays to compiled code as one argument and reads its fields by name at
no cost. (p) marks arrays indexed by position in the active list rather than by slot; S slots, U
channels the routes use.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["Channels", "FlowWorkload", "Nodes", "Records", "Routes", "RunState", "Slots", "Work"]


class FlowWorkload(NamedTuple):
    """The workload as the loop reads it (per transfer, per dependency edge, per flow)."""

    transfer_flow_offsets: np.ndarray  # int64 [T+1]
    dependent_offsets: np.ndarray  # int64 [T+1]
    dependents: np.ndarray  # int64 [D]
    needs_arrival: np.ndarray  # bool [D]
    flow_size: np.ndarray  # int64 [F], wire bytes
    flow_latency: np.ndarray  # int64 [F], ns from its last byte leaving to its arrival
    flow_transfer: np.ndarray  # int64 [F]
    flow_route: np.ndarray  # int64 [F]
    flow_cap: np.ndarray  # float64 [F] (inf: none), or empty when no flow is capped


class Routes(NamedTuple):
    """The routes' entries: channels (compact numbers) and the fraction of the flow on each."""

    offsets: np.ndarray  # int64 [R+1]
    channel: np.ndarray  # int64 [E]
    fraction: np.ndarray  # float64 [E]
    capacity: np.ndarray  # float64 [U], bit/s


class RunState(NamedTuple):
    """Per flow its times; per transfer what it waits for; the heap of transfers ready to start."""

    start: np.ndarray  # int64 [F]
    sent: np.ndarray  # int64 [F], last byte left
    finish: np.ndarray  # int64 [F], last byte arrived
    flows_left: np.ndarray  # int64 [T]
    waiting_on: np.ndarray  # int64 [T], prerequisites not yet met
    ready: np.ndarray  # int64 [T], earliest start
    arrival: np.ndarray  # int64 [T]
    departure: np.ndarray  # int64 [T]
    heap_time: np.ndarray  # int64 [T]
    heap_transfer: np.ndarray  # int64 [T]
    batch_time: np.ndarray  # int64 [T], transfers starting together
    batch: np.ndarray  # int64 [T]


class Slots(NamedTuple):
    """Per active flow slot (S), or per position in the active list (p)."""

    flow: np.ndarray
    route: np.ndarray
    remaining: np.ndarray  # bytes left at `since`
    since: np.ndarray  # ns: when its rate last changed
    rate: np.ndarray  # bit/s, since then
    cap: np.ndarray
    end: np.ndarray  # ns: when its last byte leaves at that rate
    end_heap: np.ndarray  # the active flows, a min-heap on their end ...
    end_at: np.ndarray  # ... and each one's place in it (-1: out)
    frozen_at: np.ndarray  # the filling that froze it
    frozen_rate: np.ndarray  # the rate the last filling of its component gave it
    position: np.ndarray  # in the active list
    active: np.ndarray  # the active list: slot by position (p)
    free: np.ndarray  # free slots (a stack)
    listing: np.ndarray  # scratch: flows whose rate changed
    ending: np.ndarray  # scratch: flows ending
    seen: np.ndarray  # the filling whose component search reached it
    members: np.ndarray  # scratch: the flows of the component being filled
    frozen: np.ndarray  # scratch: the flows frozen in a step
    filled: np.ndarray  # scratch: the flows the event filled
    next_started: np.ndarray  # the active flows in start order
    previous_started: np.ndarray


class Nodes(NamedTuple):
    """Per slot * longest route + entry: the channels' entry lists."""

    next: np.ndarray
    previous: np.ndarray


class Channels(NamedTuple):
    """Per channel (U)."""

    entries: np.ndarray  # entries in its list
    head: np.ndarray  # first and last node of its entry list
    tail: np.ndarray
    load: np.ndarray  # last recorded, bit/s
    marked_flag: np.ndarray
    marked: np.ndarray  # the marked list
    demand: np.ndarray  # the sum of its entries' fractions, in start order
    seen: np.ndarray  # the filling whose component search reached it
    share: np.ndarray  # its fair share in the filling
    at: np.ndarray  # its place in the filling's heap (-1: out)
    live: np.ndarray  # unfrozen entries in the filling
    dirty_flag: np.ndarray
    dirty: np.ndarray  # the dirty list
    changed: np.ndarray  # channels whose load changed
    total: np.ndarray  # a sum in the making


class Work(NamedTuple):
    """Per channel (U), scratch of a filling."""

    channels: np.ndarray  # the channels of the component being filled
    heap: np.ndarray  # its channels with unfrozen flows, a min-heap on their share
    saturated: np.ndarray  # the channels saturated in a step


class Records(NamedTuple):
    """The buffer of channel load records the loop fills and the caller empties."""

    time: np.ndarray  # int64
    channel: np.ndarray  # int32, compact channel numbers
    load: np.ndarray  # float64, bit/s
