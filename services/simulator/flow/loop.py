"""The FLOW engine's event loop, compiled: model.py sets up its arrays and drives it in slices.

It computes what model.py's docstring describes with the same floating-point operations, in the
same order, as the NumPy loop it replaced (`model.max_min_rates` is that loop's filling, kept as
the reference), so results are bit-identical to it:

- a channel's demand (sum of its entries' fractions) and load (sum of fraction * rate) are summed
  over the active flows' entries in the order the flows started, then in route order, as
  `np.bincount` summed them;
- every event fills from scratch: each step updates every channel that still carries an unfrozen
  flow (left -= delta * demand) and freezes the flows of every channel whose share is within the
  tolerance of the step;
- every event, each flow's remaining bytes drop by rate * (dt / 8e9) and its end is recomputed as
  now + ceil(remaining * 8e9 / rate).

What is incremental is only the bookkeeping, never a number:

- each channel keeps its entries in start order as a linked list across events (flows join at the
  tail when they start and leave when they end), and its demand is summed again only when its
  entries change;
- channels of equal capacity and equal demand take the same steps with the same numbers, so they
  form one group, kept across events, and a step updates each group once, not each channel. During
  a filling, a channel whose demand changes (a flow of it froze elsewhere) leaves its group with
  the group's numbers, as a group of its own, unless it is the group's last channel with unfrozen
  flows;
- a step freezes flows first and does the bookkeeping of their channels only if unfrozen flows
  remain (a step that saturates every group freezes every flow without looking at channels); a
  flow knows which of its channels it shares, and counts the others per group, so that freezing it
  visits only the shared ones;
- a channel's load is summed again only when its entries or the rate of one of them changed (the
  sum over unchanged entries and rates would give the same number);
- when most of the entries are due to be summed again (ADAPTIVE and SPRAY: a flow has an entry on
  every channel of its equal-cost paths, and every rate changes at once), one pass over all entries
  in start order gives each channel the sum its list would give, faster than walking the lists.

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
    "ENTRIES",
    "EVENTS",
    "FIRST_STARTED",
    "FREE",
    "GROUPS",
    "HEAP_SIZE",
    "LAST_STARTED",
    "MARKED",
    "NOW",
    "PAUSED",
    "RECORDS",
    "RECORDS_FULL",
    "RENEW",
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
_SATURATION_TOLERANCE = 1e-9  # as in model.max_min_rates
_NEVER = np.iinfo(np.int64).max
_MIX_A = 0x5851F42D4C957F2D  # odd multipliers of the group hash
_MIX_B = 0x2545F4914F6CDD1D

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
GROUPS = 10  # groups with channels
RENEW = 11  # flows started since the last filling (listed first in slots.listing)
FIRST_STARTED = 12  # the active flows in start order: the first (-1: none) ...
LAST_STARTED = 13  # ... and the last slot of that list
ENTRIES = 14  # channel entries of the active flows
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


# --- channels' entry lists and groups -----------------------------------------------------------
#
# The groups of arrays model.py hands over are named tuples (state.py names and describes each
# array): `channel` (Channels), `groups` (Groups), `work` (Work), `slots` (Slots), `nodes` (Nodes).


@_inline
def _mark(c, channel, marked_count):
    """Put channel c on the marked list (its demand or load is to be summed again), before its
    entries change."""
    marked_flag, marked = channel.marked_flag, channel.marked
    if not marked_flag[c]:
        marked_flag[c] = True
        marked[marked_count] = c
        marked_count += 1
        channel.marked_count[c] = channel.entries[c]
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
def _group_hash(capacity, demand, mask):
    """Equal (capacity, demand) values hash alike; NaN and huge values all hash to 0."""
    h = np.int64(0)
    if abs(capacity) < 1e18 and abs(demand) < 1e12:
        h = (np.int64(demand * 1048576.0) * _MIX_A) ^ (np.int64(capacity * 1e-6) * _MIX_B)
        h ^= h >> 31
    return h & mask


@_kernel
def _group_leave(c, channel, groups, listed_count):
    """Take channel c out of its group; a group left without channels is deleted (out of the hash
    table by backward-shift deletion, out of the group list, its id freed). Returns the number of
    groups."""
    group_of, group_next, group_prev = channel.group, channel.group_next, channel.group_prev
    (group_capacity, group_demand, group_size, group_head, group_position, listed, free, table) = groups
    g = group_of[c]
    group_of[c] = -1
    if group_prev[c] >= 0:
        group_next[group_prev[c]] = group_next[c]
    else:
        group_head[g] = group_next[c]
    if group_next[c] >= 0:
        group_prev[group_next[c]] = group_prev[c]
    group_size[g] -= 1
    if group_size[g] > 0:
        return listed_count
    mask = table.shape[0] - 1
    i = _group_hash(group_capacity[g], group_demand[g], mask)
    while table[i] != g:
        i = (i + 1) & mask
    j = i
    while True:
        j = (j + 1) & mask
        if table[j] < 0:
            break
        home = _group_hash(group_capacity[table[j]], group_demand[table[j]], mask)
        if (i <= j and i < home <= j) or (i > j and (home > i or home <= j)):
            continue
        table[i] = table[j]
        i = j
    table[i] = -1
    listed_count -= 1
    moved = listed[listed_count]
    listed[group_position[g]] = moved
    group_position[moved] = group_position[g]
    free[free.shape[0] - listed_count - 1] = g
    return listed_count


@_kernel
def _group_join(c, capacity, demand, channel, groups, listed_count):
    """Put channel c into the group of (capacity, demand), made if there is none. Returns the
    number of groups."""
    group_of, group_next, group_prev = channel.group, channel.group_next, channel.group_prev
    (group_capacity, group_demand, group_size, group_head, group_position, listed, free, table) = groups
    mask = table.shape[0] - 1
    i = _group_hash(capacity, demand, mask)
    g = -1
    while table[i] >= 0:
        if group_capacity[table[i]] == capacity and group_demand[table[i]] == demand:
            g = table[i]
            break
        i = (i + 1) & mask
    if g < 0:
        g = free[free.shape[0] - listed_count - 1]
        table[i] = g
        group_capacity[g] = capacity
        group_demand[g] = demand
        group_size[g] = 0
        group_head[g] = -1
        group_position[g] = listed_count
        listed[listed_count] = g
        listed_count += 1
    group_of[c] = g
    group_prev[c] = -1
    group_next[c] = group_head[g]
    if group_head[g] >= 0:
        group_prev[group_head[g]] = c
    group_head[g] = c
    group_size[g] += 1
    return listed_count


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
    one pass over the active flows in start order: of fractions (and whether all are 1), or, if
    `weighted`, of fraction * rate. Into channel.total (and channel.ones)."""
    route_offsets, route_channel, route_fraction = routes.offsets, routes.channel, routes.fraction
    slot_route, slot_rate, next_started = slots.route, slots.rate, slots.next_started
    marked_flag, marked, ones, total = channel.marked_flag, channel.marked, channel.ones, channel.total
    for i in range(marked_count):
        total[marked[i]] = 0.0
        if not weighted:
            ones[marked[i]] = 1
    s = first
    while s >= 0:
        for e in range(route_offsets[slot_route[s]], route_offsets[slot_route[s] + 1]):
            c = route_channel[e]
            if marked_flag[c]:
                if weighted:
                    total[c] += route_fraction[e] * slot_rate[s]
                else:
                    total[c] += route_fraction[e]
                    if route_fraction[e] != 1.0:
                        ones[c] = 0
        s = next_started[s]


@_kernel
def _regroup(
    marked_count,
    routes,
    slots,
    nodes,
    channel,
    groups,
    listed_count,
    longest,
    stamp,
    renew_count,
    first,
    entries,
):
    """Sum again the demand of every marked channel (over its entries, in start order) and move
    the channel to the group of its capacity and new demand; then count again, for every flow that
    started (listed first in slots.listing) or whose channels began or ceased to carry other flows, which
    of its channels it shares. Returns the number of groups."""
    capacity = routes.capacity
    slot_route = slots.route
    node_next = nodes.next
    count, head, group_of, demand, marked = (
        channel.entries,
        channel.head,
        channel.group,
        channel.demand,
        channel.marked,
    )
    dense = _dense(marked_count, channel, entries)
    if dense:
        _sum_marked_in_start_order(first, routes, slots, channel, marked_count, False)
    for i in range(marked_count):
        c = marked[i]
        if dense:
            total = channel.total[c]
        else:
            total = 0.0
            ones = 1
            node = head[c]
            while node >= 0:
                fraction = _fraction(node, routes, slot_route, longest)
                total += fraction
                if fraction != 1.0:
                    ones = 0
                node = node_next[node]
            channel.ones[c] = ones
        if group_of[c] >= 0:
            if count[c] > 0 and total == demand[c]:
                continue
            listed_count = _group_leave(c, channel, groups, listed_count)
        demand[c] = total
        if count[c] > 0:
            listed_count = _group_join(c, capacity[c], total, channel, groups, listed_count)
    renew, renewed = slots.listing, slots.counted_at
    for i in range(marked_count):
        c = marked[i]
        if count[c] == 1 or channel.marked_count[c] == 1:
            node = head[c]
            while node >= 0:
                s = node // longest
                if renewed[s] != stamp:
                    renewed[s] = stamp
                    renew[renew_count] = s
                    renew_count += 1
                node = node_next[node]
    route_offsets, route_channel = routes.offsets, routes.channel
    single_group, single_count, shared_count, shared = (
        slots.single_group,
        slots.single_count,
        slots.shared_count,
        nodes.shared,
    )
    for i in range(renew_count):
        s = renew[i]
        single_group[s] = -1
        single_count[s] = 0
        shared_count[s] = 0
        for e in range(route_offsets[slot_route[s]], route_offsets[slot_route[s] + 1]):
            c = route_channel[e]
            if count[c] > 1:
                shared[s * longest + shared_count[s]] = c
                shared_count[s] += 1
            elif single_group[s] == -1:
                single_group[s] = group_of[c]
                single_count[s] = 1
            elif single_group[s] == group_of[c]:
                single_count[s] += 1
            else:
                single_group[s] = -2
    return listed_count


# --- the filling --------------------------------------------------------------------------------


@_inline
def _live_entries(c, stamp, channel):
    """Entries of channel c on unfrozen flows (its entry count until this filling changed it)."""
    live, live_stamp = channel.live, channel.live_stamp
    if live_stamp[c] != stamp:
        live_stamp[c] = stamp
        live[c] = channel.entries[c]
    return live[c]


@_inline
def _group_now(c, stamp, channel):
    """Channel c's group in this filling: its own if it left its group, else its group."""
    return channel.own_group[c] if channel.departed[c] == stamp else channel.group[c]


@_kernel
def _fill(active, listed_count, routes, slots, nodes, channel, groups, work, has_caps, stamp, longest):
    """Max-min fair rates of the active flows into slots.frozen_rate (by position), step for step as
    model.max_min_rates; slots.frozen_at is `stamp` for every flow that got one (the others, flows crossing
    no channel and under no cap, keep rate 0)."""
    route_offsets, route_channel = routes.offsets, routes.channel
    slot_route, cap, frozen_at, rate = slots.route, slots.cap, slots.frozen_at, slots.frozen_rate
    position, active_list, frozen_list, crosses = slots.position, slots.active, slots.listing, slots.crosses
    single_group, single_count, shared_count, shared = (
        slots.single_group,
        slots.single_count,
        slots.shared_count,
        nodes.shared,
    )
    node_next = nodes.next
    count, head, group_next = channel.entries, channel.head, channel.group_next
    live, departed, own_group, dirty_flag, dirty = (
        channel.live,
        channel.departed,
        channel.own_group,
        channel.dirty_flag,
        channel.dirty,
    )
    group_capacity, group_demand, group_size, group_head, listed = (
        groups.capacity,
        groups.demand,
        groups.size,
        groups.head,
        groups.listed,
    )
    left, demand, share, members, alone, member, live_groups = work
    unfrozen = 0
    for i in range(active):
        rate[i] = 0.0
        frozen_at[i] = stamp - 1
        unfrozen += crosses[i]
    live_count = 0
    for i in range(listed_count):
        g = listed[i]
        left[g] = group_capacity[g]
        demand[g] = group_demand[g]
        members[g] = group_size[g]
        alone[g] = False
        live_groups[live_count] = g
        live_count += 1
    next_own = group_capacity.shape[0]
    level = 0.0
    while live_count > 0 and unfrozen > 0:
        lowest = np.inf
        not_a_number = False
        for i in range(live_count):
            g = live_groups[i]
            share[g] = left[g] / demand[g]
            if share[g] < lowest:
                lowest = share[g]
            elif share[g] != share[g]:
                not_a_number = True
        if not_a_number:
            lowest = np.nan
        delta = 0.0 if lowest < 0.0 else lowest  # Python's max(lowest, 0.0)
        if has_caps:  # ... unless an unfrozen flow reaches its cap first
            lowest_cap = np.inf
            for i in range(active):
                if frozen_at[i] != stamp and cap[i] < lowest_cap:
                    lowest_cap = cap[i]
            room = lowest_cap - level
            room = 0.0 if room < 0.0 else room
            delta = room if room < delta else delta  # Python's min(delta, room)
        level += delta
        threshold = delta * (1.0 + _SATURATION_TOLERANCE)
        saturated = 0
        for i in range(live_count):
            g = live_groups[i]
            left[g] -= delta * demand[g]
            if share[g] <= threshold:
                saturated += 1
        # Freeze the unfrozen flows of every saturated channel.
        frozen = 0
        if saturated == live_count:  # every channel saturated: every flow with a channel (the last step)
            for i in range(active):
                if frozen_at[i] != stamp and crosses[i]:
                    frozen_at[i] = stamp
                    rate[i] = level
                    frozen += 1
        elif saturated:
            for i in range(live_count):
                g = live_groups[i]
                if not share[g] <= threshold:
                    continue
                c = member[g] if alone[g] else group_head[g]
                while c >= 0:
                    if (alone[g] or departed[c] != stamp) and _live_entries(c, stamp, channel) > 0:
                        node = head[c]
                        while node >= 0:
                            p = position[node // longest]
                            if frozen_at[p] != stamp:
                                frozen_at[p] = stamp
                                rate[p] = level
                                frozen_list[frozen] = node // longest
                                frozen += 1
                            node = node_next[node]
                    c = -1 if alone[g] else group_next[c]
        progress = frozen
        if has_caps:
            capped = level * (1.0 + _SATURATION_TOLERANCE)
            for i in range(active):
                if frozen_at[i] != stamp and cap[i] <= capped:
                    frozen_at[i] = stamp
                    rate[i] = cap[i]
                    progress += 1
                    if crosses[i]:
                        frozen_list[frozen] = active_list[i]
                        frozen += 1
        if progress == 0:  # only with NaN shares (zero demand on an empty channel): rates stay 0
            break
        unfrozen -= frozen
        if unfrozen == 0:
            break
        # The channels of the frozen flows lose an unfrozen entry each: a channel left without one
        # is done, any other sums its demand again (and leaves its group, unless it is the last of
        # it with unfrozen flows).
        dirty_count = 0
        for i in range(frozen):
            s = frozen_list[i]
            if single_group[s] >= 0:  # channels that carried this flow alone are done
                members[single_group[s]] -= single_count[s]
            elif single_group[s] == -2:
                for e in range(route_offsets[slot_route[s]], route_offsets[slot_route[s] + 1]):
                    if count[route_channel[e]] == 1:
                        members[channel.group[route_channel[e]]] -= 1
            for j in range(s * longest, s * longest + shared_count[s]):
                c = shared[j]
                live[c] = _live_entries(c, stamp, channel) - 1
                if not dirty_flag[c]:
                    dirty_flag[c] = True
                    dirty[dirty_count] = c
                    dirty_count += 1
        added = 0
        for i in range(dirty_count):
            c = dirty[i]
            dirty_flag[c] = False
            g = _group_now(c, stamp, channel)
            if live[c] == 0:
                members[g] -= 1
                continue
            if channel.ones[c]:  # a sum of ones, in any order
                total = float(live[c])
            else:
                total = 0.0
                node = head[c]
                while node >= 0:
                    if frozen_at[position[node // longest]] != stamp:
                        total += _fraction(node, routes, slot_route, longest)
                    node = node_next[node]
            if members[g] == 1:  # the last channel of its group with unfrozen flows
                demand[g] = total
                continue
            members[g] -= 1
            h = next_own
            next_own += 1
            left[h] = left[g]
            demand[h] = total
            members[h] = 1
            alone[h] = True
            member[h] = c
            departed[c] = stamp
            own_group[c] = h
            live_groups[live_count + added] = h
            added += 1
        kept = 0
        for i in range(live_count + added):
            g = live_groups[i]
            if members[g] > 0:
                live_groups[kept] = g
                kept += 1
        live_count = kept


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
    now, active, marked_count, routes, slots, nodes, channel, records, record_count, longest, first, entries
):
    """Take the new rates; sum again the load of every marked channel and of every channel of a
    flow whose rate changed (over its entries, in start order, fraction * rate); record (now,
    channel, load) for each whose load changed, by channel. Returns the record count."""
    route_offsets, route_channel = routes.offsets, routes.channel
    slot_route, slot_rate, rate, active_list, position_rate = (
        slots.route,
        slots.rate,
        slots.frozen_rate,
        slots.active,
        slots.position_rate,
    )
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
    retimed_count = 0
    retimed_entries = 0
    for i in range(active):
        if rate[i] != position_rate[i]:
            position_rate[i] = rate[i]
            s = active_list[i]
            slot_rate[s] = rate[i]
            retimed[retimed_count] = s
            retimed_count += 1
            retimed_entries += route_offsets[slot_route[s] + 1] - route_offsets[slot_route[s]]
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
    groups,
    work,
    records,
    scalars,
    has_caps,
    time_limit_ns,
    max_events,
):
    """Run events from the saved state (see the module docstring); returns a status."""
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
    slot_flow, slot_route, slot_remaining, slot_rate, slot_cap = (
        slots.flow,
        slots.route,
        slots.remaining,
        slots.rate,
        slots.cap,
    )
    slot_end, position_rate, crosses = slots.end, slots.position_rate, slots.crosses
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
                        slot_remaining[active] = float(flow_size[f])
                        slot_rate[s] = 0.0
                        position_rate[active] = 0.0
                        if has_caps:
                            slot_cap[active] = flow_cap[f]
                        crosses[active] = (
                            1 if route_offsets[flow_route[f] + 1] > route_offsets[flow_route[f]] else 0
                        )
                        slot_position[s] = active
                        active_list[active] = s
                        active += 1
                        marked_count = _join(s, routes, slots, nodes, channel, marked_count, longest)
                        _append_started(s, slots, scalars)
                        scalars[ENTRIES] += route_offsets[flow_route[f] + 1] - route_offsets[flow_route[f]]
                        slots.counted_at[s] = scalars[STAMP] + 1
                        slots.listing[scalars[RENEW]] = s
                        scalars[RENEW] += 1
        if status == SLOTS_FULL:
            break
        scalars[GROUPS] = _regroup(
            marked_count,
            routes,
            slots,
            nodes,
            channel,
            groups,
            scalars[GROUPS],
            longest,
            scalars[STAMP] + 1,
            scalars[RENEW],
            scalars[FIRST_STARTED],
            scalars[ENTRIES],
        )
        scalars[RENEW] = 0
        scalars[STAMP] += 1
        _fill(
            active,
            scalars[GROUPS],
            routes,
            slots,
            nodes,
            channel,
            groups,
            work,
            has_caps,
            scalars[STAMP],
            longest,
        )
        record_count = _record_loads(
            now,
            active,
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
        next_end = _NEVER
        for i in range(active):
            if not position_rate[i] > 0:
                status = ZERO_RATE
                break
            slot_end[i] = now + np.int64(np.ceil(slot_remaining[i] * _BITS_PER_S / position_rate[i]))
            if slot_end[i] < next_end:
                next_end = slot_end[i]
        if status == ZERO_RATE:
            break
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
        step = (upcoming - now) / _BITS_PER_S
        ended = 0
        for i in range(active):
            slot_remaining[i] -= position_rate[i] * step
            if slot_end[i] <= upcoming:
                ending[ended] = active_list[i]
                ended += 1
        for i in range(ended):
            s = ending[i]
            marked_count = _leave(s, routes, slots, nodes, channel, marked_count, longest)
            _unlink_started(s, slots, scalars)
            scalars[ENTRIES] -= route_offsets[slot_route[s] + 1] - route_offsets[slot_route[s]]
            active -= 1
            last, position = active_list[active], slot_position[s]
            active_list[position] = last
            slot_remaining[position] = slot_remaining[active]
            position_rate[position] = position_rate[active]
            slot_cap[position] = slot_cap[active]
            crosses[position] = crosses[active]
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
    return status
