"""Resource names, ids, page sizes and page tokens: bad input is InvalidArgument naming the field."""

from __future__ import annotations

import base64

import pytest

from services.common.errors import InvalidArgument
from services.common.resources import (
    DEFAULT_PAGE_SIZE,
    decode_page_token,
    encode_page_token,
    new_id,
    page_size,
    parse_name,
    validate_id,
)


def test_parse_name_returns_the_variables_of_the_pattern():
    assert parse_name("fabrics/f1/links/l-7", "fabrics/{fabric}/links/{link}") == {
        "fabric": "f1",
        "link": "l-7",
    }


@pytest.mark.parametrize(
    "name",
    [
        "",
        "fabrics",
        "fabrics/",
        "fabric/f1",
        "fabrics/f1/links",
        "fabrics/f1/",
        "/fabrics/f1",
        "fabrics//links/x",
    ],
)
def test_parse_name_rejects_a_name_of_another_shape_naming_the_field(name):
    with pytest.raises(InvalidArgument) as rejected:
        parse_name(name, "fabrics/{fabric}/links/{link}" if "links" in name else "fabrics/{fabric}", "parent")
    assert rejected.value.field == "parent"
    assert str(rejected.value).startswith("parent: ")


@pytest.mark.parametrize("value", ["a", "leaf-3", "sim-3f9a1c2b", "a" * 63, "x9"])
def test_validate_id_accepts_aip_122_ids(value):
    assert validate_id(value, "fabric_id") == value


@pytest.mark.parametrize(
    "value", ["", "3fabric", "Fabric", "fab_ric", "fabric-", "a" * 64, "fab ric", "fabric\n", "ünï"]
)
def test_validate_id_rejects_anything_else_naming_the_field(value):
    with pytest.raises(InvalidArgument) as rejected:
        validate_id(value, "fabric_id")
    assert rejected.value.field == "fabric_id"


def test_new_ids_are_valid_and_distinct():
    ids = {new_id("sim") for _ in range(100)}
    assert len(ids) == 100
    assert all(validate_id(i, "id").startswith("sim-") for i in ids)


@pytest.mark.parametrize(
    ("requested", "expected"), [(0, DEFAULT_PAGE_SIZE), (1, 1), (1000, 1000), (5000, 1000)]
)
def test_page_size_defaults_and_clamps(requested, expected):
    assert page_size(requested) == expected


def test_page_size_honours_a_service_default_and_maximum():
    assert page_size(0, default=10, maximum=20) == 10
    assert page_size(30, default=10, maximum=20) == 20


def test_a_negative_page_size_is_invalid_naming_page_size():
    with pytest.raises(InvalidArgument) as rejected:
        page_size(-1)
    assert rejected.value.field == "page_size"


@pytest.mark.parametrize("offset", [0, 1, 50, 10**12])
def test_a_page_token_round_trips_its_offset(offset):
    assert decode_page_token(encode_page_token(offset)) == offset


def test_an_empty_page_token_is_the_first_page():
    assert decode_page_token("") == 0


def _token(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    "token",
    [
        "garbage!",
        "%%%",
        "bzo",
        _token("x:5"),
        _token("o:-5"),
        _token("o:"),
        _token("o: 5"),
        _token("o:5\n"),
        _token("o:٥"),
        "é",
    ],
)
def test_a_token_not_from_a_previous_page_is_invalid_naming_page_token(token):
    with pytest.raises(InvalidArgument) as rejected:
        decode_page_token(token)
    assert rejected.value.field == "page_token"
