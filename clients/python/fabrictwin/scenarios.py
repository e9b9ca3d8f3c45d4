"""`client.scenarios`: scenarios, their runs, comparisons and diagnosis through the ScenarioService.

A scenario is a fabric, jobs and the load-balancing modes to compare; a run simulates every mode (and
sweep point) and `compare` lines the results up. `diagnose` reads a telemetry source and says what it
sees (ECMP pinning, lossy links, PFC spreading).

>>> scenario = client.scenarios.create("ft8", [collective_job(ranks=16, size="256MiB")],  # doctest: +SKIP
...                                    modes=["ecmp", "adaptive"])
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

from fabrictwin.connection import Connection
from fabrictwin.jobs import wait_until_done
from fabrictwin.names import enum_value, resource_name, run_name
from fabrictwin.specs import ModeLike, load_balancing
from fabrictwin.v1 import common_pb2, scenario_pb2, scenario_pb2_grpc, simulation_pb2, topology_pb2

__all__ = ["ScenariosApi"]


class ScenariosApi:
    """Scenarios, runs, comparisons and diagnosis (ScenarioService)."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._stub = scenario_pb2_grpc.ScenarioServiceStub(connection.channel)

    def create(
        self,
        fabric: str,
        jobs: Iterable[simulation_pb2.Job],
        modes: Iterable[ModeLike],
        *,
        scenario_id: str = "",
        display_name: str = "",
        fidelity: int | str | None = None,
        transport: int | str | None = None,
        faults: Iterable[simulation_pb2.Fault] = (),
        sweeps: Iterable[scenario_pb2.Sweep] = (),
        seed: int = 0,
        store_telemetry: bool = False,
        mtu_bytes: int = 0,
        buffer_bytes: int = 0,
        header_bytes: int = 0,
        switch_latency_ns: int = 0,
    ) -> scenario_pb2.Scenario:
        """A scenario running `jobs` on `fabric` once per load-balancing mode (`["ecmp", "adaptive"]`)."""
        scenario = scenario_pb2.Scenario(
            display_name=display_name,
            fabric=resource_name("fabrics", fabric),
            jobs=list(jobs),
            modes=[load_balancing(mode) for mode in modes],
            faults=list(faults),
            sweeps=list(sweeps),
            seed=seed,
            store_telemetry=store_telemetry,
            mtu_bytes=mtu_bytes,
            buffer_bytes=buffer_bytes,
            header_bytes=header_bytes,
            switch_latency_ns=switch_latency_ns,
        )
        if fidelity is not None:
            scenario.fidelity = enum_value(simulation_pb2.Fidelity, fidelity, "fidelity")
        if transport is not None:
            scenario.transport = enum_value(simulation_pb2.Transport, transport, "transport")
        return self.create_from(scenario, scenario_id=scenario_id)

    def what_if(
        self,
        scenario: scenario_pb2.Scenario,
        *,
        repair_links: Iterable[str | int] = (),
        routing_engines: Iterable[int | str] = (),
        modes: Iterable[ModeLike] = (),
        all_clean: bool = False,
        scenario_id: str = "",
    ) -> scenario_pb2.Run:
        """Run `scenario`'s jobs on its fabric as it is now (`as-is`, with `scenario.modes[0]`) and once
        per change: each repaired link (index or display name), routing engine (`ftree`, ...),
        load-balancing mode, or a clean fabric; plus all the changes together when there are several.
        Returns the run (PENDING); `wait_run` then `compare(run.name)` says what each change buys.

        >>> run = client.scenarios.what_if(base, repair_links=["leaf-3/p17<->spine-1/p4"])  # doctest: +SKIP
        """
        request = scenario_pb2.RunWhatIfRequest(
            scenario_id=scenario_id,
            scenario=scenario,
            repair_links=[str(link) for link in repair_links],
            routing_engines=[
                enum_value(topology_pb2.RoutingEngine, e, "routing_engines") for e in routing_engines
            ],
            modes=[load_balancing(mode) for mode in modes],
            all_clean=all_clean,
        )
        return self._connection.unary(self._stub.RunWhatIf, request)

    def create_from(self, scenario: scenario_pb2.Scenario, *, scenario_id: str = "") -> scenario_pb2.Scenario:
        """Create a scenario from a complete Scenario message (every field the contract has)."""
        request = scenario_pb2.CreateScenarioRequest(scenario_id=scenario_id, scenario=scenario)
        return self._connection.unary(self._stub.CreateScenario, request)

    def get(self, name: str) -> scenario_pb2.Scenario:
        """One scenario."""
        request = scenario_pb2.GetScenarioRequest(name=resource_name("scenarios", name))
        return self._connection.unary(self._stub.GetScenario, request)

    def list(
        self, *, page_size: int = 0, filter: str = "", order_by: str = ""
    ) -> Iterator[scenario_pb2.Scenario]:
        """Every scenario (that `filter` keeps, AIP-160), in `order_by` order."""
        request = scenario_pb2.ListScenariosRequest(page_size=page_size, filter=filter, order_by=order_by)
        return self._connection.pages(self._stub.ListScenarios, request, "scenarios")

    def delete(self, name: str) -> None:
        """Delete a scenario and its runs."""
        request = scenario_pb2.DeleteScenarioRequest(name=resource_name("scenarios", name))
        self._connection.unary(self._stub.DeleteScenario, request)

    def run(self, scenario: str, *, run_id: str = "") -> scenario_pb2.Run:
        """Start a run (one simulation per mode and sweep point); it comes back PENDING (see `wait_run`)."""
        request = scenario_pb2.RunScenarioRequest(
            scenario=resource_name("scenarios", scenario), run_id=run_id
        )
        return self._connection.unary(self._stub.RunScenario, request)

    def get_run(self, name: str) -> scenario_pb2.Run:
        """One run (`scenarios/{scenario}/runs/{run}`)."""
        request = scenario_pb2.GetRunRequest(name=run_name(name))
        return self._connection.unary(self._stub.GetRun, request)

    def list_runs(
        self, scenario: str = "-", *, page_size: int = 0, filter: str = "", order_by: str = ""
    ) -> Iterator[scenario_pb2.Run]:
        """Every run of a scenario, newest first; "-" lists the runs of every scenario. `filter`
        (AIP-160: `state = FAILED`) and `order_by` (`create_time desc`) as every List."""
        request = scenario_pb2.ListRunsRequest(
            parent=resource_name("scenarios", scenario), page_size=page_size, filter=filter, order_by=order_by
        )
        return self._connection.pages(self._stub.ListRuns, request, "runs")

    def watch_run(self, name: str, *, timeout: float | None = None) -> Iterator[scenario_pb2.Run]:
        """The run each time it changes, until it is done."""
        request = scenario_pb2.WatchRunRequest(name=run_name(name))
        return self._connection.server_stream(self._stub.WatchRun, request, timeout=timeout)

    def wait_run(
        self,
        name: str,
        timeout: float | None = None,
        *,
        progress: Callable[[scenario_pb2.Run], None] | None = None,
    ) -> scenario_pb2.Run:
        """The run once SUCCEEDED, FAILED or CANCELLED; DeadlineExceededError after `timeout` seconds.
        `progress(run)` is called with each change the wait sees (each result's state as it goes)."""
        return wait_until_done(
            run_name(name), self.get_run, lambda n, left: self.watch_run(n, timeout=left), timeout, progress
        )

    def cancel_run(self, name: str) -> scenario_pb2.Run:
        """Cancel a run: its unfinished simulations are cancelled, finished results kept."""
        request = scenario_pb2.CancelRunRequest(name=run_name(name))
        return self._connection.unary(self._stub.CancelRun, request)

    def compare(self, runs: Sequence[str] | str, *, baseline: str = "") -> scenario_pb2.Comparison:
        """The mode results of one or more runs side by side, against `baseline` (default: the first)."""
        names = [runs] if isinstance(runs, str) else list(runs)
        request = scenario_pb2.CompareRunsRequest(runs=[run_name(n) for n in names], baseline=baseline)
        return self._connection.unary(self._stub.CompareRuns, request)

    def diagnose(
        self,
        source: str,
        *,
        ports: Sequence[str] = (),
        start_ns: int = 0,
        end_ns: int = 0,
        hot_above: float = 0.0,
        idle_below: float = 0.0,
        max_over_mean: float = 0.0,
        spread: float = 0.0,
    ) -> scenario_pb2.Diagnosis:
        """What a telemetry source shows (ECMP pinning, lossy links, ...), most severe finding first.

        Pinning: `ports`' mean utilisations with max/mean at least `max_over_mean` (default 1.5) and
        max - min at least `spread` (default 0.3), or some above `hot_above` (0.8) while others are
        below `idle_below` (0.2): the rule `utilisation_skew` applies too (0: each default)."""
        request = scenario_pb2.DiagnoseRequest(
            source=resource_name("sources", source),
            time_range=common_pb2.TimeRange(start_ns=start_ns, end_ns=end_ns),
            ports=list(ports),
            hot_above=hot_above,
            idle_below=idle_below,
            max_over_mean=max_over_mean,
            spread=spread,
        )
        return self._connection.unary(self._stub.Diagnose, request)
