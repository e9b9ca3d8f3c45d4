"""PFC deadlock: a cyclic pause dependency that never clears ends the run with the cycle named.

The fabric is a ring of five switches, one host each (tests/simulator/fabrics.py `switch_ring`).
Every host sends to the host two switches on; the min-hop route is two hops clockwise, so each
clockwise ring channel carries two flows at line rate and its packets wait in the queue of the next
clockwise channel: the buffer dependencies form the cycle switch-0->switch-1 -> ... ->
switch-4->switch-0. Without the closing link (a line) the same traffic cannot form a cycle.
"""

from __future__ import annotations

import asyncio
import itertools

import grpc
import pytest
from fabrictwin import Client
from fabrictwin.v1 import common_pb2, simulation_pb2, topology_pb2, topology_pb2_grpc

from services.common.errors import FailedPrecondition
from services.simulator.runner import run_simulation
from tests.in_process import in_process_stack
from tests.simulator.fabrics import point_to_point_spec, switch_ring

SWITCHES = 5
GBPS = 1_000_000_000
CLOCKWISE = [f"switch-{i}->switch-{(i + 1) % SWITCHES}" for i in range(SWITCHES)]
COUNTER_CLOCKWISE = [f"switch-{(i + 1) % SWITCHES}->switch-{i}" for i in reversed(range(SWITCHES))]


def two_hops_on(hosts_per_switch=1, step=2, offset=0):
    """(source, destination, bytes): host j of every switch i sends to host j of switch i + step."""
    return [
        (i * hosts_per_switch + offset, (i + step) % SWITCHES * hosts_per_switch + offset, 4 << 20)
        for i in range(SWITCHES)
    ]


def spec(fabric, flows, pfc=True, **roce):
    return point_to_point_spec(fabric, flows, pfc=pfc, **roce)


def named_cycle(error: FailedPrecondition) -> list[str]:
    """The ports the error names, in its order (`...: a -> b -> c`)."""
    return str(error).rsplit(": ", 1)[1].split(" -> ")


def is_rotation_of(ports: list[str], ring: list[str]) -> bool:
    return len(ports) == len(ring) and any(ports == ring[k:] + ring[:k] for k in range(len(ring)))


RING = switch_ring(SWITCHES, rate_bps=100 * GBPS)
LINE = switch_ring(SWITCHES, closed=False, rate_bps=100 * GBPS)


@pytest.mark.parametrize("xoff", [0, 16 * 1024], ids=["default-xoff", "16KiB-xoff"])
def test_traffic_two_hops_clockwise_round_a_ring_deadlocks_and_the_error_names_the_cycle(xoff):
    with pytest.raises(FailedPrecondition, match="PFC deadlock") as caught:
        run_simulation(spec(RING, two_hops_on(), pfc_xoff_bytes=xoff), RING)
    assert is_rotation_of(named_cycle(caught.value), CLOCKWISE), str(caught.value)


def test_the_same_traffic_without_pfc_drops_packets_but_finishes():
    outcome = run_simulation(spec(RING, two_hops_on(), pfc=False, buffer_bytes=64 * 1024), RING)
    assert outcome.packets.dropped > 0
    assert all(job.completion_ns > 0 for job in outcome.jobs)


def test_the_same_traffic_on_a_line_pauses_but_completes():
    flows = two_hops_on()
    outcome = run_simulation(spec(LINE, flows, pfc_xoff_bytes=16 * 1024), LINE)
    assert int(outcome.channels.pause_frames.sum()) > 0
    assert outcome.packets.dropped == 0
    assert outcome.packets.delivered_bytes == sum(size for _, _, size in flows)


def test_with_go_back_n_the_deadlock_is_still_reported_instead_of_spinning_on_retransmission_timers():
    slices = itertools.count()

    def give_up_after_20_slices(_fraction: float) -> bool:  # 20 x 2M events: a guard, never a hang
        return next(slices) < 20

    with pytest.raises(FailedPrecondition, match="PFC deadlock") as caught:
        run_simulation(spec(RING, two_hops_on(), window_bytes=256 * 1024), RING, give_up_after_20_slices)
    assert is_rotation_of(named_cycle(caught.value), CLOCKWISE), str(caught.value)


def test_a_ring_deadlocked_both_ways_names_a_cycle_the_packets_really_wait_on():
    ring = switch_ring(SWITCHES, hosts_per_switch=2, rate_bps=100 * GBPS)
    flows = two_hops_on(2, step=2, offset=0) + two_hops_on(2, step=-2, offset=1)
    with pytest.raises(FailedPrecondition, match="PFC deadlock") as caught:
        run_simulation(spec(ring, flows), ring)
    ports = named_cycle(caught.value)
    assert is_rotation_of(ports, CLOCKWISE) or is_rotation_of(ports, COUNTER_CLOCKWISE), str(caught.value)


# ---- through the real services -------------------------------------------------------------------
def ns3_ring() -> str:
    """The ring in ns-3 HPCC topology text: hosts 0..4, switch-(5+i) cabled to host-i and the next."""
    links = [f"{i} {SWITCHES + i} 100Gbps 500ns 0" for i in range(SWITCHES)]
    links += [f"{SWITCHES + i} {SWITCHES + (i + 1) % SWITCHES} 100Gbps 500ns 0" for i in range(SWITCHES)]
    switch_ids = " ".join(str(SWITCHES + i) for i in range(SWITCHES))
    return "\n".join([f"{2 * SWITCHES} {SWITCHES} {len(links)}", switch_ids, *links]) + "\n"


async def run_on_imported_ring(tmp_path, routing_engine, root: str = ""):
    """The ring imported with `routing_engine` (and `root`, a switch name, as its only root) and the
    flows run on it."""
    S = simulation_pb2
    async with in_process_stack(tmp_path) as stack:
        async with grpc.aio.insecure_channel(stack.topology.address) as channel:
            topology = topology_pb2_grpc.TopologyServiceStub(channel)
            roots = []
            if root:  # an operator reads the GUID off the fabric (ListNodes), as off ibnetdiscover
                await topology.ImportFabric(
                    topology_pb2.ImportFabricRequest(
                        fabric_id="probe", format=topology_pb2.TOPOLOGY_FORMAT_NS3_HPCC, content=ns3_ring()
                    )
                )
                nodes = await topology.ListNodes(topology_pb2.ListNodesRequest(parent="fabrics/probe"))
                roots = [f"{n.guid:#018x}" for n in nodes.nodes if n.display_name == root]
            fabric = await topology.ImportFabric(
                topology_pb2.ImportFabricRequest(
                    fabric_id="ring",
                    format=topology_pb2.TOPOLOGY_FORMAT_NS3_HPCC,
                    content=ns3_ring(),
                    routing_engine=routing_engine,
                    routing_roots=roots,
                )
            )
            assert fabric.engine_used == routing_engine, fabric.fallback_reason
        flows = [
            S.FlowSpec(source=f"host-{i}", destination=f"host-{(i + 2) % SWITCHES}", size_bytes=4 << 20)
            for i in range(SWITCHES)
        ]
        spec = S.SimulationSpec(
            fabric="fabrics/ring",
            fidelity=S.FIDELITY_PACKET,
            jobs=[S.Job(collective=S.COLLECTIVE_POINT_TO_POINT, flows=flows)],
            load_balancing=common_pb2.LoadBalancing(mode=common_pb2.LOAD_BALANCING_MODE_ECMP),
            roce=S.RoceConfig(pfc=True),
        )

        def as_a_script_would():
            with Client(**stack.addresses) as client:
                started = client.simulations.start(spec)
                return client.simulations.wait(started.name, timeout=120)

        return await asyncio.to_thread(as_a_script_would)


async def test_a_deadlocked_simulation_fails_with_the_cycle_named_not_a_stack_trace(tmp_path):
    done = await run_on_imported_ring(tmp_path, topology_pb2.ROUTING_ENGINE_MINHOP)
    assert done.state == common_pb2.JOB_STATE_FAILED
    assert done.error.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
    assert "PFC deadlock" in done.error.message and "Traceback" not in done.error.message
    ring = [f"switch-{SWITCHES + i}->switch-{SWITCHES + (i + 1) % SWITCHES}" for i in range(SWITCHES)]
    ports = done.error.message.rsplit(": ", 1)[1].split(" -> ")
    assert is_rotation_of(ports, ring), done.error.message


async def test_up_down_routing_on_the_same_ring_from_a_given_root_completes(tmp_path):
    """No switch of a ring sees nearly every host at one distance, so OpenSM finds no updn root and
    routes with minhop (the twin too: tests/topology/test_updn.py); given a root, as an operator
    gives OpenSM a root GUID file, updn breaks the cycle."""
    done = await run_on_imported_ring(tmp_path, topology_pb2.ROUTING_ENGINE_UPDN, root=f"switch-{SWITCHES}")
    assert done.state == common_pb2.JOB_STATE_SUCCEEDED, done.error.message
    assert done.result.drops == 0
