"""A real Ethernet leaf-spine fabric in Linux network namespaces: 2 spines, 2 leaves, 4 hosts; leaf0
routes each host port, leaf1 bridges them (br0), the two designs operators run.

    with LeafSpineLab(link_mbit=100) as lab:      # or: with build_lab() as lab:
        lab.lldp_neighbors_json("leaf0")           # lldpcli -f json show neighbors, as on a switch
        lab.scrape("leaf0")                        # node_exporter /metrics (netdev + netclass)
        lab.ip_route_get("leaf0", dst, src, "swp1", sport)   # the ECMP uplink the kernel picks
        lab.start_udp_flows([("h0", "h2", 49152, 40)], seconds=3); lab.wait_flows()

Each node is a namespace named `<prefix>-<node>` (prefix `ftl<pid%1000><n>`, unique per instance). Switches
route (kernel multipath over both spines, L4 hash), every veth end is shaped with tbf to `link_mbit`,
every node runs lldpd (system name = node name, port IDs = ifnames), every switch runs node_exporter on
127.0.0.1:9100 of its own namespace, every host runs a UDP sink on 4791. The plan (ports, addresses) is in
topology.py. Everything made is torn down on close(), on a failed build, and on an exception in `with`.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import pathlib
import re
import shlex
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterable, Sequence

from . import plumbing
from . import topology as topo
from .daemons import (
    Neighbor,
    lldpcli_argv,
    lldpd_argv,
    node_exporter_argv,
    node_exporter_binary,
    parse_neighbors,
    scrape_command,
    write_lldpd_files,
)
from .preflight import lab_unavailable_reason
from .shell import Daemon, LabError, live_process_groups, run, stop_daemons, wait_until
from .traffic import (
    Flow,
    FlowResult,
    as_flow,
    check_reachability,
    collect_results,
    sender_argv,
    sink_argv,
)

__all__ = [
    "Flow",
    "FlowResult",
    "LabError",
    "LeafSpineLab",
    "Neighbor",
    "build_lab",
    "lab_unavailable_reason",
]

_instance_numbers = itertools.count()


def _unique_prefix() -> str:
    """`ftl<pid%1000><n>` not used by any existing namespace."""
    existing = run(["ip", "netns", "list"]).split()
    base = f"ftl{os.getpid() % 1000:03d}"
    for n in _instance_numbers:
        prefix = f"{base}{n}"
        if not any(name.startswith(f"{prefix}-") for name in existing):
            return prefix
    raise AssertionError("unreachable")


def _temp_base() -> str | None:
    """Where the lab's temp dir goes: not under /run, which each lldpd covers with its own tmpfs."""
    return "/tmp" if tempfile.gettempdir().startswith("/run") else None


def build_lab(link_mbit: float = 100.0, **options) -> LeafSpineLab:
    """Build a lab and return it (use as `with build_lab() as lab:` or call .close())."""
    return LeafSpineLab(link_mbit, **options).build()


class LeafSpineLab:
    """The 2-spine, 2-leaf, 4-host fabric; a context manager that builds on enter and tears down on exit."""

    nodes = topo.NODES
    switches = topo.SWITCHES
    spines = topo.SPINES
    leaves = topo.LEAVES
    hosts = topo.HOSTS

    def __init__(
        self,
        link_mbit: float = 100.0,
        *,
        hash_seed: int = 1,
        tbf_burst_bytes: int = 64 * 1024,
        tbf_limit_bytes: int = 256 * 1024,
        ready_timeout_s: float = 30.0,
    ) -> None:
        self.link_mbit = link_mbit
        self.hash_seed = hash_seed
        self.tbf_burst_bytes = tbf_burst_bytes
        self.tbf_limit_bytes = tbf_limit_bytes
        self.ready_timeout_s = ready_timeout_s
        self.prefix = _unique_prefix()
        self.workdir: pathlib.Path | None = None
        self.timings: dict[str, float] = {}
        self._made_namespaces: list[str] = []
        self._daemons: dict[str, Daemon] = {}
        self._senders: list[tuple[Flow, Daemon]] = []
        self._flow_deadline = 0.0
        self._down: set[tuple[str, str]] = set()
        self._built = self._closed = False

    # ---- context manager ----------------------------------------------------------------------------------

    def __enter__(self) -> LeafSpineLab:
        if not self._built:
            self.build()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
            return
        try:
            self.close()
        except LabError as teardown:  # do not hide the body's exception behind a teardown problem
            warnings.warn(str(teardown), stacklevel=2)

    # ---- names and addresses ------------------------------------------------------------------------------

    def namespace(self, node: str) -> str:
        """The network namespace holding `node` (e.g. ftl4120-leaf0)."""
        if node not in self.nodes:
            raise KeyError(f"no node {node!r} in the lab (nodes: {', '.join(self.nodes)})")
        return f"{self.prefix}-{node}"

    def host_ip(self, host: str) -> str:
        """The host's IPv4 address."""
        return topo.host_ip(host)

    def leaf_of(self, host: str) -> str:
        """The leaf a host hangs off."""
        return topo.leaf_of(host)

    def port_toward(self, node: str, peer: str) -> str:
        """The ifname on `node` of its link to `peer`."""
        for local_if, (neighbor, _) in topo.expected_neighbors(node).items():
            if neighbor == peer:
                return local_if
        raise KeyError(f"{node} has no link to {peer}")

    def lldp_socket(self, node: str) -> str:
        """The control socket of `node`'s lldpd (for `lldpcli -u`)."""
        self.namespace(node)
        return str(self._work() / f"{node}.lldpd.sock")

    def _work(self) -> pathlib.Path:
        if self.workdir is None:
            raise LabError("the lab is not built")
        return self.workdir

    # ---- building -----------------------------------------------------------------------------------------

    def build(self) -> LeafSpineLab:
        """Create namespaces, links, addresses, routes, shaping and daemons; wait until LLDP has converged,
        every exporter answers and every host reaches every other. Tears down what it made if it fails."""
        if self._built or self._closed:
            raise LabError("a LeafSpineLab builds once")
        started = time.monotonic()
        atexit.register(self.close)
        try:
            self.workdir = pathlib.Path(tempfile.mkdtemp(prefix=f"{self.prefix}-", dir=_temp_base()))
            self.workdir.chmod(0o755)  # lldpcli drops to the _lldpd user before it opens the socket
            self._create_namespaces()
            for node in self.nodes:
                plumbing.set_sysctls(self.namespace(node), node in self.switches, self.hash_seed)
            plumbing.create_links(self.namespace)
            plumbing.configure_interfaces(self.namespace)
            plumbing.install_routes(self.namespace)
            plumbing.shape_links(self.namespace, self.link_mbit, self.tbf_burst_bytes, self.tbf_limit_bytes)
            self._start_daemons()
            self._wait_sinks()
            self._wait_exporters()
            check_reachability({h: self.namespace(h) for h in self.hosts}, topo.host_ip)
            self.wait_lldp(timeout_s=self.ready_timeout_s)
        except BaseException as exc:
            try:
                self.close()
            except LabError as teardown:
                exc.add_note(f"and tearing down the half-built lab failed too: {teardown}")
            raise
        self._built = True
        self.timings["build_s"] = time.monotonic() - started
        return self

    def _create_namespaces(self) -> None:
        for node in self.nodes:
            run(["ip", "netns", "add", self.namespace(node)])
            self._made_namespaces.append(self.namespace(node))

    def _start_daemons(self) -> None:
        work = self._work()
        exporter = node_exporter_binary()
        if exporter is None:
            raise LabError("prometheus-node-exporter is not installed")
        for node in self.nodes:
            hosts, conf = write_lldpd_files(work, node, node in self.switches)
            argv = lldpd_argv(self.namespace(node), node, hosts, conf, self.lldp_socket(node))
            self._start(f"lldpd@{node}", argv)
        for switch in self.switches:
            self._start(f"node_exporter@{switch}", node_exporter_argv(self.namespace(switch), exporter))
        for host in self.hosts:
            self._start(f"sink@{host}", sink_argv(self.namespace(host)))

    def _start(self, name: str, argv: Sequence[str]) -> Daemon:
        daemon = Daemon(name, argv, self._work() / f"{name.replace('@', '.')}.log")
        self._daemons[name] = daemon
        return daemon

    def _raise_if_a_daemon_died(self) -> None:
        for daemon in self._daemons.values():
            if not daemon.alive():
                raise LabError(f"{daemon.name} exited ({daemon.proc.returncode}): {daemon.log_tail()}")

    def _wait_sinks(self) -> None:
        def probe() -> str | None:
            self._raise_if_a_daemon_died()
            waiting = [h for h in self.hosts if "ready" not in self._daemons[f"sink@{h}"].log_tail()]
            return f"sinks not ready on {', '.join(waiting)}" if waiting else None

        wait_until(probe, timeout_s=self.ready_timeout_s, what="the UDP sinks", interval_s=0.05)

    def _wait_exporters(self) -> None:
        pending = set(self.switches)

        def probe() -> str | None:
            self._raise_if_a_daemon_died()
            for switch in sorted(pending):
                if "node_network_transmit_bytes_total" in self._scrape_text(switch, check=False):
                    pending.discard(switch)
            return f"no /metrics yet from {', '.join(sorted(pending))}" if pending else None

        wait_until(probe, timeout_s=self.ready_timeout_s, what="node_exporter", interval_s=0.1)

    # ---- LLDP ---------------------------------------------------------------------------------------------

    def lldp_neighbors_json(self, node: str) -> str:
        """The text of `lldpcli -u SOCK -f json show neighbors` on `node`."""
        return run(lldpcli_argv(self.lldp_socket(node), "show", "neighbors"), timeout=5)

    def lldp_chassis_json(self, node: str) -> str:
        """The text of `lldpcli -u SOCK -f json show chassis` on `node` (its own name, capabilities)."""
        return run(lldpcli_argv(self.lldp_socket(node), "show", "chassis"), timeout=5)

    def lldp_neighbors(self, node: str) -> dict[str, Neighbor]:
        """`node`'s LLDP neighbours, parsed: local ifname -> Neighbor."""
        return parse_neighbors(self.lldp_neighbors_json(node))

    def expected_neighbors(self, node: str) -> dict[str, tuple[str, str]]:
        """Local ifname -> (neighbour name, neighbour port) for the links of `node` now up."""
        expected = topo.expected_neighbors(node)
        return {
            ifname: peer
            for ifname, peer in expected.items()
            if (node, ifname) not in self._down and peer not in self._down
        }

    def wait_lldp(self, timeout_s: float = 30.0) -> None:
        """Wait until every node's LLDP neighbours are exactly its up links' peers (names, port ifnames)."""
        pending = set(self.nodes)

        def probe() -> str | None:
            self._raise_if_a_daemon_died()
            problems = []
            for node in sorted(pending):
                seen = {ifn: (n.name, n.port_id) for ifn, n in self.lldp_neighbors(node).items()}
                want = self.expected_neighbors(node)
                if seen == want:
                    pending.discard(node)
                else:
                    problems.append(f"{node} sees {seen}, expects {want}")
            return "; ".join(problems) or None

        wait_until(probe, timeout_s=timeout_s, what="LLDP neighbours", interval_s=0.25)

    # ---- counters -----------------------------------------------------------------------------------------

    def scrape_command(self, node: str) -> str:
        """A shell command, run from the root namespace, printing `node`'s node_exporter /metrics text."""
        if node not in self.switches:
            raise KeyError(f"{node} runs no node_exporter (switches: {', '.join(self.switches)})")
        return scrape_command(self.namespace(node))

    def scrape(self, node: str) -> str:
        """`node`'s /metrics text."""
        return self._scrape_text(node, check=True)

    def _scrape_text(self, node: str, check: bool) -> str:
        return run(["sh", "-c", self.scrape_command(node)], timeout=10, check=check)

    def qdisc_drops(self, node: str, ifname: str) -> int:
        """Packets the tbf on `node`'s `ifname` dropped (tc drops do not show in the netdev counters)."""
        out = run(["tc", "-n", self.namespace(node), "-s", "-j", "qdisc", "show", "dev", ifname])
        return sum(int(q.get("drops", 0)) for q in json.loads(out or "[]") if q.get("root"))

    # ---- links and routes ---------------------------------------------------------------------------------

    def link_down(self, node: str, ifname: str) -> None:
        """`ip link set IF down` on `node` (the peer loses carrier)."""
        run(["ip", "-n", self.namespace(node), "link", "set", ifname, "down"])
        self._down.add((node, ifname))

    def link_up(self, node: str, ifname: str) -> None:
        """`ip link set IF up` on `node`, and the permanent neighbour entry back (flushed at down)."""
        plumbing.ip_batch(
            self.namespace(node), [f"link set {ifname} up", *plumbing.neighbor_commands(node, ifname)]
        )
        self._down.discard((node, ifname))

    def route_get_command(self, switch: str) -> str:
        """Shell command template (str.format fields {dst} {src} {iif} {sport} {dport}) asking `switch`'s
        kernel which next hop it picks for a UDP 5-tuple arriving on {iif}."""
        return (
            f"ip -n {shlex.quote(self.namespace(switch))} route get {{dst}} from {{src}} iif {{iif}}"
            " ipproto udp sport {sport} dport {dport}"
        )

    def ip_route_get(self, switch: str, dst: str, src: str, iif: str, sport: int, dport: int = 4791) -> str:
        """The output ifname `switch`'s kernel picks for this UDP flow (`dev swpN` of `ip route get`)."""
        command = self.route_get_command(switch).format(dst=dst, src=src, iif=iif, sport=sport, dport=dport)
        out = run(shlex.split(command), timeout=5)
        found = re.search(r"\bdev (\S+)", out)
        if not found:
            raise LabError(f"no output device in `{command}`: {out.strip()}")
        return found.group(1)

    def pick_source_ports(
        self, src_host: str, dst_host: str, want_spine: str, count: int, start: int = 49152
    ) -> list[int]:
        """`count` UDP source ports from `start` up whose flows src_host -> dst_host:4791 the source leaf
        hashes onto its uplink toward `want_spine` (to build deliberate ECMP collisions)."""
        leaf = self.leaf_of(src_host)
        iif, want_if = topo.host_ingress(src_host), topo.uplink(leaf, want_spine)
        src, dst = self.host_ip(src_host), self.host_ip(dst_host)
        ports: list[int] = []
        for sport in range(start, 65536):
            if self.ip_route_get(leaf, dst, src, iif, sport) == want_if:
                ports.append(sport)
                if len(ports) == count:
                    return ports
        raise LabError(
            f"only {len(ports)} source ports from {start} map {src_host}->{dst_host} to {want_spine}"
        )

    # ---- traffic ------------------------------------------------------------------------------------------

    def start_udp_flows(
        self, flows: Iterable[Flow | Sequence], seconds: float, start_delay_s: float = 0.3
    ) -> list[Flow]:
        """Start one paced sender per flow (src_host, dst_host, sport, rate_mbit[, payload_bytes]), all
        beginning together `start_delay_s` from now and sending for `seconds`; wait_flows() collects them."""
        if self._senders:
            raise LabError("flows are still running: call wait_flows() first")
        start_at = time.time() + start_delay_s
        started = [as_flow(f) for f in flows]
        for i, flow in enumerate(started):
            argv = sender_argv(
                self.namespace(flow.src),
                flow,
                self.host_ip(flow.src),
                self.host_ip(flow.dst),
                seconds,
                start_at,
            )
            log = self._work() / f"flow{i}.{flow.src}-{flow.dst}.{flow.sport}.log"
            self._senders.append((flow, Daemon(f"sender{i}", argv, log)))
        self._flow_deadline = time.monotonic() + start_delay_s + seconds
        return started

    def wait_flows(self, timeout_s: float = 15.0) -> list[FlowResult]:
        """Wait (at most `timeout_s` past the flows' planned end) for the senders; their reports, in order."""
        remaining = max(0.0, self._flow_deadline - time.monotonic()) + timeout_s
        senders, self._senders = self._senders, []
        try:
            return collect_results(senders, remaining)
        finally:
            stop_daemons([d for _, d in senders], grace_s=1.0)

    # ---- teardown -----------------------------------------------------------------------------------------

    def process_ids(self) -> list[int]:
        """Pids of every live process the lab started (all members of its daemons' process groups)."""
        groups = live_process_groups()
        daemons = [*self._daemons.values(), *(d for _, d in self._senders)]
        return sorted(pid for d in daemons for pid in groups.get(d.pgid, []))

    def close(self) -> None:
        """Stop every process, delete every namespace (and so every veth), remove the temp dir. Idempotent;
        raises LabError naming what could not be removed, after trying everything."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        started = time.monotonic()
        problems = []
        stuck = stop_daemons([*self._daemons.values(), *(d for _, d in self._senders)])
        if stuck:
            problems.append(f"processes would not die: {', '.join(stuck)}")
        for namespace in reversed(self._made_namespaces):
            try:
                run(["ip", "netns", "del", namespace])
            except LabError as exc:
                problems.append(str(exc))
        if self.workdir is not None:
            try:
                shutil.rmtree(self.workdir)
            except OSError as exc:
                problems.append(f"cannot remove {self.workdir}: {exc}")
        self.timings["teardown_s"] = time.monotonic() - started
        if problems:
            raise LabError("lab teardown incomplete: " + "; ".join(problems))
