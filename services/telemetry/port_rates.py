"""Link rates of a source's ports as last reported, to derive utilisation from cumulative tx_bytes.

A batch may send a rate per port (bits/s, 0 unknown); ingest saves those that changed
(`telemetry_ports.rate_bps`) and uses the stored rate of a port that sent none. A 1,000-switch
mirror sends 27,460 rates with every poll, and reading them back to see which changed took 40-57 ms
of each poll. So the service keeps each source's rates in memory (`PortRates`), and every batch
that changes a rate adds one to its source row's `port_rates_version` in the same transaction: the
rates held are used while the version read with the source row is the one they were read or written
at, and read again otherwise (after a restart, or when another replica changed a rate).
"""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import sqlalchemy as sa
from sqlalchemy import Connection

from services.telemetry.queries import fetch_arrays
from services.telemetry.schema import ports, sources

__all__ = ["KnownRates", "PortRates", "read_port_rates", "save_port_rates"]


@dataclasses.dataclass(frozen=True)
class PortRates:
    """The rates of a source's ports at one `port_rates_version`; arrays never written."""

    version: int
    port_id: np.ndarray  # int64, sorted: the ports with a known rate
    rate_bps: np.ndarray  # float64 per port of `port_id`, > 0

    def of(self, port_ids: np.ndarray) -> np.ndarray:
        """The rate of each port (NaN: unknown)."""
        rates = np.full(port_ids.shape[0], np.nan)
        if self.port_id.shape[0]:
            at = np.minimum(np.searchsorted(self.port_id, port_ids), self.port_id.shape[0] - 1)
            known = self.port_id[at] == port_ids
            rates[known] = self.rate_bps[at[known]]
        return rates

    def with_rates(self, version: int, port_ids: np.ndarray, rates: np.ndarray) -> PortRates:
        """These rates with `rates` of `port_ids` (unique) set, at `version`."""
        kept = ~np.isin(self.port_id, port_ids)
        port_id = np.concatenate([self.port_id[kept], port_ids])
        order = np.argsort(port_id, kind="stable")
        return PortRates(version, port_id[order], np.concatenate([self.rate_bps[kept], rates])[order])


def read_port_rates(connection: Connection, source_key: int, version: int) -> PortRates:
    """Every known rate of the source's ports, as of `version` (read with the source row)."""
    query = sa.select(ports.c.id, ports.c.rate_bps).where(
        ports.c.source_key == source_key, ports.c.rate_bps > 0
    )
    port_id, rate_bps = fetch_arrays(connection, query, ("i8", "f8"))
    order = np.argsort(port_id, kind="stable")
    return PortRates(version, port_id[order], rate_bps[order])


def save_port_rates(connection: Connection, source_key: int, port_ids: np.ndarray, rates: np.ndarray) -> int:
    """Store new rates of some ports and move the source's version on; returns the new version."""
    connection.execute(
        sa.update(ports).where(ports.c.id == sa.bindparam("port")).values(rate_bps=sa.bindparam("rate")),
        [{"port": p, "rate": r} for p, r in zip(port_ids.tolist(), rates.tolist(), strict=True)],
    )
    moved = (
        sa.update(sources)
        .where(sources.c.key == source_key)
        .values(port_rates_version=sources.c.port_rates_version + 1)
        .returning(sources.c.port_rates_version)
    )
    return int(connection.execute(moved).scalar_one())


class KnownRates:
    """The newest committed rates of each source seen."""

    def __init__(self) -> None:
        self._rates: dict[int, PortRates] = {}
        self._lock = threading.Lock()

    def get(self, source_key: int, version: int) -> PortRates | None:
        """The source's rates if those held are at `version` (the stored one), else None."""
        held = self._rates.get(source_key)
        return held if held is not None and held.version == version else None

    def keep(self, source_key: int, rates: PortRates) -> None:
        """Hold committed rates, unless newer ones are held already."""
        with self._lock:
            held = self._rates.get(source_key)
            if held is None or held.version <= rates.version:
                self._rates[source_key] = rates

    def forget(self, source_key: int) -> None:
        """Drop a source's rates (the source was deleted)."""
        with self._lock:
            self._rates.pop(source_key, None)
