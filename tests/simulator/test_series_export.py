"""A run's series written to telemetry (`peers.export_series`) say how far they got.

The measured failure: a 2,048-rank k=32 run spent 18 s storing 8.6M series rows with nothing shown
(its progress stayed at 95% "storing series"); the export goes in 50,000-row batches, so it can say
after each how much is stored.
"""

from __future__ import annotations

import numpy as np

from services.simulator.peers import ROWS_PER_BATCH, export_series, prepare_telemetry_source
from services.simulator.series import ChannelSeries

from .test_service import telemetry  # noqa: F401 - a fixture


async def test_the_export_reports_its_progress_batch_by_batch(telemetry):  # noqa: F811
    channels, bins = 40, 6_000  # 240,000 rows: 5 batches
    rng = np.random.default_rng(3)
    series = ChannelSeries(
        channels=np.arange(channels, dtype=np.int32),
        start_ns=0,
        interval_ns=1000,
        bytes=rng.integers(0, 10_000, (channels, bins)),
        utilisation=rng.random((channels, bins)),
    )
    names = [f"leaf-{c}->spine-0" for c in range(channels)]
    await prepare_telemetry_source(telemetry, "exported", "fabrics/ls", "simulations/exported")
    done: list[float] = []
    stored = await export_series(telemetry, "exported", series, names, on_progress=done.append)
    assert stored == channels * bins
    assert len(done) == -(-channels * bins // ROWS_PER_BATCH)
    assert done == sorted(done) and done[-1] == 1.0 and done[0] < 1.0
