"""Counter state: each port's last raw reading and its time, per cumulative metric, of one source.

Ingest turns cumulative readings into deltas against this state (`ingest`). A mirror of 1,000
switches reads and replaces ~250k (port, metric) readings a poll, so the state is held two ways:

- In memory, as numpy arrays per metric over the source's sorted port ids (`CounterState`, kept by
  `CounterStates` between batches). A state is never changed in place: a batch makes a new one, which
  is kept only once its transaction has committed, so a batch rolled back leaves no trace.
- In the database, as the durable copy (`telemetry_counter_log`): every batch that moves a reading
  appends one row holding the readings it made as a ports x metrics matrix of packed little-endian
  arrays: port ids, Metric numbers, times (one per port when every metric of a port was read at
  once, else one per entry, -1 where a port has no reading of a metric) and readings, metric by
  metric. The state is, per (port, metric), the reading of the newest row holding it. When the rows
  would hold more than twice the entries of the state, the batch replaces them with one row holding
  the whole state instead, so the rows stay within three times the state and each batch writes
  about what it changed (a 1,000-switch poll: 27,460 ports x 9 metrics, 2.3 MB in one row).

Each row carries the source's counter generation (1, 2, ...): the number of batches that moved its
state. A batch with cumulative columns holds the source row's lock (PostgreSQL: SELECT ... FOR
UPDATE; SQLite has one writer), reads the newest generation (`stored_generation`), and uses the
state in memory only if it is at that generation, else reads the rows (`load_counter_state`). So
a restart, another replica writing the same source, or a batch that failed after its rows were
written (rolled back with them) cost one read of the rows, never a wrong delta.
"""

from __future__ import annotations

import collections
import dataclasses
import threading

import numpy as np
import sqlalchemy as sa
from sqlalchemy import Connection

from services.telemetry.schema import METRIC_COLUMNS, counter_log

__all__ = [
    "CounterState",
    "CounterStates",
    "NewReadings",
    "load_counter_state",
    "save_counter_state",
    "stored_generation",
]

_METRIC_NUMBERS = {name: number for number, name in METRIC_COLUMNS.items()}
# How each column of a log row packs its entries: fixed-width little-endian, whatever the machine.
_PACKING = {"port_id": "<i4", "metric": "<u1", "time_ns": "<i8", "reading": "<u8"}
_NO_TIME = -1  # a port without a reading of that metric


@dataclasses.dataclass(frozen=True)
class NewReadings:
    """The newest reading a batch made of each of its ports (the same ports for every metric)."""

    port_id: np.ndarray  # int64, unique
    time_ns: np.ndarray  # int64 per port
    reading: dict[str, np.ndarray]  # per cumulative metric, uint64 per port

    @property
    def entries(self) -> int:
        """(port, metric) readings held."""
        return int(self.port_id.shape[0]) * len(self.reading)


@dataclasses.dataclass(frozen=True)
class CounterState:
    """A source's last readings at one generation; arrays are shared between states, never written."""

    generation: int  # of the newest log row included; 0: none
    logged: int  # entries in the source's log rows, to know when to replace them by one
    port_id: np.ndarray  # int64, sorted, unique: ports with a reading of some metric
    time_ns: dict[str, np.ndarray]  # per metric, int64 per port of `port_id`; -1: no reading
    reading: dict[str, np.ndarray]  # per metric, uint64 per port of `port_id`

    @classmethod
    def empty(cls) -> CounterState:
        """The state of a source before any cumulative reading."""
        return cls(0, 0, np.empty(0, dtype=np.int64), {}, {})

    @property
    def entries(self) -> int:
        """(port, metric) readings held."""
        return sum(int(np.count_nonzero(times != _NO_TIME)) for times in self.time_ns.values())

    @property
    def nbytes(self) -> int:
        """Memory held by the arrays."""
        arrays = [self.port_id, *self.time_ns.values(), *self.reading.values()]
        return sum(array.nbytes for array in arrays)

    def slots(self, port_ids: np.ndarray) -> np.ndarray:
        """Each port's position in the state's arrays, -1 for a port without readings."""
        if self.port_id.shape[0] == 0:
            return np.full(port_ids.shape[0], -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(self.port_id, port_ids), self.port_id.shape[0] - 1)
        return np.where(self.port_id[at] == port_ids, at, -1)

    def last(self, metric: str, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Time (-1: none) and reading of `metric` at each slot of `slots`."""
        times, readings = self.time_ns.get(metric), self.reading.get(metric)
        if times is None or readings is None:
            return np.full(slots.shape[0], _NO_TIME, dtype=np.int64), np.zeros(slots.shape[0], np.uint64)
        present = slots >= 0
        where = np.where(present, slots, 0)
        return np.where(present, times[where], _NO_TIME), np.where(present, readings[where], 0)

    def with_readings(self, new: NewReadings) -> CounterState:
        """This state with `new` readings in place of the older ones (generation and log unchanged)."""
        port_id, time_ns, reading = self.port_id, dict(self.time_ns), dict(self.reading)
        added = np.setdiff1d(new.port_id, port_id, assume_unique=True)
        if added.shape[0]:  # new ports: every metric's arrays grow, old values moved to their slots
            port_id = np.union1d(port_id, added)
            moved = np.searchsorted(port_id, self.port_id)
            for metric in time_ns:
                grown_times = np.full(port_id.shape[0], _NO_TIME, dtype=np.int64)
                grown_readings = np.zeros(port_id.shape[0], dtype=np.uint64)
                grown_times[moved], grown_readings[moved] = time_ns[metric], reading[metric]
                time_ns[metric], reading[metric] = grown_times, grown_readings
        slots = np.searchsorted(port_id, new.port_id)
        for metric, values in new.reading.items():
            times = time_ns.get(metric)
            readings = reading.get(metric)
            if times is None or readings is None:
                times = np.full(port_id.shape[0], _NO_TIME, dtype=np.int64)
                readings = np.zeros(port_id.shape[0], dtype=np.uint64)
            else:
                times, readings = times.copy(), readings.copy()
            times[slots], readings[slots] = new.time_ns, values
            time_ns[metric], reading[metric] = times, readings
        return dataclasses.replace(self, port_id=port_id, time_ns=time_ns, reading=reading)

    def packed(self) -> dict[str, bytes]:
        """The whole state as one log row's columns."""
        metrics = list(self.time_ns)
        times = np.stack([self.time_ns[metric] for metric in metrics])
        if (times == times[0]).all():  # every metric of each port read at once: one time per port
            times = times[0]
        readings = np.stack([self.reading[metric] for metric in metrics])
        return _pack(self.port_id, metrics, times, readings)


def _pack(
    port_id: np.ndarray, metrics: list[str], time_ns: np.ndarray, reading: np.ndarray
) -> dict[str, bytes]:
    columns = {
        "port_id": port_id,
        "metric": np.array([_METRIC_NUMBERS[metric] for metric in metrics]),
        "time_ns": time_ns,
        "reading": reading,
    }
    return {
        name: np.ascontiguousarray(values, dtype=_PACKING[name]).tobytes() for name, values in columns.items()
    }


def _unpack(row: tuple) -> tuple[np.ndarray, list[str], np.ndarray, np.ndarray]:
    """A log row's ports, metrics, times and readings (metrics x ports; a time of -1: no reading)."""
    port_id, metric, time_ns, reading = (
        np.frombuffer(value, dtype=packing) for value, packing in zip(row, _PACKING.values(), strict=True)
    )
    shape = (metric.shape[0], port_id.shape[0])
    times = (
        np.broadcast_to(time_ns, shape) if time_ns.shape[0] == port_id.shape[0] else time_ns.reshape(shape)
    )
    metrics = [METRIC_COLUMNS[number] for number in metric.tolist()]
    return port_id.astype(np.int64), metrics, times, reading.reshape(shape)


def stored_generation(connection: Connection, source_key: int) -> int:
    """The generation of the source's newest log row; 0 before any."""
    newest = sa.select(sa.func.max(counter_log.c.generation)).where(counter_log.c.source_key == source_key)
    return int(connection.execute(newest).scalar_one() or 0)


def load_counter_state(connection: Connection, source_key: int) -> CounterState:
    """The source's state as its log rows have it: per (port, metric), the newest row's reading."""
    query = (
        sa.select(
            counter_log.c.generation,
            counter_log.c.port_id,
            counter_log.c.metric,
            counter_log.c.time_ns,
            counter_log.c.reading,
        )
        .where(counter_log.c.source_key == source_key)
        .order_by(counter_log.c.generation)
    )
    result = connection.execute(query)
    try:
        rows = result.cursor.fetchall()  # plain tuples of bytes: no SQLAlchemy processing per column
    finally:
        result.close()
    if not rows:
        return CounterState.empty()
    unpacked = [_unpack(row[1:]) for row in rows]
    port_id = np.unique(np.concatenate([ports for ports, _, _, _ in unpacked]))
    time_ns: dict[str, np.ndarray] = {}
    reading: dict[str, np.ndarray] = {}
    logged = 0
    for ports, metrics, times, readings in unpacked:  # oldest first: newer readings replace older
        slots = np.searchsorted(port_id, ports)
        for i, metric in enumerate(metrics):
            if metric not in time_ns:
                time_ns[metric] = np.full(port_id.shape[0], _NO_TIME, dtype=np.int64)
                reading[metric] = np.zeros(port_id.shape[0], dtype=np.uint64)
            held = times[i] != _NO_TIME
            time_ns[metric][slots[held]] = times[i][held]
            reading[metric][slots[held]] = readings[i][held]
            logged += int(np.count_nonzero(held))
    return CounterState(int(rows[-1][0]), logged, port_id, time_ns, reading)


def save_counter_state(
    connection: Connection, source_key: int, state: CounterState, new: NewReadings
) -> CounterState:
    """Write `new` readings after `state` (the source's state at its stored generation) inside the
    caller's transaction; returns the state they make, to keep once the transaction commits."""
    after = state.with_readings(new)
    generation = state.generation + 1
    if state.logged + new.entries > 2 * after.entries:
        connection.execute(sa.delete(counter_log).where(counter_log.c.source_key == source_key))
        packed, logged = after.packed(), after.entries
    else:
        metrics = list(new.reading)
        readings = np.stack([new.reading[metric] for metric in metrics])
        packed = _pack(new.port_id, metrics, new.time_ns, readings)
        logged = state.logged + new.entries
    connection.execute(sa.insert(counter_log).values(source_key=source_key, generation=generation, **packed))
    return dataclasses.replace(after, generation=generation, logged=logged)


class CounterStates:
    """The newest committed state of each source seen, at most `max_bytes` of arrays in all (the
    least recently used are dropped, and read again from the log when their source writes)."""

    def __init__(self, max_bytes: int = 256 << 20) -> None:
        self.max_bytes = max_bytes
        self._states: collections.OrderedDict[int, CounterState] = collections.OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, source_key: int, generation: int) -> CounterState | None:
        """The source's state if the one held is at `generation` (the stored one), else None."""
        with self._lock:
            state = self._states.get(source_key)
            if state is None or state.generation != generation:
                return None
            self._states.move_to_end(source_key)
            return state

    def keep(self, source_key: int, state: CounterState) -> None:
        """Hold a committed state, unless one of a later generation is held already."""
        with self._lock:
            held = self._states.get(source_key)
            if held is not None:
                if held.generation > state.generation:
                    return
                self._bytes -= held.nbytes
            self._states[source_key] = state
            self._states.move_to_end(source_key)
            self._bytes += state.nbytes
            while self._bytes > self.max_bytes and len(self._states) > 1:
                _, dropped = self._states.popitem(last=False)
                self._bytes -= dropped.nbytes

    def forget(self, source_key: int) -> None:
        """Drop a source's state (the source was deleted)."""
        with self._lock:
            dropped = self._states.pop(source_key, None)
            if dropped is not None:
                self._bytes -= dropped.nbytes
