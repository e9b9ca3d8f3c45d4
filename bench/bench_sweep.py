"""`scenario.sweep.replicas`: one sweep's wall time with 1, 2 and 4 simulator replicas.

Every service is its own process, started as `services.stack` starts them (`python -m
services.<name> --port <free port>`, SQLite under a temporary directory): topology and telemetry
once, then for each replica count a fresh set of simulator replicas, each with one worker process
(`FABRICTWIN_WORKERS=1`: the replica count is the parallelism measured), and a fresh orchestrator
whose `FABRICTWIN_SIMULATOR_ADDRESSES` lists them, as the chart's headless Service lists the pods.

The sweep: a 128-rank ring AllReduce of 256 MiB with 4 QPs per connection, ranks scattered over a
k=8 fat-tree, ECMP, at `POINTS` (8) values of `load_balancing.seed`: one simulation per point, about
1 s each at FLOW fidelity on this machine (the hash seed decides the collisions, and so the work).
Before the clock starts, each replica runs one small simulation directly (its worker imports the
engine and the replica caches the fabric's snapshot), so every count is timed warm. Timed: from
RunScenario to the run's terminal state seen through WatchRun (`wall_s`); `run_s` is the
orchestrator's own account, the run's end_time minus its create_time.

Reported per replica count: points, replicas, `wall_s`, `speedup` over one replica, how many points
each replica ran (the orchestrator's placement) and when it finished its last one (`replica_done_s`,
from the run's creation: imbalance shows here), the CPU seconds this benchmark's processes used
meanwhile (`cpu_s`: the sweep's work, about the same for every count) and those every other process
on the machine used (`other_cpu_s`: on a shared machine other work takes cores from the replicas;
trust the runs where it is near 0). Also the machine's CPU count (a replica is one busy core, so past
`cpu_count` replicas only share the cores) and its 1-minute load average before the first start.
Every process is stopped at the end (SIGTERM, a bounded wait, then SIGKILL).
FABRICTWIN_BENCH_SWEEP_POINTS changes the number of points.
"""

from __future__ import annotations

import collections
import contextlib
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence

import grpc
from fabrictwin import Client
from fabrictwin.v1 import common_pb2, scenario_pb2, simulation_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.registry import benchmark
from services.stack import SERVICES, free_port

POINTS = int(os.environ.get("FABRICTWIN_BENCH_SWEEP_POINTS", "8"))
REPLICAS = (1, 2, 4)
FABRIC = "sweep-ft8"
RANKS = 128
SIZE_BYTES = 256 << 20
QPS = 4  # QPs per connection: 4x the flows, so a point is about a second of work, not a fraction
START_TIMEOUT_S = 60.0
RUN_TIMEOUT_S = 900.0
STOP_TIMEOUT_S = 20.0
ROOT = pathlib.Path(__file__).resolve().parent.parent


class _Processes:
    """Service processes of the benchmark, each on a free port, logging under `data_dir/logs`."""

    def __init__(self, data_dir: pathlib.Path, env: dict[str, str]) -> None:
        self.data_dir = data_dir
        self.env = env
        self.running: list[tuple[str, subprocess.Popen]] = []
        self._waiting: list[tuple[str, str, str, subprocess.Popen]] = []  # started, not yet SERVING
        (data_dir / "logs").mkdir(parents=True, exist_ok=True)

    def start(self, service: str, label: str, extra_env: dict[str, str] | None = None) -> str:
        """Start `python -m services.<service>` on a free port; its address."""
        port = free_port()
        with open(self.data_dir / "logs" / f"{label}.log", "ab") as log:  # the child keeps its own handle
            process = subprocess.Popen(
                [sys.executable, "-m", f"services.{service}", "--port", str(port)],
                cwd=ROOT,
                env={**self.env, **(extra_env or {})},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.running.append((label, process))
        address = f"127.0.0.1:{port}"
        self._waiting.append((service, label, address, process))
        return address

    def wait_serving(self, timeout: float = START_TIMEOUT_S) -> None:
        """Until every process started since the last wait answers its health Check with SERVING."""
        deadline = time.monotonic() + timeout
        for service, label, address, process in self._waiting:
            with grpc.insecure_channel(address) as channel:
                stub = health_pb2_grpc.HealthStub(channel)
                request = health_pb2.HealthCheckRequest(service=SERVICES[service])
                while True:
                    if process.poll() is not None:
                        log = (self.data_dir / "logs" / f"{label}.log").read_text()[-3000:]
                        raise RuntimeError(f"{label} exited with {process.returncode}:\n{log}")
                    with contextlib.suppress(grpc.RpcError):
                        # types-grpcio-health-checking declares HealthStub without its methods.
                        reply = stub.Check(request, timeout=1)  # type: ignore[attr-defined]
                        if reply.status == health_pb2.HealthCheckResponse.SERVING:
                            break
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{label} did not report SERVING within {timeout:.0f} s")
                    time.sleep(0.1)
        self._waiting = []

    def stop(self, labels: Sequence[str] | None = None) -> None:
        """SIGTERM the named processes (all by default), wait a bounded time, SIGKILL what is left."""
        chosen = [(label, p) for label, p in self.running if labels is None or label in labels]
        for _, process in chosen:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for _, process in chosen:
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.running = [(label, p) for label, p in self.running if (label, p) not in chosen]
        self._waiting = [w for w in self._waiting if w[1] not in {label for label, _ in chosen}]


@contextlib.contextmanager
def _processes(data_dir: pathlib.Path, env: dict[str, str]) -> Iterator[_Processes]:
    processes = _Processes(data_dir, env)
    try:
        yield processes
    finally:
        processes.stop()


def _job(ranks: int, size_bytes: int, qps: int = 1) -> simulation_pb2.Job:
    return simulation_pb2.Job(
        collective=simulation_pb2.COLLECTIVE_ALL_REDUCE,
        size_bytes=size_bytes,
        rank_count=ranks,
        placement=simulation_pb2.PLACEMENT_POLICY_SCATTERED,
        qps_per_connection=qps,
    )


def _warm(address: str, fabric: str) -> None:
    """One small simulation straight on the replica at `address`: its worker imports the engine and the
    replica caches the fabric's snapshot before the clock starts."""
    spec = simulation_pb2.SimulationSpec(
        fabric=fabric,
        jobs=[_job(8, 1 << 20)],
        load_balancing=common_pb2.LoadBalancing(mode=common_pb2.LOAD_BALANCING_MODE_ECMP),
    )
    with Client(simulator=address, timeout=120) as client:
        done = client.simulations.wait(client.simulations.start(spec).name, timeout=120)
    if done.state != common_pb2.JOB_STATE_SUCCEEDED:
        raise RuntimeError(f"the warm-up simulation on {address} ended {done.state}: {done.error.message}")


def _placement(addresses: Sequence[str], run: scenario_pb2.Run) -> tuple[list[int], list[float]]:
    """Per replica, in the order of `addresses`: how many of the run's simulations it ran, and when
    its last one ended, in seconds after the run was created (server clocks: one machine)."""
    names = {result.simulation for result in run.results}
    began = run.create_time.ToNanoseconds()
    counts, done = [], []
    for address in addresses:
        with Client(simulator=address, timeout=30) as client:
            ran = [s for s in client.simulations.list() if s.name in names]
        counts.append(len(ran))
        ends = [s.end_time.ToNanoseconds() - began for s in ran]
        done.append(round(max(ends) / 1e9, 2) if ends else 0.0)
    return counts, done


def _cpu_seconds() -> tuple[float, float]:
    """CPU seconds so far (Linux /proc): the whole machine's busy time, and the time of this process
    and every process it started that is still alive (the services, the simulators' workers)."""
    tick = os.sysconf("SC_CLK_TCK")
    with open("/proc/stat") as stat:
        cpu = [int(x) for x in stat.readline().split()[1:]]
    busy = sum(cpu[:3]) + sum(cpu[5:8])  # user nice system, irq softirq steal (guest is within user)
    children: dict[int, list[int]] = collections.defaultdict(list)
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()  # after the command, which may hold spaces
        except OSError:  # gone meanwhile
            continue
        children[int(fields[1])].append(int(entry))
        ticks[int(entry)] = int(fields[11]) + int(fields[12])  # utime + stime, every thread
    ours, pending = 0, [os.getpid()]
    while pending:
        pid = pending.pop()
        ours += ticks.get(pid, 0)
        pending += children.get(pid, [])
    return busy / tick, ours / tick


def _sweep(
    orchestrator: str, scenario_id: str, points: int, job: simulation_pb2.Job
) -> tuple[float, float, float, scenario_pb2.Run]:
    """Create the sweep on `orchestrator` and run it: wall seconds, the CPU seconds this benchmark's
    processes and all other processes used meanwhile, and the finished run."""
    seeds = scenario_pb2.Sweep(parameter="load_balancing.seed", values=[str(s + 1) for s in range(points)])
    scenario = scenario_pb2.Scenario(
        fabric=f"fabrics/{FABRIC}",
        jobs=[job],
        modes=[common_pb2.LoadBalancing(mode=common_pb2.LOAD_BALANCING_MODE_ECMP, label="ECMP")],
        sweeps=[seeds],
    )
    with Client(orchestrator=orchestrator, timeout=60) as client:
        created = client.scenarios.create_from(scenario, scenario_id=scenario_id)
        busy_before, ours_before = _cpu_seconds()
        began = time.perf_counter()
        run = client.scenarios.run(created.name)
        done = client.scenarios.wait_run(run.name, timeout=RUN_TIMEOUT_S)
        wall = time.perf_counter() - began
        busy_after, ours_after = _cpu_seconds()
    ours = ours_after - ours_before
    return wall, ours, max(0.0, busy_after - busy_before - ours), done


def run_sweep_replicas(
    points: int = POINTS,
    replica_counts: Sequence[int] = REPLICAS,
    ranks: int = RANKS,
    size_bytes: int = SIZE_BYTES,
    qps: int = QPS,
) -> dict:
    """The same sweep of `points` simulations behind each of `replica_counts` simulator replicas."""
    runs: list[dict] = []
    load_before = os.getloadavg()[0]  # other work on the machine shares the cores the replicas use
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = pathlib.Path(tmp)
        env = {**os.environ, "FABRICTWIN_DATA_DIR": str(data_dir), "FABRICTWIN_LOG_FORMAT": "json",
               "FABRICTWIN_LOG_LEVEL": "WARNING", "FABRICTWIN_WORKERS": "1"}  # fmt: skip
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
        with _processes(data_dir, env) as processes:
            peers = {
                "FABRICTWIN_TOPOLOGY_ADDRESS": processes.start("topology", "topology"),
                "FABRICTWIN_TELEMETRY_ADDRESS": processes.start("telemetry", "telemetry"),
            }
            processes.wait_serving()
            with Client(topology=peers["FABRICTWIN_TOPOLOGY_ADDRESS"], timeout=120) as client:
                client.fabrics.create_fat_tree(8, fabric_id=FABRIC)
            for count in replica_counts:
                labels = [f"simulator-{count}x-{i}" for i in range(count)]
                replicas = [processes.start("simulator", label, peers) for label in labels]
                orchestrator_label = f"orchestrator-{count}x"
                orchestrator = processes.start(
                    "orchestrator",
                    orchestrator_label,
                    {**peers, "FABRICTWIN_SIMULATOR_ADDRESSES": ",".join(replicas)},
                )
                processes.wait_serving()
                for address in replicas:
                    _warm(address, f"fabrics/{FABRIC}")
                job = _job(ranks, size_bytes, qps)
                wall, cpu, other_cpu, run = _sweep(orchestrator, f"sweep-{count}x", points, job)
                states = collections.Counter(common_pb2.JobState.Name(r.state) for r in run.results)
                if run.state != common_pb2.JOB_STATE_SUCCEEDED or len(run.results) != points:
                    raise AssertionError(
                        f"{count} replicas: run {common_pb2.JobState.Name(run.state)} with {dict(states)} "
                        f"({run.error.message})"
                    )
                placement, done = _placement(replicas, run)
                run_s = (run.end_time.ToNanoseconds() - run.create_time.ToNanoseconds()) / 1e9
                runs.append(
                    {
                        "points": points,
                        "replicas": count,
                        "wall_s": round(wall, 3),
                        "run_s": round(run_s, 3),  # the orchestrator's own account of the run
                        "points_succeeded": states["JOB_STATE_SUCCEEDED"],
                        "points_per_replica": placement,
                        "replica_done_s": done,  # when each replica finished its last point
                        "cpu_s": round(cpu, 2),  # this benchmark's processes, during the run
                        "other_cpu_s": round(other_cpu, 2),  # everything else on the machine meanwhile
                    }
                )
                processes.stop([*labels, orchestrator_label])
    base = runs[0]["wall_s"] if runs and runs[0]["replicas"] == 1 else None
    for entry in runs:
        entry["speedup"] = round(base / entry["wall_s"], 2) if base else None
    return {
        "points": points,
        "cpu_count": os.cpu_count() or 0,
        "workers_per_replica": 1,
        "load_average_1m_before": round(load_before, 2),
        "job": f"ring AllReduce, {ranks} ranks, {size_bytes >> 20} MiB, {qps} QPs per connection, "
        "scattered, k=8 fat-tree, ECMP, FLOW",
        "runs": runs,
    }


@benchmark("scenario.sweep.replicas")
def sweep_replicas() -> dict:
    return run_sweep_replicas()
