"""A cancelled simulation stops within a second on a real SimulationService (port 0): a worker that
reports no progress (building a large run's workload and engine arrays, compiling) is killed within
the grace period counted from the cancel itself, and one that reports progress stops on its own,
its worker kept for the next run."""

from __future__ import annotations

import asyncio
import os
import signal
import time

from fabrictwin.v1 import common_pb2, simulation_pb2

from .servers import is_running, simulator_server, wait_done
from .test_service import ring_spec, topology  # noqa: F401 - `topology` is a fixture
from .test_worker_recovery import long_ring, worker_running

S = simulation_pb2
WITHIN_S = 1.0  # issue 15: a run started through gRPC can be cancelled within a second


async def wait_fraction(stub, name: str, above: float = 0.0, timeout: float = 60.0) -> None:
    """Until the progress shown is above `above`: the engine's loop runs and reports."""

    async def reported() -> None:
        async for simulation in stub.WatchSimulation(S.WatchSimulationRequest(name=name)):
            assert simulation.state in (common_pb2.JOB_STATE_PENDING, common_pb2.JOB_STATE_RUNNING)
            if simulation.progress.fraction > above:
                return

    await asyncio.wait_for(reported(), timeout)


async def test_a_cancelled_run_whose_worker_reports_nothing_is_stopped_within_a_second(topology):  # noqa: F811
    async with simulator_server(topology) as simulator:
        started = await simulator.stub.StartSimulation(
            S.StartSimulationRequest(simulation_id="silent", spec=long_ring())
        )
        await wait_fraction(simulator.stub, started.name)
        worker = worker_running(simulator)
        # Stopped, it reports nothing, as a worker does while it builds a k=16 run (seconds) or compiles.
        os.kill(worker, signal.SIGSTOP)
        try:
            cancelled_at = time.monotonic()
            cancelled = await simulator.stub.CancelSimulation(S.CancelSimulationRequest(name=started.name))
            assert cancelled.state == common_pb2.JOB_STATE_CANCELLED
            while is_running(worker):
                waited = time.monotonic() - cancelled_at
                assert waited < WITHIN_S, f"the cancelled run's worker is still there after {waited:.2f} s"
                await asyncio.sleep(0.02)
        finally:
            if is_running(worker):
                os.kill(worker, signal.SIGCONT)
        after = await simulator.stub.StartSimulation(
            S.StartSimulationRequest(simulation_id="next", spec=ring_spec())
        )
        done = await wait_done(simulator.stub, after.name)
        assert done.state == common_pb2.JOB_STATE_SUCCEEDED, done.error.message


async def test_a_cancelled_run_that_reports_progress_stops_without_its_worker_being_killed(topology):  # noqa: F811
    async with simulator_server(topology) as simulator:
        pool = simulator.servicer._pool
        started = await simulator.stub.StartSimulation(
            S.StartSimulationRequest(simulation_id="reporting", spec=long_ring())
        )
        await wait_fraction(simulator.stub, started.name)
        worker = worker_running(simulator)
        cancelled_at = time.monotonic()
        await simulator.stub.CancelSimulation(S.CancelSimulationRequest(name=started.name))
        while pool.busy_pids():  # the worker answers the cancelled run at its next progress report
            waited = time.monotonic() - cancelled_at
            assert waited < WITHIN_S, f"the cancelled run still holds its worker after {waited:.2f} s"
            await asyncio.sleep(0.02)
        assert is_running(worker) and worker in pool.pids()
        after = await simulator.stub.StartSimulation(
            S.StartSimulationRequest(simulation_id="next", spec=ring_spec())
        )
        done = await wait_done(simulator.stub, after.name)
        assert done.state == common_pb2.JOB_STATE_SUCCEEDED, done.error.message
        assert pool.pids() == [worker]  # the same process ran it
