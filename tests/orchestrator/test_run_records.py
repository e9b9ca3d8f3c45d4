"""A run's record stays small: its results are rows of their own, each written when it changes.

Issue 11 measured a 100k-point sweep rewriting a 10.7 MB record on every change. Before this, a
1,000-point run wrote 743 MB to SQL (the whole 708 kB record at each of 2,007 changes).
"""

from __future__ import annotations

import asyncio
import dataclasses

from fabrictwin.v1 import common_pb2, scenario_pb2
from sqlalchemy import event, select

from services.common.db import make_engine
from services.orchestrator.messages import run_to_proto, scenario_from_proto
from services.orchestrator.model import (
    FabricInfo,
    JobState,
    ModeResult,
    Outcome,
    Run,
    SimulationRequest,
    SimulationStatus,
)
from services.orchestrator.servicer import ScenarioServicer
from services.orchestrator.store import ScenarioStore, runs
from tests.orchestrator.test_service import allreduce_scenario

NOTE = "a model note of the length the FLOW engine writes, " * 3


class InstantSimulators:
    """Every simulation succeeds at once, with a result the size of a real one (measures the store
    alone: a thousand real simulations would take minutes)."""

    async def start(self, request: SimulationRequest) -> SimulationStatus:
        return SimulationStatus(f"simulations/{request.simulation_id}", JobState.RUNNING, routing_version=1)

    async def watch(self, name: str):
        await asyncio.sleep(0)
        outcome = Outcome(
            makespan_ns=123_456_789, busbw_gbps=123.4, ideal_completion_ns=1000, model_notes=(NOTE,) * 4
        )
        yield SimulationStatus(name, JobState.SUCCEEDED, routing_version=1, outcome=outcome)

    async def cancel(self, name: str) -> None:
        raise AssertionError("nothing is cancelled: the routing never changes here")


class AnyFabric:
    async def get_fabric(self, name: str) -> FabricInfo:
        return FabricInfo(name, routing_version=1)

    async def has_link(self, fabric: str, link: str) -> bool:
        return True


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
    store.create_scenario("sweep", scenario_from_proto(scenario))
    # No telemetry peer: the scenario stores no series.
    servicer = ScenarioServicer(store, AnyFabric(), InstantSimulators(), None)  # type: ignore[arg-type]
    written = count_bytes_written(engine)

    request = scenario_pb2.RunScenarioRequest(scenario="scenarios/sweep", run_id="r")
    await servicer.RunScenario(request, None)  # type: ignore[arg-type]  # called directly, no RPC
    await asyncio.gather(*servicer._tasks)

    run = run_to_proto(store.get_run("sweep", "r"))
    assert run.state == common_pb2.JOB_STATE_SUCCEEDED
    assert len(run.results) == 1000
    assert all(r.state == run.state for r in run.results)
    assert run.results[999].sweep_point == {"seed": "1000"}
    assert run.results[999].model_notes == [NOTE] * 4
    assert {r.routing_version for r in run.results} == {run.routing_version} == {1}
    # Each result is written when it starts and when it ends, plus the run at its start and end.
    assert written[0] < 8 * run.ByteSize(), f"{written[0]:,} bytes written for a {run.ByteSize():,}-byte run"
    with engine.connect() as conn:
        record = conn.execute(select(runs.c.body).where(runs.c.id == "r")).scalar_one()
    assert len(record) < 20_000  # the run and its scenario, not its 1,000 results
    engine.dispose()


def test_a_record_saved_with_its_results_reads_back_the_same(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'orchestrator.db'}")
    store = ScenarioStore(engine)
    scenario = store.create_scenario("s", scenario_from_proto(allreduce_scenario()))
    run = Run("scenarios/s/runs/r", scenario, state=JobState.RUNNING, routing_version=3)
    store.create_run("s", "r", run)
    run.results = [ModeResult(m.label, m.load_balancing, {}) for m in scenario.modes]
    store.save_run("r", run)
    run.results[1] = dataclasses.replace(
        run.results[1], state=JobState.SUCCEEDED, routing_version=3, outcome=Outcome(makespan_ns=42)
    )
    store.save_result("r", 1, run.results[1])

    read = store.get_run("s", "r")
    assert read.results == run.results
    assert read.scenario == scenario
    assert read.routing_version == 3
    assert read.fraction == 0.5  # one of two results finished
    assert [r.name for r in store.list_runs("s", 0, 10)] == ["scenarios/s/runs/r"]
    assert store.unfinished_runs()[0][1].results[1].outcome == Outcome(makespan_ns=42)
    store.delete_scenario("s")
    engine.dispose()
