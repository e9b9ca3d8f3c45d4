"""`filter` and `order_by` of List requests (AIP-160, AIP-132), over the response's messages.

The filter language is AIP-160's core, evaluated against the resource message a List returns:

    state = SUCCEEDED AND labels.site = "a"
    create_time > "2026-11-30T00:00:00Z" OR display_name : "pod"
    NOT (fabric = "fabrics/ft8") AND -kind = SIMULATED

- A path names fields by their proto names, dotted into messages; on a map the next part is a key
  (`labels.site`); a path through a repeated field matches when any element does.
- Comparators: `=`, `!=`, `<`, `<=`, `>`, `>=`, and `:` (has): a map key (`labels:site`), an element
  of a repeated field, or, on a string, a substring.
- Values: quoted strings, numbers, `true`/`false`, enum value names (`JOB_STATE_SUCCEEDED`, or the
  part after the enum's prefix, `SUCCEEDED`), RFC 3339 times for Timestamp fields.
- `AND`, `OR` (which binds tighter, as AIP-160 says), `NOT` or `-`, and parentheses.

`order_by` is `path [desc], path2, ...` over scalar fields (enums by number, times by time).
Mistakes are INVALID_ARGUMENT naming `filter` or `order_by` and where in it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from google.protobuf import descriptor, timestamp_pb2
from google.protobuf.message import Message

from services.common.errors import InvalidArgument, ResourceExhausted
from services.common.resources import decode_page_token, encode_page_token

__all__ = ["MAX_FILTERED", "Listing", "filtered_page", "parse_filter", "parse_order_by", "select"]

M = TypeVar("M", bound=Message)
Predicate = Callable[[Message], bool]

MAX_FILTERED = 10_000  # resources one filtered or ordered List reads at most
_MAX_TEXT = 2_000  # characters of a filter or order_by

_TOKEN = re.compile(
    r'\s*(?:(?P<string>"(?:[^"\\]|\\.)*")|(?P<op><=|>=|!=|[=<>:()\-])|(?P<word>[^\s"=<>!:()]+))'
)
_FD = descriptor.FieldDescriptor


@dataclasses.dataclass(frozen=True)
class _Token:
    kind: str  # string, op, word
    text: str
    at: int


def _tokens(text: str) -> list[_Token]:
    found, position = [], 0
    while position < len(text):
        if text[position:].strip() == "":
            break
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise InvalidArgument(
                "filter", f"cannot read {text[position : position + 20]!r} at character {position}"
            )
        kind = match.lastgroup or "word"
        found.append(_Token(kind, match.group(kind), match.start(kind)))
        position = match.end()
    return found


def _field(message_type: descriptor.Descriptor, name: str, where: str, field: str) -> _FD:
    fd = message_type.fields_by_name.get(name)
    if fd is None:
        known = ", ".join(sorted(message_type.fields_by_name))
        raise InvalidArgument(field, f"{where}: no field {name!r} (fields: {known})")
    return fd


def _timestamp(text: str, field: str) -> dt.datetime:
    try:
        value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgument(
            field, f"{text!r} is not an RFC 3339 time such as 2026-11-30T00:00:00Z"
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def _enum_number(fd: _FD, text: str, field: str) -> int:
    enum = fd.enum_type
    assert enum is not None
    value = enum.values_by_name.get(text)
    if value is None:  # the part after the enum's common prefix: SUCCEEDED for JOB_STATE_SUCCEEDED
        matches = [v for v in enum.values if v.name.endswith("_" + text.upper())]
        if len(matches) != 1:
            names = ", ".join(v.name for v in enum.values)
            raise InvalidArgument(field, f"{text!r} is not a value of {enum.name} ({names})")
        value = matches[0]
    return int(value.number)


def _values(message: Message, path: _Path) -> list[Any]:
    """Every value the path reaches (a repeated field fans out); [] where it reaches none. A map
    reached with a key gives that key's value; a map at the end of the path gives it as a dict."""
    items: list[Any] = [message]
    for name, kind, key in path.steps:
        reached: list[Any] = []
        for item in items:
            value = getattr(item, name)
            if kind == "map-key":
                if key in value:
                    reached.append(value[key])
            elif kind == "map":
                reached.append(dict(value))
            elif kind == "repeated":
                reached.extend(value)
            else:
                reached.append(value)
        items = reached
    return items


@dataclasses.dataclass(frozen=True)
class _Path:
    text: str
    steps: tuple[tuple[str, str, str], ...]  # (field name, single|repeated|map|map-key, map key)
    leaf: _FD | None  # the last field; None: a map's value (compared as text)

    @property
    def is_map(self) -> bool:
        return bool(self.steps) and self.steps[-1][1] == "map"


def _is_repeated(fd: Any) -> bool:
    return bool(fd.is_repeated)


def _path(message_type: descriptor.Descriptor, text: str, field: str) -> _Path:
    parts = text.split(".")
    current: descriptor.Descriptor | None = message_type
    steps: list[tuple[str, str, str]] = []
    leaf: _FD | None = None
    i = 0
    while i < len(parts):
        if current is None:
            raise InvalidArgument(field, f"{text}: {parts[i - 1]!r} has no fields")
        fd = _field(current, parts[i], text, field)
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            if i + 1 == len(parts):
                steps.append((fd.name, "map", ""))
                return _Path(text, tuple(steps), fd)
            if i + 2 != len(parts):
                raise InvalidArgument(field, f"{text}: a map key ends the path")
            steps.append((fd.name, "map-key", parts[i + 1]))
            return _Path(text, tuple(steps), None)
        steps.append((fd.name, "repeated" if _is_repeated(fd) else "single", ""))
        leaf = fd
        is_time = fd.message_type is not None and fd.message_type.full_name == "google.protobuf.Timestamp"
        current = fd.message_type if fd.message_type is not None and not is_time else None
        i += 1
    return _Path(text, tuple(steps), leaf)


def _comparable(fd: _FD | None, value: Any) -> Any:
    if isinstance(value, timestamp_pb2.Timestamp):
        return value.ToDatetime(tzinfo=dt.UTC)
    return value


def _literal(fd: _FD | None, token: _Token, field: str) -> Any:
    text = bytes(token.text[1:-1], "utf-8").decode("unicode_escape") if token.kind == "string" else token.text
    if fd is None:
        return text
    if fd.message_type is not None and fd.message_type.full_name == "google.protobuf.Timestamp":
        return _timestamp(text, field)
    if fd.type == _FD.TYPE_ENUM:
        return _enum_number(fd, text, field)
    if fd.type == _FD.TYPE_BOOL:
        if text.lower() not in ("true", "false"):
            raise InvalidArgument(field, f"{text!r} is not true or false")
        return text.lower() == "true"
    if fd.type in (_FD.TYPE_STRING, _FD.TYPE_BYTES):
        return text
    try:
        return float(text) if fd.type in (_FD.TYPE_DOUBLE, _FD.TYPE_FLOAT) else int(text)
    except ValueError:
        raise InvalidArgument(field, f"{text!r} is not a number") from None


_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "=": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


class _Parser:
    def __init__(self, message_type: descriptor.Descriptor, text: str) -> None:
        self.type = message_type
        self.tokens = _tokens(text)
        self.i = 0

    def _peek(self) -> _Token | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def _take(self) -> _Token:
        token = self._peek()
        if token is None:
            raise InvalidArgument("filter", "ends too early")
        self.i += 1
        return token

    def parse(self) -> Predicate:
        predicate = self._and()
        left = self._peek()
        if left is not None:
            raise InvalidArgument("filter", f"unexpected {left.text!r} at character {left.at}")
        return predicate

    def _and(self) -> Predicate:
        terms = [self._or()]
        while (token := self._peek()) is not None and (token.text == "AND" or token.text not in ("OR", ")")):
            if token.text == "AND":
                self.i += 1
            terms.append(self._or())  # AIP-160: adjacent terms are ANDed
        return terms[0] if len(terms) == 1 else (lambda m: all(t(m) for t in terms))

    def _or(self) -> Predicate:
        terms = [self._unary()]
        while (token := self._peek()) is not None and token.text == "OR":
            self.i += 1
            terms.append(self._unary())
        return terms[0] if len(terms) == 1 else (lambda m: any(t(m) for t in terms))

    def _unary(self) -> Predicate:
        token = self._take()
        if token.text in ("NOT", "-"):
            inner = self._unary()
            return lambda m: not inner(m)
        if token.text == "(":
            inner = self._and()
            closing = self._take()
            if closing.text != ")":
                raise InvalidArgument("filter", f"expected ')' at character {closing.at}")
            return inner
        if token.kind != "word":
            raise InvalidArgument(
                "filter", f"expected a field name at character {token.at}, got {token.text!r}"
            )
        path = _path(self.type, token.text, "filter")
        op = self._take()
        if op.text not in _COMPARE and op.text != ":":
            raise InvalidArgument("filter", f"expected a comparator after {token.text} at character {op.at}")
        value_token = self._take()
        if value_token.kind == "op":
            raise InvalidArgument("filter", f"expected a value at character {value_token.at}")
        return self._comparison(path, op.text, value_token)

    def _comparison(self, path: _Path, op: str, token: _Token) -> Predicate:
        leaf = path.leaf
        if op == ":" and path.is_map:
            key = token.text[1:-1] if token.kind == "string" else token.text
            return lambda m: any(key in v for v in _values(m, path) if isinstance(v, dict))
        if path.is_map:
            raise InvalidArgument("filter", f"{path.text} is a map: use {path.text}.KEY, or {path.text}:KEY")
        literal = _literal(leaf, token, "filter")
        if op == ":":
            if isinstance(literal, str):
                return lambda m: any(isinstance(v, str) and literal in v for v in _values(m, path))
            return lambda m: any(_comparable(leaf, v) == literal for v in _values(m, path))
        compare = _COMPARE[op]

        def test(message: Message) -> bool:
            values = _values(message, path)
            if op == "!=":
                return all(compare(_comparable(leaf, v), literal) for v in values)
            try:
                return any(compare(_comparable(leaf, v), literal) for v in values)
            except TypeError:
                return False

        return test


def parse_filter(message_type: descriptor.Descriptor, text: str) -> Predicate | None:
    """The predicate of an AIP-160 filter over messages of `message_type`; None for an empty one."""
    if not text.strip():
        return None
    if len(text) > _MAX_TEXT:
        raise InvalidArgument("filter", f"at most {_MAX_TEXT} characters, got {len(text)}")
    return _Parser(message_type, text).parse()


def parse_order_by(message_type: descriptor.Descriptor, text: str) -> list[tuple[_Path, bool]]:
    """[(path, descending)] of an AIP-132 order_by (`create_time desc, display_name`)."""
    if len(text) > _MAX_TEXT:
        raise InvalidArgument("order_by", f"at most {_MAX_TEXT} characters, got {len(text)}")
    keys = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            if text.strip():
                raise InvalidArgument("order_by", f"an empty field in {text!r}")
            continue
        words = item.split()
        if len(words) > 2 or (len(words) == 2 and words[1].lower() not in ("asc", "desc")):
            raise InvalidArgument("order_by", f"{item!r}: expected FIELD [asc|desc]")
        path = _path(message_type, words[0], "order_by")
        if path.is_map or any(kind == "repeated" for _, kind, _ in path.steps):
            raise InvalidArgument("order_by", f"{words[0]} is repeated; order by a single value")
        keys.append((path, len(words) == 2 and words[1].lower() == "desc"))
    return keys


def _sort_key(message: Message, path: _Path) -> tuple[int, Any]:
    values = _values(message, path)
    if not values:
        return (0, "")
    value = _comparable(path.leaf, values[0])
    return (1, value)


@dataclasses.dataclass(frozen=True)
class Listing:
    """A List request's filter and order, parsed; `select` applies them."""

    predicate: Predicate | None
    order: list[tuple[_Path, bool]]

    @classmethod
    def of(cls, message_type: descriptor.Descriptor, filter: str, order_by: str) -> Listing:
        return cls(parse_filter(message_type, filter), parse_order_by(message_type, order_by))

    @property
    def active(self) -> bool:
        return self.predicate is not None or bool(self.order)


def select(messages: Iterable[M], listing: Listing, what: str = "resources") -> list[M]:
    """The messages the filter keeps, in the requested order (stable; the store's order otherwise).
    ResourceExhausted when more than MAX_FILTERED would have to be read."""
    kept: list[M] = []
    for count, message in enumerate(messages, start=1):
        if count > MAX_FILTERED:
            raise ResourceExhausted(
                f"filter/order_by: more than {MAX_FILTERED:,} {what} to read; narrow the list another way"
            )
        if listing.predicate is None or listing.predicate(message):
            kept.append(message)
    for path, descending in reversed(listing.order):
        kept.sort(key=lambda m, p=path: _sort_key(m, p), reverse=descending)  # type: ignore[misc]
    return kept


def filtered_page(
    messages: Iterable[M], listing: Listing, what: str, page_token: str, page_size: int
) -> tuple[list[M], str]:
    """One page of `select(messages, listing)`: its items and the next page's token ("" on the last).
    Tokens are offsets into the filtered, ordered list, as the services' unfiltered pages are."""
    selected = select(messages, listing, what)
    offset = decode_page_token(page_token)
    following = offset + page_size
    return selected[offset:following], encode_page_token(following) if following < len(selected) else ""
