"""The FLOW engine's series integrated as the loop runs (flow/integrate.py) against
`series_reference.channel_series`, which integrates the records of a whole run at once: the same series
whatever the buffers the records come in, the interval doubling or the edges growing on the way."""

from __future__ import annotations

import numpy as np
import pytest

from services.simulator.flow import integrate
from services.simulator.flow.integrate import LoadIntegrator
from tests.simulator.series_reference import channel_series

G = 1_000_000_000


def random_records(seed: int):
    """Load changes on a few channels in time order (some at the same instant, some to 0), a
    channel that never carries load, and the run's end."""
    rng = np.random.default_rng(seed)
    channels = int(rng.integers(1, 7))
    count = int(rng.integers(0, 400))
    times = np.sort(rng.choice(rng.integers(1, 50_000, 60), count)).astype(np.int64)
    compact = rng.integers(0, channels, count).astype(np.int64)
    loads = rng.choice([0.0, 0.0, 1.5 * G, 100.0 * G, 133.3 * G, 400.0 * G], count)
    end = int(times.max(initial=0)) + int(rng.integers(1, 20_000))
    ids = np.sort(rng.choice(64, channels, replace=False)).astype(np.int32)
    return ids, times, compact, loads, end, rng


def fold_in_chunks(integrator: LoadIntegrator, ids, times, compact, loads, rng) -> None:
    integrator.open(ids)
    start = 0
    while start < len(times):  # buffers of random sizes, reused (overwritten) after each call
        size = int(rng.integers(1, 60))
        buffers = (np.zeros(64, np.int64), np.zeros(64, np.int64), np.zeros(64))
        part = slice(start, min(start + size, len(times)))
        n = part.stop - part.start
        buffers[0][:n], buffers[1][:n], buffers[2][:n] = times[part], compact[part], loads[part]
        integrator.fold(*buffers, n)
        buffers[0][:] = -1
        start = part.stop


def assert_same(got, want) -> None:
    assert got.interval_ns == want.interval_ns
    assert np.array_equal(got.channels, want.channels)
    # Sums in another order (per channel rather than over all records) may round a byte apart, on
    # the cumulative curve: an interval and its neighbour, never the total beyond a byte.
    assert np.abs(got.bytes - want.bytes).max(initial=0) <= 1
    assert np.abs(got.bytes.sum(axis=1) - want.bytes.sum(axis=1)).max(initial=0) <= 1
    same = got.bytes == want.bytes
    assert np.array_equal(got.utilisation[same], want.utilisation[same])


@pytest.mark.parametrize("seed", range(40))
def test_a_fixed_interval_gives_the_series_of_the_whole_run(seed):
    ids, times, compact, loads, end, rng = random_records(seed)
    rate = np.full(64, 400.0 * G)
    interval = int(rng.integers(50, 5000))
    integrator = LoadIntegrator(interval, fixed=True, intervals=2)  # the edges grow on the way
    fold_in_chunks(integrator, ids, times, compact, loads, rng)
    got = integrator.series(end, rate, None)
    want = channel_series(times, ids[compact], loads, rate, end, interval)
    assert_same(got, want)


@pytest.mark.parametrize("seed", range(40))
def test_a_chosen_interval_doubles_until_the_run_fits(seed):
    ids, times, compact, loads, end, rng = random_records(100 + seed)
    rate = np.full(64, 400.0 * G)
    integrator = LoadIntegrator(int(rng.integers(1, 40)), fixed=False, intervals=8)
    fold_in_chunks(integrator, ids, times, compact, loads, rng)
    got = integrator.series(end, rate, None)
    assert got.bytes.shape[1] <= 8
    want = channel_series(times, ids[compact], loads, rate, end, got.interval_ns)
    assert_same(got, want)


@pytest.mark.parametrize("seed", range(20))
def test_exact_bytes_scale_each_curve_to_its_total(seed):
    ids, times, compact, loads, end, rng = random_records(200 + seed)
    rate = np.full(64, 400.0 * G)
    exact = rng.integers(0, 10**7, 64).astype(np.float64)
    integrator = LoadIntegrator(997, fixed=True)
    fold_in_chunks(integrator, ids, times, compact, loads, rng)
    got = integrator.series(end, rate, exact)
    want = channel_series(times, ids[compact], loads, rate, end, 997, exact)
    assert_same(got, want)
    assert np.array_equal(got.bytes.sum(axis=1), np.rint(exact[got.channels]).astype(np.int64))


def test_a_fixed_interval_doubles_only_where_the_series_would_not_fit(monkeypatch):
    monkeypatch.setattr(integrate, "MAX_SERIES_VALUES", 100)
    ids = np.array([3, 9], dtype=np.int32)
    integrator = LoadIntegrator(10, fixed=True, intervals=4)
    integrator.open(ids)
    # Both channels at 80 Gb/s (10 bytes per ns) from 0 to 1,000 ns: 100 intervals of 10 ns do not
    # fit 2 x 101 values in 100; 40 ns is the first doubling whose 25 intervals fit 2 x 26.
    times = np.array([0, 0, 1000, 1000], dtype=np.int64)
    integrator.fold(times, np.array([0, 1, 0, 1]), np.array([80.0 * G, 80.0 * G, 0.0, 0.0]), 4)
    series = integrator.series(1000, np.full(10, 400.0 * G), None)
    assert series.interval_ns == 40
    assert series.bytes.tolist() == [[400] * 25, [400] * 25]


def test_a_channel_that_never_carried_load_has_no_series():
    integrator = LoadIntegrator(100, fixed=True)
    integrator.open(np.array([1, 2], dtype=np.int32))
    integrator.fold(np.array([0, 50], dtype=np.int64), np.array([0, 1]), np.array([8.0 * G, 0.0]), 2)
    series = integrator.series(200, np.full(3, 400.0 * G), None)
    assert series.channels.tolist() == [1]
    assert series.bytes.tolist() == [[100, 100]]
