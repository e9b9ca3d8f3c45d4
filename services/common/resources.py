"""Resource names (AIP-122) and page tokens (AIP-158), validated in one place."""

from __future__ import annotations

import base64
import re
import secrets

from services.common.errors import InvalidArgument, quote

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "decode_page_token",
    "encode_page_token",
    "new_id",
    "page_size",
    "parse_name",
    "validate_id",
]

DEFAULT_PAGE_SIZE = 50
_ID = re.compile(r"[a-z]([a-z0-9-]{0,61}[a-z0-9])?")
_TOKEN = re.compile(r"o:(0|[1-9][0-9]{0,18})")


def new_id(prefix: str) -> str:
    """A fresh id such as `sim-3f9a1c2b`."""
    return f"{prefix}-{secrets.token_hex(4)}"


def validate_id(value: str, field: str) -> str:
    """AIP-122 ids: lower-case letters, digits and '-', starting with a letter, at most 63 chars."""
    if not _ID.fullmatch(value):  # fullmatch: `$` would let a trailing newline through
        raise InvalidArgument(
            field,
            f"{quote(value)} is not a valid id (lower-case letters, digits and '-', start with a letter, "
            "<= 63)",
        )
    return value


def parse_name(name: str, pattern: str, field: str = "name") -> dict[str, str]:
    """Match `name` against a pattern like `fabrics/{fabric}/links/{link}`; returns the variables."""
    parts = name.split("/") if name else []
    template = pattern.split("/")
    if len(parts) != len(template):
        raise InvalidArgument(field, f"{quote(name)} is not a resource name of the form {pattern!r}")
    values: dict[str, str] = {}
    for part, expected in zip(parts, template, strict=True):
        if expected.startswith("{"):
            if not part:
                raise InvalidArgument(field, f"{quote(name)} has an empty {expected} segment")
            values[expected[1:-1]] = part
        elif part != expected:
            raise InvalidArgument(field, f"{quote(name)} is not a resource name of the form {pattern!r}")
    return values


def page_size(requested: int, default: int = DEFAULT_PAGE_SIZE, maximum: int = 1000) -> int:
    """AIP-158: 0 means the default, above the maximum is clamped, negative is an error."""
    if requested < 0:
        raise InvalidArgument("page_size", f"must not be negative, got {requested}")
    return min(requested or default, maximum)


def encode_page_token(offset: int) -> str:
    """The token of the page that starts at `offset`."""
    return base64.urlsafe_b64encode(f"o:{offset}".encode()).decode()


def decode_page_token(token: str) -> int:
    """Offset encoded in a token from a previous page; '' is the first page."""
    if not token:
        return 0
    try:
        text = base64.b64decode(token.encode("ascii"), altchars=b"-_", validate=True).decode("ascii")
    except (ValueError, UnicodeError) as exc:  # binascii.Error is a ValueError
        raise InvalidArgument("page_token", "not a token returned by a previous page") from exc
    match = _TOKEN.fullmatch(text)
    if match is None:
        raise InvalidArgument("page_token", "not a token returned by a previous page")
    return int(match.group(1))
