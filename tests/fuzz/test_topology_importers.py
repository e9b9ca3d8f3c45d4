"""Every topology importer, fed random and damaged dumps, returns a valid Fabric or a clean refusal.

The property (formats/__init__.py): `import_fabric` returns a Fabric that passes `validate()`, or
raises InvalidArgument or ResourceExhausted with a short message; never another exception. The
damaged dumps start from valid exports of a small leaf-spine, so most of them get deep into the
parser before they break.
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.common.errors import InvalidArgument, ResourceExhausted
from services.topology.fabric import Fabric
from services.topology.formats import export_fabric, import_fabric
from services.topology.formats.lldp import neighbour_documents
from services.topology.generators import leaf_spine
from services.topology.limits import FabricLimits
from tests.fuzz import ANY_TEXT, FUZZ, damaged_documents, mutated, mutated_json

MAX_MESSAGE_CHARS = 4_000
# Small limits keep every accepted fuzzed fabric cheap to build, and exercise the refusals too.
LIMITS = FabricLimits(max_nodes=2_000, max_links=4_000, max_ports_per_switch=512)

SMALL_FABRIC = leaf_spine(2, 2, 2)
VALID = {fmt: export_fabric(SMALL_FABRIC, fmt) for fmt in ("ibnetdiscover", "json", "ns3_hpcc")}
DOCUMENTS = neighbour_documents(SMALL_FABRIC)


def imports_or_refuses(format: str, text: str = "", **options: object) -> Fabric | None:
    """Import; a Fabric must validate, an error must be a short InvalidArgument or ResourceExhausted."""
    try:
        fabric = import_fabric(format, text, limits=LIMITS, **options)
    except (InvalidArgument, ResourceExhausted) as exc:
        assert len(str(exc)) <= MAX_MESSAGE_CHARS, f"{len(str(exc)):,}-character message"
        return None
    fabric.validate()
    return fabric


def tar_of(documents: list[tuple[str, str]], mode: str = "w:gz") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as archive:
        for name, text in documents:
            data = text.encode("utf-8", "surrogatepass")
            member = tarfile.TarInfo(name)
            member.size = len(data)
            archive.addfile(member, io.BytesIO(data))
    return buffer.getvalue()


def test_the_valid_exports_import() -> None:
    for fmt, text in VALID.items():
        assert imports_or_refuses(fmt, text) is not None, fmt
    assert imports_or_refuses("lldp", documents=DOCUMENTS) is not None
    assert imports_or_refuses("lldp", archive=tar_of(DOCUMENTS)) is not None


@pytest.mark.parametrize("format", ["ibnetdiscover", "json", "ns3_hpcc"])
@FUZZ
@given(text=ANY_TEXT)
def test_random_text_imports_or_is_refused(format: str, text: str) -> None:
    imports_or_refuses(format, text)


@pytest.mark.parametrize("format", ["ibnetdiscover", "json", "ns3_hpcc"])
@FUZZ
@given(data=st.data())
def test_a_damaged_dump_imports_or_is_refused(format: str, data: st.DataObject) -> None:
    imports_or_refuses(format, data.draw(mutated(VALID[format])))


@FUZZ
@given(data=st.data())
def test_a_json_dump_with_odd_values_imports_or_is_refused(data: st.DataObject) -> None:
    imports_or_refuses("json", data.draw(mutated_json(VALID["json"])))


@FUZZ
@given(
    speed=st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(2**70), 2**70),
    latency=st.integers(-(2**70), 2**70),
    slower=st.booleans(),
    format=st.sampled_from(["ibnetdiscover", "json", "ns3_hpcc"]),
)
def test_odd_import_options_are_refused_cleanly(
    speed: float, latency: int, slower: bool, format: str
) -> None:
    imports_or_refuses(
        format,
        VALID[format],
        default_link_speed_gbps=speed,
        default_link_latency_ns=latency,
        take_slower_end_on_speed_mismatch=slower,
    )


# JSON fields the fabric keeps as fixed-width numbers: an accepted value must be kept as given,
# never wrapped around (a port of 70,000 once became 4,464), rounded away or turned into NaN.
LINK_FIELDS = {"a_port": "link_port_a", "b_port": "link_port_b", "latency_ns": "link_latency_ns"}
NODE_FIELDS = {"radix": "node_radix", "lid": "node_lid", "tier": "node_tier", "rail": "node_rail"}
NODE_FIELDS["group"] = "node_group"
NUMBERS = (
    st.integers(-(2**70), 2**70)
    | st.sampled_from([0, -1, 127, 128, 255, 256, 65_535, 65_536, 70_000, 2**31, 2**32, 2**63, 10**400])
    | st.floats(allow_nan=True, allow_infinity=True)
)


@FUZZ
@given(
    where=st.sampled_from([("links", field) for field in LINK_FIELDS] + [("nodes", f) for f in NODE_FIELDS]),
    value=NUMBERS,
)
def test_a_json_number_is_kept_as_given_or_refused(where: tuple[str, str], value: float) -> None:
    document = json.loads(VALID["json"])
    part, field = where
    document[part][-1][field] = value
    fabric = imports_or_refuses("json", json.dumps(document))
    if fabric is None or (field == "lid" and value == 0):  # LID 0: "not given", a fresh one is assigned
        return
    arrays = {**LINK_FIELDS, **NODE_FIELDS}
    kept = getattr(fabric, arrays[field]).tolist()
    if field in ("a_port", "b_port"):
        kept = fabric.link_port_a.tolist() + fabric.link_port_b.tolist()
    assert value in kept, f"{field}={value!r} was accepted but the fabric holds {kept}"


@FUZZ
@given(speed=NUMBERS)
def test_a_json_link_speed_is_kept_as_given_or_refused(speed: float) -> None:
    document = json.loads(VALID["json"])
    document["links"][-1]["speed_gbps"] = speed
    fabric = imports_or_refuses("json", json.dumps(document))
    if fabric is not None:
        rate = int(fabric.link_rate_bps[-1])
        assert abs(rate - speed * 1e9) <= max(1.0, speed * 1e9 * 1e-9), f"{speed!r} Gb/s became {rate} b/s"


@FUZZ
@given(documents=damaged_documents(DOCUMENTS))
def test_damaged_lldp_documents_import_or_are_refused(documents: list[tuple[str, str]]) -> None:
    imports_or_refuses("lldp", documents=documents)


@FUZZ
@given(
    documents=damaged_documents(DOCUMENTS),
    port_speeds=st.dictionaries(
        st.text(max_size=10),
        st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(2**70), 2**70),
        max_size=3,
    ),
)
def test_lldp_port_speeds_are_checked(documents: list[tuple[str, str]], port_speeds: dict) -> None:
    imports_or_refuses("lldp", documents=documents, port_speeds_gbps=port_speeds)


@FUZZ
@given(documents=damaged_documents(DOCUMENTS), mode=st.sampled_from(["w", "w:gz", "w:bz2", "w:xz"]))
def test_an_archive_of_damaged_documents_imports_or_is_refused(
    documents: list[tuple[str, str]], mode: str
) -> None:
    imports_or_refuses("lldp", archive=tar_of(documents, mode))


ARCHIVE = tar_of(DOCUMENTS, "w")
ARCHIVE_GZ = tar_of(DOCUMENTS, "w:gz")


@st.composite
def damaged_bytes(draw: st.DrawFn, data: bytes) -> bytes:
    """`data` with a few bytes flipped, a slice cut out, or cut short."""
    buffer = bytearray(data)
    for _ in range(draw(st.integers(1, 6))):
        if not buffer:
            break
        i = draw(st.integers(0, len(buffer) - 1))
        edit = draw(st.sampled_from(("flip", "cut", "truncate", "insert")))
        if edit == "flip":
            buffer[i] = draw(st.integers(0, 255))
        elif edit == "cut":
            del buffer[i : i + draw(st.integers(1, 64))]
        elif edit == "truncate":
            del buffer[i:]
        else:
            buffer[i:i] = draw(st.binary(min_size=1, max_size=16))
    return bytes(buffer)


@FUZZ
@given(archive=st.binary(min_size=1, max_size=600) | damaged_bytes(ARCHIVE) | damaged_bytes(ARCHIVE_GZ))
def test_a_damaged_archive_imports_or_is_refused(archive: bytes) -> None:
    imports_or_refuses("lldp", archive=archive)


@FUZZ
@given(
    format=st.text(max_size=20) | st.sampled_from(["lldp", "node_link_json", "json"]),
    text=st.sampled_from(["", VALID["json"]]),
    documents=st.none() | st.just(DOCUMENTS),
    archive=st.sampled_from([b"", ARCHIVE]),
)
def test_mixed_up_arguments_are_refused_cleanly(
    format: str, text: str, documents: list | None, archive: bytes
) -> None:
    imports_or_refuses(format, text, documents=documents, archive=archive)


@pytest.mark.parametrize(
    "format, text",
    [
        ("json", "[" * 100_000 + "]" * 100_000),
        ("json", '{"version": 1, "nodes": ' + "[" * 50_000 + "]" * 50_000 + "}"),
        ("ns3_hpcc", "1000000000 1 1000000000\n0\n"),
        ("ns3_hpcc", "3 1 2\n2\n0 2 1e300Gbps 0.001ms 0\n1 2 100Gbps 0.001ms 0\n"),
        ("ibnetdiscover", "x" * 1_000_000),
    ],
)
def test_known_hostile_dumps_are_refused_cleanly(format: str, text: str) -> None:
    assert imports_or_refuses(format, text) is None


def test_an_archive_member_claiming_a_terabyte_is_refused_before_it_is_read() -> None:
    member = tarfile.TarInfo("leaf-0.json")
    member.size = 2**40
    assert imports_or_refuses("lldp", archive=gzip.compress(member.tobuf(format=tarfile.GNU_FORMAT))) is None
