"""How the packet engine compiles its functions: `@kernel`, or `@kernel_inline` for the tiny ones on
every packet's path (inlined at each call site).

Both cache into the engine's cache directory (`compile_cache.py`) and run without numba's reference
counting (`_nrt=False`): nothing in the engine allocates, and counting every array of the state
tuples on every call cost 20x (a k=8 ring: 25k packets/s with it, 500k without, 2.45M with the hot
path inlined; `loop.py`). numba's type stubs do not list `_nrt`, hence the one ignore below.
"""

from __future__ import annotations

from typing import Any

from numba import njit

__all__ = ["kernel", "kernel_inline"]

kernel: Any = njit(cache=True, _nrt=False)  # type: ignore[call-overload]
kernel_inline: Any = njit(cache=True, inline="always", _nrt=False)  # type: ignore[call-overload]
