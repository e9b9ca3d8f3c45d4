"""`Cancelled`: what an engine raises when its progress callback asks it to stop.

Both engines raise it and the worker entry (runner.py) turns it into a CANCELLED result, so it lives
below both engines rather than in either.
"""

from __future__ import annotations

__all__ = ["Cancelled"]


class Cancelled(Exception):
    """The progress callback asked the engine to stop."""
