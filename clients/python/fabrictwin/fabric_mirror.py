"""Keep the twin in sync with a live fabric: counters every interval, link states, and the cabling.

`FabricMirror(client, config)` runs what `fabrictwin mirror --config mirror.toml` runs:

1. `start()`: the fabric exists (else it is imported from the LLDP tables, with the port speeds
   the first scrape reports) and so does the LIVE telemetry source bound to it.
2. `poll()`, every `interval_s`: every target is scraped at once (`fabrictwin.scrape`); each
   scrape is parsed (`fabrictwin.importers.prometheus`: the protobuf exposition where the exporter
   serves it, else the text), its interfaces named as the fabric's
   ports (`leaf0`'s `swp3` is `leaf0/p3` when the fabric's link says so), as it arrives; the
   poll's readings go in on one IngestSamples stream, in waves of targets while the rest are still
   scraped (`fabrictwin.poll_waves`); a port whose operational state went down (or up again) sets its
   link DOWN (UP) with SetLinkState, so WatchFabric subscribers and later simulations see it.
3. `refresh_cabling()`, every `lldp.interval_s`: the LLDP tables are read again. A known link
   whose neighbour vanished is set DOWN (and UP when it is heard again). Links that appear, or
   ports cabled to someone else, are a new cabling: it is imported as a new fabric version
   `FABRIC-vN` (labels `fabrictwin.io/mirror-of`, `fabrictwin.io/cabling-version`) with its own
   source `SOURCE-vN`, and the mirror goes on with those. The old fabric and source stay as they
   were, so runs and samples keep pointing at the cabling they had.
4. With a `[health]` table, after a poll (every `health.interval_s`): the links' states from the
   source's last `health.window_s` of error and LinkDowned counters (`fabrictwin.link_health`),
   all changes in one SetLinkStates. A link the mirror holds DOWN because a port is operationally
   down is left to that rule.
5. With a `[diagnosis]` table, after a poll (every `diagnosis.interval_s`): the orchestrator's
   Diagnose over the last `diagnosis.window_s` of the source, on `diagnosis.ports`, with the ECMP
   pinning rule's thresholds the table gives (the rule `scenario diagnose` and `telemetry skew`
   apply): ECMP pinning and lossy links (drops, receive errors, and what the ports' queues
   discarded) as findings in the poll's report. The client needs the orchestrator's address.

Each step returns a report (what was scraped, stored, changed, and what failed) for the caller to
print; nothing here prints.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import threading
import time
from collections.abc import Callable, Iterable

from fabrictwin import poll_waves
from fabrictwin.client import Client
from fabrictwin.errors import AlreadyExistsError, FabricTwinError, InvalidArgumentError, NotFoundError
from fabrictwin.importers import (
    FormatError,
    prometheus,
)
from fabrictwin.ingest_feed import IngestFeed
from fabrictwin.link_health import apply_verdicts, assess
from fabrictwin.lldp import (
    LldpError,
    cable_name,
    collect_documents,
    interface_ports,
    read_cabling,
    read_documents,
)
from fabrictwin.mirror_config import MirrorConfig
from fabrictwin.names import resource_name
from fabrictwin.poll_waves import PollWaves, collector_paused, new_pool
from fabrictwin.scrape import Scraper
from fabrictwin.v1 import scenario_pb2, topology_pb2

__all__ = ["CablingReport", "FabricMirror", "LinkChange", "MirrorFinding", "PollReport"]

MIRROR_OF = "fabrictwin.io/mirror-of"
CABLING_VERSION = "fabrictwin.io/cabling-version"


@dataclasses.dataclass(frozen=True)
class LinkChange:
    """A link state the mirror set, and why."""

    link: str
    state: str  # UP, DOWN or DEGRADED
    reason: str


@dataclasses.dataclass(frozen=True)
class MirrorFinding:
    """One thing the diagnosis found in the mirrored counters (`scenario_pb2.Finding`, in words)."""

    kind: str  # ECMP_PINNING, LOSSY_LINK
    severity: str  # INFO, WARNING, CRITICAL
    ports: list[str]
    evidence: str
    suggestion: str


@dataclasses.dataclass
class PollReport:
    """One poll of every target."""

    poll: int
    time_ns: int
    fabric: str
    targets: int
    scraped: int = 0
    failed: dict[str, str] = dataclasses.field(default_factory=dict)  # node -> why
    skipped: list[str] = dataclasses.field(default_factory=list)  # nodes backing off
    ports: int = 0
    stored: int = 0
    duplicates: int = 0
    rejected: int = 0
    reasons: list[str] = dataclasses.field(default_factory=list)
    link_changes: list[LinkChange] = dataclasses.field(default_factory=list)
    health_changes: list[LinkChange] = dataclasses.field(default_factory=list)  # from [health]
    health_error: str = ""  # the assessment failed this time (it is tried again next time)
    findings: list[MirrorFinding] | None = None  # from [diagnosis]; None: not diagnosed this poll
    diagnosis_error: str = ""  # the diagnosis failed this time (it is tried again next time)
    seconds: float = 0.0
    scrape_seconds: float = 0.0  # every target fetched (they run at once)
    parse_seconds: float = 0.0
    ingest_seconds: float = 0.0  # the IngestSamples call, until the service said what it stored


@dataclasses.dataclass
class CablingReport:
    """One reading of the LLDP tables."""

    time_ns: int
    fabric: str
    source: str
    changed: bool = False
    added: list[str] = dataclasses.field(default_factory=list)  # `a:if <-> b:if`
    removed: list[str] = dataclasses.field(default_factory=list)
    failed: dict[str, str] = dataclasses.field(default_factory=dict)  # node -> why its table is missing
    error: str = ""
    link_changes: list[LinkChange] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)


def _short(name: str) -> str:
    return name.rsplit("/", 1)[-1]


class _FabricPorts:
    """The fabric's links as the mirror needs them: interface -> twin port, port -> link."""

    def __init__(self, links: Iterable[topology_pb2.Link]) -> None:
        links = list(links)
        # node -> ifname -> `node/pN`: as `fabrictwin telemetry import` names them (fabrictwin.port_names)
        self.interfaces: dict[str, dict[str, str]] = interface_ports(links)
        self.link_of: dict[str, int] = {}  # `node/pN` -> link index
        self.names: dict[int, str] = {}
        self.state: dict[int, int] = {}
        self.cables: dict[str, int] = {}  # `a:if <-> b:if` -> link index
        for link in links:
            a, b = _short(link.node_a), _short(link.node_b)
            for node, port in ((a, link.port_a), (b, link.port_b)):
                self.link_of[f"{node}/p{port}"] = link.index
            self.names[link.index] = link.display_name
            self.state[link.index] = link.state
            if link.port_name_a and link.port_name_b:
                self.cables[cable_name(a, link.port_name_a, b, link.port_name_b)] = link.index

    def interfaces_of(self, node: str) -> dict[str, str]:
        return self.interfaces.get(node, {})


class FabricMirror:
    """A live fabric mirrored into the twin (module docstring)."""

    def __init__(self, client: Client, config: MirrorConfig) -> None:
        self.client = client
        self.config = config
        self.fabric = config.fabric
        self.source = config.source
        self.polls = 0
        self._scraper = Scraper(config.target_timeout_s, config.max_workers, config.max_scrape_bytes)
        self._ports: _FabricPorts | None = None
        self._set_by_mirror: dict[int, str] = {}  # link -> what the mirror set it to (DOWN) and why
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None  # parses text scrapes
        self._next: dict[str, float] = {}  # step ("health", "diagnosis") -> its next monotonic time

    # -- the fabric and the source --------------------------------------------------------------

    def start(self) -> list[str]:
        """Make sure the fabric (the newest cabling version) and the source exist; what was done."""
        done: list[str] = []
        self.fabric = self._newest_version(self.config.fabric)
        try:
            self.client.fabrics.get(self.fabric)
        except NotFoundError:
            if self.config.lldp is None:
                raise InvalidArgumentError(
                    f"fabric: fabrics/{self.fabric} does not exist, and no [lldp] table says how to find it"
                ) from None
            fabric = self._import_cabling(self.fabric, {})
            done.append(f"imported fabrics/{self.fabric} from LLDP: {fabric.switch_count} switches, "
                        f"{fabric.host_count} hosts, {fabric.link_count} links")  # fmt: skip
            done += [f"note: {note}" for note in fabric.import_notes]
        else:
            done.append(f"mirroring fabrics/{self.fabric}")
        self.source = self._source_for(self.fabric)
        if self._ensure_source(self.source, self.fabric):
            done.append(f"created source sources/{self.source}")
        self._load_ports()
        return done

    def _newest_version(self, base: str) -> str:
        newest, version = base, 1
        for fabric in self.client.fabrics.list():
            labels = fabric.labels
            number = labels.get(CABLING_VERSION, "")
            if labels.get(MIRROR_OF) == base and number.isdigit() and int(number) > version:
                newest, version = _short(fabric.name), int(number)
        return newest

    def _version_of(self, fabric: str) -> int:
        labels = self.client.fabrics.get(fabric).labels
        return int(labels.get(CABLING_VERSION, "1") or 1)

    def _source_for(self, fabric: str) -> str:
        if fabric == self.config.fabric:
            return self.config.source
        return f"{self.config.source}-v{self._version_of(fabric)}"

    def _ensure_source(self, source: str, fabric: str) -> bool:
        try:
            existing = self.client.telemetry.get_source(source)
        except NotFoundError:
            try:
                self.client.telemetry.create_source(source, kind="live", fabric=fabric)
            except AlreadyExistsError:
                return False
            return True
        if existing.fabric and _short(existing.fabric) != fabric:
            raise InvalidArgumentError(
                f"source: sources/{source} belongs to {existing.fabric}, not fabrics/{fabric}"
            )
        return False

    def _load_ports(self) -> None:
        self._ports = _FabricPorts(self.client.fabrics.links(self.fabric))
        self._set_by_mirror = {}

    # -- LLDP -----------------------------------------------------------------------------------

    def _lldp_documents(self) -> tuple[list[tuple[str, str]], dict[str, str]]:
        lldp = self.config.lldp
        assert lldp is not None
        if lldp.directory:
            documents = read_documents(lldp.directory)
            if isinstance(documents, bytes):
                raise InvalidArgumentError(f"lldp.directory: {lldp.directory} is not a directory")
            return documents, {}
        commands = {node: lldp.command.replace("{node}", node) for node in lldp.nodes}
        return collect_documents(commands, timeout_s=lldp.timeout_s)

    def _speeds(self) -> dict[str, float]:
        """`node/ifname` -> Gb/s, from one scrape of every target (or the targets' speed_gbps)."""
        speeds: dict[str, float] = {}
        for result in self._scraper.scrape(self.config.targets):
            target = result.target
            if result.error:
                continue
            try:
                readings = prometheus.parse_scrape(
                    result.body, result.content_type, result.time_ns, where=target.node, node=target.node,
                    device_port_name="{node}/{device}",
                )  # fmt: skip
            except FormatError:
                continue
            for reading in readings:
                gbps = target.speed_gbps or reading.rate_bps / 1e9
                if gbps > 0:
                    speeds[reading.port] = gbps
        return speeds

    def _import_cabling(
        self, fabric_id: str, labels: dict[str, str], documents: list[tuple[str, str]] | None = None
    ) -> topology_pb2.Fabric:
        lldp = self.config.lldp
        assert lldp is not None
        if documents is None:
            documents, failed = self._lldp_documents()
            if failed:
                node, why = next(iter(failed.items()))
                raise InvalidArgumentError(f"lldp: no neighbour table from {node}: {why}")
        fabric = self.client.fabrics.import_lldp(
            documents,
            fabric_id=fabric_id,
            routing_engine=lldp.routing,
            default_link_speed_gbps=lldp.default_speed_gbps,
            default_link_latency_ns=lldp.default_latency_ns,
            port_speeds_gbps=self._speeds(),
        )
        if labels:
            fabric = self.client.fabrics.update(fabric_id, labels=labels)
        return fabric

    def refresh_cabling(self) -> CablingReport:
        """Read the LLDP tables again: vanished neighbours -> DOWN, new cabling -> a new version."""
        report = CablingReport(time.time_ns(), self.fabric, self.source)
        if self.config.lldp is None:
            return report
        assert self._ports is not None
        try:
            documents, report.failed = self._lldp_documents()
        except FabricTwinError as exc:
            report.error = str(exc)
            return report
        try:
            cabling = read_cabling(documents)
        except LldpError as exc:
            report.error = f"cannot read the LLDP tables: {exc.details}"
            return report
        heard_from, seen = set(cabling.nodes), cabling.cable_names()
        known = set(self._ports.cables)
        # Only cables between nodes whose tables were read can be judged.
        judged = {
            cable for cable in known if all(end.split(":")[0] in heard_from for end in cable.split(" <-> "))
        }
        report.removed = sorted(judged - seen)
        report.added = sorted(seen - known)
        if report.added:  # a cable that moved shows as one removed and one added
            report.changed = True
            try:
                self._new_version(documents, report)
            except FabricTwinError as exc:
                report.error = f"cannot store the new cabling: {exc}"
            return report
        for cable in report.removed:
            report.link_changes += self._set_state(
                self._ports.cables[cable], "DOWN", "LLDP neighbour vanished"
            )
        for cable in judged & seen:
            link = self._ports.cables[cable]
            if self._set_by_mirror.get(link) == "LLDP neighbour vanished":
                report.link_changes += self._set_state(link, "UP", "LLDP neighbour heard again")
        return report

    def _new_version(self, documents: list[tuple[str, str]], report: CablingReport) -> None:
        base = self.config.fabric
        version = self._version_of(self.fabric) + 1
        fabric_id = f"{base}-v{version}"
        fabric = self._import_cabling(
            fabric_id, {MIRROR_OF: base, CABLING_VERSION: str(version)}, documents=documents
        )
        report.notes += list(fabric.import_notes)
        self.fabric = fabric_id
        self.source = f"{self.config.source}-v{version}"
        self._ensure_source(self.source, self.fabric)
        self._load_ports()
        report.fabric, report.source = self.fabric, self.source

    # -- counters and link states ---------------------------------------------------------------

    def poll(self) -> PollReport:
        """Scrape every target, ingest what they report, and follow their ports' states.

        The scrapes are parsed as they arrive and stored in waves (`fabrictwin.poll_waves`) on one
        IngestSamples stream, so the phases overlap: `scrape_seconds` runs until the last answer,
        `parse_seconds` from then until the last scrape is parsed, `ingest_seconds` from then until
        the service has said what it stored."""
        with collector_paused():
            return self._poll()

    def _poll(self) -> PollReport:
        started = time.monotonic()
        self.polls += 1
        targets = self.config.targets
        report = PollReport(self.polls, time.time_ns(), self.fabric, len(targets))
        assert self._ports is not None
        ports = self._ports
        large = self.config.parse_workers > 1 and len(targets) >= poll_waves.PARALLEL_FROM
        if large and self._pool is None:
            self._pool = new_pool(self.config.parse_workers)  # its processes start with the first text
        waves = PollWaves(
            len(targets),
            lambda target: None if target.port_name else ports.interfaces_of(target.node),
            self._pool,
        )
        feed = IngestFeed(self.client, resource_name("sources", self.source))
        try:
            for position, scraped, parsed in self._scraper.scrape_each(targets, waves.parse):
                waves.arrived(position, scraped, parsed)
                for chunks in waves.ready():
                    feed.put(chunks)
            report.scrape_seconds = time.monotonic() - started
            for chunks in waves.ready(wait=True):
                feed.put(chunks)
            report.parse_seconds = time.monotonic() - started - report.scrape_seconds
            reply = feed.close()
        finally:
            feed.abandon()
        if reply is not None:
            report.stored, report.duplicates, report.rejected = reply.stored, reply.duplicates, reply.rejected
            report.reasons = [reason.reason for reason in reply.reasons]
        report.ingest_seconds = time.monotonic() - started - report.scrape_seconds - report.parse_seconds
        states: dict[str, tuple[int, bool]] = {}
        named: set[str] = set()
        for result, parsed in zip(waves.results, waves.parsed, strict=True):  # in target order
            assert result is not None
            if result.skipped:
                report.skipped.append(result.target.node)
            elif result.error:
                report.failed[result.target.node] = result.error
            elif isinstance(parsed, str):
                report.failed[result.target.node] = f"cannot parse: {parsed}"
                self._scraper.failed(result.target)
            elif parsed is not None:
                for port, (at, up) in parsed.states.items():  # as over all the readings
                    held = states.get(port)
                    if held is None or at >= held[0]:
                        states[port] = (at, up)
                named.update(parsed.ports)
                report.scraped += 1
        report.ports = len(named)
        report.link_changes = self._follow_states({port: up for port, (_, up) in states.items()})
        if self._due("health"):
            try:
                report.health_changes = self.assess_health()
            except FabricTwinError as exc:
                report.health_error = str(exc)
        if self._due("diagnosis"):
            try:
                report.findings = self.diagnose()
            except FabricTwinError as exc:
                report.diagnosis_error = str(exc)
        report.seconds = time.monotonic() - started
        return report

    def _due(self, step: str) -> bool:
        """Whether the optional `step` ("health", "diagnosis") is configured and its interval has
        passed since it last ran; if so, its next time is set."""
        table = getattr(self.config, step)
        if table is None or time.monotonic() < self._next.get(step, 0.0):
            return False
        self._next[step] = time.monotonic() + table.interval_s
        return True

    def diagnose(self) -> list[MirrorFinding]:
        """What the last `diagnosis.window_s` of the source shows (module docstring, step 5)."""
        diagnosis = self.config.diagnosis
        assert diagnosis is not None
        now = time.time_ns()
        found = self.client.scenarios.diagnose(
            self.source,
            ports=list(diagnosis.ports),
            start_ns=now - int(diagnosis.window_s * 1e9),
            end_ns=now,
            max_over_mean=diagnosis.max_over_mean,
            spread=diagnosis.spread,
            hot_above=diagnosis.hot_above,
            idle_below=diagnosis.idle_below,
        )
        return [
            MirrorFinding(
                scenario_pb2.FindingKind.Name(f.kind).removeprefix("FINDING_KIND_"),
                scenario_pb2.Severity.Name(f.severity).removeprefix("SEVERITY_"),
                list(f.ports),
                f.evidence,
                f.suggestion,
            )
            for f in found.findings
        ]

    def assess_health(self) -> list[LinkChange]:
        """Set the links' states the recent error counters call for (see the module docstring)."""
        health = self.config.health
        assert health is not None and self._ports is not None
        ports = self.client.telemetry.port_health(self.source, window_ns=int(health.window_s * 1e9))
        links = self.client.fabrics.links(self.fabric, page_size=10_000)
        held = {link for link, why in self._set_by_mirror.items() if why.endswith("operationally down")}
        verdicts = [
            v
            for v in assess(links, ports.ports, ber_threshold=health.ber_threshold)
            if v.changed and v.index not in held
        ]
        apply_verdicts(self.client, self.fabric, verdicts)
        for v in verdicts:
            self._ports.state[v.index] = topology_pb2.LinkState.Value(f"LINK_STATE_{v.state}")
        return [LinkChange(v.name, v.state, v.reason) for v in verdicts]

    def _follow_states(self, states: dict[str, bool]) -> list[LinkChange]:
        assert self._ports is not None
        down: dict[int, list[str]] = {}
        up: set[int] = set()
        for port, is_up in states.items():
            link = self._ports.link_of.get(port)
            if link is None:
                continue
            if is_up:
                up.add(link)
            else:
                down.setdefault(link, []).append(port)
        changes: list[LinkChange] = []
        for link, ports in sorted(down.items()):
            changes += self._set_state(link, "DOWN", f"{', '.join(sorted(ports))} operationally down")
        for link, why in sorted(self._set_by_mirror.items()):  # the links it set down, now up
            if link in up and link not in down and why.endswith("operationally down"):
                changes += self._set_state(link, "UP", "operationally up again")
        return changes

    def _set_state(self, link: int, state: str, why: str) -> list[LinkChange]:
        assert self._ports is not None
        value = topology_pb2.LinkState.Value(f"LINK_STATE_{state}")
        if self._ports.state.get(link) == value:
            return []
        self.client.fabrics.set_link_state(self.fabric, link, state.lower())
        self._ports.state[link] = value
        if state == "DOWN":
            self._set_by_mirror[link] = why
        else:
            self._set_by_mirror.pop(link, None)
        return [LinkChange(self._ports.names[link], state, why)]

    # -- the loop -------------------------------------------------------------------------------

    def run(
        self,
        stop: threading.Event,
        on_report: Callable[[PollReport | CablingReport], None],
        *,
        polls: int | None = None,
    ) -> None:
        """Poll every interval (and re-read LLDP on its interval) until `stop` is set or `polls` done."""
        next_poll = time.monotonic()
        lldp = self.config.lldp
        next_lldp = time.monotonic() + lldp.interval_s if lldp is not None else float("inf")
        done = 0
        while not stop.is_set() and (polls is None or done < polls):
            now = time.monotonic()
            if lldp is not None and now >= next_lldp:
                on_report(self.refresh_cabling())
                next_lldp = time.monotonic() + lldp.interval_s
            if now >= next_poll:
                on_report(self.poll())
                done += 1
                next_poll += self.config.interval_s
                while next_poll < time.monotonic():  # a slow poll skips ticks rather than piling up
                    next_poll += self.config.interval_s
            stop.wait(max(0.0, min(next_poll, next_lldp) - time.monotonic()))

    def close(self) -> None:
        self._scraper.close()
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None
