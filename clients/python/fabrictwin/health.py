"""gRPC health checking (grpc.health.v1.Health/Check) without the grpcio-health-checking package.

The SDK keeps its dependencies to grpcio and protobuf. The health protocol's two messages are tiny:

    message HealthCheckRequest  { string service = 1; }
    message HealthCheckResponse { ServingStatus status = 1; }   // 0 UNKNOWN, 1 SERVING,
                                                                 // 2 NOT_SERVING, 3 SERVICE_UNKNOWN
so this module writes and reads their protobuf wire format by hand (a length-delimited field 1 in the
request, a varint field 1 in the response) and calls the method through the channel's generic
`unary_unary` with identity serializers.

>>> encode_health_request("fabrictwin.v1.TopologyService")[:2].hex()
'0a1d'
>>> decode_health_response(bytes([0x08, 0x01]))
'SERVING'
"""

from __future__ import annotations

import grpc

from fabrictwin.connection import Connection
from fabrictwin.errors import FabricTwinError

__all__ = [
    "HEALTH_CHECK_METHOD",
    "SERVING_STATUS",
    "check_health",
    "decode_health_response",
    "encode_health_request",
]

HEALTH_CHECK_METHOD = "/grpc.health.v1.Health/Check"

# grpc.health.v1.HealthCheckResponse.ServingStatus
SERVING_STATUS = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint in health response")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def encode_health_request(service: str) -> bytes:
    """Wire bytes of HealthCheckRequest(service=service); "" asks about the whole server."""
    if not service:
        return b""  # proto3 does not write a field holding its default value
    raw = service.encode()
    return b"\x0a" + _varint(len(raw)) + raw  # field 1, wire type 2 (length-delimited)


def decode_health_response(data: bytes) -> str:
    """The status name (`SERVING`, ...) in HealthCheckResponse wire bytes; unknown fields are skipped."""
    status = 0
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        field, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, pos = _read_varint(data, pos)
            if field == 1:
                status = value
        elif wire_type == 1:
            pos += 8
        elif wire_type == 2:
            length, pos = _read_varint(data, pos)
            pos += length
        elif wire_type == 5:
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire_type} in health response")
    if pos > len(data):
        raise ValueError("truncated field in health response")
    return SERVING_STATUS.get(status, f"STATUS_{status}")


def check_health(connection: Connection, service: str, timeout: float = 5.0) -> str:
    """SERVING, NOT_SERVING, SERVICE_UNKNOWN or UNAVAILABLE (cannot connect) for `service` there.

    Any other failure raises the call's FabricTwinError.
    """
    check: grpc.UnaryUnaryMultiCallable[bytes, bytes] = connection.channel.unary_unary(
        HEALTH_CHECK_METHOD, request_serializer=None, response_deserializer=None
    )
    try:
        reply = check(encode_health_request(service), timeout=timeout, metadata=connection.metadata)
    except grpc.RpcError as exc:
        code = exc.code() if hasattr(exc, "code") else None
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            return "UNAVAILABLE"
        if code == grpc.StatusCode.NOT_FOUND:  # the health servicer does not know this service name
            return "SERVICE_UNKNOWN"
        raise connection.error(exc) from None
    try:
        return decode_health_response(reply)
    except ValueError as exc:
        raise FabricTwinError(str(exc), code="INTERNAL", service=connection.service) from None
