"""The FLOW loop's groups of arrays, by name (loop.py reads their fields; model.py builds them).

numba passes a namedtuple of arrays to compiled code as one argument and reads its fields by name at
no cost. (p) marks arrays indexed by position in the active list rather than by slot; S slots, U
channels the routes use, G = U + 1 group ids.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["Channels", "FlowWorkload", "Groups", "Nodes", "Records", "Routes", "RunState", "Slots", "Work"]


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
    remaining: np.ndarray  # bytes (p)
    rate: np.ndarray  # bit/s
    cap: np.ndarray  # (p)
    end: np.ndarray  # ns (p)
    frozen_at: np.ndarray  # the filling that froze it (p)
    frozen_rate: np.ndarray  # the rate it froze at (p)
    position: np.ndarray  # in the active list
    active: np.ndarray  # the active list: slot by position
    free: np.ndarray  # free slots (a stack)
    listing: np.ndarray  # scratch: flows frozen in a step; before a filling, flows to count
    ending: np.ndarray  # flows ending
    single_group: np.ndarray  # the group of its channels no other flow crosses (-1 none, -2 several)
    single_count: np.ndarray  # ... how many
    shared_count: np.ndarray  # channels it shares with other flows
    counted_at: np.ndarray  # the filling those counts are for
    position_rate: np.ndarray  # the rate last taken (p)
    crosses: np.ndarray  # 1 if it crosses a channel (p)
    next_started: np.ndarray  # the active flows in start order
    previous_started: np.ndarray


class Nodes(NamedTuple):
    """Per slot * longest route + entry: the channels' entry lists, and the shared channels."""

    next: np.ndarray
    previous: np.ndarray
    shared: np.ndarray  # the channels the flow shares with others


class Channels(NamedTuple):
    """Per channel (U)."""

    entries: np.ndarray  # entries in its list
    head: np.ndarray  # first and last node of its entry list
    tail: np.ndarray
    load: np.ndarray  # last recorded, bit/s
    group: np.ndarray  # -1: none
    group_next: np.ndarray  # next and previous channel of that group
    group_prev: np.ndarray
    demand: np.ndarray
    marked_flag: np.ndarray
    marked: np.ndarray  # the marked list
    live: np.ndarray  # unfrozen entries ...
    live_stamp: np.ndarray  # ... in this filling
    departed: np.ndarray  # the filling in which it left its group ...
    own_group: np.ndarray  # ... and its own group then
    dirty_flag: np.ndarray
    dirty: np.ndarray  # the dirty list
    changed: np.ndarray  # channels whose load changed
    marked_count: np.ndarray  # entries when it was marked
    ones: np.ndarray  # 1 if every entry's fraction is 1
    total: np.ndarray  # a sum in the making


class Groups(NamedTuple):
    """Per group id (G): channels of equal capacity and demand, filled together."""

    capacity: np.ndarray
    demand: np.ndarray
    size: np.ndarray  # channels
    head: np.ndarray  # first channel
    position: np.ndarray  # in the group list
    listed: np.ndarray  # the group list
    free: np.ndarray  # free ids
    table: np.ndarray  # hash table of (capacity, demand) (-1: empty)


class Work(NamedTuple):
    """Per group id in a filling (G + U; ids from G on: channels that left their group)."""

    left: np.ndarray  # capacity left
    demand: np.ndarray
    share: np.ndarray
    members: np.ndarray  # channels with unfrozen flows
    alone: np.ndarray  # a channel alone?
    member: np.ndarray  # its channel
    live_groups: np.ndarray  # the groups with unfrozen flows


class Records(NamedTuple):
    """The buffer of channel load records the loop fills and the caller empties."""

    time: np.ndarray  # int64
    channel: np.ndarray  # int32, compact channel numbers
    load: np.ndarray  # float64, bit/s
