"""Errors the SDK raises: one class per gRPC status code a FabricTwin caller can meet.

Every `grpc.RpcError` from a FabricTwin call is turned into a `FabricTwinError` subclass carrying the
status `code` (its name, e.g. "NOT_FOUND"), the server's `details` and, where known, which service
and address the call went to, so that a script can `except NotFoundError` and print a clean line.

>>> err = error_from_status("NOT_FOUND", "fabrics/x: no such fabric", service="topology")
>>> isinstance(err, NotFoundError), str(err)
(True, 'topology: fabrics/x: no such fabric (NOT_FOUND)')
"""

from __future__ import annotations

import grpc

__all__ = [
    "AlreadyExistsError",
    "CancelledError",
    "DeadlineExceededError",
    "FabricTwinError",
    "FailedPreconditionError",
    "InternalError",
    "InvalidArgumentError",
    "NotFoundError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "UnauthenticatedError",
    "UnavailableError",
    "UnimplementedError",
    "error_from_rpc",
    "error_from_status",
]


class FabricTwinError(Exception):
    """Base of every error the SDK raises; `code` is a gRPC status code name."""

    code: str = "UNKNOWN"

    def __init__(
        self, details: str, *, code: str | None = None, service: str = "", address: str = ""
    ) -> None:
        self.details = details
        if code is not None:
            self.code = code
        self.service = service
        self.address = address
        super().__init__(str(self))

    def __str__(self) -> str:
        prefix = f"{self.service}: " if self.service else ""
        return f"{prefix}{self.details} ({self.code})"


class InvalidArgumentError(FabricTwinError, ValueError):
    """The request was malformed; the details name the field, line or link."""

    code = "INVALID_ARGUMENT"


class NotFoundError(FabricTwinError, LookupError):
    """A named resource does not exist."""

    code = "NOT_FOUND"


class AlreadyExistsError(FabricTwinError):
    """A resource with that name exists already."""

    code = "ALREADY_EXISTS"


class FailedPreconditionError(FabricTwinError):
    """The resource is not in a state that allows the call (for example an unfinished run)."""

    code = "FAILED_PRECONDITION"


class ResourceExhaustedError(FabricTwinError):
    """The server is overloaded or the request exceeds a configured limit."""

    code = "RESOURCE_EXHAUSTED"


class UnavailableError(FabricTwinError, ConnectionError):
    """The service could not be reached (not started, wrong address, network)."""

    code = "UNAVAILABLE"


class DeadlineExceededError(FabricTwinError, TimeoutError):
    """The call, or a wait for a long-running job, took longer than its timeout."""

    code = "DEADLINE_EXCEEDED"


class UnauthenticatedError(FabricTwinError):
    """No bearer token, or the wrong one (`authorization: Bearer <token>`)."""

    code = "UNAUTHENTICATED"


class PermissionDeniedError(FabricTwinError):
    """The caller is authenticated but not allowed to do this."""

    code = "PERMISSION_DENIED"


class UnimplementedError(FabricTwinError, NotImplementedError):
    """The server does not implement this method (yet)."""

    code = "UNIMPLEMENTED"


class CancelledError(FabricTwinError):
    """The call was cancelled."""

    code = "CANCELLED"


class InternalError(FabricTwinError):
    """The server failed; its log holds the incident named in the details."""

    code = "INTERNAL"


_BY_CODE: dict[str, type[FabricTwinError]] = {
    cls.code: cls
    for cls in (
        InvalidArgumentError,
        NotFoundError,
        AlreadyExistsError,
        FailedPreconditionError,
        ResourceExhaustedError,
        UnavailableError,
        DeadlineExceededError,
        UnauthenticatedError,
        PermissionDeniedError,
        UnimplementedError,
        CancelledError,
        InternalError,
    )
}


def error_from_status(code: str, details: str, *, service: str = "", address: str = "") -> FabricTwinError:
    """The FabricTwinError subclass for a status code name (unknown codes give the base class)."""
    cls = _BY_CODE.get(code, FabricTwinError)
    if cls is FabricTwinError:
        return FabricTwinError(details, code=code, service=service, address=address)
    return cls(details, service=service, address=address)


def error_from_rpc(exc: grpc.RpcError, *, service: str = "", address: str = "") -> FabricTwinError:
    """Translate a grpc.RpcError (a grpc.Call) into a FabricTwinError with a readable message."""
    status = exc.code() if hasattr(exc, "code") else None
    code = status.name if isinstance(status, grpc.StatusCode) else "UNKNOWN"
    details = (exc.details() if hasattr(exc, "details") else None) or str(exc)
    if code == "UNAVAILABLE" and address:
        # gRPC's own text ("failed to connect to all addresses; last error: ...") does not say which
        # service the caller meant; say it first so that a script's one-line error is actionable.
        details = f"cannot reach {address}: {details}"
    return error_from_status(code, details, service=service, address=address)
