"""Benchmark registration."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["BENCHMARKS", "benchmark"]

BENCHMARKS: dict[str, Callable[[], dict[str, float | int | str]]] = {}


def benchmark(name: str) -> Callable[[Callable[[], dict]], Callable[[], dict]]:
    """Register `fn` under a stable dotted name."""

    def register(fn: Callable[[], dict]) -> Callable[[], dict]:
        if name in BENCHMARKS:
            raise ValueError(f"benchmark {name!r} registered twice")
        BENCHMARKS[name] = fn
        return fn

    return register
