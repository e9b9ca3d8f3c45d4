"""Builds fabrictwin.v1.SampleBatch messages from numpy arrays, for the telemetry tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from fabrictwin.v1 import telemetry_pb2

from services.common.arrays import to_numeric_array

__all__ = ["sample_batch"]


def sample_batch(
    source: str,
    ports: Sequence[str],
    port_index: np.ndarray,
    time_ns: np.ndarray,
    columns: Mapping[int, np.ndarray],
    counter_kinds: Mapping[int, int] | None = None,
) -> telemetry_pb2.SampleBatch:
    """A batch of rows (ports[port_index[i]], time_ns[i], columns[metric][i]); keys are Metric numbers."""
    kinds = counter_kinds or {}
    return telemetry_pb2.SampleBatch(
        source=source,
        ports=list(ports),
        port_index=to_numeric_array(np.asarray(port_index, dtype=np.int32)),
        time_ns=to_numeric_array(np.asarray(time_ns, dtype=np.int64)),
        columns=[
            telemetry_pb2.SampleColumn(
                metric=metric,
                counter_kind=kinds.get(metric, telemetry_pb2.COUNTER_KIND_DELTA),
                values=to_numeric_array(np.asarray(values)),
            )
            for metric, values in columns.items()
        ],
    )
