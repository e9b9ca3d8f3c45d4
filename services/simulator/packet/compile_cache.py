"""Where numba keeps the compiled packet engine: a directory keyed to the engine's whole source.

numba's `cache=True` checks only the file that defines a function: editing a callee in another
module (say `heap.py` under `loop.py`) would leave the stale machine code in use. So the engine's
compiled modules are decorated while `numba.config.CACHE_DIR` points at a directory named after a
hash of every source file of this package that compiled code can depend on (all but the
Python-side modules, `PYTHON_SIDE_MODULES`), `engine-<hash>` under `$NUMBA_CACHE_DIR`, or under this
package's `__pycache__` when that is unset; a change to any of them starts a fresh directory and one
compile. Directories of earlier sources are left as they are (delete them at will).

`engine_compiled()` says whether the current source has been compiled (the first run compiles for
about a minute; `python -m services.simulator.packet.warm_up` does it ahead of time).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import pathlib
from collections.abc import Iterator
from typing import Any

from numba.core import config as numba_config

__all__ = [
    "COMPILING_STAGE",
    "PYTHON_SIDE_MODULES",
    "compiling_into_engine_cache",
    "engine_cache_dir",
    "engine_compiled",
    "engine_source_hash",
]

# What a client waiting on a run sees while the engine compiles (`Progress.stage`).
COMPILING_STAGE = "compiling the packet engine (first run only)"
_PACKAGE = pathlib.Path(__file__).resolve().parent
# The event loop's index file: numba writes it once the loop (and everything it calls) has compiled.
_LOOP_INDEX = "loop.run_events-*.nbi"


# Python-side modules: no compiled function imports them (tests/simulator/test_packet_compile_cache.py
# checks it), so editing them needs no recompile. Every other module of the package is hashed.
PYTHON_SIDE_MODULES = frozenset(
    {
        "arrays",
        "config",
        "engine",
        "link_faults",
        "outcome",
        "report",
        "seam",
        "stream",
        "transport",
        "warm_up",
    }
)


@functools.cache
def engine_source_hash() -> str:
    """SHA-256 (first 16 hex digits) over the name and bytes of every .py file of this package but
    the Python-side ones."""
    digest = hashlib.sha256()
    for path in sorted(_PACKAGE.glob("*.py")):
        if path.stem not in PYTHON_SIDE_MODULES:
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def engine_cache_dir() -> pathlib.Path:
    """The numba cache directory of the current engine source."""
    base = os.environ.get("NUMBA_CACHE_DIR") or str(_PACKAGE / "__pycache__")
    return pathlib.Path(base) / f"engine-{engine_source_hash()}"


def engine_compiled() -> bool:
    """Whether the engine of this source is in the cache (a run will not compile it first)."""
    return any(engine_cache_dir().rglob(_LOOP_INDEX))


@contextlib.contextmanager
def compiling_into_engine_cache() -> Iterator[None]:
    """Functions decorated with `@njit(cache=True)` inside this block cache into `engine_cache_dir()`
    (numba fixes a function's cache directory when it is decorated)."""
    config: Any = numba_config  # numba's stubs do not list its runtime settings
    before = config.CACHE_DIR
    config.CACHE_DIR = str(engine_cache_dir())
    try:
        yield
    finally:
        config.CACHE_DIR = before
