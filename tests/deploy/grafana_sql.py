"""Turn a Grafana PostgreSQL panel's SQL into what the database receives, as Grafana does it.

Grafana prepares a SQL query in two steps, and `expand` does both:

1. The browser substitutes template variables: the global `$__interval` (`1m`, `30s`, `500ms`) and
   `$__interval_ms` (an integer), and the dashboard's variables, written `$name` or `${name}`. A
   single-valued variable of a SQL data source goes in as its text with each `'` doubled; the query
   supplies the quotes around it (`'$source'`). Anything else starting `$__` is left for step 2.
2. The data source's backend expands macros, found as Grafana's PostgreSQL macro engine finds them:
   `$name(arguments)` with no `)` inside the arguments, which are split at every comma and trimmed.
   Only the macros the FabricTwin dashboard uses are known here (an unknown one is an error, as in
   Grafana):

   - `$__unixEpochNanoFilter(col)` -> `col >= <from ns> AND col <= <to ns>` (both ends included).
   - `$__unixEpochGroup(expr, interval)` -> `floor((expr)/<seconds>)*<seconds>`, the seconds
     printed as Go's `%v` prints a float (`60`, `0.5`); `$__unixEpochGroupAlias` adds ` AS "time"`.
   - `$__unixEpochNanoFrom()` / `$__unixEpochNanoTo()` -> the range's ends in epoch nanoseconds.

   Fill modes (a third argument of the group macros) are not supported.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping

__all__ = ["GrafanaRange", "expand", "interval_seconds"]

_MACRO = re.compile(r"\$([_a-zA-Z0-9]+)\(([^)]*)\)")  # Grafana's: `\$([_a-zA-Z0-9]+)\(([^\)]*)\)`
_VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)(?!\w|\()")
_UNITS_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_INTERVAL = re.compile(r"(\d+)(ms|s|m|h|d|w)")


class GrafanaRange:
    """A dashboard time range, its ends as Grafana hands them to the backend (UTC instants)."""

    def __init__(self, start: dt.datetime, end: dt.datetime) -> None:
        if start.tzinfo is None or end.tzinfo is None:
            raise ValueError("give the range's ends with a time zone")
        self.start, self.end = start, end

    @property
    def start_ns(self) -> int:
        return _epoch_ns(self.start)

    @property
    def end_ns(self) -> int:
        return _epoch_ns(self.end)


def _epoch_ns(moment: dt.datetime) -> int:
    delta = moment - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000


def interval_seconds(interval: str) -> float:
    """`1m` -> 60.0, `500ms` -> 0.5 (one number and unit, as Grafana's `$__interval` takes).

    >>> interval_seconds("1m"), interval_seconds("500ms")
    (60.0, 0.5)
    """
    match = _INTERVAL.fullmatch(interval.strip().strip("'"))
    if match is None:
        raise ValueError(f"error parsing interval {interval}")
    return int(match[1]) * _UNITS_MS[match[2]] / 1000


def _go_float(seconds: float) -> str:
    """`seconds` as Go's `%v` prints a float64, for the range this expander accepts."""
    if not 0.001 <= seconds < 1e6:  # Go switches to exponent notation from 1e+06 on
        raise ValueError(f"{seconds} s is outside the intervals this expander formats (1 ms to 11 days)")
    text = repr(seconds)
    return text.removesuffix(".0")


def _macro(name: str, args: list[str], window: GrafanaRange) -> str:
    if name == "__unixEpochNanoFilter":
        (column,) = args
        return f"{column} >= {window.start_ns} AND {column} <= {window.end_ns}"
    if name == "__unixEpochNanoFrom":
        return str(window.start_ns)
    if name == "__unixEpochNanoTo":
        return str(window.end_ns)
    if name in ("__unixEpochGroup", "__unixEpochGroupAlias"):
        if len(args) != 2:
            raise ValueError(f"${name} needs a time expression and an interval (no fill mode here): {args}")
        seconds = _go_float(interval_seconds(args[1]))
        grouped = f"floor(({args[0]})/{seconds})*{seconds}"
        return grouped + (' AS "time"' if name.endswith("Alias") else "")
    raise ValueError(f"unknown macro {name!r}")


def expand(sql: str, window: GrafanaRange, interval: str, variables: Mapping[str, str]) -> str:
    """`sql` as the database receives it for the time range `window`, `$__interval` = `interval` and
    the dashboard `variables` (name -> the single selected value).

    >>> moment = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    >>> print(expand("SELECT $__unixEpochGroupAlias(t / 1e9, $__interval) WHERE k = '$k'",
    ...              GrafanaRange(moment, moment), "30s", {"k": "it's"}))
    SELECT floor((t / 1e9)/30)*30 AS "time" WHERE k = 'it''s'
    """
    builtins = {"__interval": interval, "__interval_ms": str(round(interval_seconds(interval) * 1000))}

    def variable(match: re.Match[str]) -> str:
        name = match[1] or match[2]
        if name in builtins:
            return builtins[name]
        if name.startswith("__"):
            return match[0]  # a macro's name without arguments, or another global: not ours to touch
        if name not in variables:
            raise KeyError(f"the query uses ${name}, which is not a dashboard variable given here")
        return variables[name].replace("'", "''")

    substituted = _VARIABLE.sub(variable, sql)

    def macro(match: re.Match[str]) -> str:
        args = [arg.strip(" ") for arg in match[2].split(",")]
        return _macro(match[1], [] if args == [""] else args, window)

    return _MACRO.sub(macro, substituted)
