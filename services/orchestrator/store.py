"""SQL store of scenarios and runs.

It keeps the domain model of `model.py`. Each row holds the few columns that are queried (ids,
scenario, state, times) and the resource as the bytes of its API message (`messages.py` converts), so
the API's shape and the stored shape never drift and rows written by earlier versions read as before.

A run's results are rows of their own (`orchestrator_run_results`, one per simulation, by position),
so a simulation that starts or ends rewrites its own few hundred bytes, not the whole run: a
1,000-point run used to write 743 MB (its 708 kB record at each of 2,007 changes). The run's row
holds the rest (state, progress stage, error, times, its scenario); while it runs, its progress
fraction is read from the rows. A run stored before the results table existed keeps its results in
its body, and is read as it was.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable

from fabrictwin.v1 import scenario_pb2
from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    DateTime,
    Engine,
    ForeignKey,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    delete,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from services.common.errors import AlreadyExists, NotFound
from services.orchestrator.messages import (
    result_to_proto,
    run_from_proto,
    run_to_proto,
    scenario_from_proto,
    scenario_to_proto,
    state_number,
)
from services.orchestrator.model import JobState, ModeResult, Run, Scenario

__all__ = ["ScenarioStore"]

metadata = MetaData()

scenarios = Table(
    "orchestrator_scenarios",
    metadata,
    Column("id", String(63), primary_key=True),
    Column("create_time", DateTime(timezone=True), nullable=False),
    Column("body", LargeBinary, nullable=False),
)

runs = Table(
    "orchestrator_runs",
    metadata,
    Column("id", String(63), primary_key=True),
    Column(
        "scenario_id", String(63), ForeignKey("orchestrator_scenarios.id", ondelete="CASCADE"), index=True
    ),
    Column("seq", BigInteger, nullable=False),  # creation order, for newest-first listing
    Column("state", Integer, nullable=False),
    Column("create_time", DateTime(timezone=True), nullable=False),
    Column("body", LargeBinary, nullable=False),
)


run_results = Table(
    "orchestrator_run_results",
    metadata,
    Column("run_id", String(63), ForeignKey("orchestrator_runs.id", ondelete="CASCADE"), primary_key=True),
    Column("position", Integer, primary_key=True),  # the result's index in Run.results
    Column("state", Integer, nullable=False),
    Column("body", LargeBinary, nullable=False),  # the ModeResult
)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class ScenarioStore:
    """Scenarios and runs in SQL (SQLite by default, PostgreSQL in production)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        metadata.create_all(engine)

    def create_scenario(self, scenario_id: str, scenario: Scenario) -> Scenario:
        now = _now()
        scenario = dataclasses.replace(scenario, name=f"scenarios/{scenario_id}", create_time=now)
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    insert(scenarios).values(
                        id=scenario_id, create_time=now, body=scenario_to_proto(scenario).SerializeToString()
                    )
                )
        except IntegrityError as exc:
            raise AlreadyExists(f"scenario_id: scenarios/{scenario_id} exists already") from exc
        return scenario

    def get_scenario(self, scenario_id: str) -> Scenario:
        with self.engine.connect() as conn:
            body = conn.execute(select(scenarios.c.body).where(scenarios.c.id == scenario_id)).scalar()
        if body is None:
            raise NotFound(f"scenarios/{scenario_id} does not exist")
        return scenario_from_proto(scenario_pb2.Scenario.FromString(body))

    def update_scenario(self, scenario_id: str, scenario: Scenario) -> None:
        with self.engine.begin() as conn:
            result = conn.execute(
                update(scenarios)
                .where(scenarios.c.id == scenario_id)
                .values(body=scenario_to_proto(scenario).SerializeToString())
            )
        if result.rowcount == 0:
            raise NotFound(f"scenarios/{scenario_id} does not exist")

    def list_scenarios(self, offset: int, limit: int) -> list[Scenario]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(scenarios.c.body)
                .order_by(scenarios.c.create_time, scenarios.c.id)
                .offset(offset)
                .limit(limit)
            ).scalars()
            return [scenario_from_proto(scenario_pb2.Scenario.FromString(b)) for b in rows]

    def delete_scenario(self, scenario_id: str) -> None:
        with self.engine.begin() as conn:
            owned = select(runs.c.id).where(runs.c.scenario_id == scenario_id)
            conn.execute(delete(run_results).where(run_results.c.run_id.in_(owned)))
            conn.execute(delete(runs).where(runs.c.scenario_id == scenario_id))
            result = conn.execute(delete(scenarios).where(scenarios.c.id == scenario_id))
        if result.rowcount == 0:
            raise NotFound(f"scenarios/{scenario_id} does not exist")

    def create_run(self, scenario_id: str, run_id: str, run: Run) -> Run:
        now = _now()
        run.create_time = now
        try:
            with self.engine.begin() as conn:
                seq = conn.execute(select(func.coalesce(func.max(runs.c.seq), 0))).scalar_one() + 1
                conn.execute(
                    insert(runs).values(
                        id=run_id,
                        scenario_id=scenario_id,
                        seq=seq,
                        state=state_number(run.state),
                        create_time=now,
                        body=_run_body(run),
                    )
                )
                _write_results(conn, run_id, run.results)
        except IntegrityError as exc:
            raise AlreadyExists(f"run_id: {run.name} exists already") from exc
        return run

    def save_run(self, run_id: str, run: Run) -> None:
        """The whole run: its own fields and every result (at its start and end, not per change)."""
        with self.engine.begin() as conn:
            conn.execute(
                update(runs)
                .where(runs.c.id == run_id)
                .values(state=state_number(run.state), body=_run_body(run))
            )
            _write_results(conn, run_id, run.results)

    def save_result(self, run_id: str, position: int, result: ModeResult) -> None:
        """One result of a run, as a simulation starts or ends."""
        with self.engine.begin() as conn:
            conn.execute(
                update(run_results)
                .where(run_results.c.run_id == run_id, run_results.c.position == position)
                .values(state=state_number(result.state), body=result_to_proto(result).SerializeToString())
            )

    def get_run(self, scenario_id: str, run_id: str) -> Run:
        with self.engine.connect() as conn:
            body = conn.execute(
                select(runs.c.body).where(runs.c.id == run_id, runs.c.scenario_id == scenario_id)
            ).scalar()
            if body is None:
                raise NotFound(f"scenarios/{scenario_id}/runs/{run_id} does not exist")
            return _with_results(conn, [(run_id, body)])[0]

    def list_runs(self, scenario_id: str | None, offset: int, limit: int) -> list[Run]:
        query = select(runs.c.id, runs.c.body).order_by(runs.c.seq.desc()).offset(offset).limit(limit)
        if scenario_id is not None:
            query = query.where(runs.c.scenario_id == scenario_id)
        with self.engine.connect() as conn:
            return _with_results(conn, [(r.id, r.body) for r in conn.execute(query)])

    def unfinished_runs(self) -> list[tuple[str, Run]]:
        """Runs left PENDING or RUNNING by a previous process (marked FAILED on start-up)."""
        # The `state` columns hold the API's JobState numbers (the rows' format predates the domain).
        states = (state_number(JobState.PENDING), state_number(JobState.RUNNING))
        with self.engine.connect() as conn:
            rows = conn.execute(select(runs.c.id, runs.c.body).where(runs.c.state.in_(states))).all()
            found = _with_results(conn, [(r.id, r.body) for r in rows])
        return [(r.id, run) for r, run in zip(rows, found, strict=True)]


def _run_body(run: Run) -> bytes:
    """The run without its results (those are rows of `run_results`)."""
    return run_to_proto(run, with_results=False).SerializeToString()


def _write_results(conn: Connection, run_id: str, results: Iterable[ModeResult]) -> None:
    conn.execute(delete(run_results).where(run_results.c.run_id == run_id))
    rows = [
        {
            "run_id": run_id,
            "position": i,
            "state": state_number(r.state),
            "body": result_to_proto(r).SerializeToString(),
        }
        for i, r in enumerate(results)
    ]
    if rows:
        conn.execute(insert(run_results), rows)


def _with_results(conn: Connection, bodies: list[tuple[str, bytes]]) -> list[Run]:
    """Runs from their bodies and their result rows; a running run's progress from those rows."""
    found = [scenario_pb2.Run.FromString(body) for _, body in bodies]
    if not found:
        return []
    by_id = {run_id: run for (run_id, _), run in zip(bodies, found, strict=True)}
    rows = conn.execute(
        select(run_results.c.run_id, run_results.c.body)
        .where(run_results.c.run_id.in_(list(by_id)))
        .order_by(run_results.c.run_id, run_results.c.position)
    )
    fresh: set[str] = set()
    for run_id, body in rows:
        message = by_id[run_id]
        if run_id not in fresh:  # rows win over results kept in the body by an older version
            fresh.add(run_id)
            del message.results[:]
        message.results.add().MergeFromString(body)
    read = [run_from_proto(message) for message in found]
    for run in read:
        if run.results and not run.state.terminal:
            done = sum(r.state.terminal for r in run.results)
            run.fraction = done / len(run.results)
    return read
