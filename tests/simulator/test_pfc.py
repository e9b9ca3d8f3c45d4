"""Priority flow control at PACKET fidelity: lossless incast, head-of-line blocking, counters."""

from __future__ import annotations

import numpy as np
import pytest

from services.common.errors import InvalidArgument
from services.simulator.runner import run_simulation
from tests.simulator.fabrics import leaf_spine

# One spine: host-0..3 on leaf-0, host-4..7 on leaf-1, every leaf-1 -> leaf-0 flow crosses spine-0.
FABRIC = leaf_spine(2, 1, 4, rate_bps=100_000_000_000)
HOSTS = [FABRIC.node_names[h] for h in FABRIC.host_nodes]


def run(flows, pfc, buffer=256 * 1024, **roce):
    spec = {
        "fabric": "fabrics/test",
        "fidelity": "PACKET",
        "jobs": [
            {
                "collective": "POINT_TO_POINT",
                "flows": [
                    {"source": HOSTS[s], "destination": HOSTS[d], "size_bytes": size} for s, d, size in flows
                ],
            }
        ],
        "load_balancing": {"mode": "ECMP"},
        "buffer_bytes": buffer,
        "pfc": pfc,
        **roce,
    }
    return run_simulation(spec, FABRIC)


# Three senders into host-0, one of them through spine-0 -> leaf-0; the innocent flow (host-5 to the
# idle host-3) crosses that same spine-0 -> leaf-0 port.
INCAST = [(1, 0, 2 << 20), (2, 0, 2 << 20), (4, 0, 2 << 20)]
INNOCENT = (5, 3, 1 << 20)


def innocent_finish(outcome):
    flows = outcome.flows
    mine = np.flatnonzero((flows.source == 5) & (flows.destination == 3))
    return int(flows.finish_ns[mine].max())


def test_without_pfc_an_incast_overflows_the_buffer_and_with_pfc_nothing_is_dropped():
    lossy = run(INCAST, pfc=False)
    assert lossy.packets.dropped > 0
    lossless = run(INCAST, pfc=True)
    assert lossless.packets.dropped == 0
    assert lossless.packets.delivered_bytes == 3 * (2 << 20)
    assert int(lossless.channels.pause_frames.sum()) > 0
    assert int(lossless.channels.pause_ns.sum()) > 0
    assert any("PFC" in note for note in lossless.model_notes)


def test_pfc_spreads_congestion_to_an_innocent_flow_sharing_the_paused_ports():
    alone = run([INNOCENT], pfc=True)
    without_pfc = run([*INCAST, INNOCENT], pfc=False)
    with_pfc = run([*INCAST, INNOCENT], pfc=True)
    # leaf-0 PAUSEs spine-0 -> leaf-0 because of host-0's backlog; the innocent flow's packets wait
    # behind the paused incast packets at spine-0 (head-of-line blocking), though host-3 is idle.
    assert innocent_finish(with_pfc) > 1.3 * innocent_finish(without_pfc)
    assert innocent_finish(with_pfc) > 1.3 * innocent_finish(alone)
    assert with_pfc.packets.dropped == 0


def test_pause_counters_sit_on_the_ports_that_were_paused():
    outcome = run(INCAST, pfc=True)
    paused = {
        name
        for name, frames in zip(outcome.channels.display_names, outcome.channels.pause_frames, strict=True)
        if frames > 0
    }
    # Paused transmitters feed leaf-0 (the switch in front of the incast's victim) or further up.
    assert "spine-0->leaf-0" in paused
    assert paused <= {
        "spine-0->leaf-0",
        "host-1->leaf-0",
        "host-2->leaf-0",
        "leaf-1->spine-0",
        "host-4->leaf-1",
    }


@pytest.mark.parametrize(
    ("roce", "field"),
    [
        ({"pfc_xoff_bytes": 64 * 1024, "pfc_xon_bytes": 128 * 1024}, "pfc_xon_bytes"),
        ({"pfc_xoff_bytes": 2 << 20}, "pfc_xoff_bytes"),
    ],
)
def test_thresholds_that_cannot_work_are_refused(roce, field):
    with pytest.raises(InvalidArgument, match=field):
        run(INCAST, pfc=True, **roce)


def test_a_port_sends_the_pauses_its_peer_receives():
    outcome = run(INCAST, pfc=True)
    channels = outcome.channels
    received = dict(zip(channels.display_names, channels.pause_frames.tolist(), strict=True))
    sent = dict(zip(channels.display_names, channels.counters["pause_frames_sent"].tolist(), strict=True))
    # leaf-0 PAUSEs spine-0: the leaf's port toward the spine sends what spine-0->leaf-0 receives.
    assert received["spine-0->leaf-0"] > 0
    assert sent["leaf-0->spine-0"] == received["spine-0->leaf-0"]
