"""Domain errors raised by the cores (which know nothing of gRPC).

The server bootstrap's error interceptor turns each into its canonical status code, so a servicer
never builds a status by hand and a caller never sees a stack trace.
"""

from __future__ import annotations

from typing import Self

__all__ = [
    "QUOTE_CHARS",
    "STATUS_CODES",
    "AlreadyExists",
    "FabricTwinError",
    "FailedPrecondition",
    "InvalidArgument",
    "NotFound",
    "ResourceExhausted",
    "Unavailable",
    "excerpt",
    "quote",
    "status_code_number",
]

# The most characters of offending input an error message quotes: enough to recognise the line, and
# never the 10 MB line itself (a status message that large cannot even reach the caller).
QUOTE_CHARS = 200

# google.rpc.Code numbers by name, for ErrorStatus messages (without depending on googleapis protos).
STATUS_CODES = {
    "OK": 0,
    "CANCELLED": 1,
    "UNKNOWN": 2,
    "INVALID_ARGUMENT": 3,
    "DEADLINE_EXCEEDED": 4,
    "NOT_FOUND": 5,
    "ALREADY_EXISTS": 6,
    "PERMISSION_DENIED": 7,
    "RESOURCE_EXHAUSTED": 8,
    "FAILED_PRECONDITION": 9,
    "ABORTED": 10,
    "OUT_OF_RANGE": 11,
    "UNIMPLEMENTED": 12,
    "INTERNAL": 13,
    "UNAVAILABLE": 14,
    "DATA_LOSS": 15,
    "UNAUTHENTICATED": 16,
}


def excerpt(text: object, limit: int = QUOTE_CHARS) -> str:
    """`text` cut to its first `limit` characters, saying how many more there were.

    >>> excerpt("swp1"), excerpt("x" * 1000, 5)
    ('swp1', 'xxxxx... (995 more characters)')
    """
    text = str(text)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit:,} more characters)"


def quote(text: object, limit: int = QUOTE_CHARS) -> str:
    """`repr` of at most `limit` characters of `text`: how an error message names offending input.

    >>> quote("leaf-0"), quote("x" * 1000, 5)
    ("'leaf-0'", "'xxxxx'... (995 more characters)")
    """
    text = str(text)
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text) - limit:,} more characters)"


def status_code_number(name: str) -> int:
    """The canonical number of a status code name; unknown names are INTERNAL (13)."""
    return STATUS_CODES.get(name, STATUS_CODES["INTERNAL"])


class FabricTwinError(Exception):
    """Base of every error a caller may see; `code` is a grpc.StatusCode name."""

    code = "INTERNAL"


class InvalidArgument(FabricTwinError, ValueError):
    """Bad input. The message names the field, line or link that is wrong."""

    code = "INVALID_ARGUMENT"

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}" if field else problem)
        self.field = field
        self.problem = problem

    def __reduce__(self) -> tuple[type[Self], tuple[str, str]]:
        # Exceptions pickle as cls(*args); ours take (field, problem), so errors raised in a worker
        # process come back to the server intact.
        return (self.__class__, (self.field, self.problem))


class NotFound(FabricTwinError, LookupError):
    """A named resource does not exist."""

    code = "NOT_FOUND"


class AlreadyExists(FabricTwinError):
    """A resource with that name exists already."""

    code = "ALREADY_EXISTS"


class FailedPrecondition(FabricTwinError):
    """The resource is not in a state that allows the call (e.g. results of an unfinished run)."""

    code = "FAILED_PRECONDITION"


class ResourceExhausted(FabricTwinError):
    """Too much work queued, or a request beyond a configured limit."""

    code = "RESOURCE_EXHAUSTED"


class Unavailable(FabricTwinError):
    """A peer service could not be reached."""

    code = "UNAVAILABLE"
