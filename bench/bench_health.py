"""`telemetry.health.<db>`: link health over 4,096 links and one hour of samples.

A source of 8,192 ports (both ends of 4,096 links) sampled every second for one hour (29,491,200
rows, generated in SQL once per database and rolled up; later runs reuse it): bytes received, symbol
errors, receive errors and LinkDownedCounter. One end of every 64th link counts a symbol error a
second, and every 1,024th link drops once, half-way through. Timed: GetPortHealth over the last hour
through the real telemetry service (its own process), median of 5 (`ms`), and the SDK's `assess`
turning the 8,192 ports into 4,096 link verdicts (`assess_ms`). Checked against the closed form: 64
links DEGRADED at 3,600 errors over the bits that end received, 4 DOWN, the rest UP.

PostgreSQL runs when FABRICTWIN_BENCH_POSTGRES_URL (or FABRICTWIN_TEST_POSTGRES_URL) is set.
"""

from __future__ import annotations

import statistics
import time

from fabrictwin.link_health import assess
from fabrictwin.v1 import topology_pb2

from bench.bench_telemetry import _postgres_url, _service, _sqlite_dataset_url, generated_source
from bench.registry import benchmark
from services.telemetry.partitions import partition_name
from services.telemetry.store import TelemetryStore

SOURCE = "bench-health-4k-links"
LINKS = 4_096
SECONDS = 3_600
S = 1_000_000_000
ERRING_EVERY = 64
DOWN_EVERY = 1_024
METRICS = ("rx_bytes", "symbol_errors", "rcv_errors", "link_downed")
# Port 2l is end a of link l, 2l + 1 end b; a link carries 5..95 % of 50 GB/s, the same each second.
_RX = "50000000000.0 * (0.05 + 0.9 * ((link * 2654435761) % 4096) / 4096.0)"
_SYMBOL = f"CASE WHEN link % {ERRING_EVERY} = 0 AND side = 0 THEN 1.0 ELSE 0.0 END"
_DOWNED = f"CASE WHEN link % {DOWN_EVERY} = 7 AND side = 1 AND t = {SECONDS // 2} THEN 1.0 ELSE 0.0 END"


def _rx_per_second(link: int) -> float:
    return 50000000000.0 * (0.05 + 0.9 * ((link * 2654435761) % 4096) / 4096.0)


def _port(link: int, side: int) -> str:
    return f"sw{link}-{'ab'[side]}/p1"


def _fill(store: TelemetryStore, key: int, sqlite: bool) -> None:
    select = (
        f"SELECT {key}, p.port_id, t * CAST({S} AS BIGINT), {_RX}, {_SYMBOL}, 0.0, {_DOWNED} "
        "FROM bench_health_ports p CROSS JOIN seconds"
    )
    columns = "source_key, port_id, time_ns, rx_bytes, symbol_errors, rcv_errors, link_downed"
    with store.engine.begin() as connection:
        create = (
            "CREATE TEMPORARY TABLE bench_health_ports AS SELECT id AS port_id, "
            "CAST(substr(name, 3, instr(name, '-') - 3) AS INTEGER) AS link, "
            "CASE WHEN substr(name, instr(name, '-') + 1, 1) = 'a' THEN 0 ELSE 1 END AS side "
            f"FROM telemetry_ports WHERE source_key = {key}"
            if sqlite
            else "CREATE TEMPORARY TABLE bench_health_ports AS SELECT id AS port_id, "
            "split_part(substr(name, 3), '-', 1)::int AS link, "
            "CASE WHEN split_part(name, '-', 2) LIKE 'a%' THEN 0 ELSE 1 END AS side "
            f"FROM telemetry_ports WHERE source_key = {key}"
        )
        connection.exec_driver_sql(create if sqlite else create.replace("%", "%%"))
        if sqlite:
            connection.exec_driver_sql(
                f"WITH RECURSIVE seconds(t) AS (SELECT 0 UNION ALL SELECT t + 1 FROM seconds "
                f"WHERE t < {SECONDS - 1}) INSERT INTO telemetry_samples ({columns}) {select}"
            )
        else:
            part = partition_name("telemetry_samples", key)
            insert = f"INSERT INTO {part} ({columns}) " + select.replace(
                "CROSS JOIN seconds", f"CROSS JOIN generate_series(0, {SECONDS - 1}) t"
            )
            connection.exec_driver_sql(insert.replace("%", "%%"))  # psycopg: % starts a placeholder
    if not sqlite:
        with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.exec_driver_sql(f"VACUUM ANALYZE {partition_name('telemetry_samples', key)}")


def _dataset(database_url: str, sqlite: bool) -> dict[str, object]:
    generated, rolled_up = generated_source(
        database_url,
        SOURCE,
        [_port(link, side) for link in range(LINKS) for side in (0, 1)],
        (SECONDS - 1) * S,
        METRICS,
        lambda store, key: _fill(store, key, sqlite),
    )
    if generated is None or rolled_up is None:
        return {"dataset": "reused from an earlier run"}
    return {"dataset_generate_s": round(generated, 1), "dataset_rollup_s": round(rolled_up, 1)}


def _links() -> list[topology_pb2.Link]:
    return [
        topology_pb2.Link(
            index=link,
            node_a=f"fabrics/f/nodes/sw{link}-a",
            port_a=1,
            node_b=f"fabrics/f/nodes/sw{link}-b",
            port_b=1,
            display_name=f"sw{link}-a/p1<->sw{link}-b/p1",
            state=topology_pb2.LINK_STATE_UP,
        )
        for link in range(LINKS)
    ]


def _health(database_url: str, sqlite: bool) -> dict:
    made = _dataset(database_url, sqlite)
    with _service(database_url) as client:
        timings = []
        for _ in range(5):
            begin = time.perf_counter()
            health = client.telemetry.port_health(SOURCE, window_ns=SECONDS * S)
            timings.append((time.perf_counter() - begin) * 1000)
    links = _links()
    begin = time.perf_counter()
    verdicts = assess(links, health.ports)
    assess_ms = (time.perf_counter() - begin) * 1000
    states = [v.state for v in verdicts]
    degraded = {v.index: v.bit_error_rate for v in verdicts if v.state == "DEGRADED"}
    expected = {
        link: SECONDS / (_rx_per_second(link) * SECONDS * 8) for link in range(0, LINKS, ERRING_EVERY)
    }
    if len(health.ports) != 2 * LINKS or len(verdicts) != LINKS:
        raise AssertionError(f"{len(health.ports)} ports, {len(verdicts)} verdicts")
    if states.count("DOWN") != LINKS // DOWN_EVERY or set(degraded) != set(expected):
        raise AssertionError(f"{states.count('DOWN')} DOWN, {len(degraded)} DEGRADED")
    for link, ber in degraded.items():
        if abs(ber - expected[link]) > 1e-9 * expected[link]:
            raise AssertionError(f"link {link}: BER {ber}, closed form {expected[link]}")
    return {
        "links": LINKS,
        "rows_in_window": 2 * LINKS * SECONDS,
        "ms": round(statistics.median(timings), 1),
        "assess_ms": round(assess_ms, 1),
        "degraded": len(degraded),
        "down": states.count("DOWN"),
        **made,
    }


@benchmark("telemetry.health.postgresql")
def health_postgresql() -> dict:
    return _health(_postgres_url(), False)


@benchmark("telemetry.health.sqlite")
def health_sqlite() -> dict:
    return _health(_sqlite_dataset_url().replace("telemetry-50m.db", "telemetry-health.db"), True)
