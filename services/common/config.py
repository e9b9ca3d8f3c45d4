"""Configuration of a service, from command-line flags and FABRICTWIN_* environment variables.

Precedence: flag > environment variable > default. Every flag `--some-thing` has the variable
`FABRICTWIN_SOME_THING`. One loader for all four services; a service adds its own flags through
`extra_flags`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["DEFAULT_PORTS", "ServiceConfig", "load_config"]

DEFAULT_PORTS = {"topology": 50051, "simulator": 50052, "telemetry": 50053, "orchestrator": 50054}


@dataclasses.dataclass(frozen=True)
class ServiceConfig:
    """Everything a FabricTwin server needs to start."""

    service: str
    host: str = "127.0.0.1"
    port: int = 0
    metrics_port: int = -1  # -1: no metrics HTTP endpoint; 0: any free port
    database_url: str = ""
    data_dir: str = ".fabrictwin"
    log_level: str = "INFO"
    log_format: str = "auto"  # auto (JSON unless stderr is a terminal), json, text
    grace_seconds: float = 5.0
    max_message_bytes: int = 64 * 1024 * 1024
    keepalive_time_ms: int = 30_000
    keepalive_timeout_ms: int = 10_000
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_ca: str = ""  # set: mutual TLS, clients must present a certificate signed by it
    auth_token: str = ""  # set: every RPC but health needs `authorization: Bearer <token>`
    workers: int = 1  # worker processes for CPU-heavy work
    topology_address: str = "127.0.0.1:50051"
    simulator_addresses: str = "127.0.0.1:50052"  # comma-separated; the orchestrator spreads jobs
    telemetry_address: str = "127.0.0.1:50053"
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def resolved_database_url(self) -> str:
        """The SQLAlchemy URL; SQLite under data_dir when none is configured."""
        if self.database_url:
            return self.database_url
        os.makedirs(self.data_dir, exist_ok=True)
        return f"sqlite:///{os.path.join(self.data_dir, self.service + '.db')}"


def _env_name(field: str) -> str:
    return "FABRICTWIN_" + field.upper()


def load_config(
    service: str,
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    extra_flags: Callable[[argparse.ArgumentParser], None] | None = None,
) -> ServiceConfig:
    """Parse flags and environment into a ServiceConfig.

    >>> load_config("topology", ["--port", "0"], env={}).port
    0
    """
    env = os.environ if env is None else env
    parser = argparse.ArgumentParser(prog=f"python -m services.{service}")
    defaults = ServiceConfig(service=service, port=DEFAULT_PORTS.get(service, 0))
    for field in dataclasses.fields(ServiceConfig):
        if field.name in ("service", "extra"):
            continue
        default = getattr(defaults, field.name)
        raw = env.get(_env_name(field.name))
        kind = type(default)
        if raw is not None:
            try:
                default = kind(raw)
            except ValueError as exc:
                raise SystemExit(f"{_env_name(field.name)}={raw!r}: expected {kind.__name__}") from exc
        parser.add_argument(
            "--" + field.name.replace("_", "-"),
            dest=field.name,
            type=kind,
            default=default,
            help=f"(env {_env_name(field.name)}, default {default!r})",
        )
    extra_names: list[str] = []
    if extra_flags is not None:
        before = {a.dest for a in parser._actions}
        extra_flags(parser)
        extra_names = [a.dest for a in parser._actions if a.dest not in before]
        for action in parser._actions:
            if action.dest in extra_names:
                raw = env.get(_env_name(action.dest))
                if raw is not None:
                    action.default = action.type(raw) if action.type else raw
    args = vars(parser.parse_args(list(argv) if argv is not None else None))
    extra = {name: args.pop(name) for name in extra_names}
    return ServiceConfig(service=service, extra=extra, **args)
