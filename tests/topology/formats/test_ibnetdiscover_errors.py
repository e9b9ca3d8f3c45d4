"""Malformed ibnetdiscover text is refused with the line and what was expected; stray lines are skipped."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.common.errors import InvalidArgument
from services.topology.formats import import_fabric
from services.topology.formats.ibnetdiscover import import_ibnetdiscover
from tests.topology.formats.shared_data import read_shared

GOOD = """\
# a leaf with one host and a loopback cable
switchguid=0x10(10)
Switch 4 "S-0000000000000010" # "leaf" enhanced port 0 lid 1 lmc 0
[1] "H-0000000000000020"[1](21) # "node HCA-1" lid 2 4xHDR
[3] "S-0000000000000010"[4] # "leaf" lid 1 4xHDR
[4] "S-0000000000000010"[3] # "leaf" lid 1 4xHDR

caguid=0x20
Ca 1 "H-0000000000000020" # "node HCA-1"
[1](21) "S-0000000000000010"[1] # lid 2 lmc 0 "leaf" lid 1 4xHDR
"""


def _line_error(text: str) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as error:
        import_fabric("ibnetdiscover", text)
    return error.value


def _replace_line(number: int, new: str) -> str:
    lines = GOOD.split("\n")
    lines[number - 1] = new
    return "\n".join(lines)


def test_the_good_example_imports():
    fabric = import_fabric("ibnetdiscover", GOOD)
    assert fabric.num_links == 2
    assert fabric.link_names == ["leaf/p1<->node HCA-1/p1", "leaf/p3<->leaf/p4"]
    assert (fabric.link_rate_bps == 200_000_000_000).all()


@pytest.mark.parametrize(
    ("line", "text", "expected"),
    [
        (4, '[1] "H-0000000000000020"[1](21) # "node HCA-1" lid 2 4xFOO', "width x speed such as 4xEDR"),
        (4, '[1] "H-0000000000000020"[1](21) # lid two', 'expected `# "<peer description>"'),
        (4, '[1 "H-0000000000000020"[1]', "expected `[<port>]"),
        (4, '[9] "H-0000000000000020"[1](21) # "node HCA-1" lid 2 4xHDR', "port 9 of a node with 4 ports"),
        (4, '[1] "H-0000000000000099"[1] # "x" lid 2 4xHDR', "has no Switch or Ca block"),
        (4, '[1] "H-0000000000000020"[1](21) bogus=1', "ibsim options"),
        (3, 'Switch 4 "S-0000000000000010" garbage', 'expected `# "<node description>" ...`'),
        (3, 'Rt 4 "R-0000000000000010" # "router"', "router nodes (Rt) are not modelled"),
        (2, "switchguid=0x11(11)", 'disagrees with the id "S-0000000000000010"'),
        (2, "caguid=0x10", "expected switchguid="),
        (6, "this is not ibnetdiscover", "expected a node header"),
        (6, '[4] "S-0000000000000010"[4] # "leaf" lid 1 4xHDR', "cannot be cabled to itself"),
    ],
)
def test_a_malformed_line_is_named_with_what_was_expected(line, text, expected):
    error = _line_error(_replace_line(line, text))
    assert error.field == f"line {line}"
    assert expected in error.problem


def test_a_link_listed_from_one_end_only_names_that_line():
    error = _line_error(_replace_line(10, ""))  # drop the CA's port line
    assert error.field == "line 4"
    assert "no line for port 1" in error.problem


def test_ends_naming_different_ports_are_reported_with_both_lines():
    error = _line_error(_replace_line(10, '[1](21) "S-0000000000000010"[2] # lid 2 lmc 0 "leaf" lid 1 4xHDR'))
    assert error.field == "line 4"
    assert "line 10" in error.problem


def test_ends_reporting_different_speeds_are_reported_with_both_lines():
    error = _line_error(_replace_line(10, '[1](21) "S-0000000000000010"[1] # lid 2 lmc 0 "leaf" lid 1 4xNDR'))
    assert error.field == "line 4"
    assert "line 10" in error.problem and "200 Gb/s" in error.problem and "400 Gb/s" in error.problem


def test_a_port_listed_twice_names_the_second_line():
    text = GOOD.replace('[3] "S', '[1] "H-0000000000000020"[1](21) # "node HCA-1" lid 2 4xHDR\n[3] "S')
    error = _line_error(text)
    assert error.field == "line 5"
    assert "already listed on line 4" in error.problem


def test_a_duplicate_node_and_a_duplicate_lid_are_refused():
    duplicate = GOOD + '\nCa 1 "H-0000000000000020" # "again"\n'
    assert "also on line 9" in _line_error(duplicate).problem
    same_lid = GOOD.replace('lid 2 lmc 0 "leaf"', 'lid 1 lmc 0 "leaf"')
    error = _line_error(same_lid)
    assert error.field == "line 10" and "LID 1 is also given on line 3" in error.problem


def test_id_lines_without_a_header_and_port_lines_without_a_node_are_refused():
    assert _line_error(GOOD + "vendid=0x2c9\n").field == "line 11"
    assert _line_error('[1] "S-1"[1]\n').field == "line 1"
    with pytest.raises(InvalidArgument, match="no Switch or Ca node"):
        import_fabric("ibnetdiscover", "# only a comment\n")


def test_unknown_width_speed_from_the_tool_takes_the_default():
    text = GOOD.replace("4xHDR", "4x???")
    fabric = import_fabric("ibnetdiscover", text, default_link_speed_gbps=100.0)
    assert (fabric.link_rate_bps == 100_000_000_000).all()


def test_ibsim_options_set_width_and_speed():
    text = 'Switch 4 "sw"\n[1] "h"[1] w=1 e=2\n\nHca 1 "h"\n[1] "sw"[1] w=1 e=2\n'
    assert import_fabric("ibnetdiscover", text).link_rate_bps.tolist() == [25_000_000_000]
    text = text.replace("w=1 e=2", "w=12")
    assert import_fabric("ibnetdiscover", text, default_link_speed_gbps=400.0).link_rate_bps.tolist() == [
        1_200_000_000_000
    ]


def test_a_bad_rate_mismatch_mode_is_refused():
    with pytest.raises(InvalidArgument, match="rate_mismatch"):
        import_ibnetdiscover(GOOD, rate_mismatch="faster")


# Garbage that cannot be mistaken for a construct of the grammar or a documented stray line.
_RESERVED = ("[", "#", "Switch", "Ca", "Hca", "Rt", "vendid=", "devid=", "sysimgguid=", "switchguid=",
             "caguid=", "rtguid=", "Non-Chassis", "Chassis", "Hostname:", "ibwarn:", "iberror:", "ibpanic:",
             "ibnetdiscover:")  # fmt: skip
garbage = st.text(
    st.characters(codec="ascii", exclude_characters="\n\r\x0b\x0c\x1c\x1d\x1e\x85"), min_size=1
).filter(lambda s: s.strip() and not s.strip().startswith(_RESERVED) and ".c:" not in s)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), junk=garbage)
def test_a_garbage_line_inserted_anywhere_in_a_real_dump_is_named(data, junk):
    lines = read_shared("ibnetdiscover/ibtopotool-3.topo").split("\n")
    at = data.draw(st.integers(0, len(lines)))
    lines.insert(at, junk)
    with pytest.raises(InvalidArgument) as error:
        import_fabric("ibnetdiscover", "\n".join(lines))
    assert error.value.field == f"line {at + 1}"


stray = st.one_of(
    st.text(" \t", min_size=1),
    st.text(st.characters(codec="ascii", exclude_characters="\n\r\x0b\x0c\x1c\x1d\x1e\x85")).map(
        lambda s: "#" + s
    ),
    st.sampled_from(["Non-Chassis Nodes", "Chassis 2 (guid 0x2c90000000042)", "Hostname: node-7"]),
    st.from_regex(r"\Asrc/[a-z_]{1,12}\.c:[0-9]{1,4}; umad [a-z ]{0,20}\Z"),
    st.sampled_from(["ibwarn: [1234] mad_rpc: _do_madrpc failed; dport (DR path slid 0; dlid 0; 0,1)"]),
)


@settings(max_examples=100, deadline=None)
@given(data=st.data(), extra=stray)
def test_a_documented_stray_line_inserted_anywhere_changes_nothing(data, extra):
    text = read_shared("ibnetdiscover/ibtopotool-3.topo")
    expected = import_fabric("ibnetdiscover", text)
    lines = text.split("\n")
    at = data.draw(st.integers(0, len(lines)))
    lines.insert(at, extra)
    fabric = import_fabric("ibnetdiscover", "\n".join(lines))
    assert fabric.node_names == expected.node_names
    assert fabric.link_names == expected.link_names
    assert fabric.link_rate_bps.tolist() == expected.link_rate_bps.tolist()


def test_an_id_line_with_a_value_that_is_not_a_number_is_named():
    error = _line_error(_replace_line(2, "switchguid=10(10)x"))
    assert error.field == "line 2"
    assert "expected <name>=0x<hex>" in error.problem
