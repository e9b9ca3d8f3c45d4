"""The twin's subnet manager against real OpenSM 3.3.23 on the ibsim fabric simulator, entry for entry.

Each lab fabric is exported as an ibsim net file (as generated, and with its records and GUIDs
shuffled), routed by OpenSM, read back with ibnetdiscover and dump_fts, imported into the twin and
routed there with the same engine: the engine that configured the tables (OpenSM's fallback where it
refuses the fabric) and every entry must agree. So must the real dumps of ../shared/testdata, and a
running OpenSM's reroute after ibsim takes a cable down (tests/lab/ib_live.py) against the twin's
sweep. Skipped, with the reason, where ibsim cannot run (no root, a missing package); `make lab`
prints the same comparison as a table.
"""

from __future__ import annotations

import json
import pathlib
import re
import time

import numpy as np
import pytest

from services.common.errors import InvalidArgument
from services.topology.formats import import_fabric
from services.topology.formats.ibsim import export_ibsim
from services.topology.generators import leaf_spine
from services.topology.lfts_dump import parse_lfts_dump, resolve_lfts
from services.topology.routing import engine_named
from services.topology.routing.balance import node_guid_keys
from tests.lab.ib_compare import (
    DUMPS,
    KNOWN_GAPS,
    LAB_FABRICS,
    LIVE_CASES,
    MULTI_PORT_CAS,
    TESTDATA,
    compare_engine,
    compare_live,
    lab_net_file,
    opensm_tables,
    real_dump,
)
from tests.lab.ib_live import ReLink, Unlink, cable
from tests.lab.ib_opensm import IbLabError, OpenSMRun, lab_processes, run_opensm
from tests.real_like import cluster_like

pytestmark = pytest.mark.lab

FABRICS = [name + suffix for name in LAB_FABRICS for suffix in ("", "-shuffled")]


@pytest.fixture(scope="module")
def opensm_runs(workdir: pathlib.Path) -> dict[tuple[str, str], OpenSMRun]:
    """OpenSM runs shared by the tests of this module, by (fabric, engine), made on first use."""
    return {}


def opensm_run(runs: dict, workdir: pathlib.Path, fabric: str, engine: str) -> OpenSMRun:
    if (fabric, engine) not in runs:
        runs[fabric, engine] = run_opensm(lab_net_file(fabric), engine, workdir, fallback_ok=True)
    return runs[fabric, engine]


@pytest.mark.parametrize(
    ("fabric", "engine"),
    [
        pytest.param(f, e, marks=pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[f, e]))
        if (f, e) in KNOWN_GAPS
        else (f, e)
        for f in FABRICS
        for e in ("minhop", "updn")
    ],
)
def test_minhop_and_updn_equal_opensm_entry_for_entry(workdir, opensm_runs, fabric, engine):
    """updn without a root list: OpenSM's detected roots (or its fallback to minhop when it finds none)."""
    result = compare_engine(fabric, engine, workdir, opensm_run(opensm_runs, workdir, fabric, engine))
    assert result.dump_fts_equal, "the switches do not hold what opensm-lfts.dump says"
    assert result.entries > 0
    assert_same_engine(result)
    assert result.equal == result.entries, result.first_differences


def assert_same_engine(result) -> None:
    """OpenSM and the twin routed with the same engine; where it fell back, for the same reason."""
    assert result.twin_engine == result.opensm_engine, (result.twin_reason, result.opensm_errors)
    if result.twin_engine != result.engine and result.engine != "file":
        # OpenSM's words: its ERR codes, else the log line the twin quotes, else the twin's first clause
        codes = re.findall(r"ERR [0-9A-F]{4}", result.twin_reason)
        phrases = codes or re.findall(r'"([^"]+)"', result.twin_reason) or [result.twin_reason.split(" (")[0]]
        said = " ".join(result.opensm_errors) if codes else result.opensm_log
        for phrase in phrases:
            assert phrase in said, (phrase, result.twin_reason, said[-500:])


@pytest.mark.parametrize("fabric", FABRICS)
def test_ftree_equals_opensm_entry_for_entry(workdir, opensm_runs, fabric):
    """Full fat-trees and leaf-spines, parallel cables and missing hosts, in cabling order and shuffled;
    a quasi fat-tree OpenSM accepts; clusters it refuses (and routes with minhop, as the twin must)."""
    result = compare_engine(fabric, "ftree", workdir, opensm_run(opensm_runs, workdir, fabric, "ftree"))
    assert result.dump_fts_equal
    assert result.entries > 0
    assert_same_engine(result)
    assert result.equal == result.entries, (f"{result.fraction:.1%}", result.first_differences)


@pytest.mark.parametrize("fabric", FABRICS)
def test_opensms_ftree_chooses_within_the_twins_up_down_groups(workdir, opensm_runs, fabric):
    """The groups (not only the LFT choice): every port OpenSM's ftree wrote is one of the twin's."""
    run = opensm_run(opensm_runs, workdir, fabric, "ftree")
    imported = import_fabric("ibnetdiscover", run.ibnetdiscover)
    switches, theirs = opensm_tables(imported, run)
    routes = engine_named("ftree").compute(imported)
    port = imported.channel_port()
    for row, node in enumerate(switches.tolist()):
        for h in np.flatnonzero(theirs[row]).tolist():
            group = {int(port[c]) for c in routes.group(imported, node, h)}
            assert theirs[row, h] in group, (imported.node_names[node], h, theirs[row, h], group)


@pytest.mark.parametrize("engine", ["minhop", "updn", "ftree"])
def test_the_twins_tables_carry_as_many_shift_permutations_as_opensms(workdir, opensm_runs, engine):
    """On the shuffled k=8 fat-tree, in host name order and in ftree's routing order."""
    fabric = "fat-tree-k8-shuffled"
    result = compare_engine(
        fabric, engine, workdir, opensm_run(opensm_runs, workdir, fabric, engine), shifts=True
    )
    counts = result.shifts
    assert counts["of"] == 127
    for order in ("name_order", "ftree_order"):
        assert counts[f"twin_{order}"] == counts[f"opensm_{order}"], counts
    if engine == "ftree":  # what ftree is for: every shift contention-free in its own order
        assert counts["opensm_ftree_order"] == 127
    else:
        assert counts["opensm_ftree_order"] < 127


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


# -- real dumps ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["minhop", "updn", "ftree"])
@pytest.mark.parametrize(
    "path",
    [
        pytest.param(
            p, marks=pytest.mark.xfail(strict=True, raises=InvalidArgument, reason="CAs with several ports")
        )
        if p.name in MULTI_PORT_CAS
        else p
        for p in DUMPS
    ],
    ids=lambda p: p.name,
)
def test_real_dumps_route_as_opensm_routes_them(workdir, path, engine):
    """The public dumps of ../shared/testdata (ibtopotool's, ibsim's examples): same engine (OpenSM
    refuses every one of them as a fat-tree, each for its own reason, and updn finds no root in some),
    same entries."""
    run = run_opensm(real_dump(path), engine, workdir, fallback_ok=True)
    fabric = import_fabric("ibnetdiscover", run.ibnetdiscover)
    switches, theirs = opensm_tables(fabric, run)
    routes = engine_named(engine).compute(fabric)
    ours = np.stack([routes.lft_ports(node) for node in switches.tolist()])
    assert routes.engine_used == run.engine_used, (routes.fallback_reason, run.errors)
    assert ours.tolist() == theirs.tolist()


def test_the_real_dumps_are_there_to_compare():
    if not TESTDATA.is_dir():
        pytest.skip(f"{TESTDATA} is absent (the shared test data sits beside the project)")
    assert len(DUMPS) >= 9


# -- roots ---------------------------------------------------------------------------------------------


def test_updn_with_a_root_guid_list_equals_opensm_given_the_same_root_guid_file(workdir):
    """The cluster with a management switch above the spines: OpenSM finds spine-1 and the management
    switch as roots itself; given spine-0 alone in its `-a` root GUID file it routes otherwise (133
    entries), and the twin given the same GUID routes alike."""
    fabric = cluster_like(1)
    net = export_ibsim(fabric)
    root = int(node_guid_keys(fabric)[fabric.node_index("spine-0")])
    run = run_opensm(net, "updn", workdir, roots=[root])
    imported = import_fabric("ibnetdiscover", run.ibnetdiscover)
    switches, theirs = opensm_tables(imported, run)
    routes = engine_named("updn", roots=[root]).compute(imported)
    assert routes.roots_source == "given"
    assert [imported.node_names[n] for n in routes.roots.tolist()] == ["spine-0"]
    ours = np.stack([routes.lft_ports(node) for node in switches.tolist()])
    assert ours.tolist() == theirs.tolist()
    detected = engine_named("updn").compute(imported)
    assert sorted(imported.node_names[n] for n in detected.roots.tolist()) == ["mgmt", "spine-1"]
    assert (np.stack([detected.lft_ports(n) for n in switches.tolist()]) != theirs).sum() > 100


# -- a running OpenSM ------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["minhop", "updn", "ftree"])
@pytest.mark.parametrize("case", sorted(LIVE_CASES))
def test_a_running_opensm_and_the_twin_reroute_a_cable_going_down_and_back_alike(workdir, case, engine):
    """OpenSM routes and keeps running; ibsim takes a cable down (trap 128, heavy sweep: OpenSM keeps
    every entry still valid; ftree falls back to minhop where the fat-tree broke), then puts it back
    (ports in INIT: routed afresh). After each, every entry equals the twin's sweep of the same
    change, and so does the number of entries that changed."""
    make, ends = LIVE_CASES[case]
    if "net.2sw2path" in case and not TESTDATA.is_dir():
        pytest.skip(f"{TESTDATA} is absent")
    net = make()
    a, port, _, _ = cable(net, *ends)
    sweeps = compare_live(net, engine, workdir, [Unlink(a.node_id, port), ReLink(a.node_id, port)])
    for result in sweeps:
        assert result.twin_engine == result.opensm_engine, result.as_dict()
        assert result.equal == result.entries, result.as_dict()
        assert result.twin_changed == result.opensm_changed, result.as_dict()
    assert sweeps[1].opensm_changed > 0
