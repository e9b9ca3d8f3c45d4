"""What the CLI prints for people: durations, sizes and tables."""

from __future__ import annotations

import pytest
from fabrictwin.format import (
    comparison_table,
    fabrics_table,
    format_bytes,
    format_duration_ns,
    render_table,
    simulation_report,
    simulations_table,
)
from fabrictwin.v1 import common_pb2, scenario_pb2, simulation_pb2, topology_pb2


@pytest.mark.parametrize(
    ("ns", "expected"),
    [
        (0, "0 ns"),
        (512, "512 ns"),
        (12_345, "12.3 us"),
        (1_234_567, "1.23 ms"),
        (999_999, "1.00 ms"),
        (2_500_000_000, "2.50 s"),
        (125 * 10**9, "125 s"),
    ],
)
def test_durations_read_with_three_significant_digits(ns: int, expected: str) -> None:
    assert format_duration_ns(ns) == expected


@pytest.mark.parametrize(
    ("size", "expected"), [(512, "512 B"), (4096, "4 KiB"), (256 * 2**20, "256 MiB"), (3 * 2**29, "1.50 GiB")]
)
def test_sizes_read_in_binary_units(size: int, expected: str) -> None:
    assert format_bytes(size) == expected


def test_a_table_aligns_text_left_and_numbers_right() -> None:
    table = render_table(
        ["MODE", "BUSBW", "NODE"], [["ECMP", "21.5", "leaf-1"], ["ADAPTIVE", "371.9", "127.0.0.1:1"]]
    )
    assert table.splitlines() == [
        "MODE      BUSBW  NODE",
        "ECMP       21.5  leaf-1",
        "ADAPTIVE  371.9  127.0.0.1:1",
    ]


def test_a_fabric_row_says_how_the_fabric_was_made() -> None:
    fabric = topology_pb2.Fabric(
        name="fabrics/ft8",
        spec=topology_pb2.FabricSpec(fat_tree=topology_pb2.FatTreeSpec(k=8)),
        host_count=128,
        switch_count=80,
        link_count=384,
        routing_engine=topology_pb2.ROUTING_ENGINE_MINHOP,
    )
    _header, row = fabrics_table([fabric]).splitlines()
    assert row.split()[:6] == ["fabrics/ft8", "fat-tree", "k=8", "128", "80", "384"]
    assert "minhop" in row


def _finished_simulation() -> simulation_pb2.Simulation:
    return simulation_pb2.Simulation(
        name="simulations/s1",
        spec=simulation_pb2.SimulationSpec(
            fabric="fabrics/ft8",
            load_balancing=common_pb2.LoadBalancing(mode=common_pb2.LOAD_BALANCING_MODE_ECMP),
        ),
        state=common_pb2.JOB_STATE_SUCCEEDED,
        result=simulation_pb2.SimulationResult(
            makespan_ns=12_300_000,
            jobs=[
                simulation_pb2.JobResult(label="job-0", ranks=16, completion_ns=12_300_000, busbw_gbps=201.25)
            ],
            uplink_skew=simulation_pb2.UtilisationSkew(
                group="tier2", links=32, max_over_mean=2.5, share_hot=0.25
            ),
        ),
    )


def test_a_finished_simulation_shows_makespan_busbw_and_uplink_skew() -> None:
    row = simulations_table([_finished_simulation()]).splitlines()[1]
    assert row.split() == [
        "simulations/s1",
        "fabrics/ft8",
        "ECMP",
        "SUCCEEDED",
        "12.3",
        "ms",
        "201.2",
        "2.50x",
    ]
    report = simulation_report(_finished_simulation())
    assert "12.3 ms" in report and "201.2" in report and "max/mean 2.50" in report and "hot 25.0%" in report


def test_a_failed_simulation_reports_its_error() -> None:
    failed = simulation_pb2.Simulation(
        name="simulations/s2",
        state=common_pb2.JOB_STATE_FAILED,
        error=common_pb2.ErrorStatus(code=3, message="jobs[0].rank_count: 999 ranks but 128 hosts"),
    )
    assert simulation_report(failed).endswith("FAILED: jobs[0].rank_count: 999 ranks but 128 hosts")


def test_a_comparison_lists_every_row_then_the_summary() -> None:
    comparison = scenario_pb2.Comparison(
        rows=[
            scenario_pb2.ComparisonRow(
                label="r/ECMP", makespan_ns=20_000_000, busbw_gbps=200, slowdown_vs_baseline=1
            ),
            scenario_pb2.ComparisonRow(
                label="r/ADAPTIVE", makespan_ns=10_000_000, busbw_gbps=400, slowdown_vs_baseline=0.5
            ),
        ],
        baseline="r/ECMP",
        summary="ADAPTIVE finishes 2.0x faster than ECMP",
    )
    lines = comparison_table(comparison).splitlines()
    assert lines[0].split()[:4] == ["LABEL", "MAKESPAN", "BUSBW_GBPS", "VS_BASELINE"]
    assert lines[1].split()[:5] == ["r/ECMP", "20.0", "ms", "200.0", "1.00x"]
    assert lines[2].split()[:5] == ["r/ADAPTIVE", "10.0", "ms", "400.0", "0.50x"]
    assert lines[3] == "ADAPTIVE finishes 2.0x faster than ECMP"
