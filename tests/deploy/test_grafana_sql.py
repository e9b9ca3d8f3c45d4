"""The Grafana SQL expander the dashboard tests rely on produces what Grafana's PostgreSQL data source
sends (pkg/tsdb/grafana-postgresql-datasource/macros.go), and refuses what it does not know."""

from __future__ import annotations

import datetime as dt

import pytest

from tests.deploy.grafana_sql import GrafanaRange, expand

# About a day, to the microsecond (what a datetime carries; Grafana passes the range in milliseconds).
START = dt.datetime(2017, 5, 10, 10, 6, 23, 152415, tzinfo=dt.UTC)
END = dt.datetime(2017, 5, 11, 10, 6, 23, 142514, tzinfo=dt.UTC)
RANGE = GrafanaRange(START, END)


def test_the_nanosecond_filter_keeps_both_ends_of_the_range():
    assert expand("WHERE $__unixEpochNanoFilter(s.time_ns)", RANGE, "1m", {}) == (
        "WHERE s.time_ns >= 1494410783152415000 AND s.time_ns <= 1494497183142514000"
    )
    assert expand("$__unixEpochNanoFrom() $__unixEpochNanoTo()", RANGE, "1m", {}) == (
        "1494410783152415000 1494497183142514000"
    )


@pytest.mark.parametrize(
    ("interval", "seconds"), [("5m", "300"), ("'5m'", "300"), ("30s", "30"), ("500ms", "0.5"), ("1h", "3600")]
)
def test_the_epoch_group_divides_by_the_interval_in_seconds_as_go_prints_them(interval, seconds):
    assert expand(f"$__unixEpochGroup(t, {interval})", RANGE, "1m", {}) == f"floor((t)/{seconds})*{seconds}"


def test_the_alias_names_the_column_time_and_the_interval_variable_is_substituted_first():
    sql = "SELECT $__unixEpochGroupAlias(s.time_ns / 1000000000.0, $__interval), count(*) / $__interval_ms"
    assert expand(sql, RANGE, "2m", {}) == (
        'SELECT floor((s.time_ns / 1000000000.0)/120)*120 AS "time", count(*) / 120000'
    )


def test_variables_go_in_as_text_with_quotes_doubled():
    assert (
        expand(
            "id = '$source' AND g = '${group}' LIMIT $topn",
            RANGE,
            "1m",
            {"source": "o'brien", "group": "uplinks", "topn": "5"},
        )
        == "id = 'o''brien' AND g = 'uplinks' LIMIT 5"
    )


@pytest.mark.parametrize(
    ("sql", "complaint"),
    [
        ("$__timeGroupAlias(t, 5m)", "unknown macro"),
        ("$__unixEpochGroup(t, 5m, 0)", "no fill mode"),
        ("$__unixEpochGroup(t, 5 minutes)", "error parsing interval"),
        ("WHERE id = '$sorce'", r"\$sorce"),
    ],
)
def test_what_the_expander_does_not_know_is_an_error_not_a_guess(sql, complaint):
    with pytest.raises((ValueError, KeyError), match=complaint):
        expand(sql, RANGE, "1m", {"source": "x"})
