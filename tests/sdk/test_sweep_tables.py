"""Sweeps from the CLI and their tables: `--sweep size=...` parsing, per-point labels with sizes in
units, and the nccl-tests-style table of a size sweep (closed forms: algbw = size / time)."""

from __future__ import annotations

import argparse

import pytest
from fabrictwin.cli_scenario import sweep_arg
from fabrictwin.format import comparison_table, nccl_tests_table, size_sweep_parameter
from fabrictwin.v1 import scenario_pb2

MIB = 1 << 20


def row(mode: str, size: int, makespan_ns: int, busbw_gbps: float) -> scenario_pb2.ComparisonRow:
    point = {"jobs.0.size_bytes": str(size)}
    result = scenario_pb2.ModeResult(label=mode, sweep_point=point, makespan_ns=makespan_ns)
    return scenario_pb2.ComparisonRow(
        label=f"{mode} [jobs.0.size_bytes={size}]",
        makespan_ns=makespan_ns,
        busbw_gbps=busbw_gbps,
        result=result,
    )


def test_sweep_arguments_take_units_and_short_names() -> None:
    assert sweep_arg("size=1MiB,16MiB,1GiB") == scenario_pb2.Sweep(
        parameter="jobs.0.size_bytes", values=["1048576", "16777216", "1073741824"]
    )
    assert sweep_arg("seed=1,2").parameter == "seed"
    assert sweep_arg("jobs.0.rank_count=8,16").values == ["8", "16"]
    assert sweep_arg("buffer=64KiB").values == ["65536"]
    for bad in ("size", "size=", "=1", "size=1MiB,,2MiB", "size=lots"):
        with pytest.raises(argparse.ArgumentTypeError):
            sweep_arg(bad)


def test_a_size_sweep_prints_like_nccl_tests() -> None:
    comparison = scenario_pb2.Comparison(
        rows=[
            row("ECMP", MIB, 100_000, 100.0),
            row("ADAPTIVE", MIB, 50_000, 200.0),
            row("ECMP", 256 * MIB, 20_000_000, 150.0),
        ],
        summary="1MiB: ADAPTIVE finishes 2.00x faster than ECMP",
    )
    assert size_sweep_parameter(comparison) == "jobs.0.size_bytes"
    lines = nccl_tests_table(comparison).splitlines()
    assert lines[0].split()[:6] == ["SIZE", "COUNT", "TYPE", "ECMP", "TIME_US", "ALGBW_GB/S"]
    first, second = lines[1].split(), lines[2].split()
    # 1 MiB in 100 us: algbw 1048576 / 1e-4 s = 10.49 GB/s; busbw 100 Gb/s = 12.50 GB/s.
    assert first[:4] == ["1", "MiB", "262,144", "float"]
    assert first[4:7] == ["100.0", "10.49", "12.50"]
    assert first[7:10] == ["50.0", "20.97", "25.00"]
    assert second[:2] == ["256", "MiB"] and second[-3:] == ["-", "-", "-"]  # ADAPTIVE did not run there
    table = comparison_table(comparison)
    assert "ECMP [jobs.0.size_bytes=1 MiB]" in table and "268435456" not in table
    assert table.rstrip().endswith(comparison.summary)


def test_other_sweeps_get_no_nccl_table() -> None:
    result = scenario_pb2.ModeResult(label="ECMP", sweep_point={"seed": "3"}, makespan_ns=5)
    comparison = scenario_pb2.Comparison(
        rows=[scenario_pb2.ComparisonRow(label="ECMP [seed=3]", result=result)]
    )
    assert size_sweep_parameter(comparison) == ""
    assert "TIME_US" not in comparison_table(comparison)
