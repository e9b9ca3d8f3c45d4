"""The collective's structure in the loop: a transfer is released once its prerequisites have left
(same connection, in order) or arrived (the data it forwards); flows are accounted when done."""

from __future__ import annotations

from services.simulator.packet.heap import schedule
from services.simulator.packet.kernel import kernel
from services.simulator.packet.layout import (
    EV_RELEASE,
    PR_DCQCN,
    QI_ACTIVE,
    SC_FLOWS_DONE,
    SC_ROB_FREE,
    SC_ROB_FREE_COUNT,
)

__all__ = ["flow_accounted", "flow_left", "fold_totals"]


@kernel
def _release_dependents(run, heap, tr, t, arrival, now):
    mask = tr.slot_of.shape[0] - 1  # -1: a held run, slot = index
    for i in range(tr.dep_off[t], tr.dep_end[t]):
        if tr.dep_arrival[i] == arrival:
            d = tr.dep[i] if mask < 0 else tr.slot_of[tr.dep[i] & mask]
            tr.pending[d] -= 1
            if tr.pending[d] == 0:
                schedule(heap, run.sc, max(now, tr.release[d]), EV_RELEASE, d)


@kernel
def flow_left(run, heap, fl, tr, f, now):
    """Flow f's last packet left its NIC."""
    t = fl.transfer[f]
    tr.unsent[t] -= 1
    if tr.unsent[t] == 0:
        _release_dependents(run, heap, tr, t, 0, now)


@kernel
def flow_accounted(run, heap, fl, rob, qps, tr, f, now):
    """Every byte of flow f delivered or dropped: its reorder slot goes back, its transfer may end."""
    sc = run.sc
    fl.finish[f] = now
    sc[SC_FLOWS_DONE] += 1
    if run.pr[PR_DCQCN] == 1 and fl.size[f] > 0:
        qps.qi[fl.qp[f], QI_ACTIVE] -= 1
    slot = fl.rob_slot[f]
    if slot >= 0:
        rob.next[slot] = sc[SC_ROB_FREE]
        sc[SC_ROB_FREE] = slot
        sc[SC_ROB_FREE_COUNT] += 1
        fl.rob_slot[f] = -1
    t = fl.transfer[f]
    tr.unarrived[t] -= 1
    if tr.unarrived[t] == 0:
        _release_dependents(run, heap, tr, t, 1, now)


@kernel
def fold_totals(finish, recv, lost, fi, fi_sum, rec_column):
    """A streamed run's page of settled flows in one pass (stream.py): (bytes settled, flows
    unfinished, latest finish, flows that lost bytes, longest recovery); their `fi` counters are
    added into `fi_sum`."""
    settled = unfinished = lost_flows = recovery = 0
    last_finish = -1
    for f in range(finish.shape[0]):
        settled += recv[f] + lost[f]
        if finish[f] < 0:
            unfinished += 1
        elif finish[f] > last_finish:
            last_finish = finish[f]
        if lost[f] > 0:
            lost_flows += 1
        for k in range(fi.shape[1]):
            fi_sum[k] += fi[f, k]
        recovery = max(recovery, fi[f, rec_column])
    return settled, unfinished, last_finish, lost_flows, recovery
