"""Load-balancing modes, one module each (base.py says what a mode holds; registry.py names them)."""

from services.simulator.modes.base import Mode
from services.simulator.modes.registry import MODES, mode_of, register

__all__ = ["MODES", "Mode", "mode_of", "register"]
