"""`service.packet.k16` (and `service.packet.k32`): a PACKET run at scale, through the services.

Issue 15's bar for a run started through gRPC: it reports progress as it goes, it can be cancelled
within a second, and its per-link series reach telemetry streamed, in bounded memory. The four
services run as their own processes (`services.stack`, SQLite under a temporary directory) and are
driven with the SDK (`fabrictwin.Client`) as a script would. The job is the engine benchmarks' own
(`bench_engine._allreduce_spec`): a 64 MiB ring AllReduce over 1,024 randomly placed ranks of the
k=16 fat-tree (1,024 hosts, 6,144 channels), ECMP, at PACKET fidelity. Then:

1. The run to completion, its series written to a telemetry source: wall time from StartSimulation
   to SUCCEEDED; what WatchSimulation reported (updates, the stages, the largest gap between two
   updates once RUNNING and while the event loop reports, the time from RUNNING to the first
   fraction above 0: the worker's setup, and from "storing series" to SUCCEEDED: the export);
   the job's completion; the rows the telemetry source holds against channels x intervals; the
   peak resident memory (VmHWM) of the simulator's service process, of its busiest child process
   (the worker that ran the simulation) and of its other children (the progress manager), and of
   the telemetry service.
2. The same run cancelled once the progress shown passes 20% (the event loop runs), and
3. cancelled `SETUP_CANCEL_AFTER_S` after StartSimulation returned (the worker builds the workload
   and the engine's arrays, which report no progress).

For each cancel: the progress and stage shown when it was cancelled, how long CancelSimulation took
and the state it answered with, when a watch saw CANCELLED, and `worker_stopped_ms`, the time until
the worker running the simulation (the simulator's child that used the most CPU just before)
stopped working on it: it ended (killed: `worker_killed`), or it used no more CPU (sampled every
10 ms; its last busy sample, confirmed by `QUIET_S` of quiet). Then the next job, a small FLOW run
on a k=4 fat-tree: its time until RUNNING and until SUCCEEDED (on the same worker, or on the one
that replaced a killed worker), next to the same run's on an idle service. Every wait is bounded.
FABRICTWIN_BENCH_SERVICE_PACKET_MODE picks the load-balancing mode (default ECMP), and
FABRICTWIN_BENCH_SERVICE_FIDELITY another fidelity for the same job (FLOW_STEADY: the 8,192-rank
ring at flow level through the service).
"""

from __future__ import annotations

import itertools
import os
import tempfile
import threading
import time
import types
from collections.abc import Iterator

from fabrictwin import Client
from fabrictwin.errors import FailedPreconditionError
from fabrictwin.specs import collective_job, load_balancing, simulation_spec
from fabrictwin.v1 import common_pb2, simulation_pb2

from bench.bench_engine import K32_RANKS, _allreduce_spec
from bench.registry import benchmark
from services.common.procfs import children_of, cpu_ticks, is_running, peak_rss_bytes
from services.simulator.packet.warm_up import warm_up
from services.stack import running_stack

FABRIC = "svc-packet"
PROBE_FABRIC = "svc-packet-probe"
MODE = os.environ.get("FABRICTWIN_BENCH_SERVICE_PACKET_MODE", "ECMP").upper()
FIDELITY = os.environ.get("FABRICTWIN_BENCH_SERVICE_FIDELITY", "PACKET").upper()
TIMEOUT_S = 900.0  # one run, the first compile of the packet engine (about a minute) included
CANCEL_AT_FRACTION = 0.2
SETUP_CANCEL_AFTER_S = 1.0
PICK_WORKER_S = 0.2  # the child that used the most CPU over this long before the cancel is the worker
STOP_TIMEOUT_S = 60.0
SAMPLE_S = 0.01  # how often a cancelled run's worker is looked at
QUIET_S = 0.3  # a worker that used no CPU for this long has stopped
RUNNING = common_pb2.JOB_STATE_RUNNING
TERMINAL = {common_pb2.JOB_STATE_SUCCEEDED, common_pb2.JOB_STATE_FAILED, common_pb2.JOB_STATE_CANCELLED}
_STATE = {value: name.removeprefix("JOB_STATE_") for name, value in common_pb2.JobState.items()}


# -- processes, from /proc (no psutil) ------------------------------------------------------------------


def _busiest_child(pid: int, window_s: float = PICK_WORKER_S) -> int | None:
    """The child of `pid` that used the most CPU over the next `window_s` seconds."""
    before = {child: cpu_ticks(child) for child in children_of(pid)}
    time.sleep(window_s)
    grown = {child: cpu_ticks(child) - ticks for child, ticks in before.items() if is_running(child)}
    return max(grown, key=lambda child: grown[child]) if grown else None


def _peak_rss_mb(pid: int) -> float | None:
    """VmHWM (peak resident set) of a live process in MiB."""
    peak = peak_rss_bytes(pid)
    return round(peak / 2**20, 1) if peak else None


# -- the runs -------------------------------------------------------------------------------------------


def packet_spec(
    fabric: str, ranks: int, source: str = "", size_bytes: int = 0
) -> simulation_pb2.SimulationSpec:
    """`bench_engine._allreduce_spec` as the SDK sends it (`size_bytes`: another size than its own)."""
    engine = _allreduce_spec(types.SimpleNamespace(fabric=f"fabrics/{fabric}"), MODE, ranks)
    engine["fidelity"] = FIDELITY
    (job,) = engine.pop("jobs")
    lb = engine.pop("load_balancing")
    spec = simulation_spec(
        engine.pop("fabric"),
        [
            collective_job(
                ranks=job.pop("rank_count"),
                size=size_bytes or job.pop("size_bytes"),
                collective=job.pop("collective"),
                placement=job.pop("placement"),
            )
        ],
        load_balancing(lb.pop("mode"), seed=lb.pop("seed"), flowlet_gap_ns=lb.pop("flowlet_gap_ns", 0)),
        fidelity=engine.pop("fidelity"),
        seed=engine.pop("seed"),
        telemetry_source=source,
    )
    spec.switch_latency_ns = engine.pop("switch_latency_ns")
    job.pop("size_bytes", None)
    if engine or job or lb:  # the engine's spec grew a field: carry it over here too
        raise AssertionError(f"fields not carried into the service's spec: {engine} {job} {lb}")
    return spec


def _probe_spec() -> simulation_pb2.SimulationSpec:
    """The next job after a cancel: a small FLOW run that takes a worker a moment."""
    job = collective_job(ranks=16, size=1 << 20, placement="random")
    return simulation_spec(PROBE_FABRIC, [job], "ecmp", fidelity="flow", seed=1)


def _watch(client: Client, name: str, began: float) -> Iterator[tuple[float, simulation_pb2.Simulation]]:
    """(seconds since `began`, simulation) for every update WatchSimulation sends, until it is done."""
    for simulation in client.simulations.watch(name, timeout=TIMEOUT_S):
        yield time.perf_counter() - began, simulation
        if simulation.state in TERMINAL:
            return
    raise AssertionError(f"the watch of {name} ended before it was done")


def _full_run(client: Client, simulator_pid: int, telemetry_pid: int, spec, source: str) -> dict:
    telemetry_rss_before = _peak_rss_mb(telemetry_pid)
    began = time.perf_counter()
    started = client.simulations.start(spec)
    start_call_s = time.perf_counter() - began
    simulator_rss_after_start = _peak_rss_mb(simulator_pid)  # after its checks
    updates = list(_watch(client, started.name, began))
    last = updates[-1][1]
    if last.state != common_pb2.JOB_STATE_SUCCEEDED:
        raise AssertionError(f"{started.name} ended {_STATE[last.state]}: {last.error.message}")
    wall = updates[-1][0]
    result = client.simulations.get(started.name).result
    running = [(t, s) for t, s in updates if s.state == RUNNING or s.state in TERMINAL]
    stepping = [(t, s) for t, s in running if s.progress.fraction > 0]
    looping = [(t, s) for t, s in stepping if s.state == RUNNING and s.progress.stage == "simulating"]
    storing = [t for t, s in updates if s.progress.stage == "storing series"]
    stages: list[str] = []
    for _, simulation in updates:
        if simulation.progress.stage and simulation.progress.stage not in stages:
            stages.append(simulation.progress.stage)
    one = next(iter(client.simulations.link_series(started.name, page_size=1)))
    channels = 2 * sum(1 for _ in client.fabrics.links(FABRIC))
    rows = client.telemetry.get_source(source).sample_count
    children = {pid: _peak_rss_mb(pid) for pid in children_of(simulator_pid)}
    worker = max(children, key=cpu_ticks) if children else None
    job = result.jobs[0]
    figures = {
        "fidelity": FIDELITY,
        "mode": MODE,
        "ranks": job.ranks,
        "size_bytes": spec.jobs[0].size_bytes,
        "wall_s": round(wall, 2),
        "start_call_s": round(start_call_s, 2),
        "engine_wall_s": round(result.wall_seconds, 2),
        "updates": len(updates),
        "updates_running": len(running),
        "stages": stages,
        "first_running_s": round(running[0][0], 2) if running else None,
        "first_progress_s": round(stepping[0][0], 2) if stepping else None,
        "max_gap_running": _max_gap(running),
        "setup_s_without_progress": round(stepping[0][0] - running[0][0], 2) if stepping else None,
        "max_gap_event_loop": _max_gap(looping),
        "export_s": round(wall - storing[0], 2) if storing else None,
        "completion_ms": round(job.completion_ns / 1e6, 3),
        "ideal_ms": round(job.ideal_completion_ns / 1e6, 3),
        "events": result.events,
        "packets_delivered": result.packets_delivered,
        "sample_interval_ns": result.sample_interval_ns,
        "intervals": len(one.utilisation),
        "channels": channels,
        "channels_carrying_traffic": len(result.links),
        "series_rows_expected": channels * len(one.utilisation),
        "series_rows_in_telemetry": rows,
        "simulator_service_peak_rss_mb_after_start": simulator_rss_after_start,
        "simulator_service_peak_rss_mb": _peak_rss_mb(simulator_pid),
        "simulator_worker_pid_measured": worker,
        "simulator_worker_peak_rss_mb": children.get(worker) if worker else None,
        "simulator_other_children_peak_rss_mb": sorted(
            (mb for pid, mb in children.items() if pid != worker and mb is not None), reverse=True
        ),
        "telemetry_peak_rss_mb_before": telemetry_rss_before,
        "telemetry_peak_rss_mb": _peak_rss_mb(telemetry_pid),
    }
    return figures


def _max_gap(updates: list[tuple[float, simulation_pb2.Simulation]]) -> dict | None:
    """The longest wait between two updates, and the update it followed."""
    if len(updates) < 2:
        return None
    (t, before), (t_next, after) = max(itertools.pairwise(updates), key=lambda p: p[1][0] - p[0][0])
    return {
        "s": round(t_next - t, 3),
        "at_s": round(t, 2),
        "after": f"{_STATE[before.state]} {before.progress.fraction:.3f} {before.progress.stage}",
        "before": f"{_STATE[after.state]} {after.progress.fraction:.3f} {after.progress.stage}",
    }


def _probe(client: Client) -> dict:
    """Run the probe: seconds until it was seen RUNNING (or done) and until it had SUCCEEDED."""
    began = time.perf_counter()
    started = client.simulations.start(_probe_spec())
    running_s, last = None, started
    for t, simulation in _watch(client, started.name, began):
        if running_s is None and simulation.state != common_pb2.JOB_STATE_PENDING:
            running_s = t
        last = simulation
    if last.state != common_pb2.JOB_STATE_SUCCEEDED:
        raise AssertionError(f"the probe ended {_STATE[last.state]}: {last.error.message}")
    return {"running_s": running_s, "succeeded_s": time.perf_counter() - began}


class _WorkerWatch:
    """Samples a worker's CPU time in a thread: when it last grew, and when the process ended."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.busy_at = time.perf_counter()  # the last sample that found more CPU time used
        self.gone_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        ticks = cpu_ticks(self.pid)
        while not self._stop.wait(SAMPLE_S):
            if not is_running(self.pid):
                self.gone_at = time.perf_counter()
                return
            now = cpu_ticks(self.pid)
            if now != ticks:
                ticks, self.busy_at = now, time.perf_counter()

    def stopped(self, since: float) -> tuple[float, bool]:
        """(when it stopped, whether it ended): it ended, or has used no CPU for QUIET_S (then it
        stopped at the last sample that saw it busy). Waits at most STOP_TIMEOUT_S."""
        deadline = time.perf_counter() + STOP_TIMEOUT_S
        while True:
            if self.gone_at is not None:
                return self.gone_at, True
            now = time.perf_counter()
            if now - max(self.busy_at, since) >= QUIET_S:
                return max(self.busy_at, since), False
            if now > deadline:
                raise TimeoutError(f"worker {self.pid} still works {STOP_TIMEOUT_S:.0f} s after the cancel")
            time.sleep(SAMPLE_S)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def _cancel_run(client: Client, simulator_pid: int, spec, *, at_fraction: float = 0.0, after_s: float = 0.0):
    """Start `spec`, cancel it once the progress shown passes `at_fraction` (else `after_s` seconds
    after StartSimulation returned), and time what follows (see the module docstring)."""
    began = time.perf_counter()
    started = client.simulations.start(spec)
    returned = time.perf_counter() - began
    watch = _watch(client, started.name, began)
    state = common_pb2.JOB_STATE_PENDING
    if at_fraction:
        for _, simulation in watch:
            state = simulation.state
            if simulation.progress.fraction > at_fraction or state in TERMINAL:
                break
    else:
        time.sleep(max(0.0, returned + after_s - PICK_WORKER_S - (time.perf_counter() - began)))
    if state in TERMINAL:
        return {"cancelled": False, "final_state": _STATE[state], "note": "it ended before the cancel"}
    worker = _busiest_child(simulator_pid)
    if worker is None:
        raise AssertionError("the simulator has no worker process")
    follow = _WorkerWatch(worker)
    try:
        shown = client.simulations.get(started.name)  # what the run showed when it was cancelled
        cancel_at = time.perf_counter()
        try:
            answer = client.simulations.cancel(started.name)
        except FailedPreconditionError:  # it finished meanwhile (a small run)
            done = client.simulations.get(started.name)
            return {
                "cancelled": False,
                "final_state": _STATE[done.state],
                "note": "it ended before the cancel",
            }
        cancel_call_s = time.perf_counter() - cancel_at
        cancelled_seen_s = None
        for t, simulation in watch:
            state = simulation.state
            if state == common_pb2.JOB_STATE_CANCELLED and cancelled_seen_s is None:
                cancelled_seen_s = t - (cancel_at - began)
        stopped_at, killed = follow.stopped(since=cancel_at)
    finally:
        follow.close()
    # The next job, once the worker stopped: it runs on that worker, or on its replacement.
    probe = _probe(client)
    return {
        "cancelled": True,
        "progress_at_cancel": round(shown.progress.fraction, 3),
        "stage_at_cancel": shown.progress.stage,
        "state_at_cancel": _STATE[shown.state],
        "cancel_s_after_start": round(cancel_at - began, 2),
        "start_call_s": round(returned, 2),
        "cancel_call_ms": round(cancel_call_s * 1000, 1),
        "cancel_answer_state": _STATE[answer.state],
        "cancelled_seen_by_watch_ms": None if cancelled_seen_s is None else round(cancelled_seen_s * 1000, 1),
        "final_state": _STATE[state],
        "worker_pid": worker,
        "worker_killed": killed,
        "worker_stopped_ms": round((stopped_at - cancel_at) * 1000, 1),
        "next_run_running_ms": round(probe["running_s"] * 1000, 1),
        "next_run_succeeded_ms": round(probe["succeeded_s"] * 1000, 1),
    }


def run_service_packet(k: int = 16, ranks: int = 1024, size_bytes: int = 0) -> dict:
    """Start the stack, run the job to completion, then cancel it twice (see the module docstring)."""
    compile_began = time.perf_counter()
    compiled = warm_up()  # as `make run` does before the services start: no run waits for a compile
    compile_s = time.perf_counter() - compile_began
    extra_env = {"FABRICTWIN_LOG_LEVEL": "WARNING"}
    with tempfile.TemporaryDirectory() as data_dir, running_stack(data_dir, extra_env=extra_env) as stack:
        simulator_pid, telemetry_pid = stack.processes["simulator"].pid, stack.processes["telemetry"].pid
        with Client(
            topology=stack.address("topology"),
            simulator=stack.address("simulator"),
            telemetry=stack.address("telemetry"),
            timeout=600,
        ) as client:
            client.fabrics.create_fat_tree(k, fabric_id=FABRIC)
            client.fabrics.create_fat_tree(4, fabric_id=PROBE_FABRIC)
            figures: dict = {"k": k, "engine_compiled_first_s": round(compile_s, 1) if compiled else 0.0}
            figures["run"] = _full_run(
                client, simulator_pid, telemetry_pid, packet_spec(FABRIC, ranks, "full", size_bytes), "full"
            )
            alone = _probe(client)
            figures["next_run_alone_running_ms"] = round(alone["running_s"] * 1000, 1)
            figures["next_run_alone_succeeded_ms"] = round(alone["succeeded_s"] * 1000, 1)
            figures["cancel_while_simulating"] = _cancel_run(
                client,
                simulator_pid,
                packet_spec(FABRIC, ranks, "cancelled-1", size_bytes),
                at_fraction=CANCEL_AT_FRACTION,
            )
            figures["cancel_during_setup"] = _cancel_run(
                client,
                simulator_pid,
                packet_spec(FABRIC, ranks, "cancelled-2", size_bytes),
                after_s=SETUP_CANCEL_AFTER_S,
            )
    return figures


@benchmark("service.packet.k16")
def service_packet_k16() -> dict:
    return run_service_packet()


@benchmark("service.packet.k32")
def service_packet_k32() -> dict:
    """The same on the k=32 fat-tree (8,192 hosts, 49,152 channels) with `engine.allreduce.k32`'s
    ranks (FABRICTWIN_BENCH_K32_RANKS, default 8,192: every host). The ring is generated as the run
    goes (workload.RingStream), so it runs within the simulator's default limits (the admission
    limits what a streamed ring holds, not its 134M transfers)."""
    return run_service_packet(k=32, ranks=K32_RANKS)
