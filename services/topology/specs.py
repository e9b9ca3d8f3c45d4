"""FabricSpec -> Fabric: defaults filled, exactly one generator chosen, errors naming `spec.<field>`.

Specs are dicts with proto field names, as `MessageToDict(..., preserving_proto_field_name=True)` gives
them (int64 fields arrive as strings); 0 means "the default", as proto3 cannot tell it from unset.
`normalise_spec` is what the store keeps; `from_spec` builds the fabric.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from services.common.errors import InvalidArgument, quote
from services.topology.cabling import DEFAULT_LINK_LATENCY_NS, DEFAULT_LINK_SPEED_GBPS
from services.topology.fabric import Fabric
from services.topology.generators import build_fat_tree, build_leaf_spine
from services.topology.limits import DEFAULT_LIMITS, FabricLimits
from services.topology.superpod import build_superpod

__all__ = ["GENERATORS", "from_spec", "normalise_spec"]

GENERATORS = ("leaf_spine", "fat_tree", "superpod")
_PARAMETERS = {
    "leaf_spine": ("leaves", "spines", "hosts_per_leaf", "parallel_links"),
    "fat_tree": ("k",),
    "superpod": ("scalable_units", "nodes_per_su", "gpus_per_node"),
}
_DEFAULTS = {"parallel_links": 1, "nodes_per_su": 32, "gpus_per_node": 8}
_COMMON = ("link_speed_gbps", "link_latency_ns", "host_link_speed_gbps")


def _number(spec: Mapping[str, Any], key: str, field: str, kind: type) -> Any:
    """A spec value as `kind`; int64 fields arrive as strings from MessageToDict."""
    value = spec.get(key, 0)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**18:
        raise InvalidArgument(field, "must be a number below 10^18")  # repr of 4,300+ digits would fail
    try:
        if isinstance(value, bool) or (isinstance(value, str) and len(value) > 40):
            raise ValueError
        return kind(value) if kind is float else int(str(value))
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidArgument(field, f"must be a number, got {quote(value)}") from exc


def normalise_spec(spec: Mapping[str, Any] | None) -> dict[str, Any]:
    """The spec with defaults filled (0 means default) and exactly one generator; validates names.

    Returns a new dict with proto field names, suitable for storing and for `from_spec`.

    >>> normalise_spec({"superpod": {"scalable_units": 4}})["superpod"]
    {'scalable_units': 4, 'nodes_per_su': 32, 'gpus_per_node': 8}
    """
    if not spec:
        raise InvalidArgument("spec", "choose a generator: leaf_spine, fat_tree or superpod")
    for key in spec:
        if key not in (*GENERATORS, *_COMMON):
            raise InvalidArgument(f"spec.{key}", "unknown field")
    chosen = [g for g in GENERATORS if g in spec]
    if not chosen:
        raise InvalidArgument("spec", "choose a generator: leaf_spine, fat_tree or superpod")
    if len(chosen) > 1:
        raise InvalidArgument("spec", f"choose exactly one generator, got {', '.join(chosen)}")
    generator = chosen[0]
    speed = _number(spec, "link_speed_gbps", "spec.link_speed_gbps", float) or DEFAULT_LINK_SPEED_GBPS
    out: dict[str, Any] = {
        "link_speed_gbps": speed,
        "link_latency_ns": _number(spec, "link_latency_ns", "spec.link_latency_ns", int)
        or DEFAULT_LINK_LATENCY_NS,
        "host_link_speed_gbps": _number(spec, "host_link_speed_gbps", "spec.host_link_speed_gbps", float)
        or speed,
    }
    params = spec[generator] or {}
    if not isinstance(params, Mapping):
        raise InvalidArgument(f"spec.{generator}", "must be a message")
    for key in params:
        if key not in _PARAMETERS[generator]:
            raise InvalidArgument(f"spec.{generator}.{key}", "unknown field")
    values = {key: _number(params, key, f"spec.{generator}.{key}", int) for key in _PARAMETERS[generator]}
    for key, default in _DEFAULTS.items():
        if key in values:
            values[key] = values[key] or default
    out[generator] = values
    return out


def from_spec(spec: Mapping[str, Any] | None, limits: FabricLimits = DEFAULT_LIMITS) -> Fabric:
    """Build the fabric a FabricSpec-shaped dict describes; errors name fields as `spec.fat_tree.k`.

    A fabric beyond `limits` is refused (ResourceExhausted) once its size is known from the
    parameters, before anything is built.
    """
    spec = normalise_spec(spec)
    generator = next(g for g in GENERATORS if g in spec)
    params = spec[generator]

    def field(param: str) -> str:
        return f"spec.{param}" if param in _COMMON else f"spec.{generator}.{param}"

    speed, latency, host_speed = (
        spec["link_speed_gbps"],
        spec["link_latency_ns"],
        spec["host_link_speed_gbps"],
    )
    if generator == "fat_tree":
        return build_fat_tree(params["k"], speed, latency, host_speed, field, limits.admit)
    if generator == "superpod":
        return build_superpod(
            params["scalable_units"],
            params["nodes_per_su"],
            params["gpus_per_node"],
            speed,
            host_speed,
            latency,
            field,
            limits.admit,
        )
    return build_leaf_spine(
        params["leaves"],
        params["spines"],
        params["hosts_per_leaf"],
        params["parallel_links"],
        speed,
        host_speed,
        latency,
        field,
        limits.admit,
    )
