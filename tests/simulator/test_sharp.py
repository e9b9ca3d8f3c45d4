"""SHARP in-network AllReduce at FLOW fidelity: the aggregation tree, bytes per link, time, refusals."""

from __future__ import annotations

import dataclasses

import grpc
import numpy as np
import pytest
from fabrictwin.v1 import common_pb2, simulation_pb2

from services.common.errors import InvalidArgument
from services.simulator.runner import run_simulation
from services.simulator.sharp import aggregation_tree
from services.simulator.spec import SimulationSpec
from services.simulator.workload import build_workload
from tests.simulator import test_service
from tests.simulator.fabrics import fat_tree, leaf_spine
from tests.simulator.wire import wire_bytes

RATE = 100_000_000_000
LINK_NS = 500
FAT_TREE = fat_tree(4, rate_bps=RATE, latency_ns=LINK_NS)  # 16 hosts, 2 per leaf, 2 leaves per pod
MIB = 1 << 20
IB_HEADER = 26  # SHARP runs over InfiniBand: LRH, BTH, ICRC and VCRC per packet


def sharp(n, size, **extra):
    return {"collective": "ALL_REDUCE", "algorithm": "SHARP", "rank_count": n, "size_bytes": size, **extra}


def ring(n, size, **extra):
    return {"collective": "ALL_REDUCE", "rank_count": n, "size_bytes": size, **extra}


def spec(*jobs, mode="ADAPTIVE", transport="INFINIBAND", **extra):
    return {
        "fabric": "fabrics/test",
        "jobs": list(jobs),
        "load_balancing": {"mode": mode},
        "transport": transport,
        **extra,
    }


def tree_switches(tree, snapshot=FAT_TREE):
    return sorted(snapshot.node_names[int(node)] for node in tree.nodes[tree.ranks :])


# -- the aggregation tree ---------------------------------------------------------------------------


def test_a_job_across_pods_meets_at_one_core_through_one_aggregation_switch_per_pod():
    tree = aggregation_tree(FAT_TREE, np.arange(16))
    assert tree_switches(tree) == sorted(
        [f"leaf-{i}" for i in range(8)] + ["spine-0", "spine-2", "spine-4", "spine-6", "core-0"]
    )
    assert FAT_TREE.node_names[int(tree.nodes[tree.root])] == "core-0"
    assert tree.height == 3
    # Every rank's parent is its own leaf, and the up channel leads there.
    leaf_of_rank = FAT_TREE.node_names[int(tree.nodes[tree.parent[5]])]
    assert leaf_of_rank == "leaf-2"
    assert FAT_TREE.channel_target()[tree.up_channel[:16]].tolist() == tree.nodes[tree.parent[:16]].tolist()


def test_a_job_within_a_pod_meets_at_one_aggregation_switch_and_one_leaf_reduces_alone():
    within_pod = aggregation_tree(FAT_TREE, np.arange(4))
    assert tree_switches(within_pod) == ["leaf-0", "leaf-1", "spine-0"]
    one_leaf = aggregation_tree(FAT_TREE, np.array([1, 0]))
    assert tree_switches(one_leaf) == ["leaf-0"]
    assert one_leaf.root == 2 and one_leaf.height == 1
    assert one_leaf.parent.tolist() == [2, 2, -1]


def test_concurrent_jobs_take_turns_among_equally_good_roots():
    fabric = leaf_spine(leaves=4, spines=4, hosts_per_leaf=4)
    roots = [
        fabric.node_names[int(aggregation_tree(fabric, np.arange(16), job).nodes[-1])] for job in range(5)
    ]
    assert roots == ["spine-0", "spine-1", "spine-2", "spine-3", "spine-0"]


def test_the_tree_avoids_a_link_that_is_down():
    link = FAT_TREE.link_names.index("spine-0<->core-0")
    state = FAT_TREE.link_state.copy()
    state[link] = 2  # DOWN
    tree = aggregation_tree(dataclasses.replace(FAT_TREE, link_state=state), np.arange(16))
    assert FAT_TREE.node_names[int(tree.nodes[tree.root])] == "core-1"
    assert link not in (tree.up_channel[tree.up_channel >= 0] // 2).tolist()


def test_each_chunk_goes_up_once_its_children_sent_it_and_down_once_the_root_has_it_all():
    workload = build_workload(SimulationSpec.from_dict(spec(sharp(4, 4 * MIB, chunks=2))), FAT_TREE)
    # 4 ranks: 4 host edges, 2 leaf edges; per chunk 6 up and 6 down; in topological order.
    assert workload.transfer_count == 2 * 12
    prerequisite = np.repeat(np.arange(workload.transfer_count), np.diff(workload.dependent_offsets))
    assert (prerequisite < workload.dependents).all()

    def name(endpoint):  # a host index, or num_hosts + node for a switch
        hosts = FAT_TREE.num_hosts
        node = FAT_TREE.host_nodes[endpoint] if endpoint < hosts else endpoint - hosts
        return FAT_TREE.node_names[int(node)]

    heads = workload.transfer_flow_offsets[:-1]
    hops = [
        (name(s), name(d))
        for s, d in zip(workload.flow_source[heads], workload.flow_destination[heads], strict=True)
    ]
    waits_for = {
        t: {hops[int(p)] for p in prerequisite[workload.dependents == t]}
        for t in range(workload.transfer_count)
    }
    up_from_leaf_0 = hops.index(("leaf-0", "spine-0"))
    assert waits_for[up_from_leaf_0] == {("host-0", "leaf-0"), ("host-1", "leaf-0")}
    down_to_leaf_1 = hops.index(("spine-0", "leaf-1"))
    assert waits_for[down_to_leaf_1] == {("leaf-0", "spine-0"), ("leaf-1", "spine-0")}
    down_to_host_3 = hops.index(("leaf-1", "host-3"))
    assert waits_for[down_to_host_3] == {("spine-0", "leaf-1")}
    second_chunk_of_host_0 = hops.index(("host-0", "leaf-0"), up_from_leaf_0 + 1)
    assert waits_for[second_chunk_of_host_0] == {("host-0", "leaf-0")}  # in order on its link


# -- bytes and time ---------------------------------------------------------------------------------


def link_bytes(outcome, snapshot=FAT_TREE):
    carried = np.zeros(snapshot.num_channels, dtype=np.int64)
    carried[outcome.channels.channels] = outcome.channels.bytes
    return carried


def test_each_host_link_carries_s_up_and_s_down_and_so_does_every_tree_link():
    size = 8 * MIB
    outcome = run_simulation(spec(sharp(16, size)), FAT_TREE)
    carried = link_bytes(outcome)
    tree = aggregation_tree(FAT_TREE, np.arange(16))
    up = tree.up_channel[tree.up_channel >= 0]
    on_the_wire = wire_bytes(size, header=IB_HEADER)  # S in 4 KiB packets, each with its IB header
    assert (carried[up] == on_the_wire).all() and (carried[up ^ 1] == on_the_wire).all()
    others = np.ones(FAT_TREE.num_channels, dtype=bool)
    others[np.r_[up, up ^ 1]] = False
    assert not carried[others].any()


def test_completion_is_the_chunk_pipeline_within_two_percent_of_s_over_b_plus_the_tree_latency():
    size, switch_ns = 64 * MIB, 100
    outcome = run_simulation(spec(sharp(16, size), switch_latency_ns=switch_ns), FAT_TREE)
    job = outcome.jobs[0]
    # Up host->leaf->spine->core, down core->spine->leaf->host: six links, five switches entered.
    tree_latency = 6 * LINK_NS + 5 * switch_ns
    streaming = wire_bytes(size, header=IB_HEADER) * 8e9 / RATE + tree_latency  # S at the payload rate
    assert job.ideal_completion_ns == pytest.approx(streaming, abs=10)
    # The FLOW model stores and forwards 256 chunks at each of 2h-1 = 5 switches on the way.
    chunk_ns = wire_bytes(size // 256, header=IB_HEADER) * 8e9 / RATE
    assert job.completion_ns == pytest.approx((256 + 5) * chunk_ns + tree_latency, rel=1e-4)
    assert job.ideal_completion_ns <= job.completion_ns <= 1.02 * job.ideal_completion_ns


def test_busbw_is_reported_with_the_all_reduce_factor_so_sharp_passes_the_link_rate():
    outcome = run_simulation(spec(sharp(16, 64 * MIB)), FAT_TREE)
    job = outcome.jobs[0]
    assert job.algbw_gbps == pytest.approx(64 * MIB * 8 / job.completion_ns)
    assert job.busbw_gbps == pytest.approx(job.algbw_gbps * 2 * 15 / 16)
    assert job.busbw_gbps > RATE / 1e9


@pytest.mark.parametrize("n", [4, 16])
def test_sharp_takes_n_over_2_n_minus_1_of_the_rings_time_for_large_messages(n):
    size = 256 * MIB
    times = {
        algorithm: run_simulation(spec(job(n, size, placement="SCATTERED")), FAT_TREE).jobs[0].completion_ns
        for algorithm, job in (("SHARP", sharp), ("RING", ring))
    }
    closed_form = n / (2 * (n - 1))
    assert times["SHARP"] / times["RING"] == pytest.approx(closed_form, rel=0.03)


def test_iterations_repeat_the_tree_once_each_host_has_the_previous_result():
    once = run_simulation(spec(sharp(8, 4 * MIB)), FAT_TREE).jobs[0]
    twice = run_simulation(spec(sharp(8, 4 * MIB, iterations=2)), FAT_TREE).jobs[0]
    assert twice.completion_ns == pytest.approx(2 * once.completion_ns, rel=1e-3)
    assert twice.ideal_completion_ns == pytest.approx(2 * once.ideal_completion_ns, abs=20)
    assert twice.algbw_gbps == pytest.approx(once.algbw_gbps, rel=1e-3)


@pytest.mark.parametrize("mode", ["ECMP", "ADAPTIVE"])
def test_a_sharp_job_beside_a_ring_on_other_pods_runs_as_it_does_alone_and_names_its_switches(mode):
    alone = run_simulation(spec(sharp(8, 8 * MIB), mode=mode), FAT_TREE)
    together = run_simulation(spec(sharp(8, 8 * MIB), ring(8, 8 * MIB), mode=mode), FAT_TREE)
    assert together.jobs[0].completion_ns == alone.jobs[0].completion_ns
    assert together.jobs[1].completed and together.jobs[1].ranks == 8
    flows = together.flows
    first = np.flatnonzero(flows.job == 0)[0]
    assert flows.host_names[int(flows.destination[first])] == "leaf-0"
    links = flows.path_links[
        flows.path_offsets[flows.route[first]] : flows.path_offsets[flows.route[first] + 1]
    ]
    assert [FAT_TREE.link_names[int(link)] for link in links] == ["host-0<->leaf-0"]


# -- what SHARP refuses -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (spec(sharp(8, MIB), transport="ROCEV2"), "SHARP needs an InfiniBand fabric"),
        (spec(sharp(8, MIB), fidelity="PACKET"), "PACKET-fidelity SHARP is not modelled"),
        (spec({**sharp(8, MIB), "collective": "ALL_GATHER"}), "ALL_REDUCE only"),
        (spec({**sharp(8, MIB), "collective": "BROADCAST"}), "ALL_REDUCE only"),
    ],
)
def test_sharp_off_an_infiniband_flow_all_reduce_is_invalid_argument_naming_the_algorithm(bad, reason):
    with pytest.raises(InvalidArgument, match=reason) as caught:
        run_simulation(bad, FAT_TREE)
    assert caught.value.field == "jobs[0].algorithm"


# -- through the service ----------------------------------------------------------------------------

S = simulation_pb2
topology, simulator = test_service.topology, test_service.simulator  # its fixtures: real servers, port 0


def sharp_spec(transport):
    job = S.Job(
        collective=S.COLLECTIVE_ALL_REDUCE,
        algorithm=S.COLLECTIVE_ALGORITHM_SHARP,
        size_bytes=16 * MIB,
        rank_count=32,
        placement=S.PLACEMENT_POLICY_SCATTERED,
    )
    return S.SimulationSpec(
        fabric="fabrics/ft8",
        jobs=[job],
        load_balancing=common_pb2.LoadBalancing(mode=common_pb2.LOAD_BALANCING_MODE_ADAPTIVE),
        transport=transport,
    )


async def test_the_service_runs_a_sharp_job_and_refuses_one_on_rocev2_before_it_starts(simulator):
    started = await simulator.StartSimulation(
        S.StartSimulationRequest(simulation_id="sharp", spec=sharp_spec(S.TRANSPORT_INFINIBAND))
    )
    seen = await test_service.watch_until_done(simulator, started.name)
    assert seen[-1].state == common_pb2.JOB_STATE_SUCCEEDED, seen[-1].error
    done = await simulator.GetSimulation(S.GetSimulationRequest(name=started.name))
    job = done.result.jobs[0]
    assert job.ranks == 32 and job.ideal_completion_ns <= job.completion_ns <= 1.03 * job.ideal_completion_ns
    hosts = set(job.hosts)
    assert any(flow.source in hosts and flow.destination not in hosts for flow in done.result.flows)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await simulator.StartSimulation(S.StartSimulationRequest(spec=sharp_spec(S.TRANSPORT_ROCEV2)))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "spec.jobs[0].algorithm" in caught.value.details()
    assert "InfiniBand" in caught.value.details()
    listed = await simulator.ListSimulations(S.ListSimulationsRequest())
    assert [s.name for s in listed.simulations] == ["simulations/sharp"]
