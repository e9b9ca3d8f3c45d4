"""Where a switch sends a packet: one function per load-balancing mode, with a common signature.

Each `choose_<mode>(run, ch, rt, fl, pk, node, p, f, now)` returns the output channel of packet p
(of flow f) at switch `node`, or -1 when the switch has no usable next hop (or `node` is a host,
which never forwards). The groups are the equal-cost next channels of (switch, the flow's
forwarding slot), DOWN channels already removed by the routing epoch; a pinned flow's slot holds
one channel at each switch of its path, so every mode returns it.
"""

from __future__ import annotations

from services.simulator.packet.draws import random_below
from services.simulator.packet.kernel import kernel, kernel_inline
from services.simulator.packet.layout import (
    CH_FREE_AT,
    CH_Q_BYTES,
    CN_DOWN,
    MODE_ADAPTIVE,
    MODE_ECMP,
    MODE_FLOWLET,
    MODE_SPRAY_RANDOM,
    PR_FLOWLET_GAP,
    PR_LINK_EVENTS,
    PR_MAX_HOPS,
    PR_MODE,
    PR_REROUTED,
)

__all__ = [
    "choose",
    "choose_adaptive",
    "choose_ecmp",
    "choose_flowlet",
    "choose_spray",
    "choose_spray_random",
]


@kernel_inline
def _group(rt, fl, node, f):
    """(key, start, end) of the group of (node, f's slot) in rt.g_ch; start == end: no next hop."""
    row = rt.node_row[node]
    if row < 0:  # a host that is not the destination: hosts do not forward
        return -1, 0, 0
    key = row * rt.num_dest + fl.dst_slot[f]
    return key, rt.g_span[key, 0], rt.g_span[key, 1]


@kernel
def _least_loaded(run, ch, rt, start, end, now):
    """The member with the fewest queued bytes; ties broken uniformly at random."""
    links_fail = run.pr[PR_LINK_EVENTS] == 1
    best = -1
    best_q = 0
    ties = 0
    for i in range(start, end):
        c = rt.g_ch[i]
        # A busy port ranks after a free one; a port whose link is down (the switch sees its own
        # link state) after every live one.
        q = ch.hot[c, CH_Q_BYTES] + (1 if ch.hot[c, CH_FREE_AT] > now else 0)
        if links_fail and ch.cn[c, CN_DOWN]:
            q += 1 << 62
        if best < 0 or q < best_q:
            best, best_q, ties = c, q, 1
        elif q == best_q:
            ties += 1
            if random_below(run.rng, ties) == 0:  # reservoir sampling: a uniform tie-break
                best = c
    return best


@kernel_inline
def choose_ecmp(run, ch, rt, fl, pk, node, p, f, now):
    """ECMP: the path hashed once per flow (its hop h is the h-th channel), no group lookup."""
    i = rt.path_off[f] + pk.hop[p]
    if run.pr[PR_REROUTED] == 0:
        return rt.path_ch[i]
    if i < rt.path_end[f]:
        c = rt.path_ch[i]
        if ch.source[c] == node:
            return c
    # A packet still on its old path when the routes changed: this switch's new group, picked by flow.
    _, start, end = _group(rt, fl, node, f)
    if end == start:
        return -1
    return rt.g_ch[start + f % (end - start)]


@kernel_inline
def choose_adaptive(run, ch, rt, fl, pk, node, p, f, now):
    """ADAPTIVE: per packet, the equal-cost output with the fewest queued bytes."""
    _, start, end = _group(rt, fl, node, f)
    if end - start <= 1:
        return rt.g_ch[start] if end > start else -1
    return _least_loaded(run, ch, rt, start, end, now)


@kernel_inline
def choose_flowlet(run, ch, rt, fl, pk, node, p, f, now):
    """FLOWLET: a flow keeps its output at this switch until it pauses longer than the gap."""
    _, start, end = _group(rt, fl, node, f)
    if end - start <= 1:
        return rt.g_ch[start] if end > start else -1
    if fl.rob_slot[f] < 0:  # a late copy of a finished flow's packet: no flowlet state left
        return _least_loaded(run, ch, rt, start, end, now)
    slot = fl.rob_slot[f] * run.pr[PR_MAX_HOPS] + pk.hop[p]  # per active flow, recycled with its slot
    c = fl.fl_ch[slot]
    # The entry is this switch's only if the flow reached the same switch at this hop last time
    # (earlier hops may have moved it): otherwise it is a new flowlet here.
    stale = c < 0 or fl.fl_node[slot] != node or (run.pr[PR_LINK_EVENTS] == 1 and ch.cn[c, CN_DOWN] > 0)
    if stale or now - fl.fl_last[slot] > run.pr[PR_FLOWLET_GAP]:
        c = _least_loaded(run, ch, rt, start, end, now)  # a new flowlet may take another path
        fl.fl_ch[slot] = c
        fl.fl_node[slot] = node
    fl.fl_last[slot] = now
    return c


@kernel
def _live_member(run, ch, rt, start, n, i):
    # A port whose link is down is skipped (the switch sees its own link state) while another member
    # is live; the routes change only with the routing reaction.
    if run.pr[PR_LINK_EVENTS] == 1:
        for _ in range(n):
            if ch.cn[rt.g_ch[start + i], CN_DOWN] == 0:
                break
            i = i + 1 if i + 1 < n else 0
    return rt.g_ch[start + i]


@kernel_inline
def choose_spray(run, ch, rt, fl, pk, node, p, f, now):
    """SPRAY: each (switch, destination) group deals packets to its ports in turn."""
    key, start, end = _group(rt, fl, node, f)
    if end - start <= 1:
        return rt.g_ch[start] if end > start else -1
    n = end - start
    i = rt.g_next[key]
    rt.g_next[key] = i + 1 if i + 1 < n else 0
    return _live_member(run, ch, rt, start, n, i)


@kernel_inline
def choose_spray_random(run, ch, rt, fl, pk, node, p, f, now):
    """SPRAY with `spray_random`: a seeded uniform member per packet (ns-3's RandomEcmpRouting)."""
    _, start, end = _group(rt, fl, node, f)
    if end - start <= 1:
        return rt.g_ch[start] if end > start else -1
    n = end - start
    return _live_member(run, ch, rt, start, n, random_below(run.rng, n))


@kernel_inline
def choose(run, ch, rt, fl, pk, node, p, f, now):
    """The run's mode's choice (layout.MODE_*)."""
    mode = run.pr[PR_MODE]
    if mode == MODE_ECMP:
        return choose_ecmp(run, ch, rt, fl, pk, node, p, f, now)
    if mode == MODE_ADAPTIVE:
        return choose_adaptive(run, ch, rt, fl, pk, node, p, f, now)
    if mode == MODE_FLOWLET:
        return choose_flowlet(run, ch, rt, fl, pk, node, p, f, now)
    if mode == MODE_SPRAY_RANDOM:
        return choose_spray_random(run, ch, rt, fl, pk, node, p, f, now)
    return choose_spray(run, ch, rt, fl, pk, node, p, f, now)
