"""The mirror's TOML configuration, random or damaged, is read or refused with InvalidArgumentError.

The property: `parse_mirror_config(text)` returns a MirrorConfig or raises InvalidArgumentError;
never another exception. Inputs are random text, damaged copies of a valid file, and TOML written
from random tables (every key the file knows, with values of every TOML type: integers beyond
int64, NaN and infinities, odd strings, arrays and tables). The two bugs it found (an integer beyond
any float, one of 4,300+ digits) are fixed; their minimal examples stay as tests, as do those of a
user's report (100,000 nested levels: tomllib's RecursionError).
"""

from __future__ import annotations

import contextlib
import json
import math

import pytest
from fabrictwin.errors import InvalidArgumentError
from fabrictwin.mirror_config import (
    MAX_CONFIG_CHARS,
    MAX_CONFIG_DEPTH,
    load_mirror_config,
    parse_mirror_config,
)
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz import FUZZ, NASTY_TOKENS, mutated

VALID = """\
fabric = "pod1"
source = "pod1-live"
interval_s = 10
timeout_s = 5
max_workers = 64
parse_workers = 2

[lldp]
interval_s = 300
nodes = ["spine0", "leaf0", "gpu-node-0"]
command = "ssh {node} 'lldpcli -f json show neighbors'"
default_speed_gbps = 400
default_latency_ns = 500
routing = "minhop"
timeout_s = 30

[[targets]]
nodes = ["spine0", "leaf0"]
url = "http://{node}:9100/metrics"
format = "prometheus"
speed_gbps = 100
port_name = "{node}/{device}"

[[targets]]
node = "gpu-node-0"
command = "cat /tmp/metrics"
"""

TOP_KEYS = ["fabric", "source", "interval_s", "timeout_s", "max_workers", "parse_workers", "max_scrape_bytes"]
LLDP_KEYS = ["interval_s", "nodes", "command", "directory", "default_speed_gbps", "default_latency_ns"]
LLDP_KEYS += ["routing", "timeout_s"]
TARGET_KEYS = ["node", "nodes", "url", "command", "format", "speed_gbps", "port_name"]

SCALARS = (
    st.integers(-(2**70), 2**70)
    | st.sampled_from([10**400, -(10**400)])
    | st.sampled_from([0, 1, -1, 64, 65, 1024, 1025, 86_400, 86_401, 10**12, 10**12 + 1, 2**63, 2**64])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.booleans()
    | st.text(st.characters(exclude_categories=("Cs",)), max_size=20)
    | st.sampled_from(["pod1", "{node}", "http://{node}/m", "https://x", "prometheus", "minhop", "/d", ""])
)
VALUES = SCALARS | st.lists(SCALARS, max_size=3)


def toml_value(value: object) -> str:
    """`value` written as TOML (strings as JSON strings, which TOML reads as basic strings)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, str):
        return json.dumps(value)
    return str(value)


def toml_table(table: dict) -> str:
    return "".join(f"{json.dumps(key)} = {toml_value(value)}\n" for key, value in table.items())


@st.composite
def tables(draw: st.DrawFn, keys: list[str], usual: dict) -> dict:
    """A table of some of `keys`, with their usual value or a random one, and sometimes a stray key."""
    table = {}
    for key in draw(st.lists(st.sampled_from(keys), unique=True)):
        table[key] = draw(st.just(usual[key]) | VALUES) if key in usual else draw(VALUES)
    if draw(st.integers(0, 9)) == 0:
        table[draw(st.text(st.characters(exclude_categories=("Cs",)), max_size=8))] = draw(VALUES)
    return table


@st.composite
def configs(draw: st.DrawFn) -> str:
    top = draw(tables(TOP_KEYS, {"fabric": "pod1", "source": "live"}))
    text = toml_table(top)
    if draw(st.booleans()):
        lldp = draw(tables(LLDP_KEYS, {"directory": "/d", "nodes": ["a", "b"], "command": "ssh {node} x"}))
        text += "[lldp]\n" + toml_table(lldp)
    for _ in range(draw(st.integers(0, 3))):
        usual = {"node": "a", "url": "http://{node}/m", "nodes": ["a", "b"], "format": "prometheus"}
        text += "[[targets]]\n" + toml_table(draw(tables(TARGET_KEYS, usual)))
    return text


def reads_or_refuses(text: str) -> None:
    with contextlib.suppress(InvalidArgumentError):
        parse_mirror_config(text)


def test_the_valid_file_reads() -> None:
    config = parse_mirror_config(VALID)
    assert len(config.targets) == 3 and config.lldp is not None


@FUZZ
@given(text=st.text(max_size=300) | st.lists(st.sampled_from(NASTY_TOKENS), max_size=10).map(" ".join))
def test_random_text_is_read_or_refused(text: str) -> None:
    reads_or_refuses(text)


@FUZZ
@given(text=mutated(VALID, max_edits=5))
def test_a_damaged_file_is_read_or_refused(text: str) -> None:
    reads_or_refuses(text)


@FUZZ
@given(text=configs())
def test_a_file_of_random_values_is_read_or_refused(text: str) -> None:
    reads_or_refuses(text)


def test_an_interval_beyond_any_float_is_refused() -> None:
    with pytest.raises(InvalidArgumentError):
        parse_mirror_config('fabric = "f"\nsource = "s"\ninterval_s = ' + "1" * 400)


def test_an_integer_of_thousands_of_digits_is_refused() -> None:
    with pytest.raises(InvalidArgumentError):
        parse_mirror_config("max_workers = " + "1" * 4_301)


@pytest.mark.parametrize(
    "value",
    ["[" * 100_000 + "]" * 100_000, "{a = " * 100_000 + "1" + "}" * 100_000, "[{a = " * 50_000],
    ids=["arrays", "inline-tables", "unclosed"],
)
def test_a_file_nested_100_000_levels_deep_is_refused_naming_the_file_on_one_line(tmp_path, value) -> None:
    path = tmp_path / "mirror.toml"
    path.write_text('fabric = "f"\nsource = "s"\nnodes = ' + value + "\n")
    with pytest.raises(InvalidArgumentError) as caught:
        load_mirror_config(str(path))
    message = str(caught.value)
    assert f"{path}: line 3: arrays and tables nested more than {MAX_CONFIG_DEPTH} deep" in message
    assert "\n" not in message


def test_nesting_up_to_the_bound_and_brackets_in_strings_and_comments_are_read() -> None:
    deep = "[" * MAX_CONFIG_DEPTH + "1" + "]" * MAX_CONFIG_DEPTH
    with pytest.raises(InvalidArgumentError, match="max_workers: must be a whole number"):
        parse_mirror_config(f'fabric = "f"\nsource = "s"\nmax_workers = {deep}\n')
    brackets = "[{" * 100
    text = (
        f"""fabric = "{brackets}"  # {brackets}
source = '{brackets}'
[[targets]]
node = """
        + '"""'
        + brackets
        + '"""'
        + f"""
command = '''{brackets}'''
"""
    )
    config = parse_mirror_config(text)
    assert config.fabric == brackets and config.targets[0].command == brackets


def test_a_file_beyond_the_size_bound_is_refused_before_it_is_parsed(tmp_path) -> None:
    path = tmp_path / "mirror.toml"
    path.write_text('fabric = "f"\n' + "#" * MAX_CONFIG_CHARS + "\n")
    with pytest.raises(InvalidArgumentError) as caught:
        load_mirror_config(str(path))
    assert str(caught.value).startswith(f"{path}: {MAX_CONFIG_CHARS + 1} characters; a mirror configuration")


def test_max_scrape_bytes_is_a_whole_number_in_its_range() -> None:
    base = 'fabric = "f"\nsource = "s"\n[[targets]]\nnode = "a"\nurl = "http://a"\n'
    assert parse_mirror_config(base).max_scrape_bytes == 16 * 1024 * 1024
    assert parse_mirror_config("max_scrape_bytes = 1048576\n" + base).max_scrape_bytes == 1024 * 1024
    for bad in ("100", "2e6", "true", "2147483648"):
        with pytest.raises(InvalidArgumentError, match="max_scrape_bytes: must be a whole number of bytes"):
            parse_mirror_config(f"max_scrape_bytes = {bad}\n" + base)
