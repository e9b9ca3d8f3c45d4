"""The FLOW-fidelity engines: fluid flows under max-min fair sharing, event by event (model.py), or
ring jobs' steady state (steady.py, FLOW_STEADY), behind the `Engine` seam (engine.py), with
their model notes (notes.py)."""

from services.simulator.flow.engine import FlowEngine, SteadyFlowEngine

__all__ = ["FlowEngine", "SteadyFlowEngine"]
