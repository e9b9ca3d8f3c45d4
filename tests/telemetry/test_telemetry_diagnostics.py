"""Utilisation skew and loss history, checked against their closed forms on the same samples."""

from __future__ import annotations

import math

import numpy as np
import pytest

from services.common.errors import InvalidArgument, NotFound
from services.common.pinning import PinningRule
from services.telemetry.store import TelemetryStore

S = 1_000_000_000
MINUTE = 60 * S


def _ingest_levels(store, source_id, levels: np.ndarray, times: np.ndarray) -> None:
    """levels[p, t]: utilisation of port p at times[t]."""
    ports = [f"leaf-{p // 4}->spine-{p % 4}" for p in range(levels.shape[0])]
    port_index = np.repeat(np.arange(levels.shape[0]), times.size)
    time_ns = np.tile(times, levels.shape[0])
    assert store.ingest(source_id, ports, port_index, time_ns, {"utilisation": levels.ravel()}).rejected == 0


def test_skew_per_interval_is_max_over_mean_cv_and_the_hot_and_idle_shares(store: TelemetryStore, source_id):
    # Interval 0: two of eight uplinks pinned at 95 %, five idle at 5 %, one at 50 % (ECMP pinning);
    # interval 1: every uplink at 40 %.
    pinned = np.array([0.95, 0.95, 0.05, 0.05, 0.05, 0.05, 0.05, 0.5])
    levels = np.stack([np.concatenate([[v, v], [0.4, 0.4]]) for v in pinned])
    _ingest_levels(store, source_id, levels, np.array([0, S // 2, S, S + S // 2]))
    skew = store.utilisation_skew(source_id, step_ns=S)
    assert skew.time_ns.tolist() == [0, S]
    mean = pinned.mean()
    assert skew.ports.tolist() == [8, 8]
    assert skew.max_over_mean[0] == pytest.approx(0.95 / mean, rel=1e-12)
    assert skew.coefficient_of_variation[0] == pytest.approx(pinned.std() / mean, rel=1e-9)
    assert (skew.share_hot[0], skew.share_idle[0]) == (2 / 8, 5 / 8)
    assert skew.max_over_mean[1] == pytest.approx(1.0)
    assert skew.coefficient_of_variation[1] == pytest.approx(0.0, abs=1e-7)
    assert (skew.share_hot[1], skew.share_idle[1]) == (0.0, 0.0)
    assert skew.min_utilisation.tolist() == pytest.approx([0.05, 0.4])
    assert skew.pinned.tolist() == [True, False]


def test_the_skew_finds_pinning_by_the_diagnosis_rule_52_next_to_8(store: TelemetryStore, source_id):
    """A leaf's uplinks at 52% and 8%: nothing above 80%, yet pinned (max/mean 1.73, 44 points apart),
    by the same rule the diagnosis applies; stricter thresholds from the caller say otherwise."""
    levels = np.array([[0.52], [0.08]])
    _ingest_levels(store, source_id, levels, np.array([5 * S]))
    skew = store.utilisation_skew(source_id)
    assert skew.share_hot.tolist() == [0.0] and skew.pinned.tolist() == [True]
    assert store.utilisation_skew(source_id, rule=PinningRule.of(spread=0.5)).pinned.tolist() == [False]


def test_skew_thresholds_and_a_whole_window_interval(store: TelemetryStore, source_id):
    levels = np.array([[0.7], [0.3], [0.1], [0.0]])
    _ingest_levels(store, source_id, levels, np.array([5 * S]))
    skew = store.utilisation_skew(source_id, rule=PinningRule.of(hot_above=0.6, idle_below=0.15))
    assert skew.time_ns.tolist() == [0]  # step 0: the window is one interval
    assert (skew.share_hot[0], skew.share_idle[0]) == (0.25, 0.5)
    with pytest.raises(InvalidArgument, match=r"^idle_below"):
        PinningRule.of(hot_above=0.2, idle_below=0.5)


def test_no_load_at_all_is_even(store: TelemetryStore, source_id):
    _ingest_levels(store, source_id, np.zeros((4, 1)), np.array([0]))
    skew = store.utilisation_skew(source_id)
    assert (skew.max_over_mean[0], skew.coefficient_of_variation[0], skew.share_idle[0]) == (1.0, 0.0, 1.0)


def test_skew_from_roll_ups_equals_skew_from_raw_samples(store: TelemetryStore, source_id):
    rng = np.random.default_rng(5)
    levels = rng.random((8, 240))
    _ingest_levels(store, source_id, levels, np.arange(240, dtype=np.int64) * S)
    raw = store.utilisation_skew(source_id, step_ns=MINUTE)
    store.sweep(source_id)
    rolled = store.utilisation_skew(source_id, step_ns=MINUTE)
    assert (raw.rollup_ns, rolled.rollup_ns) == (0, MINUTE)
    np.testing.assert_allclose(rolled.max_over_mean, raw.max_over_mean, rtol=1e-12)
    np.testing.assert_allclose(rolled.coefficient_of_variation, raw.coefficient_of_variation, rtol=1e-9)
    np.testing.assert_array_equal(rolled.share_hot, raw.share_hot)


def test_loss_history_sums_drops_and_errors_and_estimates_the_bit_error_rate(
    store: TelemetryStore, source_id
):
    times = np.array([0, S, 2 * S, 3 * S])
    columns = {
        "rx_bytes": np.array([1e9, 1e9, 0.0, 2e9]),
        "symbol_errors": np.array([0.0, 4.0, 0.0, 2.0]),
        "rcv_errors": np.array([0.0, 1.0, 0.0, 1.0]),
        "drops": np.array([0.0, 0.0, 3.0, 0.0]),
        "rx_packets": np.array([1e6, 1e6, 0, 2e6]),
    }
    store.ingest(source_id, ["leaf-0/p2"], np.zeros(4, dtype=np.int64), times, columns)
    history = store.loss_history(source_id, "leaf-0/p2", step_ns=2 * S)
    assert history.time_ns.tolist() == [0, 2 * S]
    assert history.sums["drops"].tolist() == [0.0, 3.0]
    assert history.sums["symbol_errors"].tolist() == [4.0, 2.0]
    assert history.estimated_ber.tolist() == [5 / (2e9 * 8), 3 / (2e9 * 8)]
    assert np.isnan(history.sums["xmit_discards"]).all()  # never reported: unknown, not zero

    silent = store.loss_history(source_id, "leaf-0/p2", start_ns=2 * S, end_ns=3 * S)
    assert math.isnan(silent.estimated_ber[0])  # no bytes received: no estimate
    with pytest.raises(NotFound, match=r"^port: .* has no port 'leaf-0/p9'"):
        store.loss_history(source_id, "leaf-0/p9")
