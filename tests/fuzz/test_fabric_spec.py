"""CreateFabric's generator spec, fed random dicts, builds a valid fabric or is refused cleanly.

Specs arrive as `MessageToDict(..., preserving_proto_field_name=True)` gives them (int64 fields as
strings). The property: `normalise_spec` and `from_spec` return a spec and a Fabric that passes
`validate()`, or raise InvalidArgument or ResourceExhausted with a short message; never another
exception. Small limits keep every fabric that is accepted cheap to build.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.common.errors import InvalidArgument, ResourceExhausted
from services.topology.limits import DEFAULT_LIMITS, FabricLimits
from services.topology.specs import from_spec, normalise_spec
from tests.fuzz import FUZZ, JSON_VALUES, NASTY_TOKENS

MAX_MESSAGE_CHARS = 4_000
LIMITS = FabricLimits(max_nodes=600, max_links=1_500, max_ports_per_switch=128)

PARAMETERS = {
    "leaf_spine": ("leaves", "spines", "hosts_per_leaf", "parallel_links"),
    "fat_tree": ("k",),
    "superpod": ("scalable_units", "nodes_per_su", "gpus_per_node"),
}
COMMON = ("link_speed_gbps", "link_latency_ns", "host_link_speed_gbps")
SUPERPOD = PARAMETERS["superpod"]

# Values whose repr is longer than this are covered by test_a_huge_value_is_quoted_short below.
SHORT_TOKENS = [token for token in NASTY_TOKENS if len(token) <= 200]
SHORT_VALUES = JSON_VALUES.filter(lambda value: len(repr(value)) <= 200)
_EDGES = [0, 1, 2, 3, 4, 8, -1, 2**31 - 1, 2**32, 2**63 - 1, -(2**63), 2**64, 10**6, 10**9]
ODD_NUMBERS = (
    st.integers(-(2**70), 2**70)
    | st.sampled_from(_EDGES)
    | st.sampled_from(_EDGES).map(str)  # int64 fields, as MessageToDict writes them
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([1e300, 1e308, 1e-300, 5e-324, 400.0, 0.5, 1.6e6, 1.6e6 + 1])
    | st.sampled_from(["9" * 300, "1e3", " 4", "0x10", "nan", "inf", "-0", "", "4.0"])
    | st.sampled_from(SHORT_TOKENS)
    | st.booleans()
    | st.none()
)
# Mostly small whole numbers, so that many specs get as far as building a fabric.
NUMBERS = st.integers(0, 6) | st.integers(0, 6).map(str) | st.integers(1, 16) | ODD_NUMBERS


@st.composite
def generator_specs(draw: st.DrawFn) -> dict:
    """A FabricSpec-shaped dict: usually one generator with some parameters, sometimes stranger."""
    spec: dict = {}
    some = st.lists(st.sampled_from(sorted(PARAMETERS)), max_size=2, unique=True)
    for generator in draw(st.sampled_from(sorted(PARAMETERS)).map(lambda g: [g]) | some):
        every = st.just(list(PARAMETERS[generator]))
        names = draw(every | every | st.lists(st.sampled_from(PARAMETERS[generator]), unique=True))
        params = {name: draw(NUMBERS) for name in names}
        if draw(st.integers(0, 9)) == 0:
            params[draw(st.text(max_size=8))] = draw(NUMBERS)
        spec[generator] = params if draw(st.integers(0, 9)) else draw(SHORT_VALUES)
    for name in draw(st.lists(st.sampled_from(COMMON), unique=True)):
        spec[name] = draw(NUMBERS)
    if draw(st.integers(0, 9)) == 0:
        spec[draw(st.text(max_size=8))] = draw(SHORT_VALUES)
    return spec


def builds_or_refuses(spec: object, limits: FabricLimits = LIMITS) -> bool:
    try:
        normalise_spec(spec)
        fabric = from_spec(spec, limits)
    except (InvalidArgument, ResourceExhausted) as exc:
        assert len(str(exc)) <= MAX_MESSAGE_CHARS, f"{len(str(exc)):,}-character message"
        return False
    fabric.validate()
    return True


def test_small_specs_build() -> None:
    assert builds_or_refuses({"leaf_spine": {"leaves": 2, "spines": 2, "hosts_per_leaf": 2}})
    assert builds_or_refuses({"fat_tree": {"k": 4}, "link_speed_gbps": 100})
    assert builds_or_refuses({"superpod": {"scalable_units": "1", "nodes_per_su": 2, "gpus_per_node": 2}})


@FUZZ
@given(spec=generator_specs())
def test_a_random_generator_spec_builds_or_is_refused_cleanly(spec: dict) -> None:
    builds_or_refuses(spec)


@FUZZ
@given(
    spec=st.dictionaries(
        st.sampled_from([*PARAMETERS, *COMMON]) | st.text(max_size=8),
        SHORT_VALUES | st.dictionaries(st.text(max_size=8) | st.sampled_from(SUPERPOD), SHORT_VALUES),
        max_size=3,
    )
)
def test_a_spec_of_odd_values_is_refused_cleanly(spec: dict) -> None:
    builds_or_refuses(spec)


@pytest.mark.parametrize(
    "spec",
    [
        {"fat_tree": {"k": 2**32}},
        {"fat_tree": {"k": str(2**63 - 1)}},
        {"leaf_spine": {"leaves": 4, "spines": 4, "hosts_per_leaf": 4, "parallel_links": 1_000_000}},
        {"leaf_spine": {"leaves": 10**9, "spines": 10**9, "hosts_per_leaf": 10**9}},
        {"superpod": {"scalable_units": 10**6}},
        {"leaf_spine": {"leaves": 2, "spines": 2, "hosts_per_leaf": 2}, "link_speed_gbps": 1e300},
        {"leaf_spine": {"leaves": 2, "spines": 2, "hosts_per_leaf": 2}, "link_speed_gbps": float("nan")},
        {"leaf_spine": {"leaves": 2, "spines": 2, "hosts_per_leaf": 2}, "link_latency_ns": str(2**63 - 1)},
    ],
)
def test_the_issue_s_oversized_specs_are_refused_with_the_default_limits(spec: dict) -> None:
    assert not builds_or_refuses(spec, DEFAULT_LIMITS)


@pytest.mark.parametrize(
    "spec",
    [
        {"fat_tree": {"k": "9" * 100_000}},
        {"fat_tree": {"k": 4}, "link_speed_gbps": "x" * 100_000},
        {"fat_tree": {"k": [0] * 30_000}},
    ],
    ids=["digits", "text", "list"],
)
def test_a_huge_value_is_quoted_short(spec: dict) -> None:
    builds_or_refuses(spec)


def test_an_integer_of_thousands_of_digits_is_refused() -> None:
    with pytest.raises(InvalidArgument):
        normalise_spec({"fat_tree": {"k": 10**5_000}})
