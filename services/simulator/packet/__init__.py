"""PACKET fidelity: a compiled discrete-event engine over numpy arrays (numba)."""
