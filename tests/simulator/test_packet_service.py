"""PACKET fidelity through the real services: SimulationService, telemetry export, scenarios, CLI."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from fabrictwin import Client
from fabrictwin.cli import main as cli_main
from fabrictwin.v1 import (
    common_pb2,
    scenario_pb2,
    scenario_pb2_grpc,
    simulation_pb2,
    topology_pb2,
    topology_pb2_grpc,
)

from tests.in_process import in_process_stack

S = simulation_pb2


@pytest.fixture
async def stack(tmp_path):
    async with in_process_stack(tmp_path) as running:
        async with grpc.aio.insecure_channel(running.topology.address) as channel:
            spec = topology_pb2.FabricSpec(fat_tree=topology_pb2.FatTreeSpec(k=4), link_speed_gbps=100)
            await topology_pb2_grpc.TopologyServiceStub(channel).CreateFabric(
                topology_pb2.CreateFabricRequest(fabric_id="ft4", spec=spec)
            )
        yield running


def client_for(stack) -> Client:
    return Client(**stack.addresses)


def ring(size=2 << 20, placement=S.PLACEMENT_POLICY_SCATTERED):
    return S.Job(collective=S.COLLECTIVE_ALL_REDUCE, size_bytes=size, rank_count=16, placement=placement)


async def test_a_packet_simulation_reports_queues_drops_and_packets_and_feeds_telemetry(stack):
    spec = S.SimulationSpec(
        fabric="fabrics/ft4",
        fidelity=S.FIDELITY_PACKET,
        jobs=[ring()],
        load_balancing=common_pb2.LoadBalancing(mode=common_pb2.LOAD_BALANCING_MODE_SPRAY),
        telemetry_source="packet-run",
    )

    def as_a_script_would() -> None:  # the synchronous SDK, off the servers' event loop
        with client_for(stack) as client:
            started = client.simulations.start(spec)
            done = client.simulations.wait(started.name, timeout=120)
            assert done.state == common_pb2.JOB_STATE_SUCCEEDED, done.error.message
            result = done.result
            assert result.events > 0
            assert result.packets_injected == result.packets_delivered + result.drops > 0
            assert sum(result.reorder_buffer_histogram) == result.packets_delivered
            assert 0 < result.peak_packets_in_flight < result.packets_delivered
            assert any("PACKET fidelity" in note for note in result.model_notes)
            assert result.jobs[0].completion_ns == pytest.approx(result.jobs[0].ideal_completion_ns, rel=0.03)
            series = list(client.simulations.link_series(done.name))
            assert series and all(len(s.mean_queue_bytes) == len(s.bytes) == len(s.drops) for s in series)
            top = client.telemetry.top_links(
                "packet-run", metric="queue_depth_bytes", aggregation="max", limit=3
            )
            assert len(list(top)) == 3

    await asyncio.to_thread(as_a_script_would)


async def test_a_packet_scenario_compares_all_four_modes(stack):
    async with grpc.aio.insecure_channel(stack.orchestrator.address) as channel:
        scenarios = scenario_pb2_grpc.ScenarioServiceStub(channel)
        modes = [
            common_pb2.LoadBalancing(mode=m)
            for m in (
                common_pb2.LOAD_BALANCING_MODE_ECMP,
                common_pb2.LOAD_BALANCING_MODE_ADAPTIVE,
                common_pb2.LOAD_BALANCING_MODE_SPRAY,
            )
        ]
        modes.append(
            common_pb2.LoadBalancing(mode=common_pb2.LOAD_BALANCING_MODE_FLOWLET, flowlet_gap_ns=2000)
        )
        scenario = scenario_pb2.Scenario(
            fabric="fabrics/ft4",
            jobs=[ring(1 << 20, S.PLACEMENT_POLICY_RANDOM)],
            modes=modes,
            fidelity=S.FIDELITY_PACKET,
            seed=4,
        )
        created = await scenarios.CreateScenario(scenario_pb2.CreateScenarioRequest(scenario=scenario))
        started = await scenarios.RunScenario(scenario_pb2.RunScenarioRequest(scenario=created.name))
        run = started
        async for update in scenarios.WatchRun(scenario_pb2.WatchRunRequest(name=started.name)):
            run = update
        assert run.state == common_pb2.JOB_STATE_SUCCEEDED, run.error.message
        comparison = await scenarios.CompareRuns(scenario_pb2.CompareRunsRequest(runs=[run.name]))
        assert [row.label for row in comparison.rows] == ["ECMP", "ADAPTIVE", "SPRAY", "FLOWLET"]
        assert all(row.makespan_ns > 0 for row in comparison.rows)


async def test_the_cli_runs_a_shift_permutation_packet_by_packet(stack, capsys):
    addresses = [f"--{name}={address}" for name, address in stack.addresses.items()]
    code = await asyncio.to_thread(
        cli_main,
        [
            *addresses,
            "simulate",
            "--fabric",
            "ft4",
            "--collective",
            "point_to_point",
            "--pattern",
            "shift:1",
            "--size",
            "1MB",
            "--fidelity",
            "packet",
            "--mode",
            "spray",
            "--spray-random",
            "--mtu",
            "1472",
            "--header-bytes",
            "30",
            "--wait",
            "--json",
        ],
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert '"makespan_ns"' in captured.out


async def test_go_back_n_under_bit_errors_through_the_api_and_impossible_settings_refused(stack):
    lossy_link = S.Fault(link="0", kind=S.FAULT_KIND_BIT_ERRORS, bit_error_rate=1e-6)
    spec = S.SimulationSpec(
        fabric="fabrics/ft4",
        fidelity=S.FIDELITY_PACKET,
        jobs=[ring()],
        load_balancing=common_pb2.LoadBalancing(mode=common_pb2.LOAD_BALANCING_MODE_ADAPTIVE),
        roce=S.RoceConfig(window_bytes=64 * 4096, retransmit_timeout_ns=50_000),
        faults=[lossy_link],
    )

    def as_a_script_would() -> None:
        from fabrictwin.errors import InvalidArgumentError

        with client_for(stack) as client:
            done = client.simulations.wait(client.simulations.start(spec).name, timeout=120)
            assert done.state == common_pb2.JOB_STATE_SUCCEEDED, done.error.message
            result = done.result
            assert result.corrupted_packets > 0
            assert result.retransmitted_packets >= result.corrupted_packets
            assert sum(link.rcv_errors for link in result.links) == result.corrupted_packets
            assert any("Go-Back-N" in note for note in result.model_notes)
            with_dcqcn = S.SimulationSpec()
            with_dcqcn.CopyFrom(spec)
            with_dcqcn.roce.dcqcn = True
            with_dcqcn.roce.ecn_pmax = 2.0
            with pytest.raises(InvalidArgumentError, match=r"spec\.roce\.ecn_pmax"):
                client.simulations.start(with_dcqcn)

    await asyncio.to_thread(as_a_script_would)


async def test_dcqcn_infiniband_credits_and_a_link_down_through_the_api(stack):
    base = dict(
        fabric="fabrics/ft4",
        fidelity=S.FIDELITY_PACKET,
        jobs=[ring()],
        load_balancing=common_pb2.LoadBalancing(mode=common_pb2.LOAD_BALANCING_MODE_ECMP),
    )
    dcqcn = S.SimulationSpec(**base, roce=S.RoceConfig(pfc=True, dcqcn=True, window_bytes=1 << 20))
    infiniband = S.SimulationSpec(
        **base, transport=S.TRANSPORT_INFINIBAND, infiniband=S.InfinibandConfig(vl_buffer_bytes=32 * 1024)
    )

    def as_a_script_would() -> None:
        from fabrictwin.errors import InvalidArgumentError

        with client_for(stack) as client:
            hosts = {n.name for n in client.fabrics.nodes("ft4", kind="host")}
            uplink = next(x for x in client.fabrics.links("ft4") if hosts.isdisjoint({x.node_a, x.node_b}))
            fault = S.Fault(
                link=str(uplink.index),
                kind=S.FAULT_KIND_LINK_DOWN,
                start_ns=1000,
                reroute=S.REROUTE_MODEL_SUBNET_MANAGER,
            )
            # Spraying uses every uplink, so the failed one carries traffic when it goes down.
            link_down = S.SimulationSpec(**base, roce=S.RoceConfig(window_bytes=256 * 1024), faults=[fault])
            link_down.load_balancing.mode = common_pb2.LOAD_BALANCING_MODE_SPRAY
            runs = {
                name: client.simulations.start(spec).name
                for name, spec in (("dcqcn", dcqcn), ("ib", infiniband), ("down", link_down))
            }
            done = {name: client.simulations.wait(sim, timeout=120) for name, sim in runs.items()}
            for name, sim in done.items():
                assert sim.state == common_pb2.JOB_STATE_SUCCEEDED, (name, sim.error.message)
            assert done["dcqcn"].result.cnp_sent == done["dcqcn"].result.cnp_handled
            assert any("DCQCN" in note for note in done["dcqcn"].result.model_notes)
            ib = done["ib"].result
            assert ib.drops == 0
            assert max(link.peak_input_buffer_bytes for link in ib.links) <= 32 * 1024
            down = done["down"].result
            # The subnet manager's delay is the topology service's measured recompute plus the sweep.
            assert any(
                "SUBNET_MANAGER reroute takes effect" in n and "measured recompute" in n
                for n in down.model_notes
            )
            assert sum(link.link_downed for link in down.links if link.link == uplink.index) >= 1
            assert down.xmit_discards + down.lost_on_wire > 0
            assert down.jobs[0].completion_ns > 50_000_000  # the sweep delay alone is 50 ms
            bad = S.SimulationSpec()
            bad.CopyFrom(link_down)
            bad.faults[0].link = "no-such-link"
            with pytest.raises(InvalidArgumentError, match=r"spec\.faults\[0\]\.link"):
                client.simulations.start(bad)

    await asyncio.to_thread(as_a_script_would)


async def test_the_cli_runs_go_back_n_pfc_and_a_marginal_transceiver(stack, capsys):
    addresses = [f"--{name}={address}" for name, address in stack.addresses.items()]
    code = await asyncio.to_thread(
        cli_main,
        [
            *addresses,
            "simulate",
            "--fabric",
            "ft4",
            "--ranks",
            "16",
            "--placement",
            "scattered",
            "--size",
            "1MiB",
            "--fidelity",
            "packet",
            "--mode",
            "adaptive",
            "--window",
            "128KiB",
            "--pfc",
            "--marginal",
            "0=0,0.5,0.01,0.2",
            "--ber",
            "1=1e-7",
            "--wait",
        ],
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "Go-Back-N" in captured.out and "PFC" in captured.out
    assert "GILBERT_ELLIOTT" in captured.out and "BIT_ERRORS" in captured.out


async def test_the_cli_runs_dcqcn_infiniband_credits_and_a_link_failure(stack, capsys):
    addresses = [f"--{name}={address}" for name, address in stack.addresses.items()]
    workload = ["--fabric", "ft4", "--ranks", "16", "--placement", "scattered", "--size", "1MiB"]
    packet = ["--fidelity", "packet", "--wait"]
    runs = [
        ["--mode", "ecmp", "--window", "256KiB", "--pfc", "--dcqcn"],
        ["--transport", "infiniband", "--vl-buffer", "32KiB"],
        ["--mode", "spray", "--window", "256KiB", "--link-down", "40@2000-500000:fast_recovery"],
    ]
    reports = []
    for extra in runs:
        code = await asyncio.to_thread(cli_main, [*addresses, "simulate", *workload, *packet, *extra])
        captured = capsys.readouterr()
        assert code == 0, (extra, captured.err)
        reports.append(captured.out)
    assert "ECN/DCQCN" in reports[0]
    assert "InfiniBand credit-based flow control" in reports[1]
    assert "FAST_RECOVERY reroute takes effect" in reports[2]
    code = await asyncio.to_thread(
        cli_main, [*addresses, "simulate", *workload, *packet, "--link-down", "40@2000:teleport"]
    )
    assert code == 2
    assert "--link-down" in capsys.readouterr().err
