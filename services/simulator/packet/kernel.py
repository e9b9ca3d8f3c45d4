"""How the packet engine compiles its functions: `@kernel`, or `@kernel_inline` for the tiny ones on
every packet's path (inlined at each call site).

Both cache into the engine's cache directory (`compile_cache.py`) and run without numba's reference
counting (`_nrt=False`): nothing in the engine allocates, and counting every array of the state
tuples on every call cost 20x (a k=8 ring: 25k packets/s with it, 500k without, 2.45M with the hot
path inlined; `loop.py`). numba's type stubs do not list `_nrt`, hence the one ignore below.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["cttz", "kernel", "kernel_inline"]

kernel: Any = njit(cache=True, _nrt=False)  # type: ignore[call-overload]
kernel_inline: Any = njit(cache=True, inline="always", _nrt=False)  # type: ignore[call-overload]


@intrinsic
def _cttz(typingctx: Any, word: Any) -> Any:
    """The index of the lowest set bit of a non-zero uint64 (one `tzcnt`), as an int64."""
    signature = types.int64(word)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        i64 = ir.IntType(64)
        function = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(i64, [i64, ir.IntType(1)]), "llvm.cttz.i64"
        )
        return builder.call(function, [args[0], ir.Constant(ir.IntType(1), 0)])

    return signature, codegen


cttz: Any = _cttz  # called as cttz(word) in compiled code (the intrinsic's typing context is implicit)
