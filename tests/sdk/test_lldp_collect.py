"""The mirror's LLDP collection by command (`[lldp] command`, `fabrictwin.lldp.collect_documents`): a
node's output is bounded as it is read, and a timed-out command is killed with what it started.

A document over 8 MiB is refused by its size anyway; read whole first, an output without end (a
command gone wrong) would take the mirror's memory before its timeout.
"""

from __future__ import annotations

import time

from fabrictwin.lldp import MAX_DOCUMENT_BYTES, collect_documents


def test_each_nodes_output_is_read_as_a_document_and_failures_are_said_per_node():
    documents, failed = collect_documents(
        {"leaf0": "echo '{\"lldp\": {}}'", "leaf1": "echo refused >&2; exit 3"}, timeout_s=10
    )
    assert documents == [("leaf0", '{"lldp": {}}\n')]
    assert failed == {"leaf1": "exited with 3: refused"}


def test_an_output_past_the_document_limit_is_stopped_there():
    # 20 MB, then the command ends: read whole before, it came back as a document of 20 MB.
    command = f"head -c {20_000_000} /dev/zero | tr '\\0' ' '"
    documents, failed = collect_documents({"leaf0": command}, timeout_s=30)
    assert documents == []
    assert failed == {"leaf0": f"more than {MAX_DOCUMENT_BYTES} bytes of output"}


def test_a_timed_out_command_is_killed_with_what_it_started():
    # The shell's background child keeps its stdout open: killing the shell alone left the
    # collection waiting for it (20 s).
    started = time.monotonic()
    documents, failed = collect_documents({"leaf0": "sleep 20 & sleep 20"}, timeout_s=1)
    assert time.monotonic() - started < 5
    assert documents == [] and failed == {"leaf0": "timed out after 1 s"}
