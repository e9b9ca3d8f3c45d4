"""The run's random numbers: one xorshift64* generator, its state in a one-element array."""

from __future__ import annotations

import numpy as np

from services.simulator.packet.kernel import kernel, kernel_inline

__all__ = ["random_below", "uniform"]


@kernel_inline
def _next_random(rng: np.ndarray) -> np.uint64:
    """One xorshift64* step of the run's generator: 64 random bits."""
    x = rng[0]
    x ^= x >> np.uint64(12)
    x ^= x << np.uint64(25)
    x ^= x >> np.uint64(27)
    rng[0] = x
    return x * np.uint64(2685821657736338717)


@kernel
def random_below(rng: np.ndarray, n: int) -> int:
    """A uniform integer in [0, n)."""
    return int(_next_random(rng) >> np.uint64(33)) % n


@kernel
def uniform(rng: np.ndarray) -> float:
    """A uniform float in [0, 1) (53 random bits)."""
    return float(_next_random(rng) >> np.uint64(11)) * (1.0 / 9007199254740992.0)
