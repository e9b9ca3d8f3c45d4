"""Plots and DataFrames of real runs and real telemetry: what each picture shows (its data, the
colour of hot links, its labels) and what each table holds (dtypes, zeros, enum names), from the
SDK and the CLI, against the four real services in process."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

pytest.importorskip("matplotlib")
pd = pytest.importorskip("pandas")

from fabrictwin import Client, collective_job, frames, plot_data, plots  # noqa: E402
from fabrictwin.cli import main as cli_main  # noqa: E402
from fabrictwin.specs import load_balancing  # noqa: E402
from fabrictwin.v1 import common_pb2, scenario_pb2, telemetry_pb2  # noqa: E402
from matplotlib.colors import to_hex, to_rgb  # noqa: E402
from matplotlib.image import imread  # noqa: E402

from tests.in_process import in_process_stack  # noqa: E402

FABRIC = "plots-ls"  # 2 leaves x 4 spines, 4 hosts per leaf: 8 leaf-spine links, 16 directions
UPLINK_CHANNELS = 16
# in_process_stack wires no topology to telemetry, so port groups do not resolve there: a glob instead.
UPLINKS = "leaf-*->spine-*"
SIZES = [1 << 20, 16 << 20, 256 << 20]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    loop = asyncio.new_event_loop()
    manager = in_process_stack(tmp_path_factory.mktemp("plots"))
    running = loop.run_until_complete(manager.__aenter__())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield running
    loop.call_soon_threadsafe(loop.stop)
    thread.join()
    loop.run_until_complete(manager.__aexit__(None, None, None))
    loop.close()


@pytest.fixture(scope="module")
def client(stack):
    with Client(**stack.addresses, timeout=60) as connected:
        connected.fabrics.create_leaf_spine(2, 4, 4, fabric_id=FABRIC)
        yield connected


def _run(client: Client, **kwargs) -> scenario_pb2.Run:
    scenario = client.scenarios.create(FABRIC, **kwargs)
    run = client.scenarios.wait_run(client.scenarios.run(scenario.name).name, timeout=300)
    assert run.state == common_pb2.JOB_STATE_SUCCEEDED, run.error.message
    return run


@pytest.fixture(scope="module")
def run(client) -> scenario_pb2.Run:
    """A scattered ring whose every hop crosses the spines: ECMP pins, ADAPTIVE and SPRAY spread."""
    return _run(
        client,
        jobs=[collective_job(ranks=8, size="64MiB", placement="scattered")],
        modes=[
            load_balancing("ecmp", seed=3, label="ECMP"),
            load_balancing("adaptive", label="ADAPTIVE"),
            load_balancing("spray", label="SPRAY"),
        ],
        seed=3,
        store_telemetry=True,
    )


@pytest.fixture(scope="module")
def sweep(client) -> scenario_pb2.Run:
    return _run(
        client,
        jobs=[collective_job(ranks=8, size="1MiB", placement="scattered")],
        modes=[load_balancing("ecmp", seed=3, label="ECMP"), load_balancing("adaptive", label="ADAPTIVE")],
        sweeps=[scenario_pb2.Sweep(parameter="jobs.0.size_bytes", values=[str(s) for s in SIZES])],
        seed=3,
    )


def _bars(ax):
    """The link bars of a sorted-utilisation panel (its one bar container)."""
    (bars,) = ax.containers
    return list(bars.patches)


def _colour(artist) -> str:
    return to_hex(artist.get_facecolor())


# --- the sorted utilisation -------------------------------------------------------------------------


def test_sorted_utilisation_marks_ecmps_hot_links_in_the_warning_colour_and_spreads_none(client, run):
    panels, busy = plot_data.run_link_utilisation(client, run)
    assert {label: len(values) for label, values in panels.items()} == dict.fromkeys(
        ["ECMP", "ADAPTIVE", "SPRAY"], UPLINK_CHANNELS
    )
    figure = plots.sorted_utilisation(panels, busy_ns=busy, title="uplinks")
    figure.draw_without_rendering()  # tick labels exist once laid out
    axes = figure.axes
    assert [t.get_text() for t in axes[0].get_yticklabels()] == ["0%", "20%", "50%", "80%", "100%"]
    assert [ax.get_title().split(" in ")[0] for ax in axes] == ["ECMP", "ADAPTIVE", "SPRAY"]
    slowest = max(busy.values())
    for ax, label in zip(axes, panels, strict=True):
        bars = _bars(ax)
        heights = [b.get_height() for b in bars]
        # The data: every link, busiest first, on the slowest run's time scale.
        expected = sorted((min(v * busy[label] / slowest, 1.0) for v in panels[label]), reverse=True)
        assert heights == pytest.approx(expected)
        assert ax.get_ylim() == pytest.approx((0.0, 1.08))
        assert list(ax.get_yticks()) == [0.0, 0.2, 0.5, 0.8, 1.0]
        for bar in bars:
            height = bar.get_height()
            want = plots.HOT if height > 0.8 else plots.IDLE if height < 0.2 else plots.BUSY
            assert _colour(bar) == want
    ecmp = _bars(axes[0])
    assert sum(_colour(b) == plots.HOT for b in ecmp) >= 1  # pinned: hot ...
    assert sum(b.get_height() < 0.2 for b in ecmp) >= 1  # ... and idle at once
    assert "pinned flows" in " ".join(t.get_text() for t in axes[0].texts)
    for ax in axes[1:]:  # the same bytes spread evenly: no link hot, none idle
        assert all(_colour(b) == plots.BUSY for b in _bars(ax))
        assert not any("pinned" in t.get_text() for t in ax.texts)
    legend = [t.get_text() for t in figure.legends[0].get_texts()]
    assert legend == ["hot (above 80%)", "busy", "idle (below 20%)"]
    assert "the slowest run" in axes[0].get_ylabel()


def test_each_mode_over_its_own_run_paints_an_evenly_saturated_fabric_hot_too(client, run):
    panels, _busy = plot_data.run_link_utilisation(client, run)
    figure = plots.sorted_utilisation(panels)
    for ax in figure.axes[1:]:  # ADAPTIVE and SPRAY: every uplink saturated over their own short run
        assert min(b.get_height() for b in _bars(ax)) > 0.8
        assert all(_colour(b) == plots.HOT for b in _bars(ax))
        assert not any("pinned" in t.get_text() for t in ax.texts)  # hot, but not hot-and-idle


def test_the_pictures_are_written_as_png_and_svg_with_hot_pixels_where_ecmp_is(client, run, tmp_path):
    panels, busy = plot_data.run_link_utilisation(client, run)
    figure = plots.sorted_utilisation(panels, busy_ns=busy)
    png = plots.save(figure, tmp_path / "u.png")
    svg = plots.save(figure, tmp_path / "u.svg")
    assert png.read_bytes().startswith(b"\x89PNG")
    assert "<svg" in svg.read_text()[:400] and plots.HOT.lstrip("#") in svg.read_text().lower()
    pixels = imread(png)[:, :, :3]
    height, width = pixels.shape[:2]
    above_legend = pixels[: int(0.88 * height)]  # the legend's red swatch is along the bottom
    red_columns = (abs(above_legend - to_rgb(plots.HOT)).sum(axis=2) < 0.05).nonzero()[1]
    # Red where ECMP's panel is (its hot links, their marker, the "pinned" note), nowhere else.
    assert len(red_columns) > 20
    second_panel_starts = figure.axes[1].get_position().x0 * width  # laid out by the save
    assert red_columns.max() < second_panel_starts
    with pytest.raises(Exception, match=r"\.png or \.svg"):
        plots.save(figure, tmp_path / "u.pdf")


# --- the heatmap ------------------------------------------------------------------------------------


def test_the_heatmap_of_a_run_has_every_uplink_idle_ones_included_and_hot_cells_in_red(client, run):
    ecmp = run.results[0]
    series = plot_data.simulation_tier_series(client, ecmp.simulation, tier=2)
    assert len(series) == UPLINK_CHANNELS
    figure = plots.link_heatmap(series, title="ECMP uplinks")
    figure.draw_without_rendering()
    ax = figure.axes[0]
    image = ax.images[0]
    data = image.get_array()
    assert data.shape == (UPLINK_CHANNELS, len(series[0].utilisation))
    means = data.mean(axis=1)
    assert list(means) == sorted(means, reverse=True)  # busiest at the top
    assert means[0] > 0.8 and means[-1] == 0.0  # ECMP: a hot uplink and an idle one
    assert to_hex(image.cmap(image.norm(0.95))) not in (plots.BUSY, plots.IDLE)
    assert to_rgb(image.cmap(image.norm(0.95)))[0] > 0.6 > to_rgb(image.cmap(image.norm(0.95)))[2]
    assert to_rgb(image.cmap(image.norm(0.5)))[2] > to_rgb(image.cmap(image.norm(0.5)))[0]
    left, right, _, _ = image.get_extent()
    end_ns = series[0].start_ns + len(series[0].utilisation) * series[0].interval_ns
    scale = {"s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1}[ax.get_xlabel().split("(")[1].rstrip(")")]
    assert (left, right) == pytest.approx((0.0, end_ns / scale))
    assert ax.get_xlabel().startswith("simulated time")
    assert next(t.get_text() for t in ax.get_yticklabels()) in {s.display_name for s in series}
    colourbar = figure.axes[1]
    assert [t.get_text() for t in colourbar.get_yticklabels()] == ["0%", "20%", "50%", "80%", "100%"]
    assert "hot and" in ax.get_title() and "idle link-intervals" in ax.get_title()


def test_the_heatmap_of_a_telemetry_query_shows_the_same_hot_uplink(client, run):
    ecmp = run.results[0]
    series = plot_data.telemetry_utilisation_series(client, ecmp.telemetry_source, ports=[UPLINKS])
    figure = plots.link_heatmap(series)
    figure.draw_without_rendering()
    data = figure.axes[0].images[0].get_array()
    assert data.shape[0] == len(series) > 0
    assert data.max() > 0.8
    hottest = figure.axes[0].get_yticklabels()[0].get_text()
    totals = client.simulations.get(ecmp.simulation).result.links
    assert hottest in {t.display_name for t in totals if t.mean_utilisation > 0.8}


# --- completion, busbw, sweeps and flow completion times -----------------------------------------------


def test_completion_and_busbw_bars_match_the_comparison_with_the_ideal_marked(client, run):
    comparison = client.scenarios.compare(run.name)
    figure = plots.completion_and_busbw(comparison)
    figure.draw_without_rendering()
    left, right = figure.axes
    widths = [b.get_width() for b in left.patches]
    completion = [r.result.jobs[0].completion_ns for r in comparison.rows]
    assert left.get_xlabel().startswith("completion (ms)")  # 2.4-4.8 ms
    assert widths == pytest.approx([c / 1e6 for c in completion])
    assert [b.get_width() for b in right.patches] == pytest.approx([r.busbw_gbps for r in comparison.rows])
    ideal = left.lines[0].get_xdata()
    assert list(ideal) == pytest.approx([r.result.ideal_completion_ns / 1e6 for r in comparison.rows])
    assert [t.get_text() for t in left.get_yticklabels()] == ["ECMP", "ADAPTIVE", "SPRAY"]
    assert "ideal" in next(t.get_text() for t in figure.legends[0].get_texts())
    assert plots.HOT not in {to_hex(b.get_facecolor()) for b in left.patches}


def test_a_size_sweep_draws_busbw_against_message_size_on_a_log_axis(run, sweep):
    figure = plots.busbw_sweep(sweep)
    ax = figure.axes[0]
    assert ax.get_xscale() == "log"
    lines = {line.get_label(): line for line in ax.lines}
    assert set(lines) == {"ECMP", "ADAPTIVE", "ideal"}
    for label in ("ECMP", "ADAPTIVE"):
        assert list(lines[label].get_xdata()) == SIZES
        expected = sorted(
            (int(r.sweep_point["jobs.0.size_bytes"]), r.busbw_gbps) for r in sweep.results if r.label == label
        )
        assert list(lines[label].get_ydata()) == pytest.approx([b for _, b in expected])
    assert all(y >= a for y, a in zip(lines["ideal"].get_ydata(), lines["ADAPTIVE"].get_ydata(), strict=True))
    assert ax.get_ylabel() == "busbw (Gb/s)" and ax.get_xlabel() == "message size (S)"
    assert ax.xaxis.get_major_formatter()(1 << 20, 0) == "1 MiB"
    with pytest.raises(Exception, match="no sweep points"):
        plots.busbw_sweep(run)


def test_flow_completion_cdfs_end_at_one_at_each_modes_slowest_flow(client, run):
    flows = plot_data.run_flows(client, run)
    figure = plots.completion_cdf(flows)
    ax = figure.axes[0]
    for line, (label, items) in zip(ax.lines, flows.items(), strict=True):
        assert line.get_label().startswith(f"{label} ({len(items)} flows")
        fct = sorted(f.finish_ns - f.start_ns for f in items)
        assert line.get_ydata()[-1] == pytest.approx(1.0)
        scale = {"s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1}[ax.get_xlabel().split("(")[1].rstrip(")")]
        assert line.get_xdata()[-1] == pytest.approx(fct[-1] / scale)
        assert line.get_xdata()[0] == pytest.approx(fct[0] / scale)


# --- DataFrames ------------------------------------------------------------------------------------


def test_a_run_becomes_one_row_per_mode_with_real_dtypes(run):
    frame = frames.to_pandas(run)
    assert list(frame["label"]) == ["ECMP", "ADAPTIVE", "SPRAY"]
    assert list(frame["mode"]) == ["ECMP", "ADAPTIVE", "SPRAY"]
    assert list(frame["state"]) == ["SUCCEEDED"] * 3
    assert frame["makespan_ns"].dtype == "int64" and frame["ideal_completion_ns"].dtype == "int64"
    assert frame["busbw_gbps"].dtype == "float64"
    assert list(frame["makespan_ns"]) == [r.makespan_ns for r in run.results]
    assert frame["uplink_share_idle"].iloc[1] == 0.0  # a zero is kept, not dropped
    assert (frame["run"] == run.name).all()


def test_a_sweep_gets_a_numeric_column_per_swept_parameter(sweep):
    frame = frames.to_pandas(sweep)
    assert frame["jobs.0.size_bytes"].dtype == "int64"
    assert sorted(set(frame["jobs.0.size_bytes"])) == SIZES
    assert len(frame) == 6


def test_a_comparison_and_a_simulations_tables(client, run):
    comparison = client.scenarios.compare(run.name)
    frame = frames.to_pandas(comparison)
    assert list(frame["baseline"]) == [True, False, False]
    assert list(frame["slowdown_vs_ideal"]) == pytest.approx([r.slowdown_vs_ideal for r in comparison.rows])
    simulation = client.simulations.get(run.results[0].simulation)
    links = frames.to_pandas(simulation, table="links")
    assert links["bytes"].dtype == "int64" and links["tier"].dtype == "int64"
    assert int(links["bytes"].sum()) == sum(link.bytes for link in simulation.result.links)
    flows = frames.to_pandas(simulation, table="flows")
    assert (flows["completion_ns"] == flows["finish_ns"] - flows["start_ns"]).all()
    jobs = frames.to_pandas(simulation)
    assert jobs["completion_ns"].iloc[0] == simulation.result.jobs[0].completion_ns


def test_link_series_keep_their_zeros_and_integers(client, run):
    ecmp = run.results[0]
    series = list(client.simulations.link_series(ecmp.simulation))
    frame = frames.to_pandas(series)
    assert len(frame) == sum(len(s.utilisation) for s in series)
    assert frame["bytes"].dtype == "int64" and frame["time_ns"].dtype == "int64"
    assert (frame["utilisation"] == 0.0).any() or (frame["bytes"] > 0).all()
    first = series[0]
    rows = frame[(frame["link"] == first.link) & (frame["direction"] == first.direction)]
    assert list(rows["bytes"]) == list(first.bytes)
    assert list(rows["time_ns"]) == [first.start_ns + i * first.interval_ns for i in range(len(first.bytes))]


def test_every_telemetry_query_becomes_a_frame(client, run):
    source = run.results[0].telemetry_source
    series = frames.to_pandas(client.telemetry.query_series(source, "utilisation", ports=[UPLINKS]))
    assert set(series.columns) == {"port", "time_ns", "time", "value"}
    assert series["time_ns"].dtype == "int64" and str(series["time"].dtype).startswith("timedelta64")
    top = frames.to_pandas(client.telemetry.top_links(source, "tx_bytes", limit=3))
    assert list(top.columns) == ["port", "value"] and len(top) == 3
    skew = frames.to_pandas(client.telemetry.utilisation_skew(source, ports=[UPLINKS]))
    assert skew["ports"].dtype == "int64" and skew["share_idle"].iloc[0] > 0
    port = series["port"].iloc[0]
    loss = frames.to_pandas(client.telemetry.loss_history(source, port))
    assert {"drops", "rcv_errors", "estimated_ber", "time"} <= set(loss.columns)
    health = frames.to_pandas(client.telemetry.port_health(source, window_ns=10**12))
    assert {"port", "rx_bytes", "estimated_ber"} <= set(health.columns) and len(health) > 0


def test_live_times_are_utc_datetimes():
    points = [telemetry_pb2.SkewPoint(time_ns=1_700_000_000_000_000_000, ports=4)]
    frame = frames.to_pandas(points)
    assert str(frame["time"].dtype) == "datetime64[ns, UTC]"
    assert frame["time"].iloc[0] == pd.Timestamp("2023-11-14 22:13:20", tz="UTC")


# --- the CLI ---------------------------------------------------------------------------------------


def _cli(stack, *argv: str) -> int:
    addresses = [f"--{service}={address}" for service, address in stack.addresses.items()]
    return cli_main([*addresses, *argv])


def test_the_cli_draws_every_picture(stack, run, sweep, tmp_path, capsys):
    ecmp = run.results[0]
    commands = {
        "utilisation.png": ["plot", "utilisation", run.name],
        "heatmap.svg": ["plot", "heatmap", "--run", run.name, "--mode", "ECMP", "--tier", "2"],
        "live.png": ["plot", "heatmap", "--source", ecmp.telemetry_source, "--port", UPLINKS],
        "completion.png": ["plot", "completion", run.name],
        "sweep.svg": ["plot", "sweep", sweep.name],
        "fct.png": ["plot", "fct", run.name],
    }
    for name, argv in commands.items():
        assert _cli(stack, *argv, "-o", str(tmp_path / name)) == 0, capsys.readouterr().err
        head = (tmp_path / name).read_bytes()[:300]
        assert head.startswith(b"\x89PNG") if name.endswith(".png") else b"<svg" in head
    assert _cli(stack, "plot", "heatmap", "-o", str(tmp_path / "x.png")) == 2
    assert "one of --simulation, --run or --source" in capsys.readouterr().err


def test_the_cli_writes_csv_and_parquet(stack, run, tmp_path, capsys):
    source = run.results[0].telemetry_source
    assert _cli(stack, "scenario", "compare", run.name, "--output", "csv", str(tmp_path / "c.csv")) == 0
    compared = pd.read_csv(tmp_path / "c.csv")
    assert list(compared["label"]) == ["ECMP", "ADAPTIVE", "SPRAY"]
    assert compared["makespan_ns"].dtype == "int64"
    assert "wrote 3 rows" in capsys.readouterr().err
    argv = ["telemetry", "query", source, "--metric", "utilisation", "--port", UPLINKS]
    assert _cli(stack, *argv, "--output", "parquet", str(tmp_path / "q.parquet")) == 0
    queried = pd.read_parquet(tmp_path / "q.parquet")
    assert queried["time_ns"].dtype == "int64" and str(queried["time"].dtype).startswith("timedelta64")
    assert _cli(stack, "scenario", "get", run.name, "--output", "csv", str(tmp_path / "r.csv")) == 0
    assert list(pd.read_csv(tmp_path / "r.csv")["state"]) == ["SUCCEEDED"] * 3
    ecmp = run.results[0].simulation
    assert (
        _cli(stack, "simulation", "get", ecmp, "--output", "csv", str(tmp_path / "l.csv"), "--table", "links")
        == 0
    )
    assert "tier" in pd.read_csv(tmp_path / "l.csv").columns
    assert _cli(stack, "simulation", "series", ecmp, "--output", "csv", str(tmp_path / "s.csv")) == 0
    assert (
        _cli(
            stack, "telemetry", "skew", source, "--port", UPLINKS, "--output", "csv", str(tmp_path / "k.csv")
        )
        == 0
    )
    assert _cli(stack, "scenario", "compare", run.name, "--output", "xlsx", str(tmp_path / "c.xlsx")) == 2


def test_a_live_heatmap_reads_in_wall_clock_time_from_its_first_sample():
    start = 1_764_547_200 * 10**9  # 2025-12-01 00:00:00 UTC
    minute = 60 * 10**9
    series = [
        telemetry_pb2.Series(
            port="leaf0/p3", time_ns=[start + i * minute for i in range(10)], values=[0.9] * 10
        ),
        telemetry_pb2.Series(
            port="leaf0/p4", time_ns=[start + i * minute for i in range(0, 10, 2)], values=[0.0] * 5
        ),
    ]
    figure = plots.link_heatmap(series)
    figure.draw_without_rendering()
    ax = figure.axes[0]
    data = ax.images[0].get_array()
    assert data.shape == (2, 10)
    assert list(data[0]) == [0.9] * 10
    row = np.ma.filled(np.ma.asarray(data[1], dtype=float), np.nan)
    assert list(~np.isnan(row)) == [True, False] * 5  # sampled every other minute: gaps stay blank, not 0
    assert list(row[::2]) == [0.0] * 5
    assert ax.get_xlabel() == "time since 2025-12-01 00:00:00 UTC (s)"
    assert ax.images[0].get_extent()[:2] == pytest.approx((0.0, 600.0))
    assert [t.get_text() for t in ax.get_yticklabels()] == ["leaf0/p3", "leaf0/p4"]


def test_a_simulations_flows_go_to_parquet_with_their_links(client, run, tmp_path):
    simulation = client.simulations.get(run.results[0].simulation)
    flows = frames.to_pandas(simulation, table="flows")
    frames.write_frame(flows, tmp_path / "flows.parquet")
    back = pd.read_parquet(tmp_path / "flows.parquet")
    assert list(back["size_bytes"]) == [f.size_bytes for f in simulation.result.flows]
    assert [list(x) for x in back["links"]] == [list(f.links) for f in simulation.result.flows]
