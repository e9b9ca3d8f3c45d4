"""The diagnostic queries of the seeds: utilisation skew over a link group, loss history of a link.

Skew, per interval: each port's mean utilisation in the interval (bucketed in SQL, from roll-ups
where the step allows), then across the ports in SQL: how many, the max, the min, the mean, the mean
of squares, and the shares above `hot_above` and below `idle_below` in the *same* interval. max/mean,
the coefficient of variation (population standard deviation over the mean) and whether the ports
are pinned (the one rule of services/common/pinning.py, which the diagnosis applies too) come from
those in numpy, over one row per interval. With no load at all every port is equal: max/mean 1, CV
0, not pinned.

Loss, per interval of one port: sums of drops, receive errors, symbol errors, received packets and
bytes and transmit discards; the estimated bit error rate is (symbol errors + receive errors) over
bits received, NaN where no received bytes were reported (a metric the port never reported is NaN).
Step 0 makes the whole window one interval.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import sqlalchemy as sa
from sqlalchemy import Connection

from services.common.errors import InvalidArgument
from services.common.pinning import PinningRule
from services.telemetry.aggregates import Aggregation, PortSet, bucketed
from services.telemetry.queries import QuerySource, bucket_count, fetch_arrays, plan
from services.telemetry.schema import ROLLUP_NS

__all__ = ["LOSS_METRICS", "LossHistory", "Skew", "loss_history", "utilisation_skew"]

LOSS_METRICS = ("drops", "rcv_errors", "symbol_errors", "rx_packets", "rx_bytes", "xmit_discards")


@dataclasses.dataclass(frozen=True)
class Skew:
    """Per interval (arrays of equal length): start, ports, max, mean, max/mean, CV, hot and idle shares."""

    time_ns: np.ndarray
    ports: np.ndarray
    max_utilisation: np.ndarray
    min_utilisation: np.ndarray
    mean_utilisation: np.ndarray
    max_over_mean: np.ndarray
    coefficient_of_variation: np.ndarray
    share_hot: np.ndarray
    share_idle: np.ndarray
    pinned: np.ndarray  # bool
    rollup_ns: int


@dataclasses.dataclass(frozen=True)
class LossHistory:
    """Per interval: start, one array per LOSS_METRICS name, and the estimated bit error rate."""

    time_ns: np.ndarray
    sums: dict[str, np.ndarray]
    estimated_ber: np.ndarray
    rollup_ns: int


def _check_intervals(start_ns: int, end_ns: int, step_ns: int, max_points: int) -> None:
    if step_ns < 0:
        raise InvalidArgument("step_ns", f"{step_ns} is negative")
    intervals = bucket_count(start_ns, end_ns, step_ns)
    if intervals > max_points:
        raise InvalidArgument(
            "step_ns",
            f"{intervals} intervals in the window, more than the limit of {max_points}; use a larger step_ns",
        )


def utilisation_skew(
    connection: Connection,
    source: QuerySource,
    ports: PortSet,
    start_ns: int,
    end_ns: int,
    step_ns: int,
    rule: PinningRule,
    max_points: int,
) -> Skew:
    """Skew of the ports' utilisation per interval, intervals with samples only, in time order."""
    window = plan(source, start_ns, end_ns, step_ns, Aggregation.AVG)
    _check_intervals(window.start_ns, window.end_ns, step_ns, max_points)
    rollup_ns = ROLLUP_NS if window.rollup is not None else 0
    columns = ("<i8", "<i8", "<f8", "<f8", "<f8", "<f8", "<f8", "<f8")
    if window.empty or not ports.ids:
        time, count, top, low, mean, mean_square, hot, idle = (np.empty(0, dtype=d) for d in columns)
    else:
        dialect = connection.dialect.name
        per_port = bucketed(
            window, source.key, ports, ["utilisation"], Aggregation.AVG, step_ns, dialect
        ).subquery("per_port")
        value = per_port.c.value_0
        share = lambda condition: sa.func.avg(sa.case((condition, 1.0), else_=0.0))  # noqa: E731
        query = (
            sa.select(
                per_port.c.bucket,
                sa.func.count(value),
                sa.func.max(value),
                sa.func.min(value),
                sa.func.avg(value),
                sa.func.avg(value * value),
                share(value > rule.hot_above),
                share(value < rule.idle_below),
            )
            .where(value.is_not(None))
            .group_by(per_port.c.bucket)
            .order_by(per_port.c.bucket)
        )
        time, count, top, low, mean, mean_square, hot, idle = fetch_arrays(connection, query, columns)
    loaded = mean > 0
    ratio = np.ones_like(mean)
    np.divide(top, mean, out=ratio, where=loaded)
    deviation = np.sqrt(np.maximum(mean_square - mean * mean, 0.0))
    variation = np.zeros_like(mean)
    np.divide(deviation, mean, out=variation, where=loaded)
    pinned = rule.pinned(top, mean, low) & (count >= 2)
    return Skew(time, count, top, low, mean, ratio, variation, hot, idle, pinned, rollup_ns)


def loss_history(
    connection: Connection,
    source: QuerySource,
    port_id: int,
    start_ns: int,
    end_ns: int,
    step_ns: int,
    max_points: int,
) -> LossHistory:
    """Loss counters and the estimated BER of one port per interval with samples, in time order."""
    window = plan(source, start_ns, end_ns, step_ns, Aggregation.SUM)
    _check_intervals(window.start_ns, window.end_ns, step_ns, max_points)
    rollup_ns = ROLLUP_NS if window.rollup is not None else 0
    dtypes = ("<i8", *("<f8",) * len(LOSS_METRICS))
    if window.empty:
        time, *sums = (np.empty(0, dtype=d) for d in dtypes)
    else:
        dialect = connection.dialect.name
        query = bucketed(
            window, source.key, PortSet([port_id]), LOSS_METRICS, Aggregation.SUM, step_ns, dialect
        ).subquery()
        ordered = sa.select(query.c.bucket, *(query.c[f"value_{i}"] for i in range(len(LOSS_METRICS))))
        time, *sums = fetch_arrays(connection, ordered.order_by(query.c.bucket), dtypes)
    named = dict(zip(LOSS_METRICS, sums, strict=True))
    errors = np.where(
        np.isnan(named["symbol_errors"]) & np.isnan(named["rcv_errors"]),
        np.nan,
        np.nan_to_num(named["symbol_errors"]) + np.nan_to_num(named["rcv_errors"]),
    )
    bits = named["rx_bytes"] * 8.0
    ber = np.full(bits.shape, np.nan)
    np.divide(errors, bits, out=ber, where=bits > 0)
    return LossHistory(time, named, ber, rollup_ns)
