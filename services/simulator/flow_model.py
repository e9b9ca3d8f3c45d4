"""Where the FLOW engine's loop used to live: re-exports for importers not yet moved.

The loop is `services.simulator.flow.model` now and `Cancelled` is `services.simulator.cancel`.
tests/simulator/test_packet_engine.py still imports `Cancelled` from here (layering test:
KNOWN_VIOLATIONS); delete this module once nothing does.
"""

from __future__ import annotations

from services.simulator.cancel import Cancelled
from services.simulator.flow.model import FlowRun, max_min_rates, simulate_flows

__all__ = ["Cancelled", "FlowRun", "max_min_rates", "simulate_flows"]
