"""Each port's health over a window: what the twin's link-health estimate reads.

Per port, sums over the window (one SQL aggregate over every port, from one-minute roll-ups where
the window allows and raw samples for the rest): bytes received, symbol errors, receive errors and
LinkDownedCounter (on Ethernet, carrier-down transitions). The estimated bit error rate is the one
GetLossHistory reports: (symbol errors + receive errors) over bits received — each counted error is
at least one bit in error, so it is a lower bound — NaN where the port received no bytes or never
reported either error counter. What a link's state should be follows from its two ports
(`fabrictwin.link_health` in the SDK).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import sqlalchemy as sa
from sqlalchemy import Connection

from services.telemetry.aggregates import Aggregation, PortSet, bucketed
from services.telemetry.queries import QuerySource, fetch_arrays, plan

__all__ = ["HEALTH_METRICS", "PortHealth", "port_health"]

HEALTH_METRICS = ("rx_bytes", "symbol_errors", "rcv_errors", "link_downed")


@dataclasses.dataclass(frozen=True)
class PortHealth:
    """One port's sums over the window (NaN: never reported there) and its estimated BER."""

    port: str
    rx_bytes: float
    symbol_errors: float
    rcv_errors: float
    link_downed: float
    estimated_ber: float


def estimated_ber(rx_bytes: np.ndarray, symbol_errors: np.ndarray, rcv_errors: np.ndarray) -> np.ndarray:
    """(symbol + receive errors) / bits received, element-wise; NaN without bytes or error counters.

    >>> estimated_ber(np.array([1e9]), np.array([8.0]), np.array([np.nan]))
    array([1.e-09])
    """
    errors = np.where(
        np.isnan(symbol_errors) & np.isnan(rcv_errors),
        np.nan,
        np.nan_to_num(symbol_errors) + np.nan_to_num(rcv_errors),
    )
    bits = np.nan_to_num(rx_bytes) * 8.0
    ber = np.full(bits.shape, np.nan)
    np.divide(errors, bits, out=ber, where=bits > 0)
    return ber


def port_health(
    connection: Connection,
    source: QuerySource,
    ports: PortSet,
    names: dict[int, str],
    start_ns: int,
    end_ns: int,
) -> list[PortHealth]:
    """The health of every port in `ports` with samples in [start_ns, end_ns), sorted by port name."""
    window = plan(source, start_ns, end_ns, 0, Aggregation.SUM)
    if window.empty or not ports.ids:
        return []
    reduced = bucketed(
        window, source.key, ports, HEALTH_METRICS, Aggregation.SUM, 0, connection.dialect.name
    ).subquery()
    query = sa.select(reduced.c.port_id, *(reduced.c[f"value_{i}"] for i in range(len(HEALTH_METRICS))))
    port, rx_bytes, symbol, rcv, downed = fetch_arrays(connection, query, ("<i8", *("<f8",) * 4))
    ber = estimated_ber(rx_bytes, symbol, rcv)
    found = [
        PortHealth(names[int(p)], float(b), float(s), float(r), float(d), float(e))
        for p, b, s, r, d, e in zip(
            port.tolist(),
            rx_bytes.tolist(),
            symbol.tolist(),
            rcv.tolist(),
            downed.tolist(),
            ber.tolist(),
            strict=True,
        )
        if int(p) in names
    ]
    return sorted(found, key=lambda h: h.port)
