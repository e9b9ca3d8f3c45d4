"""`client.simulations`: start, follow and read simulations through the SimulationService.

A simulation replays collective traffic on a fabric snapshot under one load-balancing mode. Build its
spec with `fabrictwin.specs.simulation_spec` (or by hand), `start` it, then `wait` for the result.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from fabrictwin.connection import Connection
from fabrictwin.jobs import wait_until_done
from fabrictwin.names import resource_name
from fabrictwin.v1 import common_pb2, simulation_pb2, simulation_pb2_grpc

__all__ = ["SimulationsApi"]


class SimulationsApi:
    """Simulations and their per-link time series (SimulationService)."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._stub = simulation_pb2_grpc.SimulationServiceStub(connection.channel)

    def start(
        self, spec: simulation_pb2.SimulationSpec, *, simulation_id: str = ""
    ) -> simulation_pb2.Simulation:
        """Start a simulation; it comes back at once in JOB_STATE_PENDING (see `wait`)."""
        request = simulation_pb2.StartSimulationRequest(simulation_id=simulation_id, spec=spec)
        return self._connection.unary(self._stub.StartSimulation, request)

    def get(self, name: str) -> simulation_pb2.Simulation:
        """One simulation: state, progress and, once SUCCEEDED, its result."""
        request = simulation_pb2.GetSimulationRequest(name=resource_name("simulations", name))
        return self._connection.unary(self._stub.GetSimulation, request)

    def list(
        self, *, page_size: int = 0, filter: str = "", order_by: str = ""
    ) -> Iterator[simulation_pb2.Simulation]:
        """Every simulation, newest first; `filter` (AIP-160: `state = FAILED`) and `order_by`."""
        request = simulation_pb2.ListSimulationsRequest(page_size=page_size, filter=filter, order_by=order_by)
        return self._connection.pages(self._stub.ListSimulations, request, "simulations")

    def cancel(self, name: str) -> simulation_pb2.Simulation:
        """Cancel a pending or running simulation."""
        request = simulation_pb2.CancelSimulationRequest(name=resource_name("simulations", name))
        return self._connection.unary(self._stub.CancelSimulation, request)

    def watch(self, name: str, *, timeout: float | None = None) -> Iterator[simulation_pb2.Simulation]:
        """The simulation each time its state or progress changes, until it is done."""
        request = simulation_pb2.WatchSimulationRequest(name=resource_name("simulations", name))
        return self._connection.server_stream(self._stub.WatchSimulation, request, timeout=timeout)

    def wait(
        self,
        name: str,
        timeout: float | None = None,
        *,
        progress: Callable[[simulation_pb2.Simulation], None] | None = None,
    ) -> simulation_pb2.Simulation:
        """The simulation once SUCCEEDED, FAILED or CANCELLED (check `.state`; `.error` says why it failed).

        Returns what `get` returns, per-flow results included: WatchSimulation's messages leave the
        flows out (they can be large and every progress report would carry them), so a simulation
        that SUCCEEDED is read once more with GetSimulation.
        Raises DeadlineExceededError if it is not done after `timeout` seconds (None: no limit).
        `progress(simulation)` is called with each state and progress report the wait sees
        (`simulation.progress.fraction`, `.stage`, e.g. "compiling the packet engine (first run only)").
        """
        done = wait_until_done(
            resource_name("simulations", name),
            self.get,
            lambda n, left: self.watch(n, timeout=left),
            timeout,
            progress,
        )
        if done.state != common_pb2.JOB_STATE_SUCCEEDED:
            return done
        return self.get(done.name)

    def link_series(self, name: str, *, page_size: int = 0) -> Iterator[simulation_pb2.LinkSeries]:
        """The per-link time series of a finished simulation, one LinkSeries per link direction."""
        request = simulation_pb2.ListLinkSeriesRequest(
            parent=resource_name("simulations", name), page_size=page_size
        )
        return self._connection.pages(self._stub.ListLinkSeries, request, "series")
