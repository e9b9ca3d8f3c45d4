"""The FLOW-fidelity engine: fluid flows under max-min fair sharing (model.py), behind the `Engine`
seam (engine.py), with its model notes (notes.py)."""

from services.simulator.flow.engine import FlowEngine

__all__ = ["FlowEngine"]
