"""A ring generated as the PACKET run goes (workload.RingStream, packet/stream.py) gives the same
results as the same ring held whole, while its transfers and flows reuse a few steps' worth of slots.

Each case runs a ring both ways, with blocks small enough that slots are freed and reused many
times, and compares everything the outcome says: completion, drops, every link's totals and
series, packet counters and the first flows' results.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from services.simulator.cancel import Cancelled
from services.simulator.engine import RunFabric
from services.simulator.packet import arrays as packet_arrays
from services.simulator.packet.arrays import EngineArrays
from services.simulator.runner import simulate
from services.simulator.spec import SimulationSpec
from services.simulator.workload import Workload, build_workload, streamable, streams
from tests.simulator.fabrics import fat_tree

GBPS = 1_000_000_000
FABRIC = fat_tree(4, rate_bps=100 * GBPS)


def ring(mode: str, *, chunks=0, qps=1, iterations=1, lb=None, **settings) -> SimulationSpec:
    job = {
        "collective": "ALL_REDUCE",
        "size_bytes": 96 << 10,
        "rank_count": 16,
        "placement": "RANDOM",
        "chunks": chunks,
        "qps_per_connection": qps,
        "iterations": iterations,
    }
    return SimulationSpec.from_dict(
        {
            "fabric": FABRIC.fabric,
            "fidelity": "PACKET",
            "jobs": [job],
            "load_balancing": {"mode": mode, **(lb or {})},
            "switch_latency_ns": 300,
            "seed": 5,
            **settings,
        }
    )


LOSSY_GBN = {"window_bytes": 16 << 10, "buffer_bytes": 6 << 10}
CASES = {
    "ecmp": ring("ECMP"),
    "ecmp_lossy": ring("ECMP", buffer_bytes=6 << 10),
    "adaptive_chunks": ring("ADAPTIVE", chunks=3, buffer_bytes=8 << 10),
    "spray_qps": ring("SPRAY", qps=3),
    "flowlet_iterations": ring("FLOWLET", iterations=2, lb={"flowlet_gap_ns": 500}),
    "time_limited": ring("SPRAY", time_limit_ns=40_000),  # stops with steps never generated
    "pfc": ring("ADAPTIVE", pfc=True, buffer_bytes=48 << 10, pfc_xoff_bytes=12 << 10, qps=2),
    # Go-Back-N on a lossy, sprayed fabric: NAKs, timeouts and resends after a receiver had all.
    "gobackn_lossy": ring("SPRAY", window_bytes=16 << 10, buffer_bytes=6 << 10, retransmit_timeout_ns=20_000),
    "gobackn_qps_chunks": ring("ECMP", window_bytes=8 << 10, buffer_bytes=5 << 10, qps=2, chunks=2),
    # Stopped with recoveries open (they count until the stop, as held).
    "gobackn_time_limited": ring("SPRAY", **LOSSY_GBN, retransmit_timeout_ns=20_000, time_limit_ns=30_000),
    # Timers of ~40 steps: slots are reused while their earlier occupants' disarmed timers are still
    # pending (when one pops on an armed new occupant: test_go_back_n's stale timer test).
    "gobackn_stale_timers": ring("ECMP", window_bytes=16 << 10, iterations=6, retransmit_timeout_ns=200_000),
    # DCQCN marking early (from 512 bytes queued): CNPs in flight when their flow's receiver is done.
    "dcqcn": ring(
        "ECMP",
        qps=2,
        dcqcn=True,
        pfc=True,
        buffer_bytes=96 << 10,
        pfc_xoff_bytes=16 << 10,
        window_bytes=32 << 10,
        ecn_kmin_bytes=512,
        ecn_kmax_bytes=1 << 10,
        ecn_pmax=1.0,
    ),
}


def _summary(outcome) -> dict:
    job = outcome.jobs[0]
    flows = outcome.flows.first(200)
    return {
        "completion": job.completion_ns,
        "completed": job.completed,
        "ideal": job.ideal_completion_ns,
        "makespan": outcome.makespan_ns,
        "events": outcome.events,
        "packets": dataclasses.asdict(outcome.packets),
        "channels": outcome.channels.channels.tolist(),
        "bytes": outcome.channels.bytes.tolist(),
        "drops": outcome.channels.drops.tolist(),
        "peak_queue": outcome.channels.peak_queue_bytes.tolist(),
        "series_bytes": outcome.series.bytes.tolist(),
        "series_queue": outcome.series.mean_queue_bytes.tolist(),
        "flow_count": outcome.flows.count,
        "flow_ends": [flows.source.tolist(), flows.destination.tolist(), flows.size_bytes.tolist()],
        "flow_times": [flows.start_ns.tolist(), flows.finish_ns.tolist()],
        "flow_ports": flows.udp_source_port.tolist(),
        "job_counters": job.counters,
        "notes": [n for n in outcome.model_notes if "generated as the run went" not in n],
    }


@pytest.mark.parametrize("name", list(CASES))
def test_a_streamed_ring_gives_the_held_rings_results(name):
    spec = CASES[name]
    fabric = RunFabric(FABRIC, {})
    held = build_workload(spec, FABRIC)
    assert held.stream is None
    streamed = build_workload(spec, FABRIC, stream_above=0)
    assert streamed.stream is not None and streamed.stream.transfers == held.transfer_count
    assert streamed.transfer_count == 16  # its connections only
    # Two steps per block: slots are freed and reused all along the ring.
    streamed.rings = [dataclasses.replace(streamed.stream, block_transfers=16)]
    assert streamed.stream.block == 2 * 16 * max(1, spec.jobs[0].chunks)
    expected = _summary(simulate(spec, fabric, None, held))
    got_outcome = simulate(spec, fabric, None, streamed)
    got = _summary(got_outcome)
    assert got == expected
    assert any("generated as the run went" in n for n in got_outcome.model_notes)


def _watched_pool(monkeypatch, spec: SimulationSpec, block_transfers: int) -> tuple[Workload, list[int]]:
    """`spec`'s streamed workload with blocks of `block_transfers`, and the list the pool's slot
    count is appended to each time the loop is called."""
    streamed = build_workload(spec, FABRIC, stream_above=0)
    assert streamed.stream is not None
    streamed.rings = [dataclasses.replace(streamed.stream, block_transfers=block_transfers)]
    sizes: list[int] = []
    original = EngineArrays.state

    def watch(self):
        if self.pool is not None:
            sizes.append(len(self.t_index))
        return original(self)

    monkeypatch.setattr(EngineArrays, "state", watch)
    return streamed, sizes


def test_the_pool_holds_a_few_steps_not_the_ring(monkeypatch):
    """Slots stay at a few steps of the ring however long it runs (here 30 steps, 60 iterations'
    worth of transfers would be 28,800)."""
    spec = ring("ECMP", iterations=60)
    streamed, sizes = _watched_pool(monkeypatch, spec, block_transfers=32)
    outcome = simulate(spec, RunFabric(FABRIC, {}), None, streamed)
    assert outcome.jobs[0].completed
    assert outcome.flows.count == 16 * 30 * 60
    assert max(sizes) <= 256, max(sizes)
    assert len(sizes) > 100  # the loop came back for more transfers all along


def test_stale_timers_do_not_hold_slots(monkeypatch):
    """Under Go-Back-N a flow's timer stays pending up to the timeout after its last ACK; a slot
    waits for its flow's timer to be disarmed, not for that event, so a timeout of ~40 steps keeps
    the pool at a few steps (it held ~60% of this ring with a 2 ms timeout while it waited)."""
    spec = ring("ECMP", window_bytes=16 << 10, iterations=6, retransmit_timeout_ns=2_000_000)
    streamed, sizes = _watched_pool(monkeypatch, spec, block_transfers=16)
    held = simulate(spec, RunFabric(FABRIC, {}), None, build_workload(spec, FABRIC))
    outcome = simulate(spec, RunFabric(FABRIC, {}), None, streamed)
    assert _summary(outcome) == _summary(held)
    assert max(sizes) <= 128, max(sizes)  # of 2,880 transfers


def test_what_streams_and_what_is_held():
    """A lone ring streams, Go-Back-N and DCQCN included; with faults or test hooks it is held whole,
    and so is everything else."""
    assert streamable(ring("SPRAY"))
    assert streamable(ring("ECMP", window_bytes=64 << 10)) and streamable(ring("ECMP", dcqcn=True))
    for settings in ({"transport": "INFINIBAND"}, {"drop_once": (0, 1)}):
        assert not streamable(ring("ECMP", **settings)), settings
    assert not streamable(dataclasses.replace(ring("ECMP"), fidelity=ring("ECMP").fidelity.FLOW))
    two = ring("ECMP")
    assert not streamable(dataclasses.replace(two, jobs=two.jobs * 2))
    # Below the threshold a streamable ring is held as before; from 2^31 transfers (int32 indices
    # in the engine) it is not generated either, and the admission's limits refuse it.
    assert build_workload(ring("ECMP"), FABRIC).stream is None
    assert streams(ring("ECMP", iterations=4_000_000)) and not streams(ring("ECMP", iterations=5_000_000))


def test_streamed_totals_count_every_flow():
    spec = ring("ECMP", buffer_bytes=6 << 10)
    streamed = build_workload(spec, FABRIC, stream_above=0)
    outcome = simulate(spec, RunFabric(FABRIC, {}), None, streamed)
    held = simulate(spec, RunFabric(FABRIC, {}), None, build_workload(spec, FABRIC))
    assert outcome.packets.dropped > 0  # lossy: some flows lost bytes
    lost_note = [n for n in outcome.model_notes if "packets dropped" in n]
    assert lost_note == [n for n in held.model_notes if "packets dropped" in n]
    assert np.array_equal(outcome.channels.flows, held.channels.flows)


def test_a_streamed_run_reports_progress_and_can_be_cancelled(monkeypatch):
    spec = ring("ECMP", iterations=40)
    fabric = RunFabric(FABRIC, {})
    monkeypatch.setattr(packet_arrays, "_BUDGET", 20_000)  # report often: this ring is ~300k events
    seen: list[float] = []

    def progress(fraction: float) -> bool:
        seen.append(fraction)
        return True

    streamed = build_workload(spec, FABRIC, stream_above=0)
    streamed.rings = [dataclasses.replace(streamed.stream, block_transfers=32)]
    assert simulate(spec, fabric, progress, streamed).jobs[0].completed
    # (The first reports, 0, come before the loop.) Before the budget was counted across returns,
    # a streamed run returned for its next block before each budget ran out: no report at all, so
    # no cancel either (8,192 ranks: ~1M events a block, 2M a budget).
    assert seen == sorted(seen) and len([f for f in seen if f > 0]) >= 5
    assert 0.8 < seen[-1] < 1  # the bytes of the freed transfers count too
    streamed = build_workload(spec, FABRIC, stream_above=0)
    with pytest.raises(Cancelled):
        simulate(spec, fabric, lambda fraction: fraction < 0.3, streamed)


@pytest.mark.parametrize("stream_above", [0, None])
def test_progress_moves_until_the_last_thousandth(monkeypatch, stream_above):
    """Progress stopped at 0.99: the last 1% of an 8,192-rank run (4 s) showed no change. It is
    capped at 0.999 now (never 1 before the run is over), streamed or held."""
    spec = ring("ECMP", iterations=40)
    monkeypatch.setattr(packet_arrays, "_BUDGET", 1_000)  # ~300 reports over this ring
    seen: list[float] = []

    def progress(fraction: float) -> bool:
        seen.append(fraction)
        return True

    workload = (
        build_workload(spec, FABRIC) if stream_above is None else build_workload(spec, FABRIC, stream_above=0)
    )
    assert simulate(spec, RunFabric(FABRIC, {}), progress, workload).jobs[0].completed
    assert 0.99 < max(seen) <= 0.999
