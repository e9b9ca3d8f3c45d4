"""The FLOW engine's event loop, compiled: model.py sets up its arrays and drives it in slices.

It computes what model.py's docstring describes with the same floating-point operations, in the
same order, as a plain NumPy loop (tests/simulator/test_flow_loop.py keeps it as the reference; it
fills every flow with `model.max_min_rates` at every event), so results are bit-identical to it:

- a channel's demand (sum of its unfrozen entries' fractions), the rates its frozen entries take
  (sum of fraction * rate) and its load (sum of fraction * rate) are summed over the active
  flows' entries in the order the flows started, then in route order, as `np.bincount` sums them;
- a filling's step freezes the flows of every channel whose share, (capacity - taken) / demand,
  is the lowest (or at their cap), as `max_min_rates` does;
- when a flow's rate changes (it starts, or its component's filling gives it another), its bytes
  left drop by its old rate * ((now - since) / 8e9), and its end becomes
  now + ceil(bytes left * 8e9 / new rate).

What is incremental is only the bookkeeping, never a number:

- each channel keeps its entries in start order as a linked list across events (flows join at the
  tail when they start and leave when they end), and its demand is summed again only when its
  entries change;
- a channel's share depends only on its own entries and on the rates its frozen flows froze at,
  so a flow's rate depends only on its connected component (flows linked through shared
  channels): an event fills again only the components holding a channel whose entries changed,
  found by walking channel lists from those channels, and the other flows keep their rates (a
  filling would give them the same bits). When the changed lists or a walk cover much of the
  active entries (ADAPTIVE and SPRAY: a flow has an entry on every channel of its equal-cost
  paths), one filling of every flow at once gives each the same rate: its steps interleave the
  components' own;
- within a filling, a step takes every channel whose share is the lowest: the first step by a
  scan (often every flow freezes in it), the later ones from a heap of the channels left, in
  which only the channels of the flows just frozen change their share;
- the flows' ends wait in a heap (an event under ECMP touches the flows of the components it
  fills, not every active flow);
- a channel's load is summed again only when its entries or the rate of one of them changed (the
  sum over unchanged entries and rates would give the same number);
- when most of the entries are due to be summed again, one pass over all entries in start order
  gives each channel the sum its list would give, faster than walking the lists.

The transfers waiting to start are a binary heap keyed (ready time, transfer), which pops them in
the order `heapq` did. Active flows live in slots that keep their index while active; their order
does not matter (only the channels' lists are ordered).

`run_events` stops at the end of the run, at the time limit, or with the state saved between two
events after `max_events` events (the caller reports progress and calls again), when the record
buffer might not hold another event's records (the caller empties it), or when the transfers about
to start need more slots than are free (the caller grows them); see the statuses. Nothing in it
allocates (`_nrt=False`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

__all__ = [
    "ACTIVE",
    "DONE",
    "ENDS",
    "ENTRIES",
    "EVENTS",
    "FILLED",
    "FIRST_STARTED",
    "FREE",
    "HEAP_SIZE",
    "LAST_STARTED",
    "MARKED",
    "NOW",
    "PAUSED",
    "RECORDS",
    "RECORDS_FULL",
    "SCALARS",
    "SLOTS_FULL",
    "SLOTS_NEEDED",
    "STAMP",
    "TIME_LIMITED",
    "TRANSFERS_DONE",
    "ZERO_RATE",
    "run_events",
]

# numba's type stubs do not list `_nrt`, hence the ignores.
_kernel: Any = njit(cache=True, _nrt=False)  # type: ignore[call-overload]
# Helpers that take the loop's tuples of arrays: inlined where called, not called with copies.
_inline: Any = njit(cache=True, inline="always", _nrt=False)  # type: ignore[call-overload]

_BITS_PER_S = 8 * 1e9  # bytes * 8e9 / (bit/s) = ns
_NEVER = np.iinfo(np.int64).max

# What `run_events` returns.
DONE = 0  # no flow active and none to start
TIME_LIMITED = 1  # the next event lies past the time limit; now = the limit
PAUSED = 2  # ran max_events events
RECORDS_FULL = 3  # the record buffer may not hold one more event's records
SLOTS_FULL = 4  # the transfers starting now need scalars[SLOTS_NEEDED] slots in all
ZERO_RATE = 5  # an active flow got rate 0 (it crosses a channel of zero capacity)

# The loop's scalar state (int64 array `scalars`), kept between calls.
NOW = 0
EVENTS = 1
HEAP_SIZE = 2
ACTIVE = 3  # active slots, listed first in the active list
TRANSFERS_DONE = 4
RECORDS = 5  # records in the buffer
SLOTS_NEEDED = 6
STAMP = 7  # fillings so far: per-filling marks compare against it
FREE = 8  # free slots, on the free stack
MARKED = 9  # channels whose entries changed since the last filling (the marked list)
FIRST_STARTED = 10  # the active flows in start order: the first (-1: none) ...
LAST_STARTED = 11  # ... and the last slot of that list
ENTRIES = 12  # channel entries of the active flows
ENDS = 13  # active flows in the heap of ends
FILLED = 14  # flows listed in slots.filled: started on no channel, before a pause for slots
SCALARS = 15


# --- the heap of transfers ready to start -------------------------------------------------------


@_inline
def _before(time_a, transfer_a, time_b, transfer_b):
    return time_a < time_b or (time_a == time_b and transfer_a < transfer_b)


@_kernel
def _heap_push(heap_time, heap_transfer, size, time, transfer):
    i = size
    while i > 0:
        parent = (i - 1) >> 1
        if _before(heap_time[parent], heap_transfer[parent], time, transfer):
            break
        heap_time[i] = heap_time[parent]
        heap_transfer[i] = heap_transfer[parent]
        i = parent
    heap_time[i] = time
    heap_transfer[i] = transfer
    return size + 1


@_kernel
def _heap_pop(heap_time, heap_transfer, size):
    """Drop the root; returns the new size."""
    size -= 1
    time, transfer = heap_time[size], heap_transfer[size]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        right = child + 1
        if right < size and _before(
            heap_time[right], heap_transfer[right], heap_time[child], heap_transfer[child]
        ):
            child = right
        if _before(time, transfer, heap_time[child], heap_transfer[child]):
            break
        heap_time[i] = heap_time[child]
        heap_transfer[i] = heap_transfer[child]
        i = child
    if size > 0:
        heap_time[i] = time
        heap_transfer[i] = transfer
    return size


@_inline
def _complete(flow, now, workload, state, heap_size):
    """Flow `flow`'s last byte left at `now`: set its times; when it was its transfer's last flow,
    start the wait of every transfer waiting on that one. Returns the heap size and 1 if the
    transfer completed, else 0."""
    (_, dependent_offsets, dependents, needs_arrival, _, flow_latency, flow_transfer, _, _) = workload
    (_, sent, finish, flows_left, waiting_on, ready, arrival, departure, heap_time, heap_transfer, _, _) = (
        state
    )
    sent[flow] = now
    finish[flow] = now + flow_latency[flow]
    transfer = flow_transfer[flow]
    flows_left[transfer] -= 1
    if finish[flow] > arrival[transfer]:
        arrival[transfer] = finish[flow]
    departure[transfer] = now
    if flows_left[transfer] != 0:
        return heap_size, 0
    for d in range(dependent_offsets[transfer], dependent_offsets[transfer + 1]):
        waiting = dependents[d]
        waited = arrival[transfer] if needs_arrival[d] else now
        if waited > ready[waiting]:
            ready[waiting] = waited
        waiting_on[waiting] -= 1
        if waiting_on[waiting] == 0:
            heap_size = _heap_push(heap_time, heap_transfer, heap_size, ready[waiting], waiting)
    return heap_size, 1


# --- channels' entry lists ----------------------------------------------------------------------
#
# The groups of arrays model.py hands over are named tuples (state.py names and describes each
# array): `channel` (Channels), `work` (Work), `slots` (Slots), `nodes` (Nodes).


@_inline
def _mark(c, channel, marked_count):
    """Put channel c on the marked list (its entries changed, or its load is to be summed again)."""
    marked_flag, marked = channel.marked_flag, channel.marked
    if not marked_flag[c]:
        marked_flag[c] = True
        marked[marked_count] = c
        marked_count += 1
    return marked_count


@_kernel
def _join(slot, routes, slots, nodes, channel, marked_count, longest):
    """Append the entries of the flow in `slot` to their channels' lists."""
    route_offsets, route_channel = routes.offsets, routes.channel
    node_next, node_prev = nodes.next, nodes.previous
    count, head, tail = channel.entries, channel.head, channel.tail
    route = slots.route[slot]
    for k in range(route_offsets[route + 1] - route_offsets[route]):
        c = route_channel[route_offsets[route] + k]
        marked_count = _mark(c, channel, marked_count)
        node = slot * longest + k
        node_next[node] = -1
        node_prev[node] = tail[c]
        if tail[c] >= 0:
            node_next[tail[c]] = node
        else:
            head[c] = node
        tail[c] = node
        count[c] += 1
    return marked_count


@_kernel
def _leave(slot, routes, slots, nodes, channel, marked_count, longest):
    """Take the entries of the flow in `slot` out of their channels' lists."""
    route_offsets, route_channel = routes.offsets, routes.channel
    node_next, node_prev = nodes.next, nodes.previous
    count, head, tail = channel.entries, channel.head, channel.tail
    route = slots.route[slot]
    for k in range(route_offsets[route + 1] - route_offsets[route]):
        c = route_channel[route_offsets[route] + k]
        marked_count = _mark(c, channel, marked_count)
        node = slot * longest + k
        if node_prev[node] >= 0:
            node_next[node_prev[node]] = node_next[node]
        else:
            head[c] = node_next[node]
        if node_next[node] >= 0:
            node_prev[node_next[node]] = node_prev[node]
        else:
            tail[c] = node_prev[node]
        count[c] -= 1
    return marked_count


@_inline
def _fraction(node, routes, slot_route, longest):
    """The fraction of the entry behind a channel list node."""
    slot = node // longest
    return routes.fraction[routes.offsets[slot_route[slot]] + node - slot * longest]


@_inline
def _dense(marked_count, channel, entries):
    """Whether summing over the marked channels' lists would visit more than half of all active
    entries: then one pass over every entry, in start order, is the cheaper way to the same sums."""
    count, marked = channel.entries, channel.marked
    visits = 0
    for i in range(marked_count):
        visits += count[marked[i]]
    return 2 * visits > entries


@_kernel
def _sum_marked_in_start_order(first, routes, slots, channel, marked_count, weighted):
    """Each marked channel's sum over its entries in start order, as its list would give it, from
    one pass over the active flows in start order: of fractions, or, if `weighted`, of fraction *
    rate. Into channel.total."""
    route_offsets, route_channel, route_fraction = routes.offsets, routes.channel, routes.fraction
    slot_route, slot_rate, next_started = slots.route, slots.rate, slots.next_started
    marked_flag, marked, total = channel.marked_flag, channel.marked, channel.total
    for i in range(marked_count):
        total[marked[i]] = 0.0
    s = first
    while s >= 0:
        for e in range(route_offsets[slot_route[s]], route_offsets[slot_route[s] + 1]):
            c = route_channel[e]
            if marked_flag[c]:
                total[c] += route_fraction[e] * slot_rate[s] if weighted else route_fraction[e]
        s = next_started[s]


# --- the filling ----------------------------------------------------------------------------------
#
# The channels of a component that still carry unfrozen flows wait in a binary min-heap on their
# share (work.heap; channel.at is a channel's place in it, -1 when out). The same functions keep
# the active flows' ends (slots.end_heap, slots.end_at, keyed by slots.end).


@_inline
def _heap_swap(heap, at, i, j):
    heap[i], heap[j] = heap[j], heap[i]
    at[heap[i]] = i
    at[heap[j]] = j


@_kernel
def _heap_down(heap, at, share, i, size):
    """Move heap[i] down to its place."""
    while True:
        child = 2 * i + 1
        if child >= size:
            return
        if child + 1 < size and share[heap[child + 1]] < share[heap[child]]:
            child += 1
        if not share[heap[child]] < share[heap[i]]:
            return
        _heap_swap(heap, at, i, child)
        i = child


@_kernel
def _heap_sift(heap, at, share, i, size):
    """Move heap[i] up or down to its place."""
    while i > 0 and share[heap[i]] < share[heap[(i - 1) >> 1]]:
        _heap_swap(heap, at, i, (i - 1) >> 1)
        i = (i - 1) >> 1
    _heap_down(heap, at, share, i, size)


@_kernel
def _heap_remove(heap, at, share, c, size):
    """Take c out of the heap; returns the new size."""
    i = at[c]
    size -= 1
    at[c] = -1
    if i != size:
        heap[i] = heap[size]
        at[heap[i]] = i
        _heap_sift(heap, at, share, i, size)
    return size


@_kernel
def _component(c, stamp, budget, routes, slots, nodes, channel, work, longest):
    """Gather the connected component of channel c (which has entries) by walking channel lists:
    into work.channels the channels reached through shared flows, into slots.members their flows,
    each marked `stamp` in channel.seen and slots.seen. Returns the numbers of channels and of
    flows, or (-1, -1) once it has visited more than `budget` list nodes."""
    route_offsets, route_channel, slot_route = routes.offsets, routes.channel, slots.route
    seen, slot_seen, node_next, head = channel.seen, slots.seen, nodes.next, channel.head
    channels, members = work.channels, slots.members
    seen[c] = stamp
    channels[0] = c
    reached, flows, i, visits = 1, 0, 0, 0
    while i < reached:
        node = head[channels[i]]
        i += 1
        while node >= 0:
            visits += 1
            s = node // longest
            if slot_seen[s] != stamp:
                slot_seen[s] = stamp
                members[flows] = s
                flows += 1
                for e in range(route_offsets[slot_route[s]], route_offsets[slot_route[s] + 1]):
                    if seen[route_channel[e]] != stamp:
                        seen[route_channel[e]] = stamp
                        channels[reached] = route_channel[e]
                        reached += 1
            node = node_next[node]
        if visits > budget:
            return -1, -1
    return reached, flows


@_kernel
def _share(c, stamp, routes, slots, nodes, channel, longest):
    """Channel c's fair share in this filling: (capacity - the rates of its frozen flows) / the
    demand of its unfrozen ones, both summed over its entries in start order, as
    model.max_min_rates sums them. Sets channel.live to its unfrozen entries."""
    slot_route, frozen_at, rate = slots.route, slots.frozen_at, slots.frozen_rate
    node_next = nodes.next
    demand, taken, live = 0.0, 0.0, 0
    node = channel.head[c]
    while node >= 0:
        s = node // longest
        if frozen_at[s] == stamp:
            taken += _fraction(node, routes, slot_route, longest) * rate[s]
        else:
            demand += _fraction(node, routes, slot_route, longest)
            live += 1
        node = node_next[node]
    channel.live[c] = live
    if live == 0:
        return np.inf
    return (routes.capacity[c] - taken) / demand


@_inline
def _lowest_cap(level, flows, stamp, slots):
    """The level, or the lowest cap of an unfrozen flow of the component if that is lower."""
    members, frozen_at, cap = slots.members, slots.frozen_at, slots.cap
    for i in range(flows):
        s = members[i]
        if frozen_at[s] != stamp and cap[s] < level:
            level = cap[s]
    return level


@_kernel
def _freeze(count, level, flows, stamp, slots, nodes, channel, work, has_caps, longest):
    """Freeze at `level` the unfrozen flows of the `count` channels in work.saturated, then (with
    caps) at its cap every unfrozen flow whose cap the level reached; listed in slots.frozen.
    Returns how many froze."""
    members, frozen_at, rate, cap = slots.members, slots.frozen_at, slots.frozen_rate, slots.cap
    frozen_list, node_next, head, saturated = slots.frozen, nodes.next, channel.head, work.saturated
    frozen = 0
    for i in range(count):
        node = head[saturated[i]]
        while node >= 0:
            s = node // longest
            if frozen_at[s] != stamp:
                frozen_at[s] = stamp
                rate[s] = level
                frozen_list[frozen] = s
                frozen += 1
            node = node_next[node]
    if has_caps:
        for i in range(flows):
            s = members[i]
            if frozen_at[s] != stamp and cap[s] <= level:
                frozen_at[s] = stamp
                rate[s] = cap[s]
                frozen_list[frozen] = s
                frozen += 1
    return frozen


@_kernel
def _fill(channels, flows, stamp, routes, slots, nodes, channel, work, has_caps, longest):
    """Max-min fair rates of one component's flows (slots.members[:flows], over work.channels[:
    channels]) into slots.frozen_rate, step for step as model.max_min_rates. The
    first step scans the channels (it often freezes every flow); the channels left then wait in
    the heap."""
    route_offsets, route_channel, slot_route = routes.offsets, routes.channel, slots.route
    frozen_list, share, at, live = slots.frozen, channel.share, channel.at, channel.live
    dirty_flag, dirty, heap, saturated, listed = (
        channel.dirty_flag,
        channel.dirty,
        work.heap,
        work.saturated,
        work.channels,
    )
    level = np.inf
    for i in range(channels):  # nothing frozen yet: (capacity - 0.0) / the demand of all entries
        c = listed[i]
        share[c] = routes.capacity[c] / channel.demand[c]
        live[c] = channel.entries[c]
        if share[c] < level:
            level = share[c]
    if has_caps:
        level = _lowest_cap(level, flows, stamp, slots)
    count, size = 0, 0
    for i in range(channels):
        c = listed[i]
        if share[c] <= level:
            saturated[count] = c
            count += 1
        else:
            heap[size] = c
            at[c] = size
            size += 1
    if count == channels:  # every channel saturates: every flow freezes at the level
        for i in range(flows):
            slots.frozen_at[slots.members[i]] = stamp
            slots.frozen_rate[slots.members[i]] = level
        return
    unfrozen = flows - _freeze(count, level, flows, stamp, slots, nodes, channel, work, has_caps, longest)
    frozen = flows - unfrozen
    if unfrozen > 0:
        for i in range(size // 2 - 1, -1, -1):
            _heap_down(heap, at, share, i, size)
    while unfrozen > 0:
        # The channels still in the heap that lost an unfrozen entry take their new share.
        dirty_count = 0
        for i in range(frozen):
            s = frozen_list[i]
            for e in range(route_offsets[slot_route[s]], route_offsets[slot_route[s] + 1]):
                c = route_channel[e]
                if at[c] >= 0 and not dirty_flag[c]:
                    dirty_flag[c] = True
                    dirty[dirty_count] = c
                    dirty_count += 1
        for i in range(dirty_count):
            c = dirty[i]
            dirty_flag[c] = False
            value = _share(c, stamp, routes, slots, nodes, channel, longest)
            if live[c] == 0:
                size = _heap_remove(heap, at, share, c, size)
            else:
                share[c] = value
                _heap_sift(heap, at, share, at[c], size)
        # Freeze the unfrozen flows of every channel whose share is the level.
        level = share[heap[0]]
        if has_caps:
            level = _lowest_cap(level, flows, stamp, slots)
        count = 0
        while size > 0 and share[heap[0]] <= level:
            saturated[count] = heap[0]
            count += 1
            size = _heap_remove(heap, at, share, heap[0], size)
        frozen = _freeze(count, level, flows, stamp, slots, nodes, channel, work, has_caps, longest)
        unfrozen -= frozen
    for i in range(size):  # channels whose flows all froze elsewhere in the last step
        at[heap[i]] = -1


@_inline
def _list_filled(flows, slots, filled):
    """Append the component's flows to slots.filled; returns the new count."""
    for i in range(flows):
        slots.filled[filled + i] = slots.members[i]
    return filled + flows


@_kernel
def _fill_all(active, stamp, filled, routes, slots, nodes, channel, work, has_caps, longest):
    """Fill every component at once: one filling over every active flow that crosses a channel
    and every channel with entries. Its steps interleave the components' own steps with the same
    numbers (a channel's share moves only with its own flows), so each flow gets the rate its
    component's filling would give it, to the bit. Returns the count of slots.filled."""
    route_offsets, slot_route, active_list = routes.offsets, slots.route, slots.active
    flows = 0
    for i in range(active):
        s = active_list[i]
        if route_offsets[slot_route[s] + 1] > route_offsets[slot_route[s]]:
            slots.members[flows] = s
            flows += 1
    channels = 0
    for c in range(channel.entries.shape[0]):
        if channel.entries[c] > 0:
            work.channels[channels] = c
            channels += 1
    if flows:
        _fill(channels, flows, stamp, routes, slots, nodes, channel, work, has_caps, longest)
    return _list_filled(flows, slots, filled)


@_kernel
def _refill(
    walk,
    marked_count,
    stamp,
    active,
    filled,
    routes,
    slots,
    nodes,
    channel,
    work,
    has_caps,
    longest,
    first,
    entries,
):
    """New rates for the flows of every component with a marked channel (those whose entries
    changed); the other flows keep theirs, which a filling would give them again to the bit.
    First the marked channels' demand (the sum of their entries' fractions, in start order); then
    each component found by walking channel lists, or every component at once (_fill_all) when
    the marked lists or a walk cover much of the active entries. The flows filled are listed in
    slots.filled after the `filled` there already. Returns the filling's stamp (one more than
    `stamp` when a walk gave way to _fill_all) and the count of slots.filled. A walk gives way
    once it has visited more list nodes than the active entries / walk[0] and than walk[1]."""
    marked, count, seen, demand, node_next = (
        channel.marked,
        channel.entries,
        channel.seen,
        channel.demand,
        nodes.next,
    )
    dense = _dense(marked_count, channel, entries)
    if dense:
        _sum_marked_in_start_order(first, routes, slots, channel, marked_count, False)
    for i in range(marked_count):
        c = marked[i]
        if dense:
            demand[c] = channel.total[c]
            continue
        total = 0.0
        node = channel.head[c]
        while node >= 0:
            total += _fraction(node, routes, slots.route, longest)
            node = node_next[node]
        demand[c] = total
    if dense:
        return stamp, _fill_all(active, stamp, filled, routes, slots, nodes, channel, work, has_caps, longest)
    budget = max(entries // walk[0], walk[1])
    listed = filled
    for i in range(marked_count):
        c = marked[i]
        if count[c] > 0 and seen[c] != stamp:
            channels, flows = _component(c, stamp, budget, routes, slots, nodes, channel, work, longest)
            if channels < 0:  # a new stamp: what was filled so far is filled again
                return stamp + 1, _fill_all(
                    active, stamp + 1, filled, routes, slots, nodes, channel, work, has_caps, longest
                )
            _fill(channels, flows, stamp, routes, slots, nodes, channel, work, has_caps, longest)
            listed = _list_filled(flows, slots, listed)
    return stamp, listed


# --- loads and records --------------------------------------------------------------------------


@_kernel
def _sort(values, count):
    """Sort values[:count] in place (`ndarray.sort` allocates): insertion sort for a few, else
    heapsort."""
    if count <= 16:
        for i in range(1, count):
            value = values[i]
            j = i - 1
            while j >= 0 and values[j] > value:
                values[j + 1] = values[j]
                j -= 1
            values[j + 1] = value
        return
    for root in range(count // 2 - 1, -1, -1):
        _sift_down(values, root, count)
    for end in range(count - 1, 0, -1):
        values[0], values[end] = values[end], values[0]
        _sift_down(values, 0, end)


@_kernel
def _sift_down(values, root, end):
    while 2 * root + 1 < end:
        child = 2 * root + 1
        if child + 1 < end and values[child + 1] > values[child]:
            child += 1
        if values[root] >= values[child]:
            return
        values[root], values[child] = values[child], values[root]
        root = child


@_kernel
def _record_loads(
    now,
    retimed_count,
    retimed_entries,
    marked_count,
    routes,
    slots,
    nodes,
    channel,
    records,
    record_count,
    longest,
    first,
    entries,
):
    """Sum again the load of every marked channel and of every channel of a flow whose rate
    changed (slots.listing[:retimed_count], with `retimed_entries` entries in all; over its
    entries, in start order, fraction * rate); record (now, channel, load) for each whose load
    changed, by channel. Returns the record count."""
    route_offsets, route_channel = routes.offsets, routes.channel
    slot_route, slot_rate = slots.route, slots.rate
    node_next = nodes.next
    head, load, marked_flag, marked, changed = (
        channel.head,
        channel.load,
        channel.marked_flag,
        channel.marked,
        channel.changed,
    )
    record_time, record_channel, record_load = records
    count, retimed = channel.entries, slots.listing
    if 2 * retimed_entries > entries:  # most flows changed rate: every channel with entries
        for c in range(count.shape[0]):
            if count[c] > 0:
                marked_count = _mark(c, channel, marked_count)
    else:
        for i in range(retimed_count):
            route = slot_route[retimed[i]]
            for e in range(route_offsets[route], route_offsets[route + 1]):
                marked_count = _mark(route_channel[e], channel, marked_count)
    dense = _dense(marked_count, channel, entries)
    if dense:
        _sum_marked_in_start_order(first, routes, slots, channel, marked_count, True)
    changes = 0
    for i in range(marked_count):
        c = marked[i]
        marked_flag[c] = False
        if dense:
            total = channel.total[c]
        else:
            total = 0.0
            node = head[c]
            while node >= 0:
                total += _fraction(node, routes, slot_route, longest) * slot_rate[node // longest]
                node = node_next[node]
        if total != load[c]:
            load[c] = total
            changed[changes] = c
            changes += 1
    if 8 * changes > load.shape[0]:  # many: in channel order by a pass over every channel's flag
        flag = channel.dirty_flag  # (the filling's dirty flags, all clear outside it)
        for i in range(changes):
            flag[changed[i]] = True
        changes = 0
        for c in range(load.shape[0]):
            if flag[c]:
                flag[c] = False
                changed[changes] = c
                changes += 1
    else:
        _sort(changed, changes)
    for i in range(changes):
        record_time[record_count] = now
        record_channel[record_count] = changed[i]
        record_load[record_count] = load[changed[i]]
        record_count += 1
    return record_count


# --- the loop -----------------------------------------------------------------------------------


@_inline
def _append_started(s, slots, scalars):
    next_started, previous_started = slots.next_started, slots.previous_started
    next_started[s] = -1
    previous_started[s] = scalars[LAST_STARTED]
    if scalars[LAST_STARTED] >= 0:
        next_started[scalars[LAST_STARTED]] = s
    else:
        scalars[FIRST_STARTED] = s
    scalars[LAST_STARTED] = s


@_inline
def _unlink_started(s, slots, scalars):
    next_started, previous_started = slots.next_started, slots.previous_started
    if previous_started[s] >= 0:
        next_started[previous_started[s]] = next_started[s]
    else:
        scalars[FIRST_STARTED] = next_started[s]
    if next_started[s] >= 0:
        previous_started[next_started[s]] = previous_started[s]
    else:
        scalars[LAST_STARTED] = previous_started[s]


@_kernel
def run_events(
    workload,
    routes,
    state,
    slots,
    nodes,
    channel,
    work,
    records,
    scalars,
    has_caps,
    walk,
    time_limit_ns,
    max_events,
):
    """Run events from the saved state (see the module docstring); returns a status. `walk`
    (int64 [2]) bounds a component search (_refill)."""
    transfer_flow_offsets, flow_size, flow_route, flow_cap = (
        workload.transfer_flow_offsets,
        workload.flow_size,
        workload.flow_route,
        workload.flow_cap,
    )
    start, heap_time, heap_transfer, batch_time, batch = (
        state.start,
        state.heap_time,
        state.heap_transfer,
        state.batch_time,
        state.batch,
    )
    slot_flow, slot_route, slot_remaining, slot_rate, slot_cap, since = (
        slots.flow,
        slots.route,
        slots.remaining,
        slots.rate,
        slots.cap,
        slots.since,
    )
    slot_end, frozen_rate, filled_list, retimed = slots.end, slots.frozen_rate, slots.filled, slots.listing
    end_heap, end_at = slots.end_heap, slots.end_at
    route_offsets = routes.offsets
    slot_position, active_list, free_slots, ending = slots.position, slots.active, slots.free, slots.ending
    channels = routes.capacity.shape[0]
    longest = nodes.next.shape[0] // slot_flow.shape[0]
    now = scalars[NOW]
    heap_size = scalars[HEAP_SIZE]
    active = scalars[ACTIVE]
    free = scalars[FREE]
    record_count = scalars[RECORDS]
    marked_count = scalars[MARKED]
    ends = scalars[ENDS]
    filled = scalars[FILLED]
    status = PAUSED
    for _ in range(max_events):
        if record_count + channels > records.time.shape[0]:
            status = RECORDS_FULL
            break
        # Start every transfer ready by now, a batch at a time (those that an empty flow of a batch
        # releases at `now` start with the next batch).
        while heap_size > 0 and heap_time[0] <= now:
            batch_count = 0
            needed = 0
            while heap_size > 0 and heap_time[0] <= now:
                batch_time[batch_count] = heap_time[0]
                batch[batch_count] = heap_transfer[0]
                needed += (
                    transfer_flow_offsets[batch[batch_count] + 1] - transfer_flow_offsets[batch[batch_count]]
                )
                batch_count += 1
                heap_size = _heap_pop(heap_time, heap_transfer, heap_size)
            if needed > free:
                for i in range(batch_count):
                    heap_size = _heap_push(heap_time, heap_transfer, heap_size, batch_time[i], batch[i])
                scalars[SLOTS_NEEDED] = active + needed
                status = SLOTS_FULL
                break
            for i in range(batch_count):
                for f in range(transfer_flow_offsets[batch[i]], transfer_flow_offsets[batch[i] + 1]):
                    start[f] = now
            for i in range(batch_count):
                for f in range(transfer_flow_offsets[batch[i]], transfer_flow_offsets[batch[i] + 1]):
                    if flow_size[f] == 0:
                        heap_size, released = _complete(f, now, workload, state, heap_size)
                        scalars[TRANSFERS_DONE] += released
            for i in range(batch_count):
                for f in range(transfer_flow_offsets[batch[i]], transfer_flow_offsets[batch[i] + 1]):
                    if flow_size[f] != 0:
                        free -= 1
                        s = free_slots[free]
                        slot_flow[s] = f
                        slot_route[s] = flow_route[f]
                        slot_remaining[s] = float(flow_size[f])
                        since[s] = now
                        slot_rate[s] = 0.0
                        end_at[s] = -1
                        frozen_rate[s] = 0.0  # (filled, unless it crosses no channel: its cap)
                        if has_caps:
                            slot_cap[s] = flow_cap[f]
                        if route_offsets[flow_route[f] + 1] == route_offsets[flow_route[f]]:
                            if has_caps and flow_cap[f] != np.inf:
                                frozen_rate[s] = flow_cap[f]
                            filled_list[filled] = s
                            filled += 1
                        slot_position[s] = active
                        active_list[active] = s
                        active += 1
                        marked_count = _join(s, routes, slots, nodes, channel, marked_count, longest)
                        _append_started(s, slots, scalars)
                        scalars[ENTRIES] += route_offsets[flow_route[f] + 1] - route_offsets[flow_route[f]]
        if status == SLOTS_FULL:
            break
        scalars[STAMP] += 1
        scalars[STAMP], filled = _refill(
            walk,
            marked_count,
            scalars[STAMP],
            active,
            filled,
            routes,
            slots,
            nodes,
            channel,
            work,
            has_caps,
            longest,
            scalars[FIRST_STARTED],
            scalars[ENTRIES],
        )
        # A flow whose rate changed: its bytes left since its last change, and its new end.
        retimed_count, retimed_entries = 0, 0
        for i in range(filled):
            s = filled_list[i]
            if not frozen_rate[s] > 0:
                status = ZERO_RATE
                break
            if frozen_rate[s] == slot_rate[s]:
                continue
            slot_remaining[s] -= slot_rate[s] * ((now - since[s]) / _BITS_PER_S)
            since[s] = now
            slot_rate[s] = frozen_rate[s]
            slot_end[s] = now + np.int64(np.ceil(slot_remaining[s] * _BITS_PER_S / slot_rate[s]))
            if end_at[s] < 0:
                end_heap[ends] = s
                end_at[s] = ends
                ends += 1
            _heap_sift(end_heap, end_at, slot_end, end_at[s], ends)
            retimed[retimed_count] = s
            retimed_count += 1
            retimed_entries += route_offsets[slot_route[s] + 1] - route_offsets[slot_route[s]]
        if status == ZERO_RATE:
            break
        filled = 0
        record_count = _record_loads(
            now,
            retimed_count,
            retimed_entries,
            marked_count,
            routes,
            slots,
            nodes,
            channel,
            records,
            record_count,
            longest,
            scalars[FIRST_STARTED],
            scalars[ENTRIES],
        )
        marked_count = 0
        scalars[EVENTS] += 1
        next_end = slot_end[end_heap[0]] if ends > 0 else _NEVER
        if active == 0 and heap_size == 0:
            status = DONE
            break
        upcoming = next_end
        if heap_size > 0 and heap_time[0] < upcoming:
            upcoming = heap_time[0]
        if time_limit_ns != 0 and upcoming > time_limit_ns:
            now = time_limit_ns
            status = TIME_LIMITED
            break
        ended = 0
        while ends > 0 and slot_end[end_heap[0]] <= upcoming:
            ending[ended] = end_heap[0]
            ended += 1
            ends = _heap_remove(end_heap, end_at, slot_end, end_heap[0], ends)
        for i in range(ended):
            s = ending[i]
            marked_count = _leave(s, routes, slots, nodes, channel, marked_count, longest)
            _unlink_started(s, slots, scalars)
            scalars[ENTRIES] -= route_offsets[slot_route[s] + 1] - route_offsets[slot_route[s]]
            active -= 1
            last, position = active_list[active], slot_position[s]
            active_list[position] = last
            slot_position[last] = position
            free_slots[free] = s
            free += 1
            heap_size, released = _complete(slot_flow[s], upcoming, workload, state, heap_size)
            scalars[TRANSFERS_DONE] += released
        now = upcoming
    scalars[NOW] = now
    scalars[HEAP_SIZE] = heap_size
    scalars[ACTIVE] = active
    scalars[FREE] = free
    scalars[RECORDS] = record_count
    scalars[MARKED] = marked_count
    scalars[ENDS] = ends
    scalars[FILLED] = filled
    return status
