"""Configuration of a service, from command-line flags and FABRICTWIN_* environment variables.

Precedence: flag > environment variable > default. Every flag `--some-thing` has the variable
`FABRICTWIN_SOME_THING`. One loader for all four services; a service adds its own flags through
`extra_flags`.

Bearer tokens are secrets: `--auth-token-file` / `--read-only-token-file` name files the loader reads
(a mounted Kubernetes Secret), so a token never has to appear on a command line, where every user
of the machine can read it in the process list. The tokens are kept out of the config's repr.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fabrictwin.client import read_token_file
from fabrictwin.errors import InvalidArgumentError

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
    # On SIGTERM: report NOT_SERVING and keep answering (health Check included) this long before the
    # listener closes, so probers and load balancers see NOT_SERVING and move away first.
    drain_seconds: float = 0.0
    max_message_bytes: int = 64 * 1024 * 1024
    keepalive_time_ms: int = 30_000
    keepalive_timeout_ms: int = 10_000
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_ca: str = ""  # set: mutual TLS, clients must present a certificate signed by it
    # set: every RPC but health needs `authorization: Bearer <token>`; services send it to their peers
    auth_token: str = dataclasses.field(default="", repr=False)
    auth_token_file: str = ""  # the token from this file (what deployments should use)
    # set: a second token that may call only reads (Get*, List*, Watch*, ...; services/common/auth.py)
    read_only_token: str = dataclasses.field(default="", repr=False)
    read_only_token_file: str = ""
    # Calls to peers: TLS verified against this CA when set; the client certificate for mutual TLS is
    # --peer-tls-cert/--peer-tls-key, by default the service's own --tls-cert/--tls-key.
    peer_tls_ca: str = ""
    peer_tls_cert: str = ""
    peer_tls_key: str = ""
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


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")
_LOG_FORMATS = ("auto", "json", "text")
_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _from_env(action: argparse.Action, raw: str) -> Any:
    """Convert an environment value the way the flag would be converted; SystemExit names the variable."""
    name = _env_name(action.dest)
    if action.nargs == 0 and isinstance(action.const, bool):  # store_true / store_false
        if raw.strip().lower() not in _TRUE + _FALSE:
            raise SystemExit(f"{name}={raw!r}: expected one of {', '.join(_TRUE + _FALSE[:-1])}")
        return (raw.strip().lower() in _TRUE) == action.const
    convert = action.type
    if convert is None:
        return raw
    try:
        # argparse also takes the name of a registered type here; the services' flags never use one.
        if not callable(convert):
            raise TypeError(f"{convert!r} is not a callable type")
        return convert(raw)
    except (TypeError, ValueError, argparse.ArgumentTypeError) as exc:
        kind = getattr(action.type, "__name__", "a valid value")
        raise SystemExit(f"{name}={raw!r}: expected {kind}") from exc


def _check(config: ServiceConfig) -> None:
    """Reject values that parse but cannot work, naming the flag and its variable."""

    def fail(field: str, problem: str) -> None:
        flag = "--" + field.replace("_", "-")
        raise SystemExit(f"{flag} / {_env_name(field)}={getattr(config, field)!r}: {problem}")

    if config.log_format not in _LOG_FORMATS:
        fail("log_format", f"expected one of {', '.join(_LOG_FORMATS)}")
    if config.log_level.upper() not in _LOG_LEVELS:
        fail("log_level", f"expected one of {', '.join(_LOG_LEVELS)}")
    if not 0 <= config.port <= 65535:
        fail("port", "expected 0..65535 (0: any free port)")
    if not -1 <= config.metrics_port <= 65535:
        fail("metrics_port", "expected -1 (off), 0 (any free port) or a port up to 65535")
    if config.drain_seconds < 0:
        fail("drain_seconds", "must not be negative")
    for field in ("grace_seconds", "max_message_bytes", "keepalive_time_ms", "keepalive_timeout_ms"):
        if getattr(config, field) <= 0:
            fail(field, "must be positive")


def _read_token(config: ServiceConfig, field: str) -> str:
    """The token in the file named by `field` (the SDK's reader: one line, whitespace around dropped);
    SystemExit naming the flag and the variable when it cannot be used."""
    source = f"--{field.replace('_', '-')} / {_env_name(field)}"
    try:
        return read_token_file(getattr(config, field), source)
    except InvalidArgumentError as exc:
        raise SystemExit(exc.details) from None


def _with_tokens(config: ServiceConfig) -> ServiceConfig:
    """Read the token files; refuse settings that are ambiguous. Never echoes a token."""
    tokens = {}
    for field in ("auth_token", "read_only_token"):
        file_field = field + "_file"
        if not getattr(config, file_field):
            continue
        if getattr(config, field):
            raise SystemExit(
                f"--{file_field.replace('_', '-')} / {_env_name(file_field)} and "
                f"--{field.replace('_', '-')} / {_env_name(field)} are both set: set one, not both"
            )
        tokens[field] = _read_token(config, file_field)
    if tokens:
        config = dataclasses.replace(
            config,
            auth_token=tokens.get("auth_token", config.auth_token),
            read_only_token=tokens.get("read_only_token", config.read_only_token),
        )
    if config.read_only_token and not config.auth_token:
        raise SystemExit(
            "--read-only-token-file / FABRICTWIN_READ_ONLY_TOKEN_FILE needs a full token as well "
            "(--auth-token-file / FABRICTWIN_AUTH_TOKEN_FILE): the services call each other with it"
        )
    if config.read_only_token and config.read_only_token == config.auth_token:
        raise SystemExit(
            "--read-only-token-file / FABRICTWIN_READ_ONLY_TOKEN_FILE: the read-only token and the full "
            "token (--auth-token-file / FABRICTWIN_AUTH_TOKEN_FILE) must differ"
        )
    return config


def load_config(
    service: str,
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    extra_flags: Callable[[argparse.ArgumentParser], None] | None = None,
) -> ServiceConfig:
    """Parse flags and environment into a ServiceConfig; a bad value exits naming the flag or variable.

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
        action = parser.add_argument(
            "--" + field.name.replace("_", "-"),
            dest=field.name,
            type=type(default),
            default=default,
            help=f"(env {_env_name(field.name)}, default {default!r})",
        )
        raw = env.get(_env_name(field.name))
        if raw is not None:
            action.default = _from_env(action, raw)
    extra_names: list[str] = []
    if extra_flags is not None:
        before = {a.dest for a in parser._actions}
        extra_flags(parser)
        for action in parser._actions:
            if action.dest in before:
                continue
            extra_names.append(action.dest)
            raw = env.get(_env_name(action.dest))
            if raw is not None:
                action.default = _from_env(action, raw)
    args = vars(parser.parse_args(list(argv) if argv is not None else None))
    extra = {name: args.pop(name) for name in extra_names}
    config = _with_tokens(ServiceConfig(service=service, extra=extra, **args))
    _check(config)
    return config
