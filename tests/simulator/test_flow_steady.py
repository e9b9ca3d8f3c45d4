"""FLOW_STEADY (flow/steady.py) against the FLOW loop it abbreviates.

Where no connection could go faster when another waits (ADAPTIVE's even split on a fat-tree: every
flow is held to its own NIC's rate), FLOW's rates never change and the two must agree on
everything timed: completion, every flow's start and finish, the series. That checks the ring's
dependencies (chunks, QPs, iterations, the three ring collectives, a job's start) one by one.
Where ECMP collides flows, FLOW's rates change as flows start and end and the steady state's do
not: bounded here on a bandwidth-bound and a latency-bound ring. Bytes and flows per link never
differ.
"""

from __future__ import annotations

import numpy as np
import pytest

from services.common.errors import InvalidArgument, ResourceExhausted
from services.simulator.admission import DEFAULT_LIMITS, estimate_cost
from services.simulator.cancel import Cancelled
from services.simulator.checks import check_simulation
from services.simulator.flow import steady as steady_model
from services.simulator.runner import run_simulation
from services.simulator.spec import SimulationSpec
from services.simulator.workload import place_jobs
from tests.simulator.fabrics import fat_tree

GBPS = 1_000_000_000
FABRIC = fat_tree(4, rate_bps=100 * GBPS)
FABRIC8 = fat_tree(8, rate_bps=400 * GBPS)


def ring_spec(fidelity: str, mode: str, fabric=FABRIC, *, ranks=16, size=96 << 10, **job) -> dict:
    settings = {k: job.pop(k) for k in ("sample_interval_ns", "time_limit_ns") if k in job}
    return {
        "fabric": fabric.fabric,
        "fidelity": fidelity,
        "jobs": [
            {
                "collective": "ALL_REDUCE",
                "size_bytes": size,
                "rank_count": ranks,
                "placement": "RANDOM",
                **job,
            }
        ],
        "load_balancing": {"mode": mode},
        "switch_latency_ns": 300,
        "seed": 5,
        **settings,
    }


def both(mode: str, fabric=FABRIC, **job):
    steady = run_simulation(ring_spec("FLOW_STEADY", mode, fabric, **job), fabric)
    flow = run_simulation(ring_spec("FLOW", mode, fabric, **job), fabric)
    return steady, flow


def _same_totals(steady, flow) -> None:
    np.testing.assert_array_equal(steady.channels.channels, flow.channels.channels)
    np.testing.assert_array_equal(steady.channels.bytes, flow.channels.bytes)
    np.testing.assert_array_equal(steady.channels.flows, flow.channels.flows)
    assert [j.ideal_completion_ns for j in steady.jobs] == [j.ideal_completion_ns for j in flow.jobs]


EXACT = {
    "plain": {},
    "chunks": {"chunks": 3},
    "qps": {"qps_per_connection": 3},
    "iterations": {"iterations": 2},
    "chunks_qps_iterations": {"chunks": 2, "qps_per_connection": 2, "iterations": 2},
    "reduce_scatter": {"collective": "REDUCE_SCATTER"},
    "all_gather": {"collective": "ALL_GATHER", "chunks": 2},
    "uneven_bytes": {"size": 96 * 1024 + 7, "qps_per_connection": 2},  # segments and QPs 1 byte apart
    "started_late": {"start_ns": 12_345},
    "fewer_bytes_than_ranks": {"size": 10},  # empty transfers: they take no time, their latency counts
}


@pytest.mark.parametrize("name", list(EXACT))
def test_where_no_flow_could_go_faster_it_is_the_flow_loop_to_the_ns(name):
    steady, flow = both("ADAPTIVE", **EXACT[name])
    assert steady.jobs[0].completed and flow.jobs[0].completed
    assert steady.jobs[0].completion_ns == flow.jobs[0].completion_ns
    assert steady.makespan_ns == flow.makespan_ns
    _same_totals(steady, flow)
    kept = len(steady.flows.finish_ns)
    assert kept == min(10_000, flow.flows.count) and steady.flows.count == flow.flows.count
    np.testing.assert_array_equal(steady.flows.start_ns, flow.flows.start_ns[:kept])
    np.testing.assert_array_equal(steady.flows.finish_ns, flow.flows.finish_ns[:kept])
    np.testing.assert_array_equal(steady.flows.source, flow.flows.source[:kept])
    assert steady.sample_interval_ns == flow.sample_interval_ns
    np.testing.assert_array_equal(steady.series.channels, flow.series.channels)
    np.testing.assert_allclose(steady.series.bytes, flow.series.bytes, atol=2)  # rounding of the curve


def test_with_collisions_it_is_close_to_the_flow_loop_on_a_bandwidth_bound_ring():
    """128 ranks on k=8 under ECMP: collided links set the pace (measured -0.10%)."""
    steady, flow = both("ECMP", FABRIC8, ranks=128, size=16 << 20)
    _same_totals(steady, flow)
    assert steady.jobs[0].completion_ns == pytest.approx(flow.jobs[0].completion_ns, rel=5e-3)
    assert flow.jobs[0].completion_ns > 1.3 * flow.jobs[0].ideal_completion_ns  # collisions matter here
    assert any("FLOW_STEADY fidelity" in note for note in steady.model_notes)


def test_where_latency_sets_the_pace_flow_lies_between_all_meeting_and_meeting_by_duty(monkeypatch):
    """A small ECMP ring whose connections send a third of the time. With every collided flow
    meeting its partners always (the max-min rates alone: one pass) it comes out 4.4% above FLOW;
    meeting each as often as that one sends, 4.7% below: FLOW lies between (as on 22 of 24 small
    rings, README), and the notes give the first as well."""
    steady, flow = both("ECMP", ranks=16, size=1 << 20)
    _same_totals(steady, flow)
    monkeypatch.setattr(steady_model, "MAX_PASSES", 1)
    all_meet = run_simulation(ring_spec("FLOW_STEADY", "ECMP", ranks=16, size=1 << 20), FABRIC)
    low, exact, high = (o.jobs[0].completion_ns for o in (steady, flow, all_meet))
    assert low < exact < high
    assert low == pytest.approx(exact, rel=0.06) and high == pytest.approx(exact, rel=0.06)
    assert any("settled" in note and "not settled" not in note for note in steady.model_notes)
    assert any(f"ended {high} ns after its start" in note for note in steady.model_notes)
    assert any("had not settled" in note for note in all_meet.model_notes)


def _mean_field(entries, duty, capacity, floor, connection=None, job=None, meet=None):
    flows = len(duty)
    job = np.zeros(flows, dtype=np.int64) if job is None else np.asarray(job)
    meet = np.ones((1, 1)) if meet is None else np.asarray(meet, dtype=float)
    return steady_model.mean_field_rates(
        entries,
        connection,
        np.asarray(duty, dtype=float),
        job,
        meet,
        np.asarray(capacity, dtype=float),
        floor,
    ).tolist()


def test_mean_field_rates_meet_other_connections_by_their_duty_and_their_own_qps_always():
    one_link = np.array([0, 1]), np.array([0, 0]), np.ones(2)
    assert _mean_field(one_link, [0.25, 1.0], [10.0], np.zeros(2)) == pytest.approx([10 / 2.0, 10 / 1.25])
    # Two QPs of a connection always meet each other: connection 0 (flows 0, 1) always sends, 1 never.
    shared = np.array([0, 1, 2, 3]), np.zeros(4, dtype=np.int64), np.ones(4)
    rates = _mean_field(shared, [1.0, 1.0, 0.0, 0.0], [8.0], np.zeros(4), connection=np.array([0, 0, 1, 1]))
    assert rates == pytest.approx([4.0, 4.0, 2.0, 2.0])
    # Half of each flow on each of two channels (an even split), one channel half as fast.
    split = np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1]), np.full(4, 0.5)
    assert _mean_field(split, [1.0, 1.0], [8.0, 4.0], np.zeros(2)) == pytest.approx([4.0, 4.0])
    # Never below the max-min floor.
    assert _mean_field(one_link, [1.0, 1.0], [10.0], np.array([6.0, 1.0])) == pytest.approx([6.0, 5.0])
    # Two jobs in a phase where job 1 runs and job 0 does not: job 0's flow meets job 1's (sending
    # half the time), job 1's does not meet job 0's.
    meet = [[1.0, 1.0], [0.0, 1.0]]
    rates = _mean_field(one_link, [0.5, 0.5], [12.0], np.zeros(2), job=[0, 1], meet=meet)
    assert rates == pytest.approx([8.0, 12.0])


def test_a_sample_interval_is_kept_as_flow_keeps_it():
    steady, flow = both("ADAPTIVE", sample_interval_ns=1_000)
    assert steady.sample_interval_ns == flow.sample_interval_ns == 1_000
    np.testing.assert_allclose(steady.series.bytes, flow.series.bytes, atol=2)


def test_a_time_limit_stops_it_with_the_job_unfinished_as_flow_does():
    """Where no flow could go faster the stopped run is FLOW's too: what finished, the bytes, the
    series, and which flows started (a transfer due after the limit never started: -1)."""
    steady, flow = both("ADAPTIVE", time_limit_ns=20_000)
    for outcome in (steady, flow):
        assert not outcome.jobs[0].completed
        assert any("time_limit_ns=20000" in note for note in outcome.model_notes)
    assert steady.makespan_ns == flow.makespan_ns == 20_000
    np.testing.assert_array_equal(steady.channels.bytes, flow.channels.bytes)
    np.testing.assert_allclose(steady.series.bytes, flow.series.bytes, atol=2)
    kept = len(steady.flows.finish_ns)
    np.testing.assert_array_equal(steady.flows.start_ns, flow.flows.start_ns[:kept])
    np.testing.assert_array_equal(steady.flows.finish_ns, flow.flows.finish_ns[:kept])
    started = steady.flows.start_ns >= 0
    assert started.any() and not started.all()
    assert ((steady.flows.finish_ns >= 0) <= started).all()


def test_progress_is_reported_and_returning_false_cancels(monkeypatch):
    seen: list[float] = []

    def progress(fraction: float) -> bool:
        seen.append(fraction)
        return True

    monkeypatch.setattr(steady_model, "_PROGRESS_EVERY_S", -1.0)
    monkeypatch.setattr(steady_model, "_SLICE_TRANSFERS", 16)  # report after every step
    run_simulation(ring_spec("FLOW_STEADY", "ECMP"), FABRIC, progress)
    fractions = [f for f in seen if f > 0]
    assert fractions == sorted(fractions) and fractions[-1] == pytest.approx(1.0)
    with pytest.raises(Cancelled):
        run_simulation(ring_spec("FLOW_STEADY", "ECMP"), FABRIC, lambda fraction: fraction < 0.25)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"algorithm": "DOUBLE_BINARY_TREE"}, "spec.jobs[0].algorithm"),
        ({"collective": "ALL_TO_ALL"}, "spec.jobs[0].collective"),
        ({"collective": "BROADCAST"}, "spec.jobs[0].collective"),
    ],
)
def test_a_job_that_is_no_ring_is_refused_naming_the_field(change, field):
    with pytest.raises(InvalidArgument) as error:
        run_simulation(ring_spec("FLOW_STEADY", "ECMP", **change), FABRIC)
    assert error.value.field == field and "FLOW fidelity" in str(error.value)


def test_a_job_that_is_no_ring_is_refused_among_rings():
    raw = ring_spec("FLOW_STEADY", "ECMP", ranks=8)
    raw["jobs"] = [raw["jobs"][0], {**raw["jobs"][0], "collective": "ALL_TO_ALL"}]
    with pytest.raises(InvalidArgument) as error:
        run_simulation(raw, FABRIC)
    assert error.value.field == "spec.jobs[1].collective"


def two_rings(fidelity: str, mode: str, fabric=FABRIC, **second) -> dict:
    raw = ring_spec(fidelity, mode, fabric, ranks=8, size=64 << 10)
    raw["jobs"] = [raw["jobs"][0], {**raw["jobs"][0], "size_bytes": 160 << 10, **second}]
    return raw


@pytest.mark.parametrize(
    "second",
    [{}, {"start_ns": 3_000}, {"collective": "REDUCE_SCATTER", "qps_per_connection": 2, "chunks": 2}],
    ids=["together", "one_later", "other_kinds"],
)
def test_several_rings_where_no_flow_could_go_faster_are_the_flow_loop_to_the_ns(second):
    steady = run_simulation(two_rings("FLOW_STEADY", "ADAPTIVE", **second), FABRIC)
    flow = run_simulation(two_rings("FLOW", "ADAPTIVE", **second), FABRIC)
    assert [j.completion_ns for j in steady.jobs] == [j.completion_ns for j in flow.jobs]
    assert all(j.completed for j in steady.jobs)
    _same_totals(steady, flow)
    kept = len(steady.flows.finish_ns)
    assert kept == flow.flows.count == steady.flows.count  # all of them: fewer than 10,000
    np.testing.assert_array_equal(steady.flows.start_ns, flow.flows.start_ns)
    np.testing.assert_array_equal(steady.flows.finish_ns, flow.flows.finish_ns)
    np.testing.assert_array_equal(steady.flows.udp_source_port, flow.flows.udp_source_port)
    np.testing.assert_allclose(steady.series.bytes, flow.series.bytes, atol=2)


def test_rings_that_do_not_overlap_are_each_what_they_are_alone():
    """The second ring starts after the first has ended: each is its own run, all-meeting figure
    included (the first passes took every job as running forever until the ends were found)."""
    both_rings = two_rings("FLOW_STEADY", "ECMP", start_ns=2_000_000)
    together = run_simulation(both_rings, FABRIC)
    for j, job in enumerate(both_rings["jobs"]):
        alone = run_simulation({**both_rings, "jobs": [job]}, FABRIC)
        assert together.jobs[j].completion_ns == alone.jobs[0].completion_ns
        meeting = [n for n in alone.model_notes if "would have ended" in n]
        label = f"job-{j}"
        expected = [n.replace("job-0", label).split(";")[0].rstrip(".") for n in meeting]
        got = [n.split(";")[0].rstrip(".") for n in together.model_notes if f"{label} would have ended" in n]
        assert got == expected
    assert together.jobs[1].completion_ns < 2_000_000  # it did not wait for the first


def test_two_rings_sharing_links_under_ecmp_are_close_to_the_flow_loop():
    """Two 64-rank rings on k=8 under ECMP, the second started when the first is over half done:
    each job within 2% of FLOW (measured -0.71% and -0.66%). Counting a connection's duty over its
    job's whole run, not per phase, put the first at -7.4%: the second job's flows send more while
    the first runs than over their whole run."""
    second = {"start_ns": 700_000, "size_bytes": 8 << 20}
    raw = {**ring_spec("FLOW_STEADY", "ECMP", FABRIC8, ranks=64, size=8 << 20)}
    raw["jobs"] = [raw["jobs"][0], {**raw["jobs"][0], **second}]
    steady = run_simulation(raw, FABRIC8)
    flow = run_simulation({**raw, "fidelity": "FLOW"}, FABRIC8)
    _same_totals(steady, flow)
    for mine, exact in zip(steady.jobs, flow.jobs, strict=True):
        assert mine.completion_ns == pytest.approx(exact.completion_ns, rel=0.02)
    assert any("a run has phases" in note for note in steady.model_notes)


def test_flowlet_is_refused_as_at_flow_fidelity():
    raw = ring_spec("FLOW_STEADY", "FLOWLET")
    with pytest.raises(InvalidArgument) as error:
        run_simulation(raw, FABRIC)
    assert error.value.field == "load_balancing.mode"


def test_8192_ranks_are_admitted_in_little_memory_counting_their_route_entries():
    """FLOW holds a 64 MiB ring over 8,192 ranks whole (~75 GB, refused); FLOW_STEADY its connections
    and their routes: under ADAPTIVE each connection's even split crosses 546 channels on k=32, and
    the run peaked at 760 MB (`make bench BENCH=simulator.flow.ring8192.k32.adaptive`; 0.65 GB was
    estimated before the entries were counted), under ECMP at 350 MB."""
    from services.topology.generators import fat_tree as generated_fat_tree
    from services.topology.snapshots import route_and_snapshot

    snapshot = route_and_snapshot(generated_fat_tree(32))
    estimates = {}
    for fidelity, mode in (("FLOW", "ECMP"), ("FLOW_STEADY", "ECMP"), ("FLOW_STEADY", "ADAPTIVE")):
        spec = SimulationSpec.from_dict(ring_spec(fidelity, mode, snapshot, ranks=8192, size=64 << 20))
        estimates[fidelity, mode] = estimate_cost(spec, snapshot, place_jobs(spec, snapshot)).memory_bytes
    assert estimates["FLOW", "ECMP"] > 50 << 30
    assert 350 << 20 < estimates["FLOW_STEADY", "ECMP"] < 1 << 30
    assert 760 << 20 < estimates["FLOW_STEADY", "ADAPTIVE"] < 2 << 30


@pytest.mark.parametrize(
    ("job", "named"),
    [
        ({"chunks": 50_000_000}, "peak memory"),  # its per-chunk state: tens of GB
        ({"iterations": 10_000_000}, "events"),  # 3.8G transfers, ~10 passes over them
    ],
)
def test_a_run_it_could_not_finish_is_refused_before_it_starts(job, named):
    spec = SimulationSpec.from_dict(ring_spec("FLOW_STEADY", "ECMP", **job))
    with pytest.raises(ResourceExhausted) as error:
        check_simulation(spec, FABRIC, DEFAULT_LIMITS)
    assert named in str(error.value)
    check_simulation(
        SimulationSpec.from_dict(ring_spec("FLOW_STEADY", "ECMP", chunks=64)), FABRIC, DEFAULT_LIMITS
    )
