"""The packet engine's random draws (`packet/draws.py`) against a plain model of its generator."""

from __future__ import annotations

import numpy as np
import pytest

from services.simulator.packet.draws import random_below

MASK = (1 << 64) - 1


def _model(state: int, n: int, count: int) -> list[int]:
    """xorshift64*, the top 31 bits of each output modulo n (Python integers: no rounding anywhere)."""
    out = []
    for _ in range(count):
        state ^= state >> 12
        state = (state ^ (state << 25)) & MASK
        state ^= state >> 27
        out.append((((state * 2685821657736338717) & MASK) >> 33) % n)
    return out


@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 63, 64, 1000, 65535, 2**20 - 1, 2**31 - 1])
def test_random_below_is_the_top_31_bits_modulo_n(n):
    seed = 0x2545F4914F6CDD1D
    rng = np.array([seed], dtype=np.uint64)
    assert [random_below(rng, n) for _ in range(2000)] == _model(seed, n, 2000)
