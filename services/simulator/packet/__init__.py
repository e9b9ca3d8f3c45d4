"""PACKET fidelity: a compiled discrete-event engine over numpy arrays (numba), behind the `Engine`
seam as `PacketEngine` (seam.py).

The compiled modules are imported here, once, while numba's cache directory is the one keyed to
this package's source (`compile_cache.py`), so that editing any of them recompiles the engine.
"""

from services.simulator.packet.compile_cache import compiling_into_engine_cache

with compiling_into_engine_cache():
    from services.simulator.packet import loop  # noqa: F401  (and every module it calls)

from services.simulator.packet.seam import PacketEngine

__all__ = ["PacketEngine"]
