"""Real OpenSM on the ibsim fabric simulator: one run of `ibsim`, `opensm`, `ibnetdiscover`, `dump_fts`.

`ibsim -s NETFILE` simulates the fabric; the InfiniBand tools reach it through libumad2sim, which
`ibsim-run` LD_PRELOADs, over a unix socket named by IBSIM_SOCKNAME (one name per run, so several
runs can share a machine). OpenSM sweeps once (`-o`), routes with the engine asked for and, with
debug bit 0x40, writes opensm-lfts.dump to --dump_files_dir; ibnetdiscover and dump_fts then read
the fabric and the switches' tables back from the simulator.

Every process runs in its own session with a deadline; ibsim is stopped (its whole process group)
when the run ends, also on failure. Failures raise IbLabError naming the step and quoting its log.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import pathlib
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence

__all__ = [
    "IbLabError",
    "OpenSMRun",
    "ibsim_lab_unavailable_reason",
    "lab_processes",
    "run_directory",
    "run_opensm",
]

TOOLS = ("ibsim", "ibsim-run", "opensm", "ibnetdiscover", "dump_fts")
UMAD2SIM = pathlib.Path("/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so")
PACKAGES = "apt-get install opensm ibsim-utils infiniband-diags"
_ENGINE_LOG_NAMES = {"minhop": "minhop", "updn": "updn", "ftree": "ftree"}
_runs = itertools.count()


class IbLabError(RuntimeError):
    """A step of the ibsim/OpenSM run failed; the message names the step and what its log says."""


@dataclasses.dataclass
class OpenSMRun:
    """What one run produced (texts as the tools wrote them) and how long each step took."""

    engine: str
    ibnetdiscover: str
    lfts_dump: str
    dump_fts: str
    opensm_log: str
    seconds: dict[str, float]
    engine_used: str = ""  # the engine that configured the tables (`engine`, or OpenSM's fallback)
    errors: tuple[str, ...] = ()  # the ERR lines of OpenSM's log


def ibsim_lab_unavailable_reason() -> str | None:
    """None when this machine can run OpenSM on ibsim; otherwise why not (for pytest.skip)."""
    if os.geteuid() != 0:
        return "the InfiniBand lab runs as root (OpenSM and ibsim-run expect it)"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"the InfiniBand lab needs {', '.join(missing)}, not found on PATH ({PACKAGES})"
    if not UMAD2SIM.exists():
        return f"the InfiniBand lab needs {UMAD2SIM} (ibsim-utils), not found"
    return None


def _tail(text: str, lines: int = 8) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _run_bounded(step: str, argv: Sequence[str], env: dict[str, str], timeout_s: float) -> str:
    """Run to completion in a session of its own; on timeout kill the whole group. Returns stdout."""
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise IbLabError(f"{step}: `{' '.join(argv)}` did not finish within {timeout_s:g} s") from None
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # anything it left in its group
    if proc.returncode != 0:
        raise IbLabError(f"{step}: `{' '.join(argv)}` exited {proc.returncode}: {_tail(err or out)}")
    return out


@contextlib.contextmanager
def _ibsim(netfile: pathlib.Path, env: dict[str, str], timeout_s: float) -> Iterator[subprocess.Popen]:
    """ibsim serving `netfile` until the block ends; IbLabError if it rejects the file."""
    log_path = netfile.with_suffix(".ibsim.log")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            ["ibsim", "-s", str(netfile)],
            stdin=subprocess.PIPE,  # its console: kept open (EOF would end the session)
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            text = log_path.read_text(errors="replace")
            if "Network simulator ready" in text:
                break
            if proc.poll() is not None:
                raise IbLabError(f"ibsim rejected the net file {netfile.name}: {_tail(text, 4)}")
            if time.monotonic() > deadline:
                raise IbLabError(f"ibsim did not become ready within {timeout_s:g} s: {_tail(text, 4)}")
            time.sleep(0.02)
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=3)
        if proc.stdin is not None:
            proc.stdin.close()


def run_opensm(
    net_text: str,
    engine: str,
    workdir: pathlib.Path,
    *,
    roots: Sequence[int] | None = None,
    fallback_ok: bool = False,
    timeout_s: float = 60.0,
) -> OpenSMRun:
    """Bring `net_text` up in ibsim, route it once with OpenSM's `engine`, read it all back.

    `roots`: switch GUIDs written to a root GUID file for OpenSM's `-a` (root_guid_file: the roots
    updn and ftree route from, instead of the ones they find themselves); other engines ignore it.

    Raises IbLabError when ibsim rejects the net file, OpenSM fails or (unless `fallback_ok`) falls
    back to another engine (its log says which), or a tool does not finish in time.
    """
    run_dir, netfile, env = run_directory(workdir / f"run{next(_runs)}-{engine}", net_text)
    dump_dir = run_dir / "dump"
    seconds: dict[str, float] = {}
    started = time.monotonic()
    with _ibsim(netfile, env, timeout_s=min(10.0, timeout_s)):
        seconds["ibsim_s"] = time.monotonic() - started
        log_path = run_dir / "opensm.log"
        t = time.monotonic()
        _run_bounded(
            "opensm",
            [
                "ibsim-run", "opensm", "-o", "-R", engine, "-D", "0x43",
                "--dump_files_dir", str(dump_dir), "-f", str(log_path),
                *root_guid_args(run_dir, roots),
            ],
            env,
            timeout_s,
        )  # fmt: skip
        seconds["opensm_s"] = time.monotonic() - t
        log = log_path.read_text(errors="replace") if log_path.exists() else ""
        used = _check_routed(engine, log, log_path, fallback_ok)
        lfts = dump_dir / "opensm-lfts.dump"
        if not lfts.exists():
            raise IbLabError(f"opensm wrote no {lfts.name} (debug mask 0x40): {_tail(log)}")
        t = time.monotonic()
        topology = _run_bounded("ibnetdiscover", ["ibsim-run", "ibnetdiscover"], env, timeout_s)
        seconds["ibnetdiscover_s"] = time.monotonic() - t
        t = time.monotonic()
        tables = _run_bounded("dump_fts", ["ibsim-run", "dump_fts"], env, timeout_s)
        seconds["dump_fts_s"] = time.monotonic() - t
    seconds["total_s"] = time.monotonic() - started
    errors = tuple(line for line in log.splitlines() if re.search(r"\bERR [0-9A-F]{4}\b", line))
    return OpenSMRun(engine, topology, lfts.read_text(), tables, log, seconds, used, errors)


SOCKET_PREFIX = "fabrictwin"  # IBSIM_SOCKNAME=fabrictwin-<pid>-<run>: one simulator per run


def run_directory(run_dir: pathlib.Path, net_text: str) -> tuple[pathlib.Path, pathlib.Path, dict[str, str]]:
    """A run's directory (with `dump/` and `cache/`), its net file, and the environment that gives the
    run its own ibsim socket and OpenSM cache: (run_dir, net file, env)."""
    (run_dir / "dump").mkdir(parents=True)
    (run_dir / "cache").mkdir()
    netfile = run_dir / "fabric.net"
    netfile.write_text(net_text)
    env = dict(os.environ)
    env.update(
        IBSIM_SOCKNAME=f"{SOCKET_PREFIX}-{os.getpid()}-{run_dir.name}",
        OSM_CACHE_DIR=str(run_dir / "cache"),
        OSM_TMP_DIR=str(run_dir),
    )
    return run_dir, netfile, env


def lab_processes() -> list[int]:
    """Pids of processes this process started through ibsim-run or ibsim (by IBSIM_SOCKNAME)."""
    marker = f"IBSIM_SOCKNAME={SOCKET_PREFIX}-{os.getpid()}-".encode()
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def root_guid_args(run_dir: pathlib.Path, roots: Sequence[int] | None) -> list[str]:
    """OpenSM's `-a FILE` for `roots` (switch GUIDs, one a line in FILE, as OpenSM's parse_node_map
    reads them), written into `run_dir`; no arguments without roots."""
    if roots is None:
        return []
    path = run_dir / "root-guids.txt"
    path.write_text("".join(f"0x{int(guid):016x}\n" for guid in roots))
    return ["-a", str(path)]


def _check_routed(engine: str, log: str, log_path: pathlib.Path, fallback_ok: bool = False) -> str:
    """The engine that configured the tables: `engine` itself, or (with `fallback_ok`) OpenSM's
    fallback; else IbLabError quoting its log."""
    configured = re.findall(r"(\S+) tables configured on all switches", log)
    errors = [line for line in log.splitlines() if re.search(r"\bERR [0-9A-F]{4}\b", line)]
    if fallback_ok and len(configured) == 1:
        return configured[0]
    if configured != [_ENGINE_LOG_NAMES.get(engine, engine)]:
        said = "; ".join(errors[:3]) or _tail(log, 3)
        raise IbLabError(
            f"opensm did not route with {engine} (configured: {configured or 'nothing'}); "
            f"{log_path.name} says: {said}"
        )
    return configured[0]


DUMP_FTS_HEADER = re.compile(r"^Unicast lids \[0x[0-9a-f]+-0x[0-9a-f]+\] of switch .* guid 0x([0-9a-f]+) ")
DUMP_FTS_ENTRY = re.compile(r"^0x([0-9a-f]+) (\d+) : ")


def dump_fts_tables(text: str) -> dict[int, dict[int, int]]:
    """dump_fts output -> {switch GUID: {destination LID: port}}, as the switches hold them."""
    tables: dict[int, dict[int, int]] = {}
    current: dict[int, int] | None = None
    for line in text.splitlines():
        header = DUMP_FTS_HEADER.match(line)
        if header:
            current = tables.setdefault(int(header[1], 16), {})
            continue
        entry = DUMP_FTS_ENTRY.match(line)
        if entry and current is not None:
            current[int(entry[1], 16)] = int(entry[2])
    return tables
