import pickle

import numpy as np
import pytest

from services.common.errors import FailedPrecondition, InvalidArgument
from services.simulator.runner import WorkerFailure, run_in_worker, run_simulation
from tests.simulator.fabrics import NDR_BPS, leaf_spine
from tests.simulator.wire import MTU, wire_bytes

FABRIC = leaf_spine(4, 4, 4)


def spec(jobs=None, **extra):
    values = dict(
        fabric="fabrics/test",
        jobs=jobs if jobs is not None else [ring()],
        load_balancing=dict(mode="ECMP"),
    )
    values.update(extra)
    return values


def ring(n=8, size=1 << 22, **job):
    return {"collective": "ALL_REDUCE", "size_bytes": size, "rank_count": n, **job}


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        (dict(fabric=""), "fabric"),
        (dict(jobs=[]), "jobs"),
        (dict(jobs=[ring(size=0)]), "jobs[0].size_bytes"),
        (dict(load_balancing=dict(mode=None)), "load_balancing.mode"),
        (dict(load_balancing=dict(mode="FLOWLET")), "load_balancing.mode"),
        (dict(fidelity="PACKET", mtu_bytes=0), "mtu_bytes"),
        (dict(fidelity="PACKET", buffer_bytes=100), "buffer_bytes"),
        (dict(faults=[dict(link="0", kind="BIT_ERRORS", bit_error_rate=1e-9)]), "faults"),
        (dict(jobs=[ring(n=1)]), "jobs[0].rank_count"),
        (dict(jobs=[ring(), ring(label="job-0")]), "jobs"),
    ],
)
def test_invalid_specs_name_the_field(changes, field):
    with pytest.raises(InvalidArgument) as caught:
        run_simulation(spec(**changes), FABRIC)
    assert caught.value.field == field


def test_flowlet_says_it_needs_packet_fidelity():
    with pytest.raises(InvalidArgument, match="FLOWLET needs PACKET fidelity"):
        run_simulation(spec(load_balancing=dict(mode="FLOWLET")), FABRIC)


def test_series_add_up_to_the_channel_totals_and_each_rank_sends_its_share():
    size, n = 1 << 22, 8
    outcome = run_simulation(spec([ring(n, size, placement="SCATTERED")]), FABRIC)
    assert np.array_equal(outcome.series.bytes.sum(axis=1), outcome.channels.bytes)
    # The interval the engine chose: a power of two of ns, the run in 33 to 128 of them.
    interval = outcome.sample_interval_ns
    assert interval & (interval - 1) == 0
    assert outcome.series.bytes.shape[1] == -(-outcome.makespan_ns // interval)
    assert 32 < outcome.series.bytes.shape[1] <= 128
    uplinks = [i for i, name in enumerate(outcome.channels.display_names) if name.startswith("host-")]
    assert len(uplinks) == n
    # Wire bytes: every packet carries its RoCEv2 header.
    assert outcome.channels.bytes[uplinks].tolist() == [2 * (n - 1) * wire_bytes(size // n)] * n
    assert (outcome.series.utilisation <= 1 + 1e-9).all()
    assert outcome.channels.peak_utilisation.max() == pytest.approx(1.0, rel=1e-3)


def test_a_fixed_sample_interval_is_used_as_given():
    outcome = run_simulation(spec(sample_interval_ns=10_000), FABRIC)
    assert outcome.sample_interval_ns == 10_000
    assert outcome.series.bytes.shape[1] == -(-outcome.makespan_ns // 10_000)


def test_iterations_repeat_the_collective_and_report_the_mean():
    once = run_simulation(spec([ring(placement="SCATTERED")], load_balancing=dict(mode="ADAPTIVE")), FABRIC)
    thrice = run_simulation(
        spec([ring(placement="SCATTERED", iterations=3)], load_balancing=dict(mode="ADAPTIVE")), FABRIC
    )
    assert thrice.jobs[0].completion_ns == pytest.approx(3 * once.jobs[0].completion_ns, rel=0.01)
    assert thrice.jobs[0].algbw_gbps == pytest.approx(once.jobs[0].algbw_gbps, rel=0.01)
    assert thrice.jobs[0].flows == 3 * once.jobs[0].flows


def test_concurrent_jobs_each_get_a_result():
    outcome = run_simulation(
        spec([ring(8, label="a"), ring(4, label="b", collective="ALL_GATHER", start_ns=1000)]), FABRIC
    )
    assert [job.label for job in outcome.jobs] == ["a", "b"]
    assert outcome.jobs[1].ranks == 4 and outcome.jobs[1].completed
    assert outcome.makespan_ns >= max(outcome.jobs[0].completion_ns, 1000 + outcome.jobs[1].completion_ns)


def test_a_time_limit_stops_the_run_and_says_which_jobs_did_not_finish():
    outcome = run_simulation(spec(time_limit_ns=20_000), FABRIC)
    assert outcome.makespan_ns == 20_000
    assert not outcome.jobs[0].completed and outcome.jobs[0].completion_ns == 0
    assert "unfinished jobs: job-0" in outcome.model_notes[-1]


def test_the_outcome_survives_pickling_for_the_worker_pool():
    outcome = run_in_worker(spec(), FABRIC)
    copy = pickle.loads(pickle.dumps(outcome))
    assert copy.jobs == outcome.jobs
    assert copy.flows.host_names[0] == "host-0"


def test_a_domain_error_in_a_worker_comes_back_as_a_failure_value():
    failure = run_in_worker(spec(jobs=[ring(hosts=["host-0", "nope"], n=0)]), FABRIC)
    assert isinstance(failure, WorkerFailure)
    assert failure.code == "INVALID_ARGUMENT" and "nope" in failure.message
    assert failure.message.startswith("spec.jobs[0].hosts[1]")


def test_cancelling_through_the_progress_callback_stops_the_engine(monkeypatch):
    import services.simulator.flow.model as flow_model

    monkeypatch.setattr(flow_model, "_PROGRESS_EVERY_S", -1.0)
    failure = run_in_worker(spec(), FABRIC, lambda fraction: False)
    assert failure == WorkerFailure("CANCELLED", "cancelled")


def test_point_to_point_ideal_is_the_wire_time_plus_latency():
    flows = [dict(source="host-0", destination="host-7", size_bytes=4_000_000)]
    outcome = run_simulation(spec([dict(collective="POINT_TO_POINT", flows=flows)]), FABRIC)
    job = outcome.jobs[0]
    wire_ns = wire_bytes(4_000_000) * 8 / NDR_BPS * 1e9
    assert job.ideal_completion_ns == pytest.approx(wire_ns + 4 * 500, abs=1)
    assert job.completion_ns == pytest.approx(job.ideal_completion_ns, abs=2)
    assert job.busbw_gbps == pytest.approx(job.algbw_gbps)
    assert len(outcome.flows.path_links[outcome.flows.path_offsets[0] : outcome.flows.path_offsets[1]]) == 4


def test_a_message_smaller_than_the_ranks_still_completes_with_empty_flows():
    outcome = run_simulation(spec([ring(n=8, size=4, qps_per_connection=3, chunks=2)]), FABRIC)
    job = outcome.jobs[0]
    assert job.completed and job.completion_ns > 0
    assert outcome.flows.size_bytes.sum() == 2 * 7 * 4


def test_a_down_link_is_avoided_and_a_cut_off_host_is_failed_precondition():
    fabric = leaf_spine(2, 2, 2)
    uplink = fabric.link_names.index("leaf-0<->spine-0")
    fabric.link_state[uplink] = 2  # DOWN
    flows = [dict(source="host-0", destination="host-3", size_bytes=1000)]
    outcome = run_simulation(spec([dict(collective="POINT_TO_POINT", flows=flows)]), fabric)
    assert all("spine-0" not in name for name in outcome.channels.display_names)
    fabric.link_state[fabric.link_names.index("host-0<->leaf-0")] = 2
    with pytest.raises(FailedPrecondition, match="no route from host-0 to host-3"):
        run_simulation(spec([dict(collective="POINT_TO_POINT", flows=flows)]), fabric)


def test_the_topology_services_own_fat_tree_gives_the_closed_form_under_adaptive():
    generators = pytest.importorskip("services.topology.generators")
    snapshots = pytest.importorskip("services.topology.snapshots")
    fabric = snapshots.route_and_snapshot(generators.fat_tree(4))
    size, n = 1 << 26, 16
    job = ring(n=n, size=size, placement="SCATTERED")
    outcome = run_simulation(spec([job], load_balancing=dict(mode="ADAPTIVE")), fabric)
    bandwidth_ns = 2 * (n - 1) / n * size * 8 / (NDR_BPS * MTU / wire_bytes(MTU)) * 1e9  # at the payload rate
    assert bandwidth_ns < outcome.jobs[0].completion_ns < 1.03 * bandwidth_ns
    assert outcome.jobs[0].completion_ns == pytest.approx(outcome.jobs[0].ideal_completion_ns, rel=1e-4)
