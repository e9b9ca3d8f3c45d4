"""Every SQL query of the shipped Grafana dashboard (each panel's and each query variable's), expanded as
Grafana expands it (`grafana_sql.expand`), runs on a real PostgreSQL telemetry database migrated to head
and filled through the telemetry store, and returns what the samples say: values worked out here from
the samples themselves, and, for skew and hot links, the telemetry store's own answers.

The data: two sources bound to one small leaf-spine fabric, a live one whose ports are named as
counters name them (`leaf-0/p2`) and a simulated one named by direction (`leaf-0->spine-0`), both in a
random minute of 2037 so that the "all sources" ingest series sees no other test's samples.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import math
import secrets
from collections import defaultdict
from collections.abc import Iterator

import numpy as np
import psycopg
import pytest
from sqlalchemy.engine import make_url

from services.common.db import normalise_url
from services.common.resources import new_id
from services.telemetry.groups import FabricLinks, group_members
from services.telemetry.store import SourceKind, SourceRecord, TelemetryStore
from tests.deploy.grafana_sql import GrafanaRange, expand, interval_seconds
from tests.deploy.test_grafana_dashboard import DASHBOARD_FILE

pytestmark = pytest.mark.postgres

SECOND = 1_000_000_000
GROUPS = ("uplinks", "downlinks", "switch-links", "host-links", "all")
LOSS_COLUMNS = {
    "drops": "drops",
    "receive errors": "rcv_errors",
    "symbol errors": "symbol_errors",
    "transmit discards": "xmit_discards",
}
# Two leaves, two spines, one host per leaf: leaf-i port 1 to its host, ports 2 and 3 up to the spines,
# port 4 to the other leaf.
ENDS = [
    ("host-0", 1, 0, "leaf-0", 1, 1),
    ("host-1", 1, 0, "leaf-1", 1, 1),
    ("leaf-0", 2, 1, "spine-0", 1, 2),
    ("leaf-0", 3, 1, "spine-1", 1, 2),
    ("leaf-1", 2, 1, "spine-0", 2, 2),
    ("leaf-1", 3, 1, "spine-1", 2, 2),
    ("leaf-0", 4, 1, "leaf-1", 4, 1),  # a peer link between the leaves: a switch link, neither up nor down
]
LIVE_PORTS = [
    *sorted({f"{a}/p{pa}" for a, pa, _, _, _, _ in ENDS} | {f"{b}/p{pb}" for _, _, _, b, pb, _ in ENDS}),
    "mystery/p9",  # in no group
]
CHANNELS = [f"{a}->{b}" for a, _, _, b, _, _ in ENDS] + [f"{b}->{a}" for a, _, _, b, _, _ in ENDS]
CHANNELS += ["nic-x->nowhere"]


@dataclasses.dataclass
class Sample:
    source: str
    port: str
    time_ns: int
    values: dict[str, float]


@dataclasses.dataclass
class Data:
    """What was stored: the sources, their samples, the fabric and the minute everything starts at."""

    store: TelemetryStore
    url: str
    live: str
    simulated: str
    fabric: str
    links: FabricLinks
    start: dt.datetime
    samples: list[Sample]

    def window(self, first_s: int, last_s: int) -> GrafanaRange:
        """The dashboard range from `first_s` to `last_s` seconds after the data's first minute."""
        start, end = (self.start + dt.timedelta(seconds=s) for s in (first_s, last_s))
        return GrafanaRange(start, end)


def _ingest(store: TelemetryStore, source: str, rows: list[Sample], columns: list[str]) -> None:
    ports = sorted({row.port for row in rows})
    rows = sorted(rows, key=lambda r: (ports.index(r.port), r.time_ns))
    outcome = store.ingest(
        source,
        ports,
        np.array([ports.index(r.port) for r in rows]),
        np.array([r.time_ns for r in rows], dtype=np.int64),
        {name: np.array([r.values[name] for r in rows]) for name in columns},
    )
    assert outcome.stored == len(rows) and outcome.rejected == 0, outcome


def _psycopg_url(url: str) -> str:
    return make_url(normalise_url(url)).set(drivername="postgresql").render_as_string(hide_password=False)


@pytest.fixture(scope="module")
def data(postgres_url: str) -> Iterator[Data]:
    start = dt.datetime(2037, 1, 1, tzinfo=dt.UTC) + dt.timedelta(minutes=secrets.randbelow(500_000))
    t0 = int(start.timestamp()) * SECOND
    rng = np.random.default_rng(14)
    fabric = f"fabrics/{new_id('dash')}"
    links = FabricLinks(fabric, 7, *(list(column) for column in zip(*ENDS, strict=True)))
    store = TelemetryStore.open(postgres_url)
    live, simulated = new_id("dash-live"), new_id("dash-sim")
    store.create_source(SourceRecord(live, SourceKind.LIVE, fabric=fabric))
    store.create_source(SourceRecord(simulated, SourceKind.SIMULATED, fabric=fabric))
    try:
        samples: list[Sample] = []
        # Live: every 10 s for three minutes, switch ports with every loss counter, hosts without error
        # counters; in the fourth minute only the hosts report.
        switch, hosts = [], []
        for port in LIVE_PORTS:
            for k in range(24 if port.startswith("host-") else 18):
                values = {"utilisation": float(rng.uniform(0, 1)), "rx_bytes": float(rng.integers(1e6, 1e8))}
                if not port.startswith("host-"):
                    values |= {name: float(rng.integers(0, 6)) for name in LOSS_COLUMNS.values()}
                (hosts if port.startswith("host-") else switch).append(
                    Sample(live, port, t0 + k * 10 * SECOND, values)
                )
        _ingest(store, live, switch, ["utilisation", "rx_bytes", *LOSS_COLUMNS.values()])
        _ingest(store, live, hosts, ["utilisation", "rx_bytes"])
        # Simulated: every 15 s for four minutes, utilisation only.
        channels = [
            Sample(simulated, port, t0 + k * 15 * SECOND, {"utilisation": float(rng.uniform(0, 1))})
            for port in CHANNELS
            for k in range(16)
        ]
        _ingest(store, simulated, channels, ["utilisation"])
        samples = switch + hosts + channels
        for source in (live, simulated):
            assert store.bind_fabric(source, links).fabric_version == 7
        yield Data(store, _psycopg_url(postgres_url), live, simulated, fabric, links, start, samples)
    finally:
        for source in (live, simulated):
            with contextlib.suppress(Exception):
                store.delete_source(source)
        store.close()


# --- The dashboard's queries -----------------------------------------------------------------------


DASHBOARD = json.loads(DASHBOARD_FILE.read_text())
PANELS = {panel["title"]: panel for panel in DASHBOARD["panels"]}
VARIABLES = {variable["name"]: variable for variable in DASHBOARD["templating"]["list"]}


def panel_sql(title_start: str) -> str:
    (title,) = [title for title in PANELS if title.startswith(title_start)]
    (target,) = PANELS[title]["targets"]
    return target["rawSql"]


def run(data: Data, sql: str, window: GrafanaRange, interval: str = "1m", **variables: str) -> list[dict]:
    """The query as Grafana would send it, run on the telemetry database: rows as {column: value}."""
    expanded = expand(sql, window, interval, {"group": "uplinks", "topn": "10", **variables})
    with psycopg.connect(data.url, autocommit=True) as connection:
        cursor = connection.execute(expanded)
        names = [column.name for column in cursor.description or []]
        rows = cursor.fetchall()
    # numeric (Decimal) and double precision alike as floats, text as is, NULL as None
    return [
        {name: v if v is None or isinstance(v, str) else float(v) for name, v in zip(names, row, strict=True)}
        for row in rows
    ]


# --- What the samples say ------------------------------------------------------------------------


def in_window(data: Data, source: str, window: GrafanaRange) -> list[Sample]:
    """Samples Grafana's $__unixEpochNanoFilter keeps: both ends of the range included."""
    return [s for s in data.samples if s.source == source and window.start_ns <= s.time_ns <= window.end_ns]


def bucket_of(time_ns: int, interval: str) -> float:
    seconds = interval_seconds(interval)
    return math.floor(time_ns / SECOND / seconds) * seconds


def members(data: Data, source: str, group: str) -> set[str]:
    """The ports of `group` as the telemetry service resolves `group:<name>` (services.telemetry.groups)."""
    names = LIVE_PORTS if source == data.live else CHANNELS
    if group == "all":
        return set(names)
    flags = group_members(f"group:{group}", "group", names, data.links)
    return {name for name, member in zip(names, flags, strict=True) if member}


def expected_skew(data: Data, source: str, group: str, window: GrafanaRange, interval: str) -> list[tuple]:
    per_port: dict[float, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    chosen = members(data, source, group)
    for s in in_window(data, source, window):
        if s.port in chosen:
            per_port[bucket_of(s.time_ns, interval)][s.port].append(s.values["utilisation"])
    rows = []
    for time in sorted(per_port):
        means = [float(np.mean(values)) for values in per_port[time].values()]
        top, mean = max(means), float(np.mean(means))
        rows.append((time, top, mean, top / mean if mean > 0 else 1.0))
    return rows


def close(a: float | None, b: float | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9))


# --- Variables -------------------------------------------------------------------------------------


def test_the_source_variable_lists_each_source_with_its_kind_and_fabric(data):
    rows = run(data, VARIABLES["source"]["query"], data.window(0, 240))
    texts = {row["__value"]: row["__text"] for row in rows}
    assert texts[data.live] == f"{data.live} (live, {data.fabric})"
    assert texts[data.simulated] == f"{data.simulated} (simulated, {data.fabric})"
    assert [row["__value"] for row in rows] == sorted(texts)


def test_the_custom_variables_offer_every_group_the_skew_query_knows():
    assert VARIABLES["group"]["query"].split(",") == list(GROUPS)
    assert VARIABLES["group"]["current"]["value"] == "uplinks"
    assert all(n.isdigit() for n in VARIABLES["topn"]["query"].split(","))


def test_every_query_of_the_dashboard_is_checked_here():
    queries = [target["rawSql"] for panel in PANELS.values() for target in panel["targets"]]
    checked = [panel_sql(p) for p in ("Utilisation skew", "Top", "Ingest", "Loss", "Estimated bit error")]
    assert sorted(queries) == sorted(checked)
    assert [v["name"] for v in VARIABLES.values() if v["type"] == "query"] == ["source"]


# --- Panels ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("group", GROUPS)
@pytest.mark.parametrize("kind", ["live", "simulated"])
def test_skew_panel_takes_the_groups_ports_as_the_telemetry_service_does(data, kind, group):
    source = data.live if kind == "live" else data.simulated
    window = data.window(0, 240)
    rows = run(data, panel_sql("Utilisation skew"), window, source=source, group=group)
    expected = expected_skew(data, source, group, window, "1m")
    assert len(expected) >= 3 and len(members(data, source, group)) >= 2  # the check has something to see
    assert [row["time"] for row in rows] == [e[0] for e in expected]
    for row, (_, top, mean, ratio) in zip(rows, expected, strict=True):
        assert close(row["max"], top) and close(row["mean"], mean) and close(row["max/mean"], ratio), row


@pytest.mark.parametrize("group", ["uplinks", "all"])
def test_skew_panel_agrees_with_the_stores_utilisation_skew(data, group):
    window = data.window(0, 240)
    rows = run(data, panel_sql("Utilisation skew"), window, source=data.live, group=group)
    skew = data.store.utilisation_skew(
        data.live,
        start_ns=window.start_ns,
        end_ns=window.end_ns + 1,  # the store's end is exclusive, Grafana's range includes it
        port_patterns=[] if group == "all" else [f"group:{group}"],
        step_ns=60 * SECOND,
    )
    assert [row["time"] * SECOND for row in rows] == skew.time_ns.tolist()
    assert np.allclose([row["max"] for row in rows], skew.max_utilisation, rtol=1e-9)
    assert np.allclose([row["mean"] for row in rows], skew.mean_utilisation, rtol=1e-9)
    assert np.allclose([row["max/mean"] for row in rows], skew.max_over_mean, rtol=1e-9)


@pytest.mark.parametrize("interval", ["30s", "1m"])
def test_skew_panel_buckets_by_the_interval_and_keeps_both_ends_of_the_range(data, interval):
    window = data.window(60, 120)  # ends on a sample: Grafana's range includes it
    rows = run(data, panel_sql("Utilisation skew"), window, interval, source=data.simulated)
    expected = expected_skew(data, data.simulated, "uplinks", window, interval)
    assert [row["time"] for row in rows] == [e[0] for e in expected]
    assert expected[-1][0] == bucket_of(window.end_ns, interval)
    assert all(close(r["max"], e[1]) and close(r["mean"], e[2]) for r, e in zip(rows, expected, strict=True))


def test_top_links_panel_lists_the_highest_mean_utilisation_first_as_top_links_does(data):
    window = data.window(30, 150)
    rows = run(data, panel_sql("Top"), window, source=data.live, topn="3")
    utilisation: dict[str, list[float]] = defaultdict(list)
    for s in in_window(data, data.live, window):
        utilisation[s.port].append(s.values["utilisation"])
    ranked = sorted(utilisation, key=lambda p: -np.mean(utilisation[p]))[:3]
    assert [row["port"] for row in rows] == ranked
    for row in rows:
        assert close(row["mean utilisation"], float(np.mean(utilisation[row["port"]])))
        assert close(row["peak utilisation"], max(utilisation[row["port"]]))
    top = data.store.top_links(
        data.live, "utilisation", start_ns=window.start_ns, end_ns=window.end_ns + 1, limit=3
    )
    assert [(p.port, pytest.approx(p.value, rel=1e-9)) for p in top.ports] == [
        (row["port"], row["mean utilisation"]) for row in rows
    ]


def test_loss_panel_sums_each_counter_per_interval_and_leaves_unreported_ones_empty(data):
    window = data.window(0, 240)
    rows = run(data, panel_sql("Loss"), window, source=data.live)
    buckets = sorted({bucket_of(s.time_ns, "1m") for s in in_window(data, data.live, window)})
    assert [row["time"] for row in rows] == buckets
    assert buckets == [bucket_of(window.start_ns, "1m") + 60 * minute for minute in range(4)]
    for row in rows:
        inside = [s for s in in_window(data, data.live, window) if bucket_of(s.time_ns, "1m") == row["time"]]
        for label, column in LOSS_COLUMNS.items():
            reported = [s.values[column] for s in inside if column in s.values]
            assert close(row[label], sum(reported) if reported else None), (label, row)
    assert rows[-1]["drops"] is None  # only the hosts, which report no loss counters, in the last minute
    assert rows[0]["drops"] > 0


def test_ber_panel_is_errors_over_bits_received_and_empty_without_error_counters(data):
    window = data.window(0, 240)
    rows = run(data, panel_sql("Estimated bit error"), window, source=data.live)
    assert len(rows) == 4
    for row in rows:
        inside = [s for s in in_window(data, data.live, window) if bucket_of(s.time_ns, "1m") == row["time"]]
        errors = [s.values[c] for s in inside for c in ("symbol_errors", "rcv_errors") if c in s.values]
        bits = 8 * sum(s.values["rx_bytes"] for s in inside)
        assert close(row["estimated BER"], sum(errors) / bits if errors else None), row
    assert rows[-1]["estimated BER"] is None and rows[0]["estimated BER"] > 0


@pytest.mark.parametrize("interval", ["30s", "1m"])
def test_ingest_panel_counts_samples_per_second_for_the_source_and_the_database(data, interval):
    window = data.window(0, 240)
    rows = run(data, panel_sql("Ingest"), window, interval, source=data.live)
    live: dict[float, int] = defaultdict(int)
    every: dict[float, int] = defaultdict(int)
    for source in (data.live, data.simulated):
        for s in in_window(data, source, window):
            every[bucket_of(s.time_ns, interval)] += 1
            live[bucket_of(s.time_ns, interval)] += source == data.live
    seconds = interval_seconds(interval)
    assert [row["time"] for row in rows] == sorted(every)
    for row in rows:
        assert close(row[data.live], live[row["time"]] / seconds), row
        assert close(row["all sources"], every[row["time"]] / seconds), row
    # 15 live ports every 10 s, then only the 2 hosts in the fourth minute: 1.5, then 0.2 samples/s.
    assert close(rows[0][data.live], 1.5) and close(rows[-1][data.live], 0.2)
