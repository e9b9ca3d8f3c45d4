"""The load-balancing modes by name: each mode module's `Mode`, registered once."""

from __future__ import annotations

from services.simulator.modes.adaptive import Adaptive
from services.simulator.modes.base import Mode
from services.simulator.modes.ecmp import Ecmp
from services.simulator.modes.flowlet import Flowlet
from services.simulator.modes.spray import Spray
from services.simulator.spec import LoadBalancingMode, LoadBalancingSpec

__all__ = ["MODES", "mode_of", "register"]

MODES: dict[LoadBalancingMode, Mode] = {}


def register(mode: Mode) -> None:
    """Make `mode` the one that `mode_of` returns for `mode.mode`."""
    MODES[mode.mode] = mode


def mode_of(load_balancing: LoadBalancingSpec | LoadBalancingMode) -> Mode:
    """The registered mode of a spec's load balancing (validated: its mode is set and registered)."""
    name = load_balancing if isinstance(load_balancing, LoadBalancingMode) else load_balancing.mode
    assert name is not None, "validate the spec first: load_balancing.mode is required"
    return MODES[name]


for _mode in (Ecmp(), Adaptive(), Spray(), Flowlet()):
    register(_mode)
