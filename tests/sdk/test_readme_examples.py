"""The README's and the SDK README's examples run as written, in the order the READMEs give them,
against fresh services, and each shows what its text says it shows.

The convention: a fenced ```sh or ```python block right after a line `<!-- example: NAME -->` is an
example that runs as written (the comment is invisible on a rendered page). Untagged blocks are
illustrations: placeholders such as RUN, a live cluster, files the reader has and the test does not,
or commands that change the environment (`pip install`). `CHECKS` below holds each example's point,
by NAME; a tagged example without a check, or a check without its example, fails the test.

How they run, as a reader on a fresh checkout would run them: the four services as subprocesses
(`services.stack`, as `make run` starts them) with empty data, the SDK and CLI pointed at them by the
`FABRICTWIN_*_ADDRESS` variables that `Client.from_env()` and the CLI read; every example in
document order, README.md first, then clients/python/README.md (the SDK README says the main one
comes first), from the project root; ```sh blocks with `bash -e`, ```python blocks with this
interpreter. The examples share the services, so one that creates what an earlier one made must get
it or pick another id: that is the first failure this test was written for.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from services.stack import running_stack

pytestmark = pytest.mark.system

ROOT = pathlib.Path(__file__).resolve().parents[2]
READMES = [ROOT / "README.md", ROOT / "clients" / "python" / "README.md"]
TAGGED_BLOCK = re.compile(
    r"^<!-- example: (?P<name>[\w-]+) -->\n```(?P<language>sh|python)\n(?P<code>.*?)^```$", re.M | re.S
)


@dataclass(frozen=True)
class Example:
    name: str
    language: str
    code: str
    readme: str


def tagged_examples() -> list[Example]:
    """Every tagged block of the READMEs, in reading order."""
    return [
        Example(m["name"], m["language"], m["code"], path.relative_to(ROOT).as_posix())
        for path in READMES
        for m in TAGGED_BLOCK.finditer(path.read_text())
    ]


def run_example(example: Example, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = (
        ["bash", "-e", "-c", example.code]
        if example.language == "sh"
        else [sys.executable, "-c", example.code]
    )
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[str, subprocess.CompletedProcess[str]]:
    """Every tagged example run once, in order, against one fresh stack: name -> its process."""
    with running_stack(tmp_path_factory.mktemp("readme-stack")) as stack:
        env = {**os.environ, **stack.client_env}
        # The interpreter running the tests is the reader's venv (`source .venv/bin/activate` too).
        env["PATH"] = os.pathsep.join([str(pathlib.Path(sys.executable).parent), env.get("PATH", "")])
        return {example.name: run_example(example, env) for example in tagged_examples()}


def succeeded(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, (
        f"exit {done.returncode}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    )
    return done.stdout


def last_json_document(stdout: str) -> dict:
    """The JSON object the example printed last (after any tables)."""
    start = stdout.rindex("\n{\n") + 1 if not stdout.startswith("{\n") else 0
    return json.loads(stdout[start:])


# ---- each example's point ------------------------------------------------------------------------


def check_using_it(stdout: str) -> None:
    """README "Using it": 128 scattered ranks, 1 GiB: ECMP collides, ADAPTIVE meets the ideal."""
    comparison = last_json_document(stdout)
    rows = {row["label"]: row for row in comparison["rows"]}
    ecmp, adaptive = rows["ECMP"], rows["ADAPTIVE"]
    assert int(ecmp["makespan_ns"]) > 2.5 * int(adaptive["makespan_ns"])
    assert adaptive["slowdown_vs_ideal"] == pytest.approx(1.0, abs=0.03)
    assert ecmp["uplink_share_hot"] > 0 and ecmp["uplink_share_idle"] > 0.2  # hot and idle at once
    assert adaptive["uplink_share_idle"] == 0


def check_flow_steady(stdout: str) -> None:
    """README "FLOW, FLOW_STEADY or PACKET": the same ring at FLOW_STEADY and FLOW, within 1%."""
    decoder, documents = json.JSONDecoder(), []
    for start in (m.start() for m in re.finditer(r"^\[", stdout, re.M)):  # each --json list (after the table)
        documents.extend(decoder.raw_decode(stdout, start)[0])
    fidelities = [d["spec"]["fidelity"] for d in documents]
    assert fidelities == ["FIDELITY_FLOW_STEADY", "FIDELITY_FLOW"], fidelities
    steady, flow = (int(d["result"]["jobs"][0]["completion_ns"]) for d in documents)
    assert flow > 0 and steady == pytest.approx(flow, rel=0.01)
    assert any(note.startswith("FLOW_STEADY fidelity") for note in documents[0]["result"]["model_notes"])


def check_sdk_ecmp_vs_adaptive(stdout: str) -> None:
    """SDK README, scripting: ADAPTIVE faster than ECMP, and ECMP's uplinks uneven."""
    per_mode = {
        m["label"]: (float(m["busbw"]), float(m["skew"]))
        for m in re.finditer(
            r"^(?P<label>ECMP|ADAPTIVE) (?P<busbw>[\d.]+) Gb/s (?P<skew>[\d.]+)$", stdout, re.M
        )
    }
    assert set(per_mode) == {"ECMP", "ADAPTIVE"}, stdout
    (ecmp_busbw, ecmp_skew), (adaptive_busbw, adaptive_skew) = per_mode["ECMP"], per_mode["ADAPTIVE"]
    assert adaptive_busbw > 1.5 * ecmp_busbw
    assert ecmp_skew > 1.5 and adaptive_skew == pytest.approx(1.0, abs=0.05)
    faster = re.search(r"ADAPTIVE finishes ([\d.]+)x faster than ECMP", stdout)
    assert faster is not None and float(faster[1]) > 1.5, stdout


def check_sdk_packet_faults(stdout: str) -> None:
    """SDK README, packet by packet: Go-Back-N resends, DCQCN's CNPs, discards before the reroute."""
    completion_ns, retransmitted, cnp_sent, xmit_discards = map(int, stdout.split())
    assert completion_ns > 0
    assert cnp_sent > 0
    assert xmit_discards > 0
    assert retransmitted > xmit_discards  # each loss costs the packets in flight behind it


def check_sdk_errors(stdout: str) -> None:
    """SDK README, errors: prints exactly what the example's comment says."""
    assert stdout == "topology: fabrics/ft9 does not exist (NOT_FOUND)\n"


def check_routing(stdout: str) -> None:
    """README "Routing as the subnet manager routes": the lines its comments show (times aside)."""
    assert re.search(
        r"rerouted fabrics/ft8r: minhop routing version 2 \(incremental\): 66 LFT entries changed on 33 "
        r"switches \(280 with their equal-cost sets, on 40\), 0 unreachable host pairs, [\d.]+ ms\n"
        r"  most changed: pod0-edge0 31, pod0-agg0 4, pod0-edge1 1, pod0-edge2 1, pod0-edge3 1\n",
        stdout,
    ), stdout
    assert (
        "fabrics/ft8r: ftree->minhop routing version 3 (full): 215 LFT entries changed on 39 switches"
        in stdout
    )
    assert (
        "  ftree fell back to minhop, as OpenSM does: ERR AB09: Different number of upward port groups on "
        "switches 0xfab0000000008100 (pod0-edge0) (3) and 0xfab0000000008200 (pod0-edge1) (4); ERR AB0D: "
        "Fabric topology hasn't been identified as FatTree\n"
    ) in stdout
    assert "  roots (given): core-0, core-1\n" in stdout


CHECKS: dict[str, Callable[[str], None]] = {
    "using-it": check_using_it,
    "routing": check_routing,
    "flow-steady": check_flow_steady,
    "sdk-ecmp-vs-adaptive": check_sdk_ecmp_vs_adaptive,
    "sdk-packet-faults": check_sdk_packet_faults,
    "sdk-errors": check_sdk_errors,
}


def test_every_tagged_example_has_a_check_and_every_check_its_example():
    names = [example.name for example in tagged_examples()]
    assert len(names) == len(set(names)), names
    assert sorted(names) == sorted(CHECKS)


@pytest.mark.parametrize("name", list(CHECKS))
def test_the_example_runs_as_written_and_shows_its_point(outputs, name):
    CHECKS[name](succeeded(outputs[name]))
