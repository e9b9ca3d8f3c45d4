"""One blocking gRPC channel to one FabricTwin service, and the four ways the SDK calls through it.

A `Connection` owns the channel (plain, TLS or mutual TLS), adds `authorization: Bearer <token>`
metadata to every call, applies the default deadline to unary calls, and turns every
`grpc.RpcError` into a `fabrictwin.errors.FabricTwinError` naming the service and its address.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import grpc

from fabrictwin.errors import CancelledError, FabricTwinError, InvalidArgumentError, error_from_rpc

__all__ = ["DEFAULT_TIMEOUT", "MAX_MESSAGE_BYTES", "Connection", "TlsFiles"]

# The servers accept 64 MiB messages by default; a large fabric's snapshot can exceed gRPC's 4 MiB.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024

T = TypeVar("T")

# Passed as `timeout` to mean "the connection's default deadline" (None already means "no deadline").
DEFAULT_TIMEOUT = -1.0


class TlsFiles:
    """PEM contents for TLS (root certificates) or mutual TLS (plus the client's key and chain)."""

    def __init__(
        self,
        root_certificates: bytes | None = None,
        private_key: bytes | None = None,
        certificate_chain: bytes | None = None,
    ) -> None:
        if (private_key is None) != (certificate_chain is None):
            raise InvalidArgumentError("mutual TLS needs both private_key and certificate_chain")
        self.root_certificates = root_certificates
        self.private_key = private_key
        self.certificate_chain = certificate_chain

    @property
    def enabled(self) -> bool:
        """True when any TLS material was given (the channel is then a secure channel)."""
        return any(v is not None for v in (self.root_certificates, self.private_key, self.certificate_chain))


class _GuardedIterator:
    """Iterates `items`; an exception from them ends the stream and is kept for the caller.

    gRPC pulls a request iterator in its own thread and, when it raises, logs a traceback and reports
    only "Exception iterating requests!". Instead the guard records the exception, cancels the call
    (`on_error`) and stops, so that `Connection.client_stream` can raise the original exception.
    """

    def __init__(self, items: Iterable[Any]) -> None:
        self._items = iter(items)
        self.error: Exception | None = None
        self.on_error: Callable[[], Any] | None = None

    def __iter__(self) -> _GuardedIterator:
        return self

    def __next__(self) -> Any:
        if self.error is not None:
            raise StopIteration
        try:
            return next(self._items)
        except StopIteration:
            raise
        except Exception as exc:
            self.error = exc
            if self.on_error is not None:
                self.on_error()
            raise StopIteration from None


class Connection:
    """A channel to one service (`service` is "topology", "simulator", ...) at `address`."""

    def __init__(
        self,
        service: str,
        address: str,
        *,
        token: str | None = None,
        tls: TlsFiles | None = None,
        timeout: float | None = 30.0,
    ) -> None:
        self.service = service
        self.address = address
        self.timeout = timeout
        self.metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
        options = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ]
        if tls is not None and tls.enabled:
            credentials = grpc.ssl_channel_credentials(
                tls.root_certificates, tls.private_key, tls.certificate_chain
            )
            self.channel = grpc.secure_channel(address, credentials, options=options)
        else:
            self.channel = grpc.insecure_channel(address, options=options)

    def close(self) -> None:
        """Close the channel; calls in flight are cancelled."""
        self.channel.close()

    def error(self, exc: grpc.RpcError) -> FabricTwinError:
        """The FabricTwinError for a failed call on this connection."""
        return error_from_rpc(exc, service=self.service, address=self.address)

    def unary(self, method: Callable[..., T], request: Any, *, timeout: float | None = DEFAULT_TIMEOUT) -> T:
        """Call a unary method; DEFAULT_TIMEOUT means the connection's default, None no deadline."""
        try:
            return method(
                request,
                timeout=self.timeout if timeout == DEFAULT_TIMEOUT else timeout,
                metadata=self.metadata,
            )
        except grpc.RpcError as exc:
            raise self.error(exc) from None

    def client_stream(
        self, method: grpc.StreamUnaryMultiCallable[Any, T], requests: Iterable[Any], *, timeout: float | None
    ) -> T:
        """Call a client-streaming method with an iterable of requests.

        An exception raised by `requests` itself reaches the caller unchanged (gRPC iterates it in
        its own thread and would otherwise report only an anonymous CANCELLED).
        """
        guarded = _GuardedIterator(requests)
        future = method.future(guarded, timeout=timeout, metadata=self.metadata)
        guarded.on_error = future.cancel
        if guarded.error is not None:  # raised before on_error was set
            future.cancel()
        try:
            response = future.result()
        except grpc.FutureCancelledError:
            if guarded.error is not None:
                raise guarded.error from None
            raise CancelledError(
                "the call was cancelled", service=self.service, address=self.address
            ) from None
        except grpc.RpcError as exc:
            if guarded.error is not None:
                raise guarded.error from None
            raise self.error(exc) from None
        except BaseException:  # Ctrl-C while waiting: do not leave the stream open
            future.cancel()
            raise
        if guarded.error is not None:  # the server answered the half-closed stream before the cancel
            raise guarded.error
        return response

    def server_stream(
        self, method: Callable[..., Any], request: Any, *, timeout: float | None
    ) -> Iterator[Any]:
        """Iterate a server-streaming method; leaving the loop early cancels the call on the server."""
        call = method(request, timeout=timeout, metadata=self.metadata)
        try:
            yield from call
        except grpc.RpcError as exc:
            raise self.error(exc) from None
        finally:
            # A generator closed by `break` (or garbage-collected) must not leave the stream open.
            call.cancel()

    def pages(self, method: Callable[..., Any], request: Any, items: str) -> Iterator[Any]:
        """Iterate every item of a paged List method (AIP-158), fetching pages as they are needed.

        `request` is mutated: its `page_token` advances from page to page; `items` is the name of the
        repeated field of the response (`fabrics`, `links`, ...).
        """
        while True:
            response = self.unary(method, request)
            yield from getattr(response, items)
            if not response.next_page_token:
                return
            request.page_token = response.next_page_token
