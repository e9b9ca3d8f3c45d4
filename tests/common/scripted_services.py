"""Test doubles of two FabricTwin services whose behaviour is scripted by the request, for bootstrap tests.

The bootstrap is the thing under test, so these servicers hold no domain logic: the resource name in
the request says what to do. `fabrics/<script>` (GetFabric, WatchFabric) and `sources/<script>`
(IngestSamples, per batch) understand:

- `ok`, or any name not below: succeed (GetFabric echoes the name; WatchFabric streams two events).
- `slow-<ms>`: sleep that long first, then succeed.
- `big-<bytes>`: succeed with a display_name of that many bytes (to exceed the send limit).
- `invalid`: raise InvalidArgument("spec.fat_tree.k", "must be even").
- `missing`: raise NotFound.
- `divide`: raise ZeroDivisionError (an unexpected bug).
- `secret`: raise ValueError carrying a "secret" the caller must never see.
- `huge-<chars>`: raise InvalidArgument quoting a line of that many characters (an error echoing input).
- `hugebug-<chars>`: raise ValueError with a message of that many characters (a bug echoing input).

WatchFabric yields its first event before applying the script, so failures happen mid-stream.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from fabrictwin.v1 import telemetry_pb2, telemetry_pb2_grpc, topology_pb2, topology_pb2_grpc

from services.common.errors import InvalidArgument, NotFound
from services.common.server import ServiceDefinition

__all__ = [
    "SECRET",
    "ScriptedTelemetry",
    "ScriptedTopology",
    "scripted_definitions",
]

SECRET = "password=hunter2 at /srv/fabrictwin/core.py"


async def _act(name: str) -> str:
    """Carry out the script in `name` (`fabrics/<script>`); returns the display name to answer with."""
    script = name.rpartition("/")[2]
    if script.startswith("slow-"):
        await asyncio.sleep(int(script[5:]) / 1000)
    elif script.startswith("big-"):
        return "x" * int(script[4:])
    elif script.startswith("huge-"):
        raise InvalidArgument("line 3", f"expected a port line, got {'é' * int(script[5:])!r}")
    elif script.startswith("hugebug-"):
        raise ValueError("y" * int(script[8:]))
    elif script == "invalid":
        raise InvalidArgument("spec.fat_tree.k", "must be even")
    elif script == "missing":
        raise NotFound(f"{name} does not exist")
    elif script == "divide":
        return str(1 / 0)
    elif script == "secret":
        raise ValueError(SECRET)
    return script


class ScriptedTopology(topology_pb2_grpc.TopologyServiceServicer):
    """GetFabric and WatchFabric as the name says; every other method is the generated UNIMPLEMENTED."""

    async def GetFabric(self, request: topology_pb2.GetFabricRequest, context: object) -> topology_pb2.Fabric:
        display_name = await _act(request.name)
        return topology_pb2.Fabric(name=request.name, display_name=display_name)

    async def WatchFabric(
        self, request: topology_pb2.WatchFabricRequest, context: object
    ) -> AsyncIterator[topology_pb2.FabricEvent]:
        yield topology_pb2.FabricEvent(fabric=request.name)
        await _act(request.name)
        yield topology_pb2.FabricEvent(fabric=request.name)


class ScriptedTelemetry(telemetry_pb2_grpc.TelemetryServiceServicer):
    """IngestSamples (client streaming) applies each batch's source script and counts the batches."""

    async def IngestSamples(
        self, request_iterator: AsyncIterator[telemetry_pb2.IngestSamplesRequest], context: object
    ) -> telemetry_pb2.IngestSamplesResponse:
        batches = 0
        async for request in request_iterator:
            await _act(request.batch.source)
            batches += 1
        return telemetry_pb2.IngestSamplesResponse(stored=batches)


def scripted_definitions() -> list[ServiceDefinition]:
    """Both doubles, ready to mount with `serving` or `run_service`."""
    return [
        ServiceDefinition(
            "fabrictwin.v1.TopologyService",
            ScriptedTopology(),
            topology_pb2_grpc.add_TopologyServiceServicer_to_server,
        ),
        ServiceDefinition(
            "fabrictwin.v1.TelemetryService",
            ScriptedTelemetry(),
            telemetry_pb2_grpc.add_TelemetryServiceServicer_to_server,
        ),
    ]
