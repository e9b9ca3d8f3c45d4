"""`Client`: one object for scripts, holding a blocking channel to each of the four services.

>>> from fabrictwin import Client
>>> with Client.from_env() as client:  # doctest: +SKIP
...     fabric = client.fabrics.create_fat_tree(8, fabric_id="ft8")
...     print(client.health())

Every call sends `authorization: Bearer <token>` when a token is set, uses the client's `timeout`
as the deadline of unary calls, and raises `fabrictwin.errors.FabricTwinError` subclasses on failure.
The token is best kept in a file (`token_file=`, FABRICTWIN_TOKEN_FILE): a token on a command line is
visible to every user of the machine in the process list.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from types import TracebackType

from fabrictwin.connection import Connection, TlsFiles
from fabrictwin.errors import InvalidArgumentError
from fabrictwin.fabrics import FabricsApi
from fabrictwin.health import check_health
from fabrictwin.scenarios import ScenariosApi
from fabrictwin.simulations import SimulationsApi
from fabrictwin.telemetry import TelemetryApi

__all__ = ["DEFAULT_ADDRESSES", "SERVICE_NAMES", "Addresses", "Client", "read_token_file"]

DEFAULT_ADDRESSES = {
    "topology": "127.0.0.1:50051",
    "simulator": "127.0.0.1:50052",
    "telemetry": "127.0.0.1:50053",
    "orchestrator": "127.0.0.1:50054",
}

# The gRPC service each FabricTwin server hosts, as its health servicer knows it.
SERVICE_NAMES = {
    "topology": "fabrictwin.v1.TopologyService",
    "simulator": "fabrictwin.v1.SimulationService",
    "telemetry": "fabrictwin.v1.TelemetryService",
    "orchestrator": "fabrictwin.v1.ScenarioService",
}


def read_token_file(path: str, source: str = "token_file") -> str:
    """The bearer token in the file at `path`: one line, surrounding whitespace dropped.

    InvalidArgumentError names `source` (the parameter or variable that named the file) and the path.
    """
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise InvalidArgumentError(f"{source}={path}: cannot read the token ({reason})") from None
    if not token:
        raise InvalidArgumentError(f"{source}={path}: the file is empty")
    if any(c.isspace() for c in token) or not token.isprintable():
        # A token travels as an HTTP/2 header value: one line of printable characters.
        raise InvalidArgumentError(f"{source}={path}: expected the token alone, on one line")
    return token


_ENV = {
    "topology": "FABRICTWIN_TOPOLOGY_ADDRESS",
    "simulator": "FABRICTWIN_SIMULATOR_ADDRESS",
    "telemetry": "FABRICTWIN_TELEMETRY_ADDRESS",
    "orchestrator": "FABRICTWIN_ORCHESTRATOR_ADDRESS",
}


@dataclasses.dataclass(frozen=True)
class Addresses:
    """Where the four services listen, plus the bearer token, as read from the environment."""

    topology: str = DEFAULT_ADDRESSES["topology"]
    simulator: str = DEFAULT_ADDRESSES["simulator"]
    telemetry: str = DEFAULT_ADDRESSES["telemetry"]
    orchestrator: str = DEFAULT_ADDRESSES["orchestrator"]
    token: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Addresses:
        """FABRICTWIN_{TOPOLOGY,SIMULATOR,TELEMETRY,ORCHESTRATOR}_ADDRESS, and the token from
        FABRICTWIN_TOKEN_FILE (a file holding it) or FABRICTWIN_TOKEN (not both).

        FABRICTWIN_SIMULATOR_ADDRESS may list several replicas separated by commas (as the
        orchestrator's configuration does); the SDK talks to the first.
        """
        env = os.environ if env is None else env
        values = {
            service: env.get(variable, "").strip() or DEFAULT_ADDRESSES[service]
            for service, variable in _ENV.items()
        }
        values["simulator"] = values["simulator"].split(",")[0].strip() or DEFAULT_ADDRESSES["simulator"]
        token, token_file = env.get("FABRICTWIN_TOKEN") or None, env.get("FABRICTWIN_TOKEN_FILE") or None
        if token_file is not None:
            if token is not None:
                raise InvalidArgumentError("FABRICTWIN_TOKEN_FILE and FABRICTWIN_TOKEN are both set: set one")
            token = read_token_file(token_file, "FABRICTWIN_TOKEN_FILE")
        return cls(**values, token=token)


class Client:
    """A synchronous FabricTwin client: `fabrics`, `simulations`, `telemetry`, `scenarios`, `health()`.

    Parameters
    ----------
    topology, simulator, telemetry, orchestrator:
        `host:port` of each service.
    token, token_file:
        Bearer token sent on every call (servers started with `--auth-token-file`), or the file
        holding it; not both.
    root_certificates, private_key, certificate_chain:
        PEM bytes for TLS (root certificates) or mutual TLS (all three); plain text when none is given.
    timeout:
        Deadline of each unary call in seconds (None: no deadline). Streams and waits take their own.
    """

    def __init__(
        self,
        topology: str = DEFAULT_ADDRESSES["topology"],
        simulator: str = DEFAULT_ADDRESSES["simulator"],
        telemetry: str = DEFAULT_ADDRESSES["telemetry"],
        orchestrator: str = DEFAULT_ADDRESSES["orchestrator"],
        *,
        token: str | None = None,
        token_file: str | None = None,
        root_certificates: bytes | None = None,
        private_key: bytes | None = None,
        certificate_chain: bytes | None = None,
        timeout: float | None = 30.0,
    ) -> None:
        if token_file is not None:
            if token is not None:
                raise InvalidArgumentError("give token or token_file, not both")
            token = read_token_file(token_file)
        tls = TlsFiles(root_certificates, private_key, certificate_chain)
        addresses = {
            "topology": topology,
            "simulator": simulator,
            "telemetry": telemetry,
            "orchestrator": orchestrator,
        }
        self.connections = {
            service: Connection(service, address, token=token, tls=tls, timeout=timeout)
            for service, address in addresses.items()
        }
        self.fabrics = FabricsApi(self.connections["topology"])
        self.simulations = SimulationsApi(self.connections["simulator"])
        self.telemetry = TelemetryApi(self.connections["telemetry"])
        self.scenarios = ScenariosApi(self.connections["orchestrator"])

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        root_certificates: bytes | None = None,
        private_key: bytes | None = None,
        certificate_chain: bytes | None = None,
        timeout: float | None = 30.0,
    ) -> Client:
        """A client for the addresses and token in the environment (see `Addresses.from_env`)."""
        found = Addresses.from_env(env)
        return cls(
            found.topology,
            found.simulator,
            found.telemetry,
            found.orchestrator,
            token=found.token,
            root_certificates=root_certificates,
            private_key=private_key,
            certificate_chain=certificate_chain,
            timeout=timeout,
        )

    def health(self, services: Iterable[str] | None = None, *, timeout: float = 5.0) -> dict[str, str]:
        """Each service's health: SERVING, NOT_SERVING, SERVICE_UNKNOWN or UNAVAILABLE (unreachable).

        `services` limits the check to some of "topology", "simulator", "telemetry", "orchestrator".
        Uses the standard grpc.health.v1 protocol (see fabrictwin.health); needs no token.

        >>> Client().health()  # doctest: +SKIP
        {'topology': 'SERVING', 'simulator': 'SERVING', 'telemetry': 'SERVING', 'orchestrator': 'UNAVAILABLE'}
        """
        wanted = list(self.connections) if services is None else list(services)
        unknown = [s for s in wanted if s not in self.connections]
        if unknown:
            raise InvalidArgumentError(
                f"services: {', '.join(unknown)} not one of {', '.join(self.connections)}"
            )
        return {s: check_health(self.connections[s], SERVICE_NAMES[s], timeout) for s in wanted}

    def addresses(self) -> dict[str, str]:
        """The address of each service this client talks to."""
        return {service: connection.address for service, connection in self.connections.items()}

    def close(self) -> None:
        """Close every channel."""
        for connection in self.connections.values():
            connection.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({', '.join(f'{k}={v!r}' for k, v in self.addresses().items())})"
