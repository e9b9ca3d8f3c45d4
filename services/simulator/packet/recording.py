"""The per-interval series: bytes on the wire, queue depth (integral and peak), counted durations."""

from __future__ import annotations

from services.simulator.packet.kernel import kernel, kernel_inline
from services.simulator.packet.layout import CH_Q_BYTES, CH_Q_LAST, PF_INV_INTERVAL, PR_INTERVAL

__all__ = ["bin_of", "record_tx", "set_queue", "spread_ps"]


@kernel_inline
def bin_of(pr, pf, t):
    """t // PR_INTERVAL for t >= 0, by the reciprocal and one correction (exact while t < 2^53 ps;
    the integer division was ~4% of a k=16 run)."""
    interval = pr[PR_INTERVAL]
    b = int(t * pf[PF_INV_INTERVAL])
    if b * interval > t:
        b -= 1
    elif (b + 1) * interval <= t:
        b += 1
    return b


@kernel_inline
def record_tx(series, pr, pf, c, t0, duration, wire):
    """Bytes of one serialisation on channel c, spread over the sample bins it overlaps."""
    interval = pr[PR_INTERVAL]
    b0 = bin_of(pr, pf, t0)
    b1 = bin_of(pr, pf, t0 + duration - 1)
    if b0 == b1:
        series.bytes[b0, c] += wire
    else:
        for b in range(b0, b1 + 1):
            lo = max(t0, b * interval)
            hi = min(t0 + duration, (b + 1) * interval)
            series.bytes[b, c] += wire * (hi - lo) / duration


@kernel
def spread_ps(series, pr, column, c, t0, t1):
    """A duration [t0, t1) into the counter series column, split over the bins it overlaps."""
    interval = pr[PR_INTERVAL]
    for b in range(t0 // interval, (t1 - 1) // interval + 1):
        series.ev[b, c, column] += min(t1, (b + 1) * interval) - max(t0, b * interval)


@kernel_inline
def set_queue(ch, series, pr, pf, c, now, new_bytes):
    """Integrate channel c's old queue depth over [q_last, now), then change it."""
    interval = pr[PR_INTERVAL]
    old = ch.hot[c, CH_Q_BYTES]
    last = ch.hot[c, CH_Q_LAST]
    if old > 0 and now > last:
        b0 = bin_of(pr, pf, last)
        b1 = bin_of(pr, pf, now - 1)
        if b0 == b1:
            series.qint[b0, c] += old * (now - last)
        else:
            for b in range(b0, b1 + 1):
                lo = max(last, b * interval)
                hi = min(now, (b + 1) * interval)
                series.qint[b, c] += old * (hi - lo)
                if old > series.qpeak[b, c]:  # the depth held through this interval
                    series.qpeak[b, c] = old
    ch.hot[c, CH_Q_BYTES] = new_bytes
    ch.hot[c, CH_Q_LAST] = now
    if new_bytes > ch.peak_q[c]:
        ch.peak_q[c] = new_bytes
    b = bin_of(pr, pf, now)
    if new_bytes > series.qpeak[b, c]:
        series.qpeak[b, c] = new_bytes
