"""The one rule for ECMP pinning, shared by the diagnosis, the utilisation skew and the mirror.

The seeds' signature is relative: links of one group (the uplinks of a leaf, one tier) far apart in
the same window, some carrying two flows while their neighbours carry none, because the hash pinned
the flows, not because the fabric is short of bandwidth. So a group is *pinned* in a window when its
links' mean utilisations

- spread out: the busiest runs at `max_over_mean` times the group's mean or more, and at least
  `spread` (absolute utilisation) above the idlest; or
- split into hot and idle at once: some above `hot_above` while others sit below `idle_below`.

Its hot links are those at `max_over_mean` times the mean or more (or above `hot_above`), its idle
links those at the mean divided by `max_over_mean` or less (or below `idle_below`). 52% next to 8%
on a leaf's two uplinks is pinned (max/mean 1.73, spread 0.44); 50% next to 40% is not; 5% next to
0% is not (spread 0.05): little traffic, nothing to fix.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from services.common.errors import InvalidArgument

__all__ = ["DEFAULT_RULE", "PinningRule", "Verdict"]


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The rule applied to one group in one window: pinned or not, and which links are hot and idle
    (indices into the values given, busiest first and idlest first)."""

    pinned: bool
    hot: tuple[int, ...]
    idle: tuple[int, ...]
    max_over_mean: float
    spread: float


@dataclasses.dataclass(frozen=True)
class PinningRule:
    """The thresholds (utilisation as a fraction of the link rate; see the module docstring)."""

    hot_above: float = 0.8
    idle_below: float = 0.2
    max_over_mean: float = 1.5
    spread: float = 0.3

    @classmethod
    def of(
        cls, hot_above: float = 0.0, idle_below: float = 0.0, max_over_mean: float = 0.0, spread: float = 0.0
    ) -> PinningRule:
        """The rule with the given thresholds, 0 meaning the default; InvalidArgument naming the one
        out of range."""
        default = DEFAULT_RULE
        rule = cls(
            hot_above=hot_above or default.hot_above,
            idle_below=idle_below or default.idle_below,
            max_over_mean=max_over_mean or default.max_over_mean,
            spread=spread or default.spread,
        )
        for name, low, high in (("hot_above", 0, 1e6), ("idle_below", 0, 1e6), ("spread", 0, 1e6)):
            value = getattr(rule, name)
            if not low <= value <= high:
                raise InvalidArgument(name, f"{value} is outside {low}..{high:g}")
        if rule.idle_below > rule.hot_above:
            raise InvalidArgument(
                "idle_below", f"{rule.idle_below} must be within 0..hot_above ({rule.hot_above})"
            )
        if not 1.0 <= rule.max_over_mean <= 1e6:
            raise InvalidArgument("max_over_mean", f"{rule.max_over_mean} must be at least 1")
        return rule

    def describe(self) -> str:
        return (
            f"max/mean >= {self.max_over_mean:g} and max - min >= {self.spread:.0%}, or some above "
            f"{self.hot_above:.0%} while others are below {self.idle_below:.0%}"
        )

    def judge(self, values: Sequence[float]) -> Verdict:
        """The rule on one group's mean utilisations in one window."""
        array = np.asarray(values, dtype=float)
        if array.size < 2:
            return Verdict(False, (), (), 1.0, 0.0)
        mean, top, low = float(array.mean()), float(array.max()), float(array.min())
        ratio = top / mean if mean > 0 else 1.0
        pinned = bool(self.pinned(np.array([top]), np.array([mean]), np.array([low]))[0])
        above = mean * self.max_over_mean if mean > 0 else np.inf
        below = mean / self.max_over_mean if mean > 0 else -np.inf
        falling = np.argsort(-array, kind="stable").tolist()  # busiest first, then in given order
        rising = np.argsort(array, kind="stable").tolist()  # idlest first, then in given order
        hot = tuple(i for i in falling if array[i] > self.hot_above or array[i] >= above)
        idle = tuple(i for i in rising if array[i] < self.idle_below or array[i] <= below)
        return Verdict(pinned and bool(hot) and bool(idle), hot, idle, ratio, top - low)

    def pinned(self, top: np.ndarray, mean: np.ndarray, low: np.ndarray) -> np.ndarray:
        """[n] bool, vectorised over windows: the rule from each window's max, mean and min (the
        absolute part needs only those too: some above hot_above means the max is)."""
        spread_out = (top >= self.max_over_mean * mean) & (top - low >= self.spread) & (mean > 0)
        split = (top > self.hot_above) & (low < self.idle_below)
        pinned: np.ndarray = spread_out | split
        return pinned


DEFAULT_RULE = PinningRule()
