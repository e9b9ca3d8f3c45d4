"""The simulator's calls to other FabricTwin services: topology snapshots in, telemetry series out.

- `SnapshotSource` fetches `StreamFabricSnapshot` from the topology service and caches snapshots by
  (fabric, routing_version); a cheap `GetFabric` tells whether the cached routing is current.
  `what_if` fetches the routes with some links DOWN as the topology service recomputes them (the
  stored fabric unchanged) with the measured reroute time, cached by (fabric, routing_version, links).
- `prepare_telemetry_source` checks, when a simulation is accepted, the SIMULATED source its series
  will go to, and creates it (with `simulation` set) if nobody has; `export_series` writes a run's
  per-channel series into it: columns METRIC_TX_BYTES and METRIC_UTILISATION, plus
  METRIC_QUEUE_DEPTH_BYTES (mean per interval) and METRIC_DROPS at PACKET fidelity, and with faults,
  PFC or DCQCN also METRIC_RCV_ERRORS, METRIC_XMIT_DISCARDS, METRIC_ECN_MARKED, METRIC_PAUSE_RX and
  METRIC_PAUSE_DURATION_NS (all COUNTER_KIND_DELTA), one port per channel named like
  `leaf-0->spine-1`, sample times from the start of the simulation.

Peers' errors become domain errors naming what the caller sent (`spec.fabric`).
"""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator, Callable

import grpc
import numpy as np
from fabrictwin.v1 import telemetry_pb2, telemetry_pb2_grpc, topology_pb2, topology_pb2_grpc

from services.common.arrays import to_numeric_array
from services.common.errors import FailedPrecondition, InvalidArgument
from services.common.peers import PeerAuth, auth_metadata, domain_error, peer_channel
from services.common.snapshot import FabricSnapshot
from services.simulator.fabric_state import SnapshotView
from services.simulator.series import ChannelSeries

__all__ = ["SnapshotSource", "export_series", "prepare_telemetry_source"]

ROWS_PER_BATCH = 50_000


CURRENT = SnapshotView()  # the fabric's current routes, nothing changed

_SnapshotKey = tuple[str, int, tuple[int, ...], tuple[int, ...], str]


class SnapshotSource:
    """Snapshots from the topology service, cached by (fabric, routing_version, down, up, engine)."""

    def __init__(self, address: str, auth_token: PeerAuth | str = "", cache_size: int = 8) -> None:
        self._address = address
        self._auth = auth_token
        self._metadata = auth_metadata(auth_token)
        self._channel: grpc.aio.Channel | None = None
        self._cache: collections.OrderedDict[_SnapshotKey, FabricSnapshot] = collections.OrderedDict()
        self._cache_size = cache_size

    def _stub(self) -> topology_pb2_grpc.TopologyServiceAsyncStub:
        if self._channel is None:
            self._channel = peer_channel(self._address, self._auth)
        return topology_pb2_grpc.TopologyServiceStub(self._channel)

    async def get(self, fabric: str, view: SnapshotView = CURRENT) -> FabricSnapshot:
        """The snapshot of `fabric` seen through `view` (default: its current routes); NotFound /
        InvalidArgument name `spec.fabric`, a routing version no longer held is FAILED_PRECONDITION."""
        return await self._fetch(fabric, (), "spec.fabric", view)

    async def what_if(
        self,
        fabric: str,
        down_links: tuple[int, ...],
        field: str = "spec.fabric",
        view: SnapshotView = CURRENT,
    ) -> tuple[FabricSnapshot, float]:
        """(snapshot, reroute seconds): the routes of `fabric` (seen through `view`) with links
        `down_links` (indices) DOWN, as the topology service's engine recomputes them incrementally,
        and the measured time of that recompute (0.0 without links). The stored fabric is not changed.
        Errors name `field` (the topology service's own message names `down_links[i]`)."""
        snapshot = await self._fetch(fabric, tuple(sorted(set(down_links))), field, view)
        return snapshot, snapshot.reroute_seconds

    async def _fetch(
        self, fabric: str, down: tuple[int, ...], field: str, view: SnapshotView
    ) -> FabricSnapshot:
        stub = self._stub()
        up = tuple(sorted(set(view.up_links)))
        try:
            version = view.routing_version
            if not version:
                current = await stub.GetFabric(
                    topology_pb2.GetFabricRequest(name=fabric), metadata=self._metadata
                )
                version = current.routing_version
            key = (fabric, version, down, up, view.routing_engine)
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
            # Streamed in chunks, so that a snapshot of any size arrives (a k=32 fat-tree is ~16 MB).
            request = topology_pb2.StreamFabricSnapshotRequest(
                name=fabric, down_links=down, routing_version=view.routing_version, up_links=up
            )
            if view.routing_engine:
                request.routing_engine = topology_pb2.RoutingEngine.Value(
                    "ROUTING_ENGINE_" + view.routing_engine.upper()
                )
            chunks = [part.data async for part in stub.StreamFabricSnapshot(request, metadata=self._metadata)]
        except grpc.aio.AioRpcError as exc:
            raise domain_error(exc, f"topology ({self._address})", field) from exc
        snapshot = FabricSnapshot.from_proto(topology_pb2.FabricSnapshot.FromString(b"".join(chunks)))
        self._cache[(fabric, snapshot.routing_version, down, up, view.routing_engine)] = snapshot
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return snapshot

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None


def _batches(
    source: str, series: ChannelSeries, names: list[str], on_progress: Callable[[float], object] | None = None
) -> AsyncIterator[telemetry_pb2.IngestSamplesRequest]:
    bins = series.bytes.shape[1]
    per_batch = max(1, ROWS_PER_BATCH // max(1, bins))
    times = series.start_ns + np.arange(bins, dtype=np.int64) * series.interval_ns

    async def generate() -> AsyncIterator[telemetry_pb2.IngestSamplesRequest]:
        for first in range(0, len(names), per_batch):
            last = min(first + per_batch, len(names))
            count = last - first
            delta = telemetry_pb2.COUNTER_KIND_DELTA
            columns = [
                (telemetry_pb2.METRIC_TX_BYTES, series.bytes),
                (telemetry_pb2.METRIC_UTILISATION, series.utilisation),
                (telemetry_pb2.METRIC_QUEUE_DEPTH_BYTES, series.mean_queue_bytes),  # PACKET only
                (telemetry_pb2.METRIC_DROPS, series.drops),  # PACKET only
                # PACKET only, with faults, PFC or DCQCN:
                (telemetry_pb2.METRIC_RCV_ERRORS, series.counters.get("rcv_errors")),
                (telemetry_pb2.METRIC_XMIT_DISCARDS, series.counters.get("xmit_discards")),
                (telemetry_pb2.METRIC_ECN_MARKED, series.counters.get("ecn_marked_packets")),
                (telemetry_pb2.METRIC_PAUSE_RX, series.counters.get("pause_frames")),
                (telemetry_pb2.METRIC_PAUSE_DURATION_NS, series.counters.get("pause_ns")),
            ]
            yield telemetry_pb2.IngestSamplesRequest(
                batch=telemetry_pb2.SampleBatch(
                    source=source,
                    ports=names[first:last],
                    port_index=to_numeric_array(np.repeat(np.arange(count, dtype=np.int32), bins)),
                    time_ns=to_numeric_array(np.tile(times, count)),
                    columns=[
                        telemetry_pb2.SampleColumn(
                            metric=metric,
                            counter_kind=delta,
                            values=to_numeric_array(values[first:last].astype(np.float64).ravel()),
                        )
                        for metric, values in columns
                        if values is not None
                    ],
                )
            )
            if on_progress is not None:  # the batch was taken: the stream wants the next
                on_progress(last / len(names))

    return generate()


async def export_series(
    address: str,
    source_id: str,
    series: ChannelSeries,
    names: list[str],
    auth_token: PeerAuth | str = "",
    on_progress: Callable[[float], object] | None = None,
) -> int:
    """Ingest the series into `sources/{source_id}` (made ready by `prepare_telemetry_source` when the
    simulation was accepted); returns rows stored. `on_progress(fraction)`: after each batch sent,
    the fraction of the channels sent so far."""
    metadata = auth_metadata(auth_token)
    async with peer_channel(address, auth_token) as channel:
        stub = telemetry_pb2_grpc.TelemetryServiceStub(channel)
        try:
            reply = await stub.IngestSamples(
                _batches(f"sources/{source_id}", series, names, on_progress), metadata=metadata
            )
        except grpc.aio.AioRpcError as exc:
            raise domain_error(exc, f"telemetry ({address})", "spec.telemetry_source") from exc
    if reply.rejected:
        reason = reply.reasons[0].reason if reply.reasons else "no reason given"
        raise FailedPrecondition(f"telemetry rejected {reply.rejected} of the series rows: {reason}")
    return int(reply.stored + reply.duplicates)


TELEMETRY_CHECK_SECONDS = 5.0


async def prepare_telemetry_source(
    address: str, source_id: str, fabric: str, simulation: str, auth_token: PeerAuth | str = ""
) -> None:
    """Before a simulation is accepted: the telemetry service answers, and `source_id` is a SIMULATED
    source not bound to another fabric, or does not exist yet and is created here, for `simulation`.

    A run of the orchestrator creates its simulations' sources itself (with `simulation` set) before
    starting them, so this creates only the source of a simulation started on its own; it never
    writes into a source someone else created meanwhile (ALREADY_EXISTS is an error, not a reuse).
    Errors name `spec.telemetry_source`; a telemetry service that does not answer within
    TELEMETRY_CHECK_SECONDS is Unavailable."""
    field = "spec.telemetry_source"
    metadata = auth_metadata(auth_token)
    async with peer_channel(address, auth_token) as channel:
        stub = telemetry_pb2_grpc.TelemetryServiceStub(channel)
        try:
            source = await stub.GetSource(
                telemetry_pb2.GetSourceRequest(name=f"sources/{source_id}"),
                metadata=metadata,
                timeout=TELEMETRY_CHECK_SECONDS,
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.NOT_FOUND:
                raise domain_error(exc, f"telemetry ({address})", field) from exc
            created = telemetry_pb2.Source(
                kind=telemetry_pb2.SOURCE_KIND_SIMULATED,
                display_name=simulation,
                fabric=fabric,
                simulation=simulation,
            )
            try:
                await stub.CreateSource(
                    telemetry_pb2.CreateSourceRequest(source_id=source_id, source=created),
                    metadata=metadata,
                    timeout=TELEMETRY_CHECK_SECONDS,
                )
            except grpc.aio.AioRpcError as create_exc:
                raise domain_error(create_exc, f"telemetry ({address})", field) from create_exc
            return
    if source.kind == telemetry_pb2.SOURCE_KIND_LIVE:
        raise InvalidArgument(
            field,
            f"sources/{source_id} holds a live cluster's counters; a run's series go to a SIMULATED source",
        )
    if source.fabric and source.fabric != fabric:
        raise InvalidArgument(
            field, f"sources/{source_id} is bound to {source.fabric}, and this simulation runs on {fabric}"
        )
