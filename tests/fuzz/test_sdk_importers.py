"""The SDK's counter and cabling importers, fed random and damaged text, answer or refuse cleanly.

The property: `prometheus.parse`, `perfquery.parse`, `CsvSamples.parse` and `lldp.read_cabling` return
their result or raise InvalidArgumentError (FormatError and LldpError are subclasses); never another
exception. A bug found here is kept as a strict xfail with its minimal example, so it stays recorded
until it is fixed: a template perfquery cannot fill, and messages that quote a whole 100 KB token
(issue 11: a message quotes at most ~200 characters of the offending input).
"""

from __future__ import annotations

import contextlib
import io
import tarfile

import pytest
from fabrictwin.errors import InvalidArgumentError
from fabrictwin.importers import columns_of, perfquery, prometheus
from fabrictwin.importers.csv_samples import CsvSamples
from fabrictwin.lldp import documents_from_archive, read_cabling
from hypothesis import given
from hypothesis import strategies as st

from services.topology.formats.lldp import neighbour_documents
from services.topology.generators import leaf_spine
from tests.fuzz import ANY_TEXT, FUZZ, damaged_documents, mutated

MAX_MESSAGE_CHARS = 4_000

PERFQUERY = """\
# Port counters: Lid 12 port 1 (CapMask: 0x5A00)
PortSelect:......................1
SymbolErrorCounter:..............3
LinkDownedCounter:...............1
PortRcvErrors:...................2
PortXmitDiscards:................5
PortXmitData:....................4294967200
PortRcvData:.....................1000
PortXmitPkts:....................77
PortRcvPkts:.....................88
PortXmitWait:....................9
# Port extended counters: Lid 12 port 1 (CapMask: 0x5300 CapMask2: 0x0000002)
PortXmitData:....................36298026860928
PortRcvData:.....................12279028775751
PortXmitWait:....................22730501
# timestamp 1700000000.5
# Port counters: Lid 13 port 255 (CapMask: 0x5A00)
PortXmitData:....................1
# Port counters: Lid 14 port 2 (CapMask: 0x5A00)
PortXmitData:....................7
"""

SCRAPE = """\
# HELP node_infiniband_port_data_transmitted_bytes_total Number of data octets transmitted
# TYPE node_infiniband_port_data_transmitted_bytes_total counter
node_infiniband_port_data_transmitted_bytes_total{device="mlx5_0",port="1"} 3.6298026860928e+13
node_infiniband_port_data_received_bytes_total{device="mlx5_0",port="1"} 1.2e+07
node_infiniband_port_transmit_wait_total{device="mlx5_0",port="1"} 22730501
node_infiniband_port_errors_received_total{device="mlx5_0",port="1"} 4
node_infiniband_info{board_id="MT_0000000010",device="mlx5_0",firmware_version="20.31.1014"} 1
# TYPE node_network_receive_bytes_total counter
node_network_receive_bytes_total{device="swp3"} 1.5e+09
node_network_transmit_bytes_total{device="swp3"} 2.5e+09
node_network_info{device="swp3",operstate="down"} 1
node_network_speed_bytes{device="swp3"} 5e+10
node_ethtool_rx_prio3_pause{device="swp3"} 12
ifHCInOctets{ifName="Ethernet1"} 100
ifHCOutOctets{ifName="Ethernet1"} 200
ifOperStatus{ifName="Ethernet1"} 1
ifHighSpeed{ifName="Ethernet1"} 100000
node_cpu_seconds_total{cpu="0",mode="idle"} 12345.5
"""

CSV = """\
time_ns,port,source,tx_bytes:cumulative_64,utilisation
0,leaf-0/p1,pod1,1250000,0.91
0,leaf-0/p2,pod1,140000,0.10
1000,leaf-0/p1,pod1,18446744073709551615,1.0
"""

LLDP_DOCUMENTS = neighbour_documents(leaf_spine(2, 2, 2))

TIMES = st.integers(-(2**63), 2**63 - 1) | st.sampled_from([0, 2**64, -(2**64)])


def test_the_valid_documents_read() -> None:
    assert perfquery.parse(PERFQUERY, 0)
    assert prometheus.parse(SCRAPE, 0, node="n")
    assert CsvSamples("s.csv", "pod1").parse(CSV) is not None
    assert read_cabling(LLDP_DOCUMENTS).cables


@FUZZ
@given(text=ANY_TEXT | mutated(SCRAPE, max_edits=6), time_ns=TIMES, node=st.text(max_size=8))
def test_prometheus_reads_or_refuses(text: str, time_ns: int, node: str) -> None:
    with contextlib.suppress(InvalidArgumentError):
        columns_of(prometheus.parse(text, time_ns, node=node))


@FUZZ
@given(
    port_name=st.text(alphabet="{}[]!:.0123456789abcdeilnoprtv/", max_size=16),
    device_port_name=st.text(alphabet="{}[]!:.0123456789abcdeilnoprtv/", max_size=16),
    pfc_priority=st.integers(-(2**40), 2**40),
)
def test_prometheus_naming_options_are_checked(
    port_name: str, device_port_name: str, pfc_priority: int
) -> None:
    with contextlib.suppress(InvalidArgumentError):
        prometheus.parse(
            SCRAPE, 0, port_name=port_name, device_port_name=device_port_name, pfc_priority=pfc_priority
        )


@FUZZ
@given(
    text=ANY_TEXT | mutated(PERFQUERY, max_edits=6),
    time_ns=TIMES,
    nodes=st.dictionaries(st.integers(-(2**64), 2**64), st.text(max_size=6), max_size=3),
    link_gbps=st.floats(allow_nan=True, allow_infinity=True),
)
def test_perfquery_reads_or_refuses(text: str, time_ns: int, nodes: dict, link_gbps: float) -> None:
    with contextlib.suppress(InvalidArgumentError):
        columns_of(perfquery.parse(text, time_ns, node="n", nodes=nodes, link_gbps=link_gbps))


PERFQUERY_ONE_PORT = "# Port counters: Lid 3 port 1 (CapMask: 0x5A00)\nPortXmitData:......40\n"


def test_perfquery_refuses_a_port_name_template_it_cannot_fill() -> None:
    with pytest.raises(InvalidArgumentError):
        perfquery.parse(PERFQUERY_ONE_PORT, 0, port_name="{device}")


@FUZZ
@given(
    pieces=st.lists(ANY_TEXT | mutated(CSV, max_edits=6), min_size=1, max_size=3),
    kinds=st.dictionaries(
        st.sampled_from(["tx_bytes", "utilisation", "x"]), st.text(max_size=12), max_size=2
    ),
)
def test_csv_reads_or_refuses(pieces: list[str], kinds: dict) -> None:
    reader = CsvSamples("s.csv", "pod1", kinds)
    for piece in pieces:  # a growing file is fed in pieces, and the header is kept between them
        try:
            reader.parse(piece)
        except InvalidArgumentError:
            return


@FUZZ
@given(documents=damaged_documents(LLDP_DOCUMENTS))
def test_read_cabling_reads_or_refuses(documents: list[tuple[str, str]]) -> None:
    with contextlib.suppress(InvalidArgumentError):
        read_cabling(documents)


def _tar(documents: list[tuple[str, str]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in documents:
            data = text.encode()
            member = tarfile.TarInfo(name)
            member.size = len(data)
            archive.addfile(member, io.BytesIO(data))
    return buffer.getvalue()


ARCHIVE = _tar(LLDP_DOCUMENTS)


@FUZZ
@given(
    archive=st.binary(max_size=600)
    | st.builds(
        lambda cut, flips, data: bytes(b ^ flips.get(i, 0) for i, b in enumerate(data[:cut])),
        st.integers(0, len(ARCHIVE)),
        st.dictionaries(st.integers(0, len(ARCHIVE) - 1), st.integers(1, 255), max_size=6),
        st.just(ARCHIVE),
    )
)
def test_an_archive_is_read_or_refused(archive: bytes) -> None:
    with contextlib.suppress(InvalidArgumentError):
        read_cabling(documents_from_archive(archive))


BIG = "x" * 100_000
LEAF_SPINE_RENAMED = [(BIG, LLDP_DOCUMENTS[0][1]), *LLDP_DOCUMENTS[1:]]


@pytest.mark.parametrize(
    "read",
    [
        lambda: perfquery.parse(PERFQUERY_ONE_PORT.replace("40", "4" + BIG), 0),
        lambda: CsvSamples("s.csv", "pod1").parse(f"time_ns,port,{BIG}\n"),
        lambda: CsvSamples("s.csv", "pod1").parse(f"time_ns,port,tx_bytes:{BIG}\n"),
        lambda: CsvSamples("s.csv", "pod1").parse(f"time_ns,port,tx_bytes\n{BIG},p,1\n"),
        lambda: CsvSamples("s.csv", "pod1").parse(f"time_ns,port,tx_bytes\n0,p,{BIG}\n"),
        lambda: CsvSamples("s.csv", "pod1").parse(f"time_ns,port,source,tx_bytes\n0,p,{BIG},1\n"),
        lambda: read_cabling(LEAF_SPINE_RENAMED),
    ],
    ids=["perfquery-value", "csv-header", "csv-kind", "csv-time", "csv-value", "csv-source", "lldp-name"],
)
def test_a_huge_token_is_quoted_short(read) -> None:
    with pytest.raises(InvalidArgumentError) as refused:
        read()
    assert len(str(refused.value)) <= MAX_MESSAGE_CHARS, f"{len(str(refused.value)):,}-character message"
