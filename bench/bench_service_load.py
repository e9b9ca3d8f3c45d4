"""`service.load`: 64 clients on the real services at once, mixed reads and writes, bounded in time.

The four services run as their own processes (`services.stack`, SQLite under a temporary directory,
as `make run` starts them, the roll-up sweep every 5 s). A k=8 fat-tree's 768 switch ports get an
hour of samples, one every 10 s (276,480 rows), rolled up before the clock starts. Then:

1. QuerySeries alone: one client (one port's hour, raw: 360 points), first one call after the
   other, then pausing between calls as the 64 clients do (exponential, mean 0.1 s: a call after
   any pause takes about twice as long as one right after another, 4.4 ms against 2.1 ms here,
   whatever the service; 0.1 s costs the same as 0.5 s), for p50 and p99 without contention.
2. Under load: 64 clients (8 processes x 8 threads, each client its own channel) call for
   `SECONDS` (20 s), each waiting a random think time between calls (exponential, mean `THINK_S`,
   0.5 s: about 2 calls a second per client, 150 in all, a dashboard or a poller rather than a
   flood; 64 clients with no pause measure only how many cores the machine has). Each
   call is drawn by weight from telemetry's QuerySeries, TopLinks and GetUtilisationSkew (the 384
   uplinks over the last 10 minutes, per minute), GetSource and IngestSamplesAcked (the SDK's
   ingest: 48 ports x 10 new times) and topology's GetFabric, ListLinks and SetLinkState (a link
   DOWN, then UP).

Reported per method: calls, errors (any status but OK), p50 and p99 in ms; the calls per second
made; QuerySeries p99 under load over its p99 alone, paced like the load (issue 11's bar: at most
5), and over its p99 and p50 alone back to back. Every row sent must be stored exactly once: the
source's sample count is checked at the end.
FABRICTWIN_BENCH_LOAD_SECONDS and FABRICTWIN_BENCH_LOAD_THINK_S change the duration and the pause.
"""

from __future__ import annotations

import collections
import multiprocessing
import os
import random
import tempfile
import threading
import time

import numpy as np
from fabrictwin import Client
from fabrictwin.errors import FabricTwinError

from bench.registry import benchmark
from services.stack import running_stack

CLIENTS = 64
PROCESSES = 8
SECONDS = float(os.environ.get("FABRICTWIN_BENCH_LOAD_SECONDS", "20"))
THINK_S = float(os.environ.get("FABRICTWIN_BENCH_LOAD_THINK_S", "0.5"))
ALONE_CALLS = 300
ALONE_PACED_CALLS = 150
ALONE_PAUSE_S = 0.1  # a pause this long already costs what 0.5 s does (an idle client's first packet)
S = 1_000_000_000
STEP_NS = 10 * S
TIMES = 360  # an hour every 10 s
FABRIC = "load-ft8"
SOURCE = "load-ft8-live"
INGEST_PORTS = 48
INGEST_TIMES = 10
LAST_10_MINUTES = {"start_ns": (TIMES - 60) * STEP_NS, "end_ns": TIMES * STEP_NS}

WEIGHTS = {
    "telemetry.QuerySeries": 50,
    "telemetry.TopLinks": 5,
    "telemetry.GetUtilisationSkew": 5,
    "telemetry.GetSource": 10,
    "telemetry.IngestSamplesAcked": 15,  # the SDK's ingest, acknowledged batch by batch
    "topology.GetFabric": 5,
    "topology.ListLinks": 5,
    "topology.SetLinkState": 5,  # a pair: the link DOWN, then UP again, timed together
}


def _switch_ports(client: Client) -> tuple[list[str], list[int]]:
    """`node/pN` of both ends of every switch-to-switch link, and the links' indices."""
    ports, links = [], []
    for link in client.fabrics.links(FABRIC):
        a, b = link.node_a.rsplit("/", 1)[-1], link.node_b.rsplit("/", 1)[-1]
        if a.startswith("host") or b.startswith("host"):
            continue
        ports += [f"{a}/p{link.port_a}", f"{b}/p{link.port_b}"]
        links.append(link.index)
    return ports, links


def _prepare(client: Client) -> tuple[list[str], list[int]]:
    client.fabrics.create_fat_tree(8, fabric_id=FABRIC, link_speed_gbps=400)
    ports, links = _switch_ports(client)
    client.telemetry.create_source(SOURCE, fabric=FABRIC)
    rng = np.random.default_rng(11)
    port_index = np.tile(np.arange(len(ports)), TIMES)
    time_ns = np.repeat(np.arange(TIMES, dtype=np.int64) * STEP_NS, len(ports))
    utilisation = rng.random(port_index.size)
    reply = client.telemetry.ingest_columns(
        SOURCE, ports, port_index.tolist(), time_ns.tolist(),
        {"utilisation": utilisation.tolist(), "tx_bytes": (utilisation * 5e11).tolist()},
    )  # fmt: skip
    if reply.stored != port_index.size:
        raise AssertionError(f"prefill stored {reply.stored} of {port_index.size} rows")
    deadline = time.monotonic() + 60
    while not client.telemetry.get_source(SOURCE).rolled_up_until_ns:  # as a source a minute old is
        if time.monotonic() > deadline:
            raise TimeoutError("the sweep did not roll the prefilled hour up")
        time.sleep(0.2)
    return ports, links


def _query_series(client: Client, ports: list[str], rng: random.Random) -> None:
    port = rng.choice(ports)
    (series,) = client.telemetry.query_series(SOURCE, "utilisation", ports=[port], end_ns=TIMES * STEP_NS)
    if len(series.values) != TIMES:
        raise AssertionError(f"{port}: {len(series.values)} points, expected {TIMES}")


class _Caller:
    """One client: its own channels, its own lane of ingest times, and the calls it can make."""

    def __init__(self, addresses: dict[str, str], lane: int, ports: list[str], links: list[int]) -> None:
        self.client = Client(topology=addresses["topology"], telemetry=addresses["telemetry"], timeout=60)
        self.rng = random.Random(lane)
        self.lane = lane
        self.ports = ports
        self.links = links
        self.ingested = 0  # rows sent and acknowledged
        self.sent = 0

    def call(self, method: str) -> None:
        telemetry, fabrics = self.client.telemetry, self.client.fabrics
        if method == "telemetry.QuerySeries":
            _query_series(self.client, self.ports, self.rng)
        elif method == "telemetry.TopLinks":
            telemetry.top_links(SOURCE, "utilisation", ports=["group:uplinks"], limit=10, **LAST_10_MINUTES)
        elif method == "telemetry.GetUtilisationSkew":
            telemetry.utilisation_skew(SOURCE, ports=["group:uplinks"], step_ns=60 * S, **LAST_10_MINUTES)
        elif method == "telemetry.GetSource":
            telemetry.get_source(SOURCE)
        elif method == "telemetry.IngestSamplesAcked":
            self._ingest()
        elif method == "topology.GetFabric":
            fabrics.get(FABRIC)
        elif method == "topology.ListLinks":
            sum(1 for _ in fabrics.links(FABRIC))
        elif method == "topology.SetLinkState":
            link = self.rng.choice(self.links)
            fabrics.set_link_state(FABRIC, link, "down")
            fabrics.set_link_state(FABRIC, link, "up")
        else:
            raise ValueError(method)

    def _ingest(self) -> None:
        # New rows only: times after the prefilled hour, in this client's own lane of nanoseconds.
        first = TIMES * STEP_NS + self.sent * S + self.lane
        ports = self.rng.sample(self.ports, INGEST_PORTS)
        port_index = list(range(INGEST_PORTS)) * INGEST_TIMES
        time_ns = [first + (i // INGEST_PORTS) * CLIENTS for i in range(len(port_index))]
        self.sent += 1
        reply = self.client.telemetry.ingest_columns(
            SOURCE, ports, port_index, time_ns, {"utilisation": [0.5] * len(port_index)}
        )
        if reply.stored != len(port_index):
            raise AssertionError(f"stored {reply.stored} of {len(port_index)} new rows")
        self.ingested += reply.stored


def _client_process(job: tuple[dict[str, str], list[int], list[str], list[int], float, float]) -> dict:
    """Run this process's clients until `until` (time.time()); their latencies and errors."""
    addresses, lanes, ports, links, until, think_s = job
    latencies: dict[str, list[float]] = collections.defaultdict(list)
    errors: collections.Counter = collections.Counter()
    first_errors: dict[str, str] = {}
    ingested = [0]
    lock = threading.Lock()
    methods, weights = list(WEIGHTS), list(WEIGHTS.values())

    def run(lane: int) -> None:
        caller = _Caller(addresses, lane, ports, links)
        try:
            while time.time() < until:
                time.sleep(caller.rng.expovariate(1 / think_s))
                method = caller.rng.choices(methods, weights)[0]
                began = time.perf_counter()
                try:
                    caller.call(method)
                except (FabricTwinError, AssertionError) as exc:
                    with lock:
                        errors[method] += 1
                        first_errors.setdefault(method, str(exc)[:300])
                    continue
                elapsed = time.perf_counter() - began
                with lock:
                    latencies[method].append(elapsed)
        finally:
            with lock:
                ingested[0] += caller.ingested
            caller.client.close()

    threads = [threading.Thread(target=run, args=(lane,)) for lane in lanes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {
        "latencies": dict(latencies),
        "errors": dict(errors),
        "first_errors": first_errors,
        "ingested": ingested[0],
    }


def _ms(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)) * 1000, 1) if values else 0.0


def _alone(client: Client, ports: list[str], calls: int, pause_s: float = 0.0) -> list[float]:
    rng = random.Random(0)
    for _ in range(20):  # warm the channel and the server's caches
        _query_series(client, ports, rng)
    timings = []
    for _ in range(calls):
        if pause_s:
            time.sleep(rng.expovariate(1 / pause_s))
        began = time.perf_counter()
        _query_series(client, ports, rng)
        timings.append(time.perf_counter() - began)
    return timings


def run_load(clients: int = CLIENTS, seconds: float = SECONDS, think_s: float = THINK_S) -> dict:
    """Start the stack, prefill, time QuerySeries alone, then `clients` clients for `seconds`."""
    extra_env = {"FABRICTWIN_LOG_LEVEL": "WARNING", "FABRICTWIN_MAINTENANCE_INTERVAL_SECONDS": "5"}
    with tempfile.TemporaryDirectory() as data_dir, running_stack(data_dir, extra_env=extra_env) as stack:
        addresses = {name: stack.address(name) for name in ("topology", "telemetry")}
        with Client(topology=addresses["topology"], telemetry=addresses["telemetry"], timeout=600) as client:
            ports, links = _prepare(client)
            rows_before = client.telemetry.get_source(SOURCE).sample_count
            alone = _alone(client, ports, ALONE_CALLS)
            paced = _alone(client, ports, ALONE_PACED_CALLS, ALONE_PAUSE_S)
            lanes = [list(range(clients))[p::PROCESSES] for p in range(PROCESSES)]
            until = time.time() + 5 + seconds  # 5 s for the processes to start
            jobs = [(addresses, lane, ports, links, until, think_s) for lane in lanes if lane]
            context = multiprocessing.get_context("spawn")
            with context.Pool(len(jobs)) as pool:
                results = pool.map(_client_process, jobs)
            rows_after = client.telemetry.get_source(SOURCE).sample_count
    latencies: dict[str, list[float]] = collections.defaultdict(list)
    errors: collections.Counter = collections.Counter()
    first_errors: dict[str, str] = {}
    ingested = 0
    for result in results:
        for method, values in result["latencies"].items():
            latencies[method] += values
        errors.update(result["errors"])
        for method, message in result["first_errors"].items():
            first_errors.setdefault(method, message)
        ingested += result["ingested"]
    calls = sum(len(v) for v in latencies.values()) + sum(errors.values())
    figures: dict = {
        "clients": clients,
        "seconds": seconds,
        "think_s_mean": think_s,
        "calls": calls,
        "calls_per_s": round(calls / seconds, 1),
        "errors": sum(errors.values()),
    }
    for method in WEIGHTS:
        values = latencies.get(method, [])
        key = method.replace("telemetry.", "").replace("topology.", "topology_")
        figures[f"{key}_calls"] = len(values) + errors.get(method, 0)
        figures[f"{key}_errors"] = errors.get(method, 0)
        figures[f"{key}_p50_ms"] = _ms(values, 50)
        figures[f"{key}_p99_ms"] = _ms(values, 99)
    figures["QuerySeries_alone_p50_ms"] = _ms(alone, 50)
    figures["QuerySeries_alone_p99_ms"] = _ms(alone, 99)
    figures["QuerySeries_alone_paced_p50_ms"] = _ms(paced, 50)
    figures["QuerySeries_alone_paced_p99_ms"] = _ms(paced, 99)
    under_load = _ms(latencies.get("telemetry.QuerySeries", []), 99)
    figures["QuerySeries_p99_over_alone_paced_p99"] = round(under_load / _ms(paced, 99), 2)
    figures["QuerySeries_p99_over_alone_p99"] = round(under_load / _ms(alone, 99), 2)
    figures["QuerySeries_p99_over_alone_p50"] = round(under_load / _ms(alone, 50), 2)
    figures["rows_ingested_under_load"] = ingested
    figures["rows_stored_under_load"] = rows_after - rows_before
    if first_errors:
        figures["first_errors"] = "; ".join(f"{m}: {e}" for m, e in sorted(first_errors.items()))
    if rows_after - rows_before != ingested:
        raise AssertionError(f"{ingested} rows acknowledged under load, {rows_after - rows_before} stored")
    return figures


@benchmark("service.load")
def service_load() -> dict:
    return run_load()
