"""InfiniBand link width x speed (`4xEDR`) <-> bit/s, the one table every format uses.

Per-lane signalling rates in Gb/s (the figures InfiniBand names its speeds by; 8b/10b coding of
SDR-QDR and 64b/66b of FDR10-NDR are not subtracted):

| speed | SDR | DDR | QDR | FDR10 | FDR     | EDR | HDR | NDR | XDR |
|-------|-----|-----|-----|-------|---------|-----|-----|-----|-----|
| Gb/s  | 2.5 | 5   | 10  | 10    | 14.0625 | 25  | 50  | 100 | 200 |

A link's rate is lanes x lane rate: `4xQDR` = 40 Gb/s, `4xFDR` = 56.25, `4xNDR` = 400, `1xSDR` = 2.5.
Widths are 1x, 2x, 4x, 8x and 12x.
"""

from __future__ import annotations

__all__ = ["LANE_GBPS", "WIDTHS", "rate_bps", "width_speed"]

LANE_GBPS: dict[str, float] = {
    "SDR": 2.5,
    "DDR": 5.0,
    "QDR": 10.0,
    "FDR10": 10.0,
    "FDR": 14.0625,
    "EDR": 25.0,
    "HDR": 50.0,
    "NDR": 100.0,
    "XDR": 200.0,
}
WIDTHS = (1, 2, 4, 8, 12)

# Export prefers 4x (the usual cable) and then the speeds in order; FDR10 is skipped because
# QDR names the same lane rate.
_EXPORT_ORDER = [
    (width, speed)
    for width in (4, 1, 2, 8, 12)
    for speed in ("SDR", "DDR", "QDR", "FDR", "EDR", "HDR", "NDR", "XDR")
]
_BY_RATE: dict[int, str] = {}
for _width, _speed in _EXPORT_ORDER:
    _BY_RATE.setdefault(round(_width * LANE_GBPS[_speed] * 1e9), f"{_width}x{_speed}")


def rate_bps(width: int, speed: str) -> int | None:
    """Bits per second of `width` lanes at `speed`; None if either is not an InfiniBand value.

    >>> rate_bps(4, "HDR"), rate_bps(4, "FDR"), rate_bps(3, "EDR")
    (200000000000, 56250000000, None)
    """
    lane = LANE_GBPS.get(speed.upper())
    if lane is None or width not in WIDTHS:
        return None
    return round(width * lane * 1e9)


def width_speed(rate: int) -> str | None:
    """The `<width>x<speed>` token for a rate in bit/s (4x preferred), or None if there is none.

    >>> width_speed(400_000_000_000), width_speed(2_500_000_000), width_speed(123)
    ('4xNDR', '1xSDR', None)
    """
    return _BY_RATE.get(int(rate))
