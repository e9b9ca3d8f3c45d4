"""The optional extras of the SDK: imported only when asked for, with an error naming what to install.

The SDK itself needs grpcio and protobuf only. Plots need matplotlib (`pip install 'fabrictwin[plots]'`),
DataFrames need pandas (`fabrictwin[pandas]`) and Parquet files pyarrow as well (`fabrictwin[parquet]`).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from fabrictwin.errors import FabricTwinError

__all__ = ["MissingExtraError", "require"]


class MissingExtraError(FabricTwinError, ImportError):
    """An optional library is not installed; the message names the extra that installs it."""

    code = "FAILED_PRECONDITION"


def require(module: str, extra: str, purpose: str) -> ModuleType:
    """`import module`, or MissingExtraError saying `pip install 'fabrictwin[extra]'` for `purpose`."""
    try:
        return importlib.import_module(module)
    except ImportError:
        top = module.split(".")[0]
        raise MissingExtraError(
            f"{purpose} need {top}, which is not installed: pip install 'fabrictwin[{extra}]'"
        ) from None
