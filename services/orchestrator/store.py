"""SQL store of scenarios and runs.

Each row keeps the few columns that are queried (ids, scenario, state, times) and the whole
resource as its serialized protobuf message, so the API's shape and the stored shape never drift.
"""

from __future__ import annotations

import datetime as dt

from fabrictwin.v1 import common_pb2, scenario_pb2
from sqlalchemy import (
    BigInteger,
    Column,
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


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class ScenarioStore:
    """Scenarios and runs in SQL (SQLite by default, PostgreSQL in production)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        metadata.create_all(engine)

    def create_scenario(self, scenario_id: str, scenario: scenario_pb2.Scenario) -> scenario_pb2.Scenario:
        now = _now()
        scenario.name = f"scenarios/{scenario_id}"
        scenario.create_time.FromDatetime(now)
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    insert(scenarios).values(
                        id=scenario_id, create_time=now, body=scenario.SerializeToString()
                    )
                )
        except IntegrityError as exc:
            raise AlreadyExists(f"scenario_id: scenarios/{scenario_id} exists already") from exc
        return scenario

    def get_scenario(self, scenario_id: str) -> scenario_pb2.Scenario:
        with self.engine.connect() as conn:
            body = conn.execute(select(scenarios.c.body).where(scenarios.c.id == scenario_id)).scalar()
        if body is None:
            raise NotFound(f"scenarios/{scenario_id} does not exist")
        return scenario_pb2.Scenario.FromString(body)

    def update_scenario(self, scenario_id: str, scenario: scenario_pb2.Scenario) -> None:
        with self.engine.begin() as conn:
            result = conn.execute(
                update(scenarios)
                .where(scenarios.c.id == scenario_id)
                .values(body=scenario.SerializeToString())
            )
        if result.rowcount == 0:
            raise NotFound(f"scenarios/{scenario_id} does not exist")

    def list_scenarios(self, offset: int, limit: int) -> list[scenario_pb2.Scenario]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(scenarios.c.body)
                .order_by(scenarios.c.create_time, scenarios.c.id)
                .offset(offset)
                .limit(limit)
            ).scalars()
            return [scenario_pb2.Scenario.FromString(b) for b in rows]

    def delete_scenario(self, scenario_id: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(delete(runs).where(runs.c.scenario_id == scenario_id))
            result = conn.execute(delete(scenarios).where(scenarios.c.id == scenario_id))
        if result.rowcount == 0:
            raise NotFound(f"scenarios/{scenario_id} does not exist")

    def create_run(self, scenario_id: str, run_id: str, run: scenario_pb2.Run) -> scenario_pb2.Run:
        now = _now()
        run.create_time.FromDatetime(now)
        try:
            with self.engine.begin() as conn:
                seq = conn.execute(select(func.coalesce(func.max(runs.c.seq), 0))).scalar_one() + 1
                conn.execute(
                    insert(runs).values(
                        id=run_id,
                        scenario_id=scenario_id,
                        seq=seq,
                        state=run.state,
                        create_time=now,
                        body=run.SerializeToString(),
                    )
                )
        except IntegrityError as exc:
            raise AlreadyExists(f"run_id: {run.name} exists already") from exc
        return run

    def save_run(self, run_id: str, run: scenario_pb2.Run) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                update(runs).where(runs.c.id == run_id).values(state=run.state, body=run.SerializeToString())
            )

    def get_run(self, scenario_id: str, run_id: str) -> scenario_pb2.Run:
        with self.engine.connect() as conn:
            body = conn.execute(
                select(runs.c.body).where(runs.c.id == run_id, runs.c.scenario_id == scenario_id)
            ).scalar()
        if body is None:
            raise NotFound(f"scenarios/{scenario_id}/runs/{run_id} does not exist")
        return scenario_pb2.Run.FromString(body)

    def list_runs(self, scenario_id: str | None, offset: int, limit: int) -> list[scenario_pb2.Run]:
        query = select(runs.c.body).order_by(runs.c.seq.desc()).offset(offset).limit(limit)
        if scenario_id is not None:
            query = query.where(runs.c.scenario_id == scenario_id)
        with self.engine.connect() as conn:
            return [scenario_pb2.Run.FromString(b) for b in conn.execute(query).scalars()]

    def unfinished_runs(self) -> list[tuple[str, scenario_pb2.Run]]:
        """Runs left PENDING or RUNNING by a previous process (marked FAILED on start-up)."""
        states = (common_pb2.JOB_STATE_PENDING, common_pb2.JOB_STATE_RUNNING)
        with self.engine.connect() as conn:
            rows = conn.execute(select(runs.c.id, runs.c.body).where(runs.c.state.in_(states))).all()
        return [(r.id, scenario_pb2.Run.FromString(r.body)) for r in rows]
