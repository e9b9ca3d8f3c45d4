"""Simulator replicas as the orchestrator sees them: one channel each, work only for those that answer.

A simulation lives in the memory of the replica that started it, so it is followed there, with
WatchSimulation. Work goes only to a replica whose grpc.health.v1 Check answers SERVING (asked
before each StartSimulation, so a draining replica gets none). A replica that stops answering (a
call or stream breaks and its Check does not answer SERVING) is taken out of rotation: new
simulations go to the others, and a background probe asks its Check every `PROBE_SECONDS` until it
answers SERVING again. The simulations it was running raise `SimulatorLost` to whoever follows
them, who may start them again elsewhere (a simulation is deterministic: a re-run is the same
result). A closed connection (a killed process) is noticed at once; a replica that vanishes
without closing it (a lost node) by keepalive pings, within about 15 s.

A target is a `host:port`, an `ipv4:a,b` list, or a `dns:///name:port` (a Kubernetes headless
Service); names are resolved here, again at most every `RESOLVE_SECONDS` when simulations start
(replicas come and go), and every address gets its own channel. Over TLS a replica reached by its
IP is checked against the name it was resolved from.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import AsyncIterator, Sequence

import grpc
from fabrictwin.v1 import common_pb2, simulation_pb2, simulation_pb2_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common.errors import AlreadyExists, Unavailable
from services.common.peers import PeerAuth, auth_metadata, domain_error, peer_channel
from services.orchestrator.contracts import SimulatorLost

__all__ = ["GrpcSimulators", "SimulatorLost"]

log = logging.getLogger("fabrictwin.orchestrator")

HEALTH_SERVICE = "fabrictwin.v1.SimulationService"

_TERMINAL = (common_pb2.JOB_STATE_SUCCEEDED, common_pb2.JOB_STATE_FAILED, common_pb2.JOB_STATE_CANCELLED)

# Codes a call ends with when the replica itself went away (process killed, connection reset, server
# stopped). They are only a suspicion: the replica's health Check decides.
_GONE_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
    }
)

_REPLICA_CHANNEL_OPTIONS = (
    # A replica that vanishes without closing its connections (a node lost, a network partition) is
    # noticed on a silent WatchSimulation stream by keepalive pings; the servers accept one per 5 s.
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.http2.max_pings_without_data", 0),
    # gRPC's reconnect back-off grows to 120 s; a replica that comes back should be reached in seconds.
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2_000),
)


class GrpcSimulators:
    """Simulator replicas: simulations go round-robin over those that answer; each is followed on its own."""

    RESOLVE_SECONDS = 10.0
    PROBE_SECONDS = 0.5  # how often a replica out of rotation is asked whether it is SERVING again
    CHECK_SECONDS = 2.0  # a health Check that takes longer is no answer
    RESUMES = 3  # a broken stream to a replica that still answers is resumed at most this often

    def __init__(self, targets: Sequence[str], auth: PeerAuth | str = "") -> None:
        if not targets:
            raise ValueError("at least one simulator address is needed")
        self._auth = auth
        self.metadata = auth_metadata(auth)
        self._targets = list(targets)
        self._stubs: dict[str, simulation_pb2_grpc.SimulationServiceAsyncStub] = {}
        self._health: dict[str, health_pb2_grpc.HealthStub] = {}
        self.channels: list[grpc.aio.Channel] = []
        self._order: list[str] = []
        self._turn = 0
        self._resolved_at = -float("inf")
        self._owner: dict[str, str] = {}
        self._out: dict[str, asyncio.Task[None]] = {}  # out of rotation -> its health probe
        self._use(self._expand_all())

    # Addresses --------------------------------------------------------------------------------------

    @staticmethod
    def _expand(target: str) -> list[str]:
        if target.startswith(("ipv4:", "ipv6:")):
            return [a for a in target.split(":", 1)[1].split(",") if a]
        if target.startswith("dns:"):
            host, _, port = target.rsplit("/", 1)[-1].rpartition(":")
            infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
            found = {str(info[4][0]) for info in infos}
            return sorted(f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}" for ip in found)
        return [target]

    @staticmethod
    def _server_name(target: str) -> str:
        """The name a replica's certificate must carry when it is dialled by the IP `target` resolved to."""
        if target.startswith("dns:"):
            return target.rsplit("/", 1)[-1].rpartition(":")[0]
        return ""

    def _expand_all(self) -> list[tuple[str, str]]:
        addresses: dict[str, str] = {}
        for target in self._targets:
            try:
                for address in self._expand(target):
                    addresses.setdefault(address, self._server_name(target))
            except OSError:  # a name that does not resolve now: keep what it resolved to before
                for address in self._order:
                    addresses.setdefault(address, "")
        return list(addresses.items())

    def _use(self, addresses: list[tuple[str, str]]) -> None:
        for address, server_name in addresses:
            if address not in self._stubs:
                channel = peer_channel(
                    address, self._auth, server_name=server_name, options=_REPLICA_CHANNEL_OPTIONS
                )
                self.channels.append(channel)
                self._stubs[address] = simulation_pb2_grpc.SimulationServiceStub(channel)
                self._health[address] = health_pb2_grpc.HealthStub(channel)
        self._order = [address for address, _ in addresses] or self._order
        self._resolved_at = time.monotonic()

    async def _resolve(self, force: bool = False) -> None:
        if force or time.monotonic() - self._resolved_at > self.RESOLVE_SECONDS:
            self._use(await asyncio.to_thread(self._expand_all))

    # Health -----------------------------------------------------------------------------------------

    async def _serving(self, address: str) -> bool:
        """True when the replica answers its health Check with SERVING within CHECK_SECONDS."""
        try:
            # types-grpcio-health-checking declares HealthStub without its methods.
            reply: health_pb2.HealthCheckResponse = await self._health[address].Check(  # type: ignore[attr-defined]
                health_pb2.HealthCheckRequest(service=HEALTH_SERVICE),
                timeout=self.CHECK_SECONDS,
                metadata=self.metadata,
            )
        except grpc.aio.AioRpcError:
            return False
        return reply.status == health_pb2.HealthCheckResponse.SERVING

    def _take_out(self, address: str) -> None:
        """No new work for `address` until its health Check answers SERVING again."""
        if address in self._out:
            return
        log.warning(
            "simulator replica stopped answering: no new work until it is SERVING", extra={"replica": address}
        )
        self._out[address] = asyncio.get_running_loop().create_task(self._probe(address))

    async def _probe(self, address: str) -> None:
        try:
            while address in self._order:  # one that left the DNS answer is not waited for
                await asyncio.sleep(self.PROBE_SECONDS)
                if await self._serving(address):
                    log.info("simulator replica is SERVING again", extra={"replica": address})
                    break
        finally:
            if self._out.get(address) is asyncio.current_task():  # not a later probe of the same replica
                del self._out[address]

    def serving(self) -> list[str]:
        """The replicas new simulations may go to now."""
        return [address for address in self._order if address not in self._out]

    # Calls ------------------------------------------------------------------------------------------

    def _next(self, tried: set[str]) -> str | None:
        candidates = [a for a in self.serving() if a not in tried]
        if not candidates:
            return None
        address = candidates[self._turn % len(candidates)]
        self._turn += 1
        return address

    async def _bring_back_any(self) -> bool:
        """Before giving up: ask every replica out of rotation now rather than at its next probe."""
        await self._resolve(force=True)
        back = False
        for address in [a for a in self._order if a in self._out]:
            if await self._serving(address):
                probe = self._out.pop(address, None)  # None: its probe saw it first
                if probe is not None:
                    probe.cancel()
                back = True
        return back

    async def start(
        self, spec: simulation_pb2.SimulationSpec, simulation_id: str = ""
    ) -> simulation_pb2.Simulation:
        """Start `spec` on a replica that answers, as `simulations/{simulation_id}` if given;
        Unavailable when none can take it.

        A re-run may reach a replica that still holds the simulation under that name (its stream
        broke, the replica did not go away): the same spec there is the same simulation, and is
        followed rather than started twice; another spec under that name is AlreadyExists.
        """
        await self._resolve()
        tried: set[str] = set()
        while True:
            address = self._next(tried)
            if address is None and await self._bring_back_any():
                address = self._next(tried)
            if address is None:
                gone = ", ".join(sorted(tried | set(self._out))) or "none resolved"
                targets = ", ".join(self._targets)
                raise Unavailable(
                    f"no simulator replica can take the work ({targets}; not answering: {gone})"
                )
            tried.add(address)
            if not await self._serving(address):  # draining (NOT_SERVING), or gone since last asked
                self._take_out(address)
                continue
            try:
                simulation = await self._stubs[address].StartSimulation(
                    simulation_pb2.StartSimulationRequest(simulation_id=simulation_id, spec=spec),
                    timeout=60,
                    metadata=self.metadata,
                )
            except grpc.aio.AioRpcError as exc:
                if exc.code() in _GONE_CODES and not await self._serving(address):
                    self._take_out(address)
                    continue  # the replica is gone, not the spec refused: try another
                if exc.code() == grpc.StatusCode.ALREADY_EXISTS and simulation_id:
                    simulation = await self._same_simulation(address, simulation_id, spec)
                else:
                    raise domain_error(exc, "simulator", "scenario") from exc
            self._owner[simulation.name] = address
            return simulation

    async def _same_simulation(
        self, address: str, simulation_id: str, spec: simulation_pb2.SimulationSpec
    ) -> simulation_pb2.Simulation:
        """The simulation `address` already holds under this id, if it runs `spec`."""
        name = f"simulations/{simulation_id}"
        try:
            held = await self._stubs[address].GetSimulation(
                simulation_pb2.GetSimulationRequest(name=name), timeout=30, metadata=self.metadata
            )
        except grpc.aio.AioRpcError as exc:
            raise domain_error(exc, "simulator", "scenario") from exc
        if held.spec != spec:
            raise AlreadyExists(f"simulator replica {address} holds another simulation named {name}")
        return held

    async def watch(self, name: str) -> AsyncIterator[simulation_pb2.Simulation]:
        """The simulation now and at every change, from its replica, until a terminal state.

        Raises SimulatorLost when the replica stops answering (it is then out of rotation) or no
        longer knows the simulation (it restarted).
        """
        address = self._owner.get(name) or (self._order[0] if self._order else "")
        if address not in self._stubs:
            raise SimulatorLost(f"no simulator replica is known to run {name}")
        request = simulation_pb2.WatchSimulationRequest(name=name)
        resumes = 0
        try:
            while True:
                try:
                    async for simulation in self._stubs[address].WatchSimulation(
                        request, metadata=self.metadata
                    ):
                        yield simulation
                        if simulation.state in _TERMINAL:
                            return
                except grpc.aio.AioRpcError as exc:
                    if exc.code() == grpc.StatusCode.NOT_FOUND:
                        raise SimulatorLost(f"simulator replica {address} no longer knows {name}") from exc
                    if exc.code() not in _GONE_CODES:
                        raise domain_error(exc, "simulator") from exc
                # The stream broke (or ended early): a replica that still answers is asked again.
                if not await self._serving(address):
                    self._take_out(address)
                    raise SimulatorLost(f"simulator replica {address} stopped answering while running {name}")
                resumes += 1
                if resumes > self.RESUMES:
                    raise SimulatorLost(
                        f"the stream from simulator replica {address} about {name} keeps breaking"
                    )
        finally:
            self._owner.pop(name, None)

    async def get(self, name: str) -> simulation_pb2.Simulation:
        """The simulation now, from its replica (one call: runs follow simulations with `watch`)."""
        stub = self._stubs[self._owner.get(name, self._order[0])]
        try:
            return await stub.GetSimulation(
                simulation_pb2.GetSimulationRequest(name=name), timeout=30, metadata=self.metadata
            )
        except grpc.aio.AioRpcError as exc:
            raise domain_error(exc, "simulator") from exc

    async def cancel(self, name: str) -> None:
        """Cancel a simulation on the replica running it (a run that will not use its result). When no
        replica is known to run it (its StartSimulation was cut short, a cancelled run's last starts),
        every replica is asked; the ones that never heard of it answer NOT_FOUND, which is fine."""
        address = self._owner.pop(name, None)
        addresses = [address] if address is not None else list(self._stubs)
        request = simulation_pb2.CancelSimulationRequest(name=name)
        for target in addresses:
            try:
                await self._stubs[target].CancelSimulation(request, timeout=30, metadata=self.metadata)
            except grpc.aio.AioRpcError as exc:
                if address is None and exc.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNAVAILABLE):
                    continue
                raise domain_error(exc, "simulator") from exc

    async def close(self) -> None:
        """Stop the health probes and close every channel."""
        probes = list(self._out.values())
        for task in probes:
            task.cancel()
        for task in probes:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for channel in self.channels:
            await channel.close()
