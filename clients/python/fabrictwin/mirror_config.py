"""The mirror's configuration file (`fabrictwin mirror --config mirror.toml`), read and checked.

```toml
fabric = "pod1"              # the fabric in the twin; imported from LLDP on first start if missing
source = "pod1-live"         # telemetry source of the counters (created LIVE on the fabric if missing)
interval_s = 10              # one poll of every target per interval
timeout_s = 5                # per target (default: the interval, at most 10 s)
# max_workers = 64           # scrapes in flight at once
# parse_workers = 8          # processes parsing text scrapes (default: the CPUs, at most 8)
# max_scrape_bytes = 16777216  # a target answering (or a command printing) more fails, read no further

[lldp]                       # where the cabling comes from; re-read every `interval_s`
interval_s = 300
nodes = ["spine0", "leaf0", "gpu-node-0"]          # every node, hosts included
command = "ssh {node} 'lldpcli -f json show chassis; lldpcli -f json show neighbors'"
# directory = "/var/lib/lldp"                     # or: NODE.json files another job keeps fresh
default_speed_gbps = 400     # links whose speed no target reports
routing = "minhop"

[[targets]]                  # one table per kind of target; `nodes` expands {node}
nodes = ["spine0", "leaf0"]
url = "http://{node}:9100/metrics"                 # or: command = "..." (its stdout is the scrape)
format = "prometheus"        # node_exporter (netdev, ethtool, infiniband) or snmp_exporter if_mib
# speed_gbps = 100           # the port speed, where the exporter reports none or the wrong one
# port_name = "{node}/{device}"  # for fabrics that keep no interface names

[diagnosis]                  # optional: findings from the stored counters, as `scenario diagnose`
window_s = 60                # how far back each diagnosis reads
interval_s = 60              # how often (default: every poll)
ports = ["group:uplinks"]    # the ports judged together (names, globs, fabric groups)
# max_over_mean = 1.5        # the ECMP pinning rule's thresholds (those of `telemetry skew` and
# spread = 0.3               # `scenario diagnose`): pinned when max/mean and max - min reach these,
# hot_above = 0.8            # or some ports run hot while others idle
# idle_below = 0.2

[health]                     # optional: link states from the error counters (fabrictwin.link_health)
window_s = 900               # how far back each assessment reads
ber_threshold = 1e-12        # DEGRADED above this estimated bit error rate
interval_s = 60              # how often (default: every poll)
```

A mistake is an `InvalidArgumentError` naming the key (`targets[2].url: ...`). Unknown keys are
mistakes too, so a typo never silently falls back to a default. A file larger than 8 MiB, or nesting
arrays and tables more than 32 deep, is refused naming the file before it is parsed.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import tomllib
from collections.abc import Mapping
from typing import Any

from fabrictwin.errors import InvalidArgumentError

__all__ = [
    "DEFAULT_MAX_SCRAPE_BYTES",
    "MAX_CONFIG_CHARS",
    "MAX_CONFIG_DEPTH",
    "DiagnosisConfig",
    "LldpConfig",
    "MirrorConfig",
    "TargetConfig",
    "load_mirror_config",
    "parse_mirror_config",
]

FORMATS = ("prometheus",)
# One scrape: node_exporter on a 64-port switch sends ~200 kB of text (less as protobuf), a host with
# every collector and the ethtool statistics of 8 NICs a few MB.
DEFAULT_MAX_SCRAPE_BYTES = 16 * 1024 * 1024
_SCRAPE_BYTES_RANGE = (1024, 1024**3)
# A mirror.toml of 10,000 targets listed one by one is ~1 MB and nests 3 deep ([[targets]], nodes).
# tomllib recurses once per level: far deeper input ends in RecursionError, so it is refused first.
MAX_CONFIG_CHARS = 8 * 1024 * 1024
MAX_CONFIG_DEPTH = 32
_TOP = {"fabric", "source", "interval_s", "timeout_s", "max_workers", "parse_workers", "max_scrape_bytes",
        "lldp", "targets", "health", "diagnosis"}  # fmt: skip
_DIAGNOSIS = {"window_s", "interval_s", "ports", "max_over_mean", "spread", "hot_above", "idle_below"}
_HEALTH = {"window_s", "ber_threshold", "interval_s"}
_LLDP = {"interval_s", "nodes", "command", "directory", "default_speed_gbps", "default_latency_ns", "routing",
         "timeout_s"}  # fmt: skip
_TARGET = {"node", "nodes", "url", "command", "format", "speed_gbps", "port_name"}


@dataclasses.dataclass(frozen=True)
class TargetConfig:
    """One scrape target: a node's metrics by URL or command."""

    node: str
    url: str = ""
    command: str = ""
    format: str = "prometheus"
    speed_gbps: float = 0.0  # 0: as the exporter reports
    port_name: str = ""  # template over {node} and {device}; "" = the fabric's interface names

    @property
    def where(self) -> str:
        return self.url or self.command


@dataclasses.dataclass(frozen=True)
class LldpConfig:
    """Where the neighbour tables come from, and how often they are read again."""

    interval_s: float = 300.0
    nodes: tuple[str, ...] = ()
    command: str = ""
    directory: str = ""
    default_speed_gbps: float = 400.0
    default_latency_ns: int = 500
    routing: str = "minhop"
    timeout_s: float = 30.0


@dataclasses.dataclass(frozen=True)
class HealthConfig:
    """Link health from the counters the mirror stores: how far back, the threshold, how often."""

    window_s: float = 900.0
    ber_threshold: float = 1e-12
    interval_s: float = 0.0  # 0: after every poll


@dataclasses.dataclass(frozen=True)
class DiagnosisConfig:
    """Findings from the counters the mirror stores (the orchestrator's Diagnose): how far back, how
    often, which ports, and the ECMP pinning rule's thresholds (0: the rule's default)."""

    window_s: float = 60.0
    interval_s: float = 0.0  # 0: after every poll
    ports: tuple[str, ...] = ("group:uplinks",)
    max_over_mean: float = 0.0
    spread: float = 0.0
    hot_above: float = 0.0
    idle_below: float = 0.0


@dataclasses.dataclass(frozen=True)
class MirrorConfig:
    """The whole file."""

    fabric: str
    source: str
    interval_s: float = 10.0
    timeout_s: float = 0.0  # 0: min(interval_s, 10)
    max_workers: int = 64  # scrapes in flight at once
    parse_workers: int = 1  # processes that parse text scrapes (from 64 targets on; protobuf is read here)
    max_scrape_bytes: int = DEFAULT_MAX_SCRAPE_BYTES  # a target's answer (a command's output) at most
    targets: tuple[TargetConfig, ...] = ()
    lldp: LldpConfig | None = None
    health: HealthConfig | None = None
    diagnosis: DiagnosisConfig | None = None

    @property
    def target_timeout_s(self) -> float:
        return self.timeout_s or min(self.interval_s, 10.0)


def _unknown(table: Mapping[str, Any], known: set[str], where: str) -> None:
    for key in table:
        if key not in known:
            prefix = f"{where}." if where else ""
            raise InvalidArgumentError(
                f"{prefix}{key}: unknown key; expected one of {', '.join(sorted(known))}"
            )


def _text(table: Mapping[str, Any], key: str, where: str, default: str = "") -> str:
    value = table.get(key, default)
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{where}{key}: must be a string, got {type(value).__name__}")
    return value


def _positive(table: Mapping[str, Any], key: str, where: str, default: float, *, zero: bool = False) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgumentError(f"{where}{key}: must be a number, got {str(value)[:200]!r}")
    if isinstance(value, int) and abs(value) > 10**15:  # beyond any float's exact range: refuse first
        raise InvalidArgumentError(f"{where}{key}: {str(value)[:50]}... is out of range")
    if not math.isfinite(value):
        raise InvalidArgumentError(f"{where}{key}: must be a finite number, got {value!r}")
    if value < 0 or (value == 0 and not zero):
        raise InvalidArgumentError(f"{where}{key}: must be {'>= 0' if zero else '> 0'}, got {value}")
    if value > 86_400 and key.endswith("_s"):
        raise InvalidArgumentError(f"{where}{key}: at most one day (86400 s), got {value}")
    return float(value)


def _nodes(table: Mapping[str, Any], where: str) -> tuple[str, ...]:
    nodes = table.get("nodes", [])
    if not isinstance(nodes, list) or not all(isinstance(n, str) and n for n in nodes):
        raise InvalidArgumentError(f"{where}nodes: must be a list of node names")
    return tuple(nodes)


def _targets(value: Any) -> tuple[TargetConfig, ...]:
    if not isinstance(value, list):
        raise InvalidArgumentError("targets: must be an array of tables ([[targets]])")
    targets: list[TargetConfig] = []
    seen: dict[str, str] = {}
    for i, table in enumerate(value):
        where = f"targets[{i}]."
        if not isinstance(table, dict):
            raise InvalidArgumentError(f"targets[{i}]: must be a table")
        _unknown(table, _TARGET, f"targets[{i}]")
        url, command = _text(table, "url", where), _text(table, "command", where)
        if bool(url) == bool(command):
            raise InvalidArgumentError(f"targets[{i}]: give a url or a command (one of them)")
        if url and not url.startswith(("http://", "https://")):
            raise InvalidArgumentError(f"{where}url: must start with http:// or https://, got {url[:200]!r}")
        format = _text(table, "format", where, "prometheus")
        if format not in FORMATS:
            raise InvalidArgumentError(f"{where}format: {format!r} is not one of {', '.join(FORMATS)}")
        if "node" in table and "nodes" in table:
            raise InvalidArgumentError(f"targets[{i}]: give node or nodes, not both")
        nodes = (_text(table, "node", where),) if "node" in table else _nodes(table, where)
        if not nodes or not all(nodes):
            raise InvalidArgumentError(f"targets[{i}]: name the node(s) it reports (node = or nodes = [...])")
        if len(nodes) > 1 and "{node}" not in url + command:
            raise InvalidArgumentError(f"targets[{i}]: several nodes share one target; use {{node}} in it")
        speed = _positive(table, "speed_gbps", where, 0.0, zero=True)
        port_name = _text(table, "port_name", where)
        for node in nodes:
            if node in seen:
                raise InvalidArgumentError(f"targets[{i}]: node {node!r} is already scraped by {seen[node]}")
            seen[node] = f"targets[{i}]"
            targets.append(TargetConfig(node, url.replace("{node}", node), command.replace("{node}", node),
                                        format, speed, port_name))  # fmt: skip
    return tuple(targets)


def _health(value: Any) -> HealthConfig:
    if not isinstance(value, dict):
        raise InvalidArgumentError("health: must be a table ([health])")
    _unknown(value, _HEALTH, "health")
    threshold = value.get("ber_threshold", 1e-12)
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 < threshold < 1:
        raise InvalidArgumentError(f"health.ber_threshold: must be in (0, 1), got {str(threshold)[:50]!r}")
    return HealthConfig(
        window_s=_positive(value, "window_s", "health.", 900.0),
        ber_threshold=float(threshold),
        interval_s=_positive(value, "interval_s", "health.", 0.0, zero=True),
    )


def _diagnosis(value: Any) -> DiagnosisConfig:
    if not isinstance(value, dict):
        raise InvalidArgumentError("diagnosis: must be a table ([diagnosis])")
    _unknown(value, _DIAGNOSIS, "diagnosis")
    where = "diagnosis."
    ports = value.get("ports", ["group:uplinks"])
    if not isinstance(ports, list) or not ports or not all(isinstance(p, str) and p for p in ports):
        raise InvalidArgumentError("diagnosis.ports: must be a list of port names, globs or groups")
    fractions = {}
    for key in ("spread", "hot_above", "idle_below"):
        fractions[key] = _positive(value, key, where, 0.0, zero=True)
        if fractions[key] > 1:
            raise InvalidArgumentError(f"{where}{key}: a utilisation in [0, 1], got {fractions[key]}")
    ratio = _positive(value, "max_over_mean", where, 0.0, zero=True)
    if 0 < ratio < 1:
        raise InvalidArgumentError(f"{where}max_over_mean: at least 1 (max over mean), got {ratio}")
    return DiagnosisConfig(
        window_s=_positive(value, "window_s", where, 60.0),
        interval_s=_positive(value, "interval_s", where, 0.0, zero=True),
        ports=tuple(ports),
        max_over_mean=ratio,
        **fractions,
    )


def _lldp(value: Any) -> LldpConfig:
    if not isinstance(value, dict):
        raise InvalidArgumentError("lldp: must be a table ([lldp])")
    _unknown(value, _LLDP, "lldp")
    where = "lldp."
    command, directory = _text(value, "command", where), _text(value, "directory", where)
    if bool(command) == bool(directory):
        raise InvalidArgumentError("lldp: give a command (run per node, with {node}) or a directory")
    nodes = _nodes(value, where)
    if command and not nodes:
        raise InvalidArgumentError("lldp.nodes: a command needs the list of nodes to run it on")
    if command and "{node}" not in command:
        raise InvalidArgumentError("lldp.command: must contain {node}")
    routing = _text(value, "routing", where, "minhop")
    latency = value.get("default_latency_ns", 500)
    if isinstance(latency, bool) or not isinstance(latency, int) or not 0 <= latency <= 10**12:
        raise InvalidArgumentError(f"lldp.default_latency_ns: must be whole ns in [0, 1e12], got {latency!r}")
    return LldpConfig(
        interval_s=_positive(value, "interval_s", where, 300.0),
        nodes=nodes,
        command=command,
        directory=directory,
        default_speed_gbps=_positive(value, "default_speed_gbps", where, 400.0),
        default_latency_ns=latency,
        routing=routing,
        timeout_s=_positive(value, "timeout_s", where, 30.0),
    )


# Strings and comments (whose brackets do not nest), or one bracket. Only a bound: TOML's corners
# (an escaped quote at the end of a multi-line string) may miscount, and tomllib has the last word.
_TOML_TOKEN = re.compile(
    r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*|[\[\]{}]'
)


def _check_bounds(text: str, where: str) -> None:
    """Refuse text tomllib cannot be trusted with: too large, or nested too deep for its recursion."""
    if len(text) > MAX_CONFIG_CHARS:
        raise InvalidArgumentError(
            f"{where}: {len(text)} characters; a mirror configuration has at most {MAX_CONFIG_CHARS}"
        )
    depth = 0
    for token in _TOML_TOKEN.finditer(text):
        bracket = token.group()
        if bracket in ("[", "{"):
            depth += 1
            if depth > MAX_CONFIG_DEPTH:
                line = text.count("\n", 0, token.start()) + 1
                raise InvalidArgumentError(
                    f"{where}: line {line}: arrays and tables nested more than {MAX_CONFIG_DEPTH} deep"
                )
        elif bracket in ("]", "}"):
            depth = max(0, depth - 1)


def parse_mirror_config(text: str, where: str = "<mirror config>") -> MirrorConfig:
    """The configuration in `text` (TOML); InvalidArgumentError names the key or line that is wrong."""
    _check_bounds(text, where)
    try:
        table = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, ValueError) as exc:  # ValueError: an integer of 4,300+ digits
        raise InvalidArgumentError(f"{where}: not TOML: {str(exc)[:200]}") from None
    except RecursionError:  # the bound above counts brackets only roughly
        raise InvalidArgumentError(f"{where}: arrays and tables nested too deep") from None
    _unknown(table, _TOP, "")
    fabric, source = _text(table, "fabric", ""), _text(table, "source", "")
    if not fabric:
        raise InvalidArgumentError("fabric: name the fabric the mirror keeps in sync")
    if not source:
        raise InvalidArgumentError("source: name the telemetry source the counters go to")
    workers = table.get("max_workers", 64)
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 1024:
        raise InvalidArgumentError(f"max_workers: must be a whole number in [1, 1024], got {workers!r}")
    parse_workers = table.get("parse_workers", min(os.cpu_count() or 1, 8))
    if isinstance(parse_workers, bool) or not isinstance(parse_workers, int) or not 1 <= parse_workers <= 64:
        raise InvalidArgumentError(f"parse_workers: must be a whole number in [1, 64], got {parse_workers!r}")
    max_bytes = table.get("max_scrape_bytes", DEFAULT_MAX_SCRAPE_BYTES)
    low, high = _SCRAPE_BYTES_RANGE
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or not low <= max_bytes <= high:
        got = str(max_bytes)[:50]
        raise InvalidArgumentError(
            f"max_scrape_bytes: must be a whole number of bytes in [{low}, {high}], got {got!r}"
        )
    config = MirrorConfig(
        fabric=fabric,
        parse_workers=parse_workers,
        max_scrape_bytes=max_bytes,
        source=source,
        interval_s=_positive(table, "interval_s", "", 10.0),
        timeout_s=_positive(table, "timeout_s", "", 0.0, zero=True),
        max_workers=workers,
        targets=_targets(table.get("targets", [])),
        lldp=_lldp(table["lldp"]) if "lldp" in table else None,
        health=_health(table["health"]) if "health" in table else None,
        diagnosis=_diagnosis(table["diagnosis"]) if "diagnosis" in table else None,
    )
    if not config.targets and config.lldp is None:
        raise InvalidArgumentError("targets: give at least one target, or an [lldp] table, or both")
    return config


def load_mirror_config(path: str) -> MirrorConfig:
    """The configuration in the file at `path`."""
    try:
        with open(path, encoding="utf-8") as stream:
            text = stream.read(MAX_CONFIG_CHARS + 1)  # bounded: /dev/zero is a file too
    except OSError as exc:
        raise InvalidArgumentError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise InvalidArgumentError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    return parse_mirror_config(text, path)
