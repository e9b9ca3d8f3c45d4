"""Resource names and enum values as a person types them, turned into what the API expects.

Scripts and the CLI may say `ft8` or `fabrics/ft8`, `ecmp` or `LOAD_BALANCING_MODE_ECMP`; these
helpers accept both so that every call site does not re-implement the same prefixing.

>>> resource_name("fabrics", "ft8")
'fabrics/ft8'
>>> from fabrictwin.v1 import common_pb2
>>> enum_value(common_pb2.LoadBalancingMode, "adaptive", "mode") == common_pb2.LOAD_BALANCING_MODE_ADAPTIVE
True
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from fabrictwin.errors import InvalidArgumentError

if TYPE_CHECKING:
    # The class of a generated enum (`common_pb2.LoadBalancingMode`), generic in the type of its values
    # (mypy-protobuf's `LoadBalancingMode.ValueType`) in protobuf's type stubs only.
    from google.protobuf.internal.enum_type_wrapper import _EnumTypeWrapper

__all__ = ["enum_choices", "enum_label", "enum_prefix", "enum_value", "resource_name", "run_name"]

EnumNumber = TypeVar("EnumNumber", bound=int)


def resource_name(collection: str, value: str) -> str:
    """`value` as `collection/value`, unless it already starts with `collection/`."""
    if not value:
        raise InvalidArgumentError(f"{collection}: a name is required")
    return value if value.startswith(collection + "/") else f"{collection}/{value}"


def run_name(value: str) -> str:
    """A run's name `scenarios/{scenario}/runs/{run}`; `{scenario}/runs/{run}` is accepted too."""
    name = resource_name("scenarios", value)
    parts = name.split("/")
    if len(parts) != 4 or parts[2] != "runs" or not parts[1] or not parts[3]:
        raise InvalidArgumentError(f"run: {value!r} is not of the form scenarios/{{scenario}}/runs/{{run}}")
    return name


def _names(enum_type: Any) -> list[str]:
    return [value.name for value in enum_type.DESCRIPTOR.values]


def enum_prefix(enum_type: Any) -> str:
    """The common prefix of an enum's value names (`LOAD_BALANCING_MODE_`), from its UNSPECIFIED value."""
    for name in _names(enum_type):
        if name.endswith("_UNSPECIFIED"):
            return name[: -len("UNSPECIFIED")]
    return ""


def enum_choices(enum_type: Any) -> list[str]:
    """The short lower-case names of an enum's values, without UNSPECIFIED (`["ecmp", "adaptive", ...]`)."""
    prefix = enum_prefix(enum_type)
    return [name[len(prefix) :].lower() for name in _names(enum_type) if not name.endswith("_UNSPECIFIED")]


def enum_value(enum_type: _EnumTypeWrapper[EnumNumber], value: int | str, field: str) -> EnumNumber:
    """An enum's number from a number, a full name, or a short name in any case (`ecmp`, `ECMP`)."""
    if isinstance(value, int):
        for number in enum_type.values():
            if number == value:
                return number
        raise InvalidArgumentError(f"{field}: {value} is not a valid {enum_type.DESCRIPTOR.name}")
    # Compare without separators so that `all_reduce`, `all-reduce` and `allreduce` all match.
    wanted = _squash(value)
    prefix = enum_prefix(enum_type)
    for name in _names(enum_type):
        if name.endswith("_UNSPECIFIED"):
            continue
        if wanted in (_squash(name), _squash(name[len(prefix) :])):
            return enum_type.Value(name)
    raise InvalidArgumentError(f"{field}: {value!r} is not one of {', '.join(enum_choices(enum_type))}")


def _squash(text: str) -> str:
    return text.strip().upper().replace("_", "").replace("-", "")


def enum_label(enum_type: Any, number: int) -> str:
    """The short upper-case name of an enum value (`ECMP`), or the number if the SDK does not know it."""
    try:
        name: str = enum_type.Name(number)
    except ValueError:
        return str(number)
    return name[len(enum_prefix(enum_type)) :]
