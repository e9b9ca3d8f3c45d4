"""A simulator survives its workers: a worker killed mid-run fails only that run, naming how it died;
health reports the service without a worker and with one again; the next run succeeds; and stopping
the service ends the worker running a simulation."""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import subprocess
import sys
import time

import grpc
import pytest
from fabrictwin.v1 import common_pb2, simulation_pb2
from grpc_health.v1 import health_pb2

from services.simulator.__main__ import SERVICE_NAME
from services.stack import free_port

from .servers import busiest_child, children_of, is_running, simulator_server, wait_done
from .test_service import ring_spec, topology  # noqa: F401 - `topology` is a fixture

S = simulation_pb2
ROOT = pathlib.Path(__file__).resolve().parents[2]


def long_ring(fidelity=S.FIDELITY_FLOW) -> S.SimulationSpec:
    """Tens of seconds of work on the k=8 fat-tree (650k transfers at FLOW fidelity)."""
    spec = ring_spec(fabric="fabrics/ft8", ranks=128, fidelity=fidelity)
    spec.jobs[0].iterations = 20 if fidelity == S.FIDELITY_FLOW else 1
    if fidelity == S.FIDELITY_PACKET:
        spec.jobs[0].size_bytes = 256 << 20
    return spec


def worker_running(simulator) -> int:
    """The pid of the worker process running a simulation (by the pool, else by its CPU time)."""
    pool = simulator.servicer._pool
    busy = pool.busy_pids() if hasattr(pool, "busy_pids") else []
    pid = busy[0] if busy else busiest_child(os.getpid())
    assert pid is not None
    return pid


async def wait_running(stub, name: str, timeout: float = 60.0) -> None:
    async def running() -> None:
        async for simulation in stub.WatchSimulation(S.WatchSimulationRequest(name=name)):
            if simulation.state != common_pb2.JOB_STATE_PENDING:
                return

    await asyncio.wait_for(running(), timeout)


async def test_a_killed_worker_fails_its_run_naming_the_signal_and_later_runs_succeed(topology):  # noqa: F811
    async with simulator_server(topology) as simulator:
        statuses: list[int] = []

        async def watch_health() -> None:
            request = health_pb2.HealthCheckRequest(service=SERVICE_NAME)
            async for reply in simulator.health.Watch(request):
                statuses.append(reply.status)

        watcher = asyncio.create_task(watch_health())
        started = await simulator.stub.StartSimulation(
            S.StartSimulationRequest(simulation_id="doomed", spec=long_ring())
        )
        await wait_running(simulator.stub, started.name)
        worker = worker_running(simulator)
        os.kill(worker, signal.SIGKILL)

        done = await wait_done(simulator.stub, started.name, timeout=30)
        assert done.state == common_pb2.JOB_STATE_FAILED
        assert done.error.code == grpc.StatusCode.UNAVAILABLE.value[0]
        assert "worker process died (SIGKILL)" in done.error.message
        assert "internal error" not in done.error.message

        # Health: NOT_SERVING while no worker was alive, SERVING again once the replacement answered.
        deadline = time.monotonic() + 30
        while not (
            health_pb2.HealthCheckResponse.NOT_SERVING in statuses
            and statuses[-1] == health_pb2.HealthCheckResponse.SERVING
        ):
            assert time.monotonic() < deadline, statuses
            await asyncio.sleep(0.05)
        watcher.cancel()

        after = await simulator.stub.StartSimulation(
            S.StartSimulationRequest(simulation_id="after", spec=ring_spec())
        )
        done = await wait_done(simulator.stub, after.name)
        assert done.state == common_pb2.JOB_STATE_SUCCEEDED, done.error.message
        assert worker not in children_of(os.getpid())


async def test_a_cancelled_run_that_does_not_stop_has_its_worker_killed(topology, monkeypatch):  # noqa: F811
    import services.simulator.servicer as servicer_module

    monkeypatch.setattr(servicer_module, "CANCEL_GRACE_SECONDS", 0.5)
    async with simulator_server(topology) as simulator:
        started = await simulator.stub.StartSimulation(
            S.StartSimulationRequest(simulation_id="stubborn", spec=long_ring())
        )
        await wait_running(simulator.stub, started.name)
        worker = worker_running(simulator)
        os.kill(worker, signal.SIGSTOP)  # a worker that no longer reports progress (as while compiling)
        try:
            await simulator.stub.CancelSimulation(S.CancelSimulationRequest(name=started.name))
            deadline = time.monotonic() + 10
            while is_running(worker):
                assert time.monotonic() < deadline, "the cancelled run's worker is still there"
                await asyncio.sleep(0.05)
        finally:
            if is_running(worker):
                os.kill(worker, signal.SIGCONT)
        after = await simulator.stub.StartSimulation(
            S.StartSimulationRequest(simulation_id="next", spec=ring_spec())
        )
        done = await wait_done(simulator.stub, after.name)
        assert done.state == common_pb2.JOB_STATE_SUCCEEDED, done.error.message


@pytest.mark.parametrize("ctrl_c", [False, True], ids=["sigterm", "ctrl-c-to-the-process-group"])
async def test_stopping_the_service_while_a_worker_runs_leaves_no_process_behind(
    topology,  # noqa: F811
    tmp_path,
    ctrl_c,
):
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FABRICTWIN_LOG_FORMAT": "json"}
    log = tmp_path / "simulator.log"
    with open(log, "wb") as output:
        service = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "services.simulator",
                "--port",
                str(port),
                "--topology-address",
                topology,
                "--telemetry-address",
                "127.0.0.1:1",
            ],
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, as a terminal's foreground job
        )
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            await asyncio.wait_for(channel.channel_ready(), 60)
            from fabrictwin.v1 import simulation_pb2_grpc

            stub = simulation_pb2_grpc.SimulationServiceStub(channel)
            started = await stub.StartSimulation(
                S.StartSimulationRequest(simulation_id="interrupted", spec=long_ring(S.FIDELITY_PACKET))
            )
            await asyncio.sleep(1.0)  # the worker is loading the engine or simulating
            children = children_of(service.pid)
            assert children, "the service runs its simulation in worker processes"
            assert started.name == "simulations/interrupted"
        if ctrl_c:  # a terminal sends SIGINT to every process of the foreground group
            os.killpg(service.pid, signal.SIGINT)
        else:
            service.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        while service.poll() is None:
            assert time.monotonic() < deadline, "the simulator did not stop within 30 s of SIGTERM"
            await asyncio.sleep(0.05)
        assert service.returncode == 0, log.read_text()[-3000:]
        assert "Traceback" not in log.read_text(), log.read_text()[-3000:]
        deadline = time.monotonic() + 5
        while any(is_running(pid) for pid in children):
            alive = [pid for pid in children if is_running(pid)]
            assert time.monotonic() < deadline, f"processes {alive} outlived the simulator"
            await asyncio.sleep(0.05)
    finally:
        if service.poll() is None:
            service.kill()
            service.wait()


async def test_a_run_that_outgrows_its_worker_fails_as_out_of_memory_and_the_next_runs(topology):  # noqa: F811
    # Admission's memory estimate off, so that the run reaches the worker's 640 MiB address space.
    async with simulator_server(topology, worker_memory_bytes=640 << 20, max_memory_bytes=0) as simulator:
        spec = ring_spec()
        spec.jobs[0].iterations = 2_000  # ~1.2 GB at its peak
        started = await simulator.stub.StartSimulation(
            S.StartSimulationRequest(simulation_id="big", spec=spec)
        )
        done = await wait_done(simulator.stub, started.name, timeout=120)
        assert done.state == common_pb2.JOB_STATE_FAILED
        assert done.error.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0], done.error.message
        assert "the worker ran out of memory" in done.error.message
        assert "limited to 640 MiB" in done.error.message
        after = await simulator.stub.StartSimulation(
            S.StartSimulationRequest(simulation_id="small", spec=ring_spec())
        )
        done = await wait_done(simulator.stub, after.name)
        assert done.state == common_pb2.JOB_STATE_SUCCEEDED, done.error.message
