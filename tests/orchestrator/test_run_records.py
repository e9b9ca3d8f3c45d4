"""A run's record stays small: its results are rows of their own, each written when it changes.

Issue 11 measured a 100k-point sweep rewriting a 10.7 MB record on every change. Before this, a
1,000-point run wrote 743 MB to SQL (the whole 708 kB record at each of 2,007 changes).
"""

from __future__ import annotations

import asyncio
import itertools

from fabrictwin.v1 import common_pb2, scenario_pb2, simulation_pb2
from sqlalchemy import event, select

from services.common.db import make_engine
from services.orchestrator.servicer import ScenarioServicer
from services.orchestrator.store import ScenarioStore, runs
from tests.orchestrator.test_service import allreduce_scenario

NOTE = "a model note of the length the FLOW engine writes, " * 3


class InstantSimulators:
    """Every simulation succeeds at once, with a result the size of a real one."""

    def __init__(self) -> None:
        self.ids = itertools.count()

    async def start(self, spec: simulation_pb2.SimulationSpec) -> simulation_pb2.Simulation:
        name = f"simulations/sim-{next(self.ids):012d}"
        return simulation_pb2.Simulation(name=name, state=common_pb2.JOB_STATE_RUNNING)

    async def watch(self, name: str):
        await asyncio.sleep(0)
        simulation = simulation_pb2.Simulation(name=name, state=common_pb2.JOB_STATE_SUCCEEDED)
        simulation.result.makespan_ns = 123_456_789
        simulation.result.jobs.add(busbw_gbps=123.4, ideal_completion_ns=1000)
        simulation.result.model_notes.extend([NOTE] * 4)
        yield simulation


class AnyFabric:
    async def get_fabric(self, name: str) -> None:
        return None


def count_bytes_written(engine) -> list[int]:
    written = [0]

    @event.listens_for(engine, "before_cursor_execute")
    def _count(conn, cursor, statement, parameters, context, executemany) -> None:
        rows = parameters if executemany else [parameters]
        for row in rows:
            values = row.values() if isinstance(row, dict) else row
            written[0] += sum(len(v) for v in values if isinstance(v, bytes | str | memoryview))

    return written


async def test_a_thousand_point_run_writes_each_result_a_few_times_not_the_whole_record(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'orchestrator.db'}")
    store = ScenarioStore(engine)
    points = scenario_pb2.Sweep(parameter="seed", values=[str(v) for v in range(1, 1001)])
    scenario = allreduce_scenario(modes=[allreduce_scenario().modes[0]], sweeps=[points])
    store.create_scenario("sweep", scenario)
    servicer = ScenarioServicer(store, AnyFabric(), InstantSimulators(), None)
    written = count_bytes_written(engine)

    request = scenario_pb2.RunScenarioRequest(scenario="scenarios/sweep", run_id="r")
    await servicer.RunScenario(request, None)
    await asyncio.gather(*servicer._tasks)

    run = store.get_run("sweep", "r")
    assert run.state == common_pb2.JOB_STATE_SUCCEEDED
    assert len(run.results) == 1000
    assert all(r.state == common_pb2.JOB_STATE_SUCCEEDED for r in run.results)
    assert run.results[999].sweep_point == {"seed": "1000"}
    assert run.results[999].model_notes == [NOTE] * 4
    # Each result is written when it starts and when it ends, plus the run at its start and end.
    assert written[0] < 8 * run.ByteSize(), f"{written[0]:,} bytes written for a {run.ByteSize():,}-byte run"
    with engine.connect() as conn:
        record = conn.execute(select(runs.c.body).where(runs.c.id == "r")).scalar_one()
    assert len(record) < 20_000  # the run and its scenario, not its 1,000 results
    engine.dispose()


def test_a_record_saved_with_its_results_reads_back_the_same(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'orchestrator.db'}")
    store = ScenarioStore(engine)
    store.create_scenario("s", allreduce_scenario())
    run = scenario_pb2.Run(name="scenarios/s/runs/r", state=common_pb2.JOB_STATE_RUNNING)
    store.create_run("s", "r", run)
    for label in ("ECMP", "ADAPTIVE"):
        run.results.add(label=label, state=common_pb2.JOB_STATE_PENDING)
    store.save_run("r", run)
    run.results[1].state = common_pb2.JOB_STATE_SUCCEEDED
    run.results[1].makespan_ns = 42
    store.save_result("r", 1, run.results[1])

    read = store.get_run("s", "r")
    assert list(read.results) == list(run.results)
    assert read.progress.fraction == 0.5  # one of two results finished
    assert [r.name for r in store.list_runs("s", 0, 10)] == ["scenarios/s/runs/r"]
    assert store.unfinished_runs()[0][1].results[1].makespan_ns == 42
    store.delete_scenario("s")
    engine.dispose()
