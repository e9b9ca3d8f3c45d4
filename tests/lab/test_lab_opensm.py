"""The twin's subnet manager against real OpenSM 3.3.23 on the ibsim fabric simulator, entry for entry.

Each lab fabric is exported as an ibsim net file (as generated, and with its records and GUIDs
shuffled), routed by OpenSM, read back with ibnetdiscover and dump_fts, imported into the twin and
routed there with the same engine. Skipped, with the reason, where ibsim cannot run (no root, a
missing package); `make lab` prints the same comparison as a table.
"""

from __future__ import annotations

import json
import os
import pathlib
import time

import numpy as np
import pytest

from services.common.errors import InvalidArgument
from services.topology.formats import import_fabric
from services.topology.formats.ibsim import export_ibsim
from services.topology.generators import leaf_spine
from services.topology.lfts_dump import parse_lfts_dump, resolve_lfts
from services.topology.routing import engine_named
from tests.lab.ib_compare import LAB_FABRICS, compare_engine, lab_net_file, opensm_tables
from tests.lab.ib_opensm import IbLabError, OpenSMRun, ibsim_lab_unavailable_reason, run_opensm

pytestmark = pytest.mark.lab

FABRICS = [name + suffix for name in LAB_FABRICS for suffix in ("", "-shuffled")]
FULL_FAT_TREES = [name for name in FABRICS if name.startswith("fat-tree")]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    reason = ibsim_lab_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    return tmp_path_factory.mktemp("ibsim")


@pytest.fixture(scope="module")
def opensm_runs(workdir: pathlib.Path) -> dict[tuple[str, str], OpenSMRun]:
    """OpenSM runs shared by the tests of this module, by (fabric, engine), made on first use."""
    return {}


def opensm_run(runs: dict, workdir: pathlib.Path, fabric: str, engine: str) -> OpenSMRun:
    if (fabric, engine) not in runs:
        runs[fabric, engine] = run_opensm(lab_net_file(fabric), engine, workdir)
    return runs[fabric, engine]


def lab_processes() -> list[int]:
    """Pids of processes this test process started through ibsim-run or ibsim (by IBSIM_SOCKNAME)."""
    marker = f"IBSIM_SOCKNAME=fabrictwin-{os.getpid()}-".encode()
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.parametrize("engine", ["minhop", "updn"])
@pytest.mark.parametrize("fabric", FABRICS)
def test_minhop_and_updn_equal_opensm_entry_for_entry(workdir, opensm_runs, fabric, engine):
    result = compare_engine(fabric, engine, workdir, opensm_run(opensm_runs, workdir, fabric, engine))
    assert result.dump_fts_equal, "the switches do not hold what opensm-lfts.dump says"
    assert result.entries > 0
    assert result.equal == result.entries, result.first_differences


# OpenSM's ftree numbers leaves by a BFS over switch "tuples" from the lowest-GUID leaf; the twin
# numbers them by GUID, which is the same order only when GUIDs follow the cabling (not yet built).
TUPLE_ORDER = pytest.mark.xfail(strict=True, reason="ftree leaf order by OpenSM's BFS tuples: not yet built")


@pytest.mark.parametrize(
    "fabric", [pytest.param(f, marks=TUPLE_ORDER) if f.endswith("shuffled") else f for f in FULL_FAT_TREES]
)
def test_ftree_equals_opensm_on_full_fat_trees(workdir, opensm_runs, fabric):
    result = compare_engine(fabric, "ftree", workdir, opensm_run(opensm_runs, workdir, fabric, "ftree"))
    assert result.dump_fts_equal
    assert result.equal == result.entries, (f"{result.fraction:.1%}", result.first_differences)


@pytest.mark.parametrize("fabric", [f for f in FABRICS if f not in FULL_FAT_TREES])
def test_where_ftree_differs_from_opensm_both_choose_within_the_same_up_down_group(
    workdir, opensm_runs, fabric
):
    """Leaf-spines (not full fat-trees): OpenSM's ftree choice is one of the twin's equal-cost ports."""
    run = opensm_run(opensm_runs, workdir, fabric, "ftree")
    imported = import_fabric("ibnetdiscover", run.ibnetdiscover)
    switches, theirs = opensm_tables(imported, run)
    routes = engine_named("ftree").compute(imported)
    port = imported.channel_port()
    for row, node in enumerate(switches.tolist()):
        for h in np.flatnonzero(theirs[row]).tolist():
            group = {int(port[c]) for c in routes.group(imported, node, h)}
            assert theirs[row, h] in group, (imported.node_names[node], h, theirs[row, h], group)


@pytest.mark.parametrize("fabric", FABRICS)
def test_the_file_engine_fed_opensms_dump_reproduces_it(workdir, opensm_runs, fabric):
    result = compare_engine(fabric, "file", workdir, opensm_run(opensm_runs, workdir, fabric, "minhop"))
    assert result.equal == result.entries > 0


def test_the_k8_comparison_of_three_engines_takes_under_a_minute(workdir):
    started = time.monotonic()
    for engine in ("minhop", "updn", "ftree"):
        compare_engine("fat-tree-k8-shuffled", engine, workdir)
    assert time.monotonic() - started < 60


def test_a_net_file_ibsim_rejects_is_an_error_naming_it_and_nothing_is_left_running(workdir):
    text = export_ibsim(leaf_spine(2, 1, 1))
    text = text.replace('"S-fab0000000000300"[1]', '"S-fab0000000000300"[9]', 1)  # leaf-0 has 2 ports
    with pytest.raises(IbLabError, match=r"ibsim rejected the net file fabric\.net"):
        run_opensm(text, "minhop", workdir, timeout_s=20)
    assert lab_processes() == []


def test_opensm_failing_to_route_with_the_engine_asked_for_is_an_error_quoting_its_log(workdir):
    # A ring of five switches is no fat-tree: OpenSM's ftree refuses it (and falls back to minhop).
    nodes = [{"name": f"s{i}", "kind": "SWITCH"} for i in range(5)]
    nodes += [{"name": "h0", "kind": "HOST"}, {"name": "h1", "kind": "HOST"}]
    links = [{"a": f"s{i}", "a_port": 1, "b": f"s{(i + 1) % 5}", "b_port": 2} for i in range(5)]
    links += [
        {"a": "s0", "a_port": 3, "b": "h0", "b_port": 1},
        {"a": "s2", "a_port": 3, "b": "h1", "b_port": 1},
    ]
    ring = import_fabric("json", json.dumps({"version": 1, "nodes": nodes, "links": links}))
    with pytest.raises(IbLabError, match=r"opensm did not route with ftree .*opensm\.log says"):
        run_opensm(export_ibsim(ring), "ftree", workdir, timeout_s=30)
    assert lab_processes() == []


def test_a_dump_whose_lids_do_not_match_the_fabric_is_an_error_naming_the_line(workdir, opensm_runs):
    run = opensm_run(opensm_runs, workdir, "leaf-spine-4x2", "minhop")
    other = import_fabric(
        "ibnetdiscover", opensm_run(opensm_runs, workdir, "fat-tree-k4", "minhop").ibnetdiscover
    )
    with pytest.raises(InvalidArgument) as err:
        resolve_lfts(other, parse_lfts_dump(run.lfts_dump))
    assert err.value.field.startswith("lfts_dump line ")
