"""Storing one prepared batch inside the caller's transaction.

`store_batch` resolves port names to ids (creating new ports), turns cumulative counters into deltas
against each port's last stored reading (and cumulative tx_bytes into utilisation where the port's
link rate is known and no utilisation was sent), inserts the rows (a row already stored is a duplicate,
never stored twice), saves the newest readings (`counter_state`), keeps the source's sample count,
newest time and metric mask, and recomputes roll-ups a late row touches. Anything wrong raises
BatchRejected and the caller's transaction rolls the whole batch back.

A batch with cumulative columns locks its source's row first, so the batches moving one source's
counters commit one after the other, whichever client or replica sends them: each is converted
against the readings of the one before, and a reading older than one already stored is refused as
late instead of being counted again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np
import sqlalchemy as sa
from sqlalchemy import Connection

from services.telemetry.batches import BatchRejected, PreparedBatch
from services.telemetry.counter_state import (
    CounterState,
    CounterStates,
    NewReadings,
    load_counter_state,
    save_counter_state,
    stored_generation,
)
from services.telemetry.counters import counter_deltas
from services.telemetry.port_rates import KnownRates, PortRates, read_port_rates, save_port_rates
from services.telemetry.rollups import refresh_rollups
from services.telemetry.schema import metric_bit, ports, samples, sources
from services.telemetry.sql import dialect_insert, insert_samples

__all__ = ["Remembered", "StoredBatch", "store_batch"]

# Past this many names, a source's whole port list is read instead of a long IN list (SQLite and
# psycopg limit the number of parameters of one statement).
_MAX_IN_LIST = 500


@dataclasses.dataclass(frozen=True)
class StoredBatch:
    """What one batch did: rows stored and duplicate, and the port ids it used (to cache on commit)."""

    source_key: int
    stored: int
    duplicates: int
    port_ids: dict[str, int]
    counter_state: CounterState | None = None  # the source's counter state after the batch, if read
    port_rates: PortRates | None = None  # the source's link rates after the batch, if read


class Remembered:
    """What ingest keeps of each source between batches, all of it from committed transactions: port
    ids by name (a port's id never changes), counter states (`counter_state`) and link rates
    (`port_rates`), the last two checked against the source row before each use."""

    def __init__(self) -> None:
        self.port_ids: dict[int, dict[str, int]] = {}
        self.counter_states = CounterStates()
        self.rates = KnownRates()

    def keep(self, done: StoredBatch) -> None:
        """Remember what a batch used and made, once its transaction has committed."""
        self.port_ids.setdefault(done.source_key, {}).update(done.port_ids)
        if done.counter_state is not None:
            self.counter_states.keep(done.source_key, done.counter_state)
        if done.port_rates is not None:
            self.rates.keep(done.source_key, done.port_rates)

    def forget(self, source_key: int) -> None:
        """Drop a deleted source."""
        self.port_ids.pop(source_key, None)
        self.counter_states.forget(source_key)
        self.rates.forget(source_key)


def _port_ids(
    connection: Connection, source_key: int, names: list[str], known: Mapping[str, int]
) -> np.ndarray:
    """Database ids of `names` (ports of the source), creating the ports that are new."""

    def lookup(wanted: list[str]) -> dict[str, int]:
        query = sa.select(ports.c.name, ports.c.id).where(ports.c.source_key == source_key)
        if len(wanted) <= _MAX_IN_LIST:
            query = query.where(ports.c.name.in_(wanted))
        return {name: port_id for name, port_id in connection.execute(query)}

    ids = np.fromiter((known.get(name, -1) for name in names), dtype=np.int64, count=len(names))
    unknown = np.flatnonzero(ids < 0)
    if unknown.shape[0]:
        wanted = [names[i] for i in unknown.tolist()]
        found = lookup(wanted)
        missing = [name for name in wanted if name not in found]
        if missing:
            create = dialect_insert(connection, ports).on_conflict_do_nothing(
                index_elements=["source_key", "name"]
            )
            connection.execute(create, [{"source_key": source_key, "name": name} for name in missing])
            found.update(lookup(missing))
        ids[unknown] = [found[name] for name in wanted]
    return ids


def _already_stored(
    connection: Connection, source_key: int, port_id: np.ndarray, time_ns: np.ndarray
) -> np.ndarray:
    """Which of these (port, time) rows the samples table holds already (re-sent cumulative rows)."""
    query = sa.select(samples.c.port_id, samples.c.time_ns).where(
        samples.c.source_key == source_key,
        samples.c.port_id.in_(np.unique(port_id).tolist()),
        samples.c.time_ns.between(int(time_ns.min()), int(time_ns.max())),
    )
    existing = {(port, time) for port, time in connection.execute(query)}
    # A Python loop, but only over rows re-sent at or before a port's last reading: not the hot path.
    keys = zip(port_id.tolist(), time_ns.tolist(), strict=True)
    return np.array([key in existing for key in keys], dtype=bool)


@dataclasses.dataclass(frozen=True)
class _Converted:
    keep: np.ndarray  # bool per prepared row: not a re-sent cumulative row
    values: dict[str, np.ndarray]  # per column, for the kept rows: amounts (deltas for cumulative ones)
    intervals: dict[str, np.ndarray]  # per cumulative column: ns since the previous reading, NaN if none
    readings: NewReadings | None  # each port's newest reading per cumulative column, to be saved


def _convert_cumulative(
    connection: Connection, source_key: int, batch: PreparedBatch, port_ids: np.ndarray, state: CounterState
) -> _Converted:
    """Deltas of the cumulative columns against each port's previous reading (in `state`)."""
    cumulative = [name for name, kind in batch.kinds.items() if kind.is_cumulative]
    if not cumulative:
        return _Converted(np.ones(batch.time_ns.shape[0], dtype=bool), dict(batch.values), {}, None)
    slots = state.slots(port_ids)
    last_time, last_reading = {}, {}
    for name in cumulative:
        last_time[name], last_reading[name] = state.last(name, slots)

    # Rows at or before a port's last reading are either re-sent (already stored: duplicates) or
    # late, and a late reading cannot be turned into a delta without rewriting the next one.
    stale = np.zeros(batch.time_ns.shape[0], dtype=bool)
    for name in cumulative:
        stale |= batch.time_ns <= last_time[name][batch.port]
    keep = ~stale
    if stale.any():
        stored = _already_stored(connection, source_key, port_ids[batch.port[stale]], batch.time_ns[stale])
        if not stored.all():
            late = np.flatnonzero(stale)[~stored][0]
            name = next(n for n in cumulative if batch.time_ns[late] <= last_time[n][batch.port[late]])
            port = batch.port_names[batch.port[late]]
            raise BatchRejected(
                "time_ns",
                f"{batch.kinds[name].name} reading of {name} for port {port!r} at "
                f"{int(batch.time_ns[late])} ns is not after the last stored reading "
                f"({int(last_time[name][batch.port[late]])} ns); send cumulative counters in time order",
                int(batch.batch_row[late]),
            )

    port, time = batch.port[keep], batch.time_ns[keep]
    first = np.ones(port.shape[0], dtype=bool)
    first[1:] = port[1:] != port[:-1]
    last = np.ones(port.shape[0], dtype=bool)
    last[:-1] = first[1:]
    values = {name: column[keep] for name, column in batch.values.items()}
    intervals: dict[str, np.ndarray] = {}
    newest: dict[str, np.ndarray] = {}
    for name in cumulative:
        readings = values[name]
        previous = np.empty_like(readings)
        previous[1:] = readings[:-1]
        previous[first] = last_reading[name][port[first]]
        has_previous = ~first
        has_previous[first] = last_time[name][port[first]] >= 0
        values[name] = counter_deltas(batch.kinds[name], readings, previous, has_previous)
        since = np.empty(time.shape[0], dtype=np.float64)
        since[1:] = time[1:] - time[:-1]
        since[first] = time[first] - last_time[name][port[first]]
        since[~has_previous] = np.nan
        intervals[name] = since
        newest[name] = readings[last]
    new = NewReadings(port_ids[port[last]], time[last], newest) if last.any() else None
    return _Converted(keep, values, intervals, new)


def _port_rates(
    connection: Connection,
    source_key: int,
    version: int,
    batch: PreparedBatch,
    port_ids: np.ndarray,
    known: KnownRates,
) -> tuple[np.ndarray, PortRates | None]:
    """Link rate of each port of the batch (bits/s, NaN unknown), the rates sent with it saved; and
    the source's rates after the batch, to keep once it commits (None: not sure of them)."""
    held = known.get(source_key, version) or read_port_rates(connection, source_key, version)
    rates = held.of(port_ids)
    after: PortRates | None = held
    if batch.port_rate_bps is not None:
        sent = batch.port_rate_bps > 0
        changed = sent & (batch.port_rate_bps != rates)
        if changed.any():
            new_version = save_port_rates(
                connection, source_key, port_ids[changed], batch.port_rate_bps[changed]
            )
            # Another batch changed rates since the source row was read: read them again next time.
            after = (
                held.with_rates(new_version, port_ids[changed], batch.port_rate_bps[changed])
                if new_version == version + 1
                else None
            )
        rates[sent] = batch.port_rate_bps[sent]
    return rates, after


def _utilisation(converted: _Converted, rates: np.ndarray) -> np.ndarray | None:
    """Transmit utilisation from cumulative tx_bytes: bytes * 8 / (interval * rate); None if unknowable."""
    usable = ~np.isnan(rates)
    if not usable.any():
        return None
    seconds = converted.intervals["tx_bytes"] * 1e-9
    with np.errstate(divide="ignore", invalid="ignore"):
        utilisation = converted.values["tx_bytes"] * 8.0 / (seconds * rates)
    utilisation[~np.isfinite(utilisation)] = np.nan
    return utilisation


def _counter_state(connection: Connection, source_key: int, states: CounterStates) -> CounterState:
    """The source's committed counter state: the one in memory if it is the newest stored, else read."""
    generation = stored_generation(connection, source_key)
    held = states.get(source_key, generation)
    if held is not None:
        return held
    return load_counter_state(connection, source_key) if generation else CounterState.empty()


def _update_source(connection: Connection, source_key: int, stored: int, newest: int, mask: int):
    """Count the rows and move the newest time; the row lock orders this batch after a running sweep."""
    newest_time = sa.case(
        (sources.c.newest_time_ns.is_(None) | (sources.c.newest_time_ns < newest), newest),
        else_=sources.c.newest_time_ns,
    )
    statement = (
        sa.update(sources)
        .where(sources.c.key == source_key)
        .values(
            sample_count=sources.c.sample_count + stored,
            newest_time_ns=newest_time,
            metrics_mask=sources.c.metrics_mask.op("|")(mask),
        )
        .returning(sources.c.rolled_up_until_ns, sources.c.metrics_mask)
    )
    return connection.execute(statement).one()


def store_batch(
    connection: Connection,
    source_id: str,
    batch: PreparedBatch,
    remembered: Remembered,
) -> StoredBatch:
    """Store a prepared batch inside the caller's transaction; `remembered.keep` the result once it
    has committed."""
    source = sa.select(sources.c.key, sources.c.retained_from_ns, sources.c.port_rates_version).where(
        sources.c.id == source_id
    )
    if batch.cumulative:  # one batch at a time moves a source's counters (see `counter_state`)
        source = source.with_for_update()
    row = connection.execute(source).first()
    if row is None:
        raise BatchRejected("source", f"sources/{source_id} does not exist")
    source_key, retained_from = int(row.key), int(row.retained_from_ns)
    if batch.time_ns.shape[0] == 0:
        return StoredBatch(source_key, 0, batch.duplicates, {})
    expired = batch.time_ns < retained_from
    if expired.any():
        at = int(np.argmax(expired))
        raise BatchRejected(
            "time_ns",
            f"{int(batch.time_ns[at])} ns is before {retained_from} ns, where the source's retention "
            "deleted the raw samples; older data can no longer be added",
            int(batch.batch_row[at]),
        )
    port_ids = _port_ids(connection, source_key, batch.port_names, remembered.port_ids.get(source_key, {}))
    state = _counter_state(connection, source_key, remembered.counter_states) if batch.cumulative else None
    converted = _convert_cumulative(connection, source_key, batch, port_ids, state or CounterState.empty())
    keep, values = converted.keep, converted.values
    derive = "tx_bytes" in converted.intervals and "utilisation" not in values
    rates_after = None
    if batch.port_rate_bps is not None or derive:
        version = int(row.port_rates_version)
        rates, rates_after = _port_rates(connection, source_key, version, batch, port_ids, remembered.rates)
        if derive:
            utilisation = _utilisation(converted, rates[batch.port[keep]])
            if utilisation is not None:
                values = {**values, "utilisation": utilisation}
    stored_ports = port_ids[batch.port[keep]]
    stored_times = batch.time_ns[keep]
    stored = insert_samples(connection, source_key, stored_ports, stored_times, values)
    if state is not None and converted.readings is not None:
        state = save_counter_state(connection, source_key, state, converted.readings)
    if stored:
        mask = 0
        for name in values:
            mask |= metric_bit(name)
        rolled_up_until, full_mask = _update_source(
            connection, source_key, stored, int(stored_times.max()), mask
        )
        late = stored_times < rolled_up_until
        if late.any():  # rare: a row inside minutes already rolled up; recompute those minutes
            refresh_rollups(
                connection,
                source_key,
                int(full_mask),
                np.unique(stored_ports[late]).tolist(),
                int(stored_times[late].min()),
                int(rolled_up_until),
            )
    names = dict(zip(batch.port_names, port_ids.tolist(), strict=True))
    return StoredBatch(source_key, stored, batch.rows - stored, names, state, rates_after)
