"""LLDP documents are refused by their size before they are parsed (or read, or unpacked).

Reported: a 61 MB LLDP document took 26 s to refuse and left the topology service at 1.3 GB. One node's
`lldpcli -f json show neighbors` is about 1.2 kB a neighbour (tests/topology/formats/lldpd_captures), a
few hundred kB for a 64-port switch: 8 MiB a document, 256 MiB all together, are never reached.
"""

from __future__ import annotations

import io
import json
import os
import pathlib
import re
import tarfile
import time

import pytest
from fabrictwin.lldp import (
    MAX_DOCUMENT_BYTES,
    MAX_TOTAL_BYTES,
    LldpError,
    documents_from_archive,
    read_documents,
)

from services.common.errors import InvalidArgument
from services.topology.formats import import_fabric
from services.topology.formats.lldp import import_lldp

CAPTURES = pathlib.Path(__file__).parent / "lldpd_captures"


def big_document(size: int) -> str:
    """A well-formed neighbour table of about `size` characters: one real entry, over and over."""
    entry = json.loads((CAPTURES / "leaf0.neighbors.json").read_text())["lldp"]["interface"]["swp3"]
    one = json.dumps({"swp1": entry})
    count = size // (len(one) + 2) + 1
    return json.dumps({"lldp": {"interface": [{f"swp{i}": entry} for i in range(1, count + 1)]}})


def test_a_document_over_8_mib_is_refused_naming_it_before_it_is_parsed():
    text = big_document(61_000_000)
    started = time.perf_counter()
    with pytest.raises(InvalidArgument) as caught:
        import_lldp([("lldp.spine0.json", '{"lldp": {}}'), ("lldp.leaf0.json", text)])
    took = time.perf_counter() - started
    assert str(caught.value).startswith(
        f"documents['lldp.leaf0.json']: {len(text):,} characters; one node's document may have at most "
        f"{MAX_DOCUMENT_BYTES:,} (8 MiB"
    )
    assert took < 0.5, f"{took:.2f} s: parsed before it was refused"  # parsing it takes seconds
    with pytest.raises(InvalidArgument, match=r"documents\['leaf0'\]: 8,388,609 characters"):
        import_fabric("lldp", "", documents=[("leaf0", " " * (MAX_DOCUMENT_BYTES + 1))])


def test_documents_over_256_mib_together_are_refused_before_any_is_parsed():
    text = " " * MAX_DOCUMENT_BYTES  # one string, shared: the test holds 8 MiB
    documents = [(f"n{i}.json", text) for i in range(MAX_TOTAL_BYTES // MAX_DOCUMENT_BYTES + 1)]
    with pytest.raises(
        InvalidArgument, match=r"^documents: are 276,824,064 characters in all; .* 268,435,456"
    ):
        import_lldp(documents)


class _Spaces(io.RawIOBase):
    """`size` bytes of spaces, read as a file (an archive member that is never held whole)."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        count = min(len(buffer), self.left)
        buffer[:count] = b" " * count
        self.left -= count
        return count


def test_an_archive_member_over_8_mib_is_refused_by_the_size_it_declares():
    packed = io.BytesIO()
    with tarfile.open(fileobj=packed, mode="w:gz") as tar:
        member = tarfile.TarInfo("lldp/lldp.leaf0.json")
        member.size = MAX_DOCUMENT_BYTES + 1
        tar.addfile(member, _Spaces(member.size))
    assert len(packed.getvalue()) < 100_000  # spaces pack well: the archive itself is within its limit
    with pytest.raises(LldpError, match=r"archive: 'lldp/lldp.leaf0.json': 8,388,609 bytes; one node's"):
        documents_from_archive(packed.getvalue())


def test_files_over_the_limits_are_refused_by_their_size_before_they_are_read(tmp_path):
    tables = tmp_path / "lldp"
    tables.mkdir()
    (tables / "leaf0.json").write_text('{"lldp": {}}')
    with open(tables / "spine0.json", "wb") as sparse:  # 9 MiB that take no disk
        sparse.truncate(9 * 1024 * 1024)
    with pytest.raises(
        LldpError, match=re.escape(f"{tables / 'spine0.json'}']: 9,437,184 bytes; one node's")
    ):
        read_documents(str(tables))
    archive = tmp_path / "lldp.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(tables / "leaf0.json", "leaf0.json")
    os.truncate(archive, 65 * 1024 * 1024)  # still a tar (zeros end it), past 64 MiB
    with pytest.raises(
        LldpError, match=re.escape(f"{archive}: 68,157,440 bytes; an archive may have at most 67,108,864")
    ):
        read_documents(str(archive))
