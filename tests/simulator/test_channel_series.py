"""`series_reference.channel_series` (the integrator's reference): records by channel (the FLOW
engine's old order, no sort) integrate to exactly what the same records in time order do."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.simulator.series_reference import channel_series


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 10_000), st.sampled_from([0.0, 1e9, 2.5e9, 4e10])),
        min_size=1,
        max_size=80,
    ),
    st.integers(1, 3_000),
)
def test_records_by_channel_give_the_series_records_in_time_order_give(records, interval_ns):
    channel = np.array([c for c, _, _ in records], dtype=np.int32)
    time_ns = np.array([t for _, t, _ in records], dtype=np.int64)
    load = np.array([v for _, _, v in records])
    rate = np.full(6, 4e10)
    end_ns = int(time_ns.max()) + 1_000
    by_time = np.lexsort((channel, time_ns))  # time order (ties by channel)
    by_channel = np.lexsort((time_ns, channel))  # channel, then time
    a = channel_series(time_ns[by_time], channel[by_time], load[by_time], rate, end_ns, interval_ns)
    b = channel_series(time_ns[by_channel], channel[by_channel], load[by_channel], rate, end_ns, interval_ns)
    assert np.array_equal(a.channels, b.channels)
    assert a.interval_ns == b.interval_ns
    assert np.array_equal(a.bytes, b.bytes)
    assert np.array_equal(a.utilisation, b.utilisation)
