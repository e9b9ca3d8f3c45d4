"""A running OpenSM on the ibsim fabric simulator: it routes the fabric, then reroutes after each change.

ib_opensm.run_opensm routes once (`opensm -o`); here OpenSM keeps running as the fabric's subnet
manager, as on a real cluster, and the caller changes the fabric through ibsim's console (its stdin):
`Unlink "nodeid"[port]` takes a cable down, `ReLink` puts it back. ibsim then sends trap 128 (link
state change) from each switch end of the cable; OpenSM answers a trap 128 with a heavy sweep, routes
again and writes its tables ("<engine> tables configured on all switches"; opensm-lfts.dump again).
After each sweep the harness copies the dump (OpenSM rewrites it every sweep) and reads the fabric and
the switches' tables back with ibnetdiscover and dump_fts.

What a running OpenSM does (3.3.23, checked in its source and measured here):
- A heavy sweep after a trap keeps every LFT entry that is still valid: osm_switch_recommend_path
  (osm_switch.c) keeps the port a switch already uses for a LID unless `ignore_existing_lfts` is set,
  the port is down or it is no longer on a minimum-hop path (minhop, and updn, which builds its
  tables with the same function). `ignore_existing_lfts` is set for the first sweep (osm_subnet.c),
  for a new switch (osm_sw_info_rcv.c) and for a port in INIT state (osm_port_info_rcv.c,
  osm_pi_rcv_update_self) and cleared once the tables are set (osm_state_mgr.c). A cable taken down
  leaves its ports DOWN, so after an Unlink only the entries that used it or whose port is no longer
  on a shortest path move; a ReLink brings the ports up in INIT and OpenSM routes the fabric afresh.
  ftree builds its tables itself, from scratch; a fat-tree that lost a cable is no fat-tree to it
  ("ERR AB0D ... hasn't been identified as FatTree") and OpenSM falls back to minhop
  (osm_ucast_mgr_process), which keeps the entries ftree wrote that are still valid.
- Periodic sweeps are off (`-s 0`: osm_sm.c starts the sweep timer only for a non-zero interval; the
  default is a light sweep every 10 s), so only a step sweeps. A trap 128 forces a heavy sweep
  (osm_trap_rcv.c); so does SIGHUP, without a trap (main.c): the `Resweep` step.
- A trap travels to the SM along the switches' tables; an end whose route to the SM used the lost
  cable cannot send it (ibsim: "send_trap: routing failed"), the other end can. Taking down the SM's
  own cable (ibsim-run attaches OpenSM to the first record of the net file) leaves OpenSM unaware.
- The log is flushed line by line (`-d 2`, force_log_flush), so it can be followed while OpenSM runs.
  A sweep ends with the dump written and then "SUBNET UP" (osm_state_mgr.c), or with "Errors during
  initialization"; a trap arriving during a sweep makes OpenSM discover or sweep again, so a step is
  over when the log and the dump have been quiet for `settle_s` after a sweep's end.

Every process runs in its own session and is stopped (its process group) when the run ends, also on
failure; every wait is bounded. Failures raise IbLabError naming the step and quoting the logs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import pathlib
import re
import signal
import subprocess
import time
from collections.abc import Sequence

from services.topology.formats import import_fabric
from services.topology.lfts_dump import parse_lfts_dump, resolve_lfts
from tests.lab.ib_opensm import (
    IbLabError,
    _ibsim,
    _run_bounded,
    _tail,
    lab_processes,
    root_guid_args,
    run_directory,
)

__all__ = [
    "EntryChanges",
    "IbLabError",
    "LiveRun",
    "LiveSweep",
    "NetRecord",
    "ReLink",
    "Resweep",
    "Step",
    "Unlink",
    "cable",
    "host_entries",
    "lab_processes",
    "net_records",
    "net_without_cable",
    "run_live_opensm",
]

_CONFIGURED = re.compile(r"(\S+) tables configured on all switches")
_SWEEP_END = re.compile(r"SUBNET UP|Errors during initialization|No routing engine able")
_ERR = re.compile(r"\bERR [0-9A-F]{4}\b")
_TRAP = re.compile(r"Received Generic Notice type:\d+ num:(\d+)")
_runs = itertools.count()


@dataclasses.dataclass(frozen=True)
class Unlink:
    """ibsim `Unlink "node_id"[port]`: the cable on that port goes down (both ends, ports DOWN/Polling)
    and each switch end sends trap 128. `node_id` is the ibsim record id ("S-fab0000000000300")."""

    node_id: str
    port: int

    def command(self) -> str:
        return f'Unlink "{self.node_id}"[{self.port}]'


@dataclasses.dataclass(frozen=True)
class ReLink:
    """ibsim `ReLink "node_id"[port]`: the cable an Unlink took down comes back (ports INIT, trap 128)."""

    node_id: str
    port: int

    def command(self) -> str:
        return f'ReLink "{self.node_id}"[{self.port}]'


@dataclasses.dataclass(frozen=True)
class Resweep:
    """No change to the fabric: SIGHUP to OpenSM, which runs a heavy sweep (no trap involved)."""

    def command(self) -> None:
        return None


Step = Unlink | ReLink | Resweep


@dataclasses.dataclass
class LiveSweep:
    """The fabric and tables after one step (`step` None: OpenSM's first routing)."""

    step: Step | None
    engine: str  # named in the last "<engine> tables configured" line of the step
    configured: list[str]  # every such line of the step, in order (one per sweep that routed)
    lfts_dump: str  # opensm-lfts.dump as that sweep wrote it
    dump_fts: str
    ibnetdiscover: str
    errors: list[str]  # OpenSM's "ERR XXXX" lines of the step
    traps: list[int]  # trap numbers OpenSM received during the step
    log: str  # OpenSM's log of the step
    ibsim_output: str  # what ibsim printed since the last command, up to this one's end (its traps'
    # "send_trap: routing failed" warnings; "got trap repress" lines of the previous step's traps)
    seconds: dict[str, float]


@dataclasses.dataclass
class LiveRun:
    engine: str  # the engine asked for (`-R`)
    run_dir: pathlib.Path  # the net file, OpenSM's log, output and dumps
    sweeps: list[LiveSweep]  # the first routing, then one per step
    opensm_log: str
    ibsim_log: str
    seconds: dict[str, float]


def _describe(step: Step | None, index: int) -> str:
    if step is None:
        return "first sweep"
    what = step.command() or "Resweep (SIGHUP)"
    return f"step {index} ({what})"


class _Live:
    """ibsim's console and OpenSM's log and dump while both run."""

    def __init__(
        self,
        sim: subprocess.Popen,
        osm: subprocess.Popen,
        run_dir: pathlib.Path,
        env: dict[str, str],
        timeout_s: float,
        settle_s: float,
    ) -> None:
        self.sim, self.osm, self.env = sim, osm, env
        self.ibsim_log = run_dir / "fabric.ibsim.log"
        self.log = run_dir / "opensm.log"
        self.out = run_dir / "opensm.out"
        self.dump = run_dir / "dump" / "opensm-lfts.dump"
        self.timeout_s, self.settle_s = timeout_s, settle_s
        self.log_pos = 0  # where the current step's part of the log begins
        self.sim_pos = 0  # where ibsim's output for the next command begins
        self.said = ""  # what ibsim printed for the current step's command

    def read_log(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def _dump_stamp(self) -> tuple[int, int] | None:
        try:
            st = self.dump.stat()
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def _alive(self, what: str) -> None:
        if self.osm.poll() is not None:
            said = _tail(self.read_log(), 6) or _tail(self.out.read_text(errors="replace"), 6)
            raise IbLabError(f"{what}: opensm exited {self.osm.returncode}: {said}")
        if self.sim.poll() is not None:
            raise IbLabError(f"{what}: ibsim exited {self.sim.returncode}: {_tail(self._sim_text(), 4)}")

    def _sim_text(self) -> str:
        return self.ibsim_log.read_text(errors="replace")

    def console(self, what: str, command: str, index: int) -> str:
        """Send `command` to ibsim's console; what ibsim printed for it. IbLabError if it refused it."""
        marker = f"# fabrictwin step {index} done"
        assert self.sim.stdin is not None
        try:
            self.sim.stdin.write(f"{command}\n{marker}\n".encode())
            self.sim.stdin.flush()
        except BrokenPipeError:
            self._alive(what)
            raise
        deadline = time.monotonic() + min(self.timeout_s, 10.0)
        while True:
            text = self._sim_text()
            end = text.find(marker, self.sim_pos)
            if end >= 0:
                break
            self._alive(what)
            if time.monotonic() > deadline:
                raise IbLabError(f"{what}: ibsim did not take the command: {_tail(text[self.sim_pos :], 4)}")
            time.sleep(0.02)
        said = text[self.sim_pos : end].replace("sim> ", "\n")
        self.sim_pos = end + len(marker)
        lines = [line.strip() for line in said.splitlines() if line.strip()]
        refused = [line for line in lines if line.startswith("#") or "unknown - skipped" in line]
        if refused:
            raise IbLabError(f"{what}: ibsim refused `{command}`: {'; '.join(refused)}")
        self.said = "\n".join(lines)
        return self.said

    def wait_sweep(self, what: str, before: tuple[int, int] | None) -> tuple[str, tuple[int, int] | None]:
        """Wait until OpenSM has routed (a "tables configured" line after the step began), ended that
        sweep, rewritten the dump (its stamp differs from `before`) and gone quiet for settle_s.
        Returns the step's part of the log and the dump's stamp."""
        deadline = time.monotonic() + self.timeout_s
        quiet_since, last = time.monotonic(), ("", before)
        while True:
            self._alive(what)
            part = self.read_log()[self.log_pos :]
            stamp = self._dump_stamp()
            now = time.monotonic()
            if (part, stamp) != last:
                quiet_since, last = now, (part, stamp)
            ends = list(_SWEEP_END.finditer(part))
            routed = list(_CONFIGURED.finditer(part))
            if "No routing engine able" in part:
                raise IbLabError(f"{what}: opensm could not route: {_errors_said(part)}")
            done = (
                routed
                and ends
                and ends[-1].start() > routed[-1].start()
                and stamp is not None
                and stamp != before
                and part.endswith("\n")
            )
            if done and now - quiet_since >= self.settle_s:
                return part, stamp
            if now > deadline:
                state = "routed, not quiet" if done else "no sweep that routed and ended"
                raise IbLabError(
                    f"{what}: opensm did not sweep within {self.timeout_s:g} s ({state}); "
                    f"ibsim printed: {self.said.replace(chr(10), '; ') or 'nothing'}; "
                    f"opensm.log says: {_tail(part, 4) or 'nothing since the step began'}"
                )
            time.sleep(0.05)

    def capture(
        self,
        what: str,
        step: Step | None,
        ibsim_output: str,
        started: float,
        before: tuple[int, int] | None,
    ) -> LiveSweep:
        """The step's sweep (the dump's stamp no longer `before`): its log, a copy of the dump, then
        ibnetdiscover and dump_fts; again if OpenSM swept meanwhile (the copy and the switches would
        disagree)."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            part, stamp = self.wait_sweep(what, before)
            swept = time.monotonic()
            lfts = self.dump.read_text()
            topology = _run_bounded(
                f"{what}: ibnetdiscover", ["ibsim-run", "ibnetdiscover"], self.env, self.timeout_s
            )
            tables = _run_bounded(f"{what}: dump_fts", ["ibsim-run", "dump_fts"], self.env, self.timeout_s)
            if self.read_log()[self.log_pos :] == part and self._dump_stamp() == stamp:
                break
            if time.monotonic() > deadline:
                raise IbLabError(f"{what}: opensm kept sweeping while its tables were read back")
        self.log_pos += len(part)
        configured = [m[1] for m in _CONFIGURED.finditer(part)]
        return LiveSweep(
            step=step,
            engine=configured[-1],
            configured=configured,
            lfts_dump=lfts,
            dump_fts=tables,
            ibnetdiscover=topology,
            errors=[line for line in part.splitlines() if _ERR.search(line)],
            traps=[int(m[1]) for m in _TRAP.finditer(part)],
            log=part,
            ibsim_output=ibsim_output,
            seconds={"sweep_s": swept - started, "read_back_s": time.monotonic() - swept},
        )

    def step(self, index: int, step: Step) -> LiveSweep:
        what = _describe(step, index)
        started = time.monotonic()
        before = self._dump_stamp()
        if isinstance(step, Resweep):
            os.kill(self.osm.pid, signal.SIGHUP)
            said = self.said = ""
        else:
            command = step.command()
            if '"' in step.node_id or "\n" in step.node_id or len(command) > 100:
                raise IbLabError(f"{what}: not a node id ibsim's console can take: {step.node_id!r}")
            said = self.console(what, command, index)
        return self.capture(what, step, said, started, before)


def _errors_said(log: str) -> str:
    errors = [line for line in log.splitlines() if _ERR.search(line) or "No routing engine" in line]
    return "; ".join(errors[:3]) or _tail(log, 3)


def _stop(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """SIGTERM to the process group, SIGKILL after `grace_s`."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # anything left in its group


def run_live_opensm(
    net_text: str,
    engine: str,
    workdir: pathlib.Path,
    steps: Sequence[Step],
    *,
    roots: Sequence[int] | None = None,
    timeout_s: float = 60.0,
    settle_s: float = 1.0,
) -> LiveRun:
    """Bring `net_text` up in ibsim under a running OpenSM (`engine`), then apply `steps` one by one.

    Returns the first routing and one sweep per step (see LiveSweep). `roots`: switch GUIDs for
    OpenSM's root_guid_file (`-a`), used by updn and ftree. Every wait ends within `timeout_s`;
    a step is over once OpenSM's log and dump have been quiet for `settle_s` after its sweep.
    Raises IbLabError naming the step when ibsim rejects the net file or a command, OpenSM exits,
    cannot route, or does not sweep in time; everything started is stopped in any case.
    """
    run_dir, netfile, env = run_directory(workdir / f"live{next(_runs)}-{engine}", net_text)
    dump_dir = run_dir / "dump"
    seconds: dict[str, float] = {}
    started = time.monotonic()
    sweeps: list[LiveSweep] = []
    log_path = run_dir / "opensm.log"
    argv = [
        "ibsim-run", "opensm", "-R", engine, "-D", "0x43", "-d", "2", "-s", "0",
        "--dump_files_dir", str(dump_dir), "-f", str(log_path), *root_guid_args(run_dir, roots),
    ]  # fmt: skip
    with _ibsim(netfile, env, timeout_s=min(10.0, timeout_s)) as sim:
        seconds["ibsim_s"] = time.monotonic() - started
        with open(run_dir / "opensm.out", "wb") as out:
            osm = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                start_new_session=True,
            )  # fmt: skip
        try:
            live = _Live(sim, osm, run_dir, env, timeout_s, settle_s)
            live.sim_pos = len(live._sim_text())
            sweeps.append(live.capture(_describe(None, 0), None, "", time.monotonic(), None))
            for index, step in enumerate(steps, 1):
                sweeps.append(live.step(index, step))
        finally:
            stopping = time.monotonic()
            _stop(osm)
            seconds["stop_opensm_s"] = time.monotonic() - stopping
        opensm_log = live.read_log()
        ibsim_log = live._sim_text()
    seconds["total_s"] = time.monotonic() - started
    return LiveRun(engine, run_dir, sweeps, opensm_log, ibsim_log, seconds)


@dataclasses.dataclass(frozen=True)
class NetRecord:
    """A node of an ibsim net file: its ibsim id, GUID (0 if the file gives none), the name in the
    record's comment (as FabricTwin's export writes it) and its cables, port -> (remote id, port)."""

    node_id: str
    kind: str  # "Switch" or "Ca"
    guid: int
    name: str
    ports: dict[int, tuple[str, int]]


_GUID = re.compile(r"^(?:switch|ca|hca)guid\s*=\s*(0x[0-9a-fA-F]+)", re.IGNORECASE)
_RECORD = re.compile(r'^(Switch|Ca|Hca)\s+\d+\s+"([^"]+)"(?:[^#]*#\s*"([^"]*)")?')
_PORT = re.compile(r'^\[(\d+)\]\s+"([^"]+)"\[(\d+)\]')


def net_records(net_text: str) -> dict[str, NetRecord]:
    """The records of an ibsim net file by node name (the comment's name, else the ibsim id)."""
    records: dict[str, NetRecord] = {}
    current: NetRecord | None = None
    guid = 0
    for line in net_text.splitlines():
        stated = _GUID.match(line)
        if stated:
            guid = int(stated[1], 16)
            continue
        head = _RECORD.match(line)
        if head:
            kind = "Ca" if head[1] == "Hca" else head[1]
            current = NetRecord(head[2], kind, guid, head[3] or head[2], {})
            records[current.name] = current
            guid = 0
            continue
        port = _PORT.match(line)
        if port and current is not None:
            current.ports[int(port[1])] = (port[2], int(port[3]))
    return records


def cable(net_text: str, a: str, b: str) -> tuple[NetRecord, int, NetRecord, int]:
    """(record, port, record, port) of the first cable between the nodes named `a` and `b`."""
    records = net_records(net_text)
    end_a, end_b = records[a], records[b]
    for port, (remote, remote_port) in sorted(end_a.ports.items()):
        if remote == end_b.node_id:
            return end_a, port, end_b, remote_port
    raise KeyError(f"no cable between {a} and {b}")


def net_without_cable(net_text: str, node_id: str, port: int) -> str:
    """`net_text` without the cable on `node_id`'s `port` (both ends' port lines dropped)."""
    by_id = {r.node_id: r for r in net_records(net_text).values()}
    remote, remote_port = by_id[node_id].ports[port]
    drop = {(node_id, port), (remote, remote_port)}
    out, current = [], None
    for line in net_text.splitlines(keepends=True):
        head = _RECORD.match(line)
        if head:
            current = head[2]
        entry = _PORT.match(line)
        if entry and (current, int(entry[1])) in drop:
            continue
        out.append(line)
    return "".join(out)


def host_entries(ibnetdiscover: str, lfts_dump: str) -> dict[tuple[str, str], int]:
    """(switch name, host name) -> output port of an opensm-lfts.dump, over the fabric ibnetdiscover
    read back with it (names are the node descriptions); entries without a route are left out."""
    fabric = import_fabric("ibnetdiscover", ibnetdiscover)
    switches, ports = resolve_lfts(fabric, parse_lfts_dump(lfts_dump))
    names = fabric.node_names
    hosts = [names[n] for n in fabric.host_nodes.tolist()]
    out = {}
    for row, node in enumerate(switches.tolist()):
        for h, port in enumerate(ports[row].tolist()):
            if port:
                out[names[node], hosts[h]] = int(port)
    return out


@dataclasses.dataclass(frozen=True)
class EntryChanges:
    """How host-destination LFT entries changed from one routing to another."""

    entries: int  # entries before
    changed: int  # entries before whose port differs after (dropped ones included)
    dropped: int  # entries before with no route after
    added: int  # entries after that were not there before

    @classmethod
    def between(cls, before: dict[tuple[str, str], int], after: dict[tuple[str, str], int]) -> EntryChanges:
        return cls(
            entries=len(before),
            changed=sum(1 for key, port in before.items() if after.get(key) != port),
            dropped=sum(1 for key in before if key not in after),
            added=sum(1 for key in after if key not in before),
        )
