"""The Ethernet mirror, proven on a real fabric: Linux namespaces, kernel ECMP, lldpd, node_exporter.

Through the real services (subprocesses) and the real `fabrictwin mirror` CLI: the lab is discovered
by LLDP, its counters mirrored while RoCEv2-like flows run, the ECMP pinning the kernel's hash made
is diagnosed from those counters, the flows are replayed as observed and under SPRAY and ADAPTIVE,
and a leaf uplink taken down shows DOWN on the fabric.
"""

from __future__ import annotations

import pytest

from services.stack import running_stack
from tests.lab.mirror_lab import INTERVAL_S, LINK_MBIT, run_mirror_lab
from tests.lab.netns_fabric import build_lab, lab_unavailable_reason

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def steps(tmp_path_factory):
    reason = lab_unavailable_reason()
    if reason is not None:
        pytest.skip(f"the namespace lab cannot run here: {reason}")
    workdir = tmp_path_factory.mktemp("mirror-lab")
    with build_lab(link_mbit=LINK_MBIT) as lab, running_stack(workdir / "stack") as stack:
        found = {}
        for step in run_mirror_lab(lab, stack, workdir):
            found[step["step"]] = step
        return found


def test_lldp_discovers_the_lab_nodes_kinds_ports_and_links(steps):
    found = steps["discover"]
    assert found["message"] == "imported fabrics/lab from LLDP: 4 switches, 4 hosts, 8 links"
    assert found["switches"] == ["leaf0", "leaf1", "spine0", "spine1"]
    assert found["hosts"] == ["h0", "h1", "h2", "h3"]
    assert found["links"] == sorted([
        "leaf0:swp1<->h0:eth0", "leaf0:swp2<->h1:eth0", "leaf1:swp1<->h2:eth0", "leaf1:swp2<->h3:eth0",
        "spine0:swp1<->leaf0:swp3", "spine0:swp2<->leaf1:swp3",
        "spine1:swp1<->leaf0:swp4", "spine1:swp2<->leaf1:swp4",
    ])  # fmt: skip
    assert found["speeds_gbps"] == [LINK_MBIT / 1000] and found["import_notes"] == []


def test_the_twin_holds_the_bytes_node_exporter_reported_within_one_percent(steps):
    found = steps["mirror"]
    assert found["ports_compared"] >= 6  # every switch port the flows crossed
    assert found["max_relative_error"] < 0.01
    exporter = found["uplink_bytes_exporter"]
    sent = {(f["src"], f["dst"]): f["wire_bytes"] for f in found["flows"]}
    # Both of leaf0's flows went up toward spine0; its other uplink carried LLDP frames only.
    assert exporter["leaf0/p3"] == pytest.approx(sent[("h0", "h2")] + sent[("h1", "h3")], rel=0.01)
    assert exporter["leaf0/p4"] < 50_000


def test_diagnose_names_the_pinned_hot_uplink_and_the_idle_one_from_real_counters(steps):
    """leaf0's spine0 uplink carries two flows (1 and 8 units: about 54%) while its spine1 uplink
    idles: pinned by the relative rule, though nothing runs above an absolute 80%."""
    found = steps["diagnose"]
    assert found["hot"] == ["leaf0/p3"]
    pinning = next(f for f in found["findings"] if f["kind"] == 1)
    assert "idle: leaf0/p4" in pinning["evidence"]
    measured = found["uplink_utilisation"]
    assert measured["leaf0/p3"] < 0.8 and measured["leaf0/p4"] < 0.01
    (skew,) = found["skew"]
    values = list(measured.values())
    assert skew["max_over_mean"] == pytest.approx(max(values) / (sum(values) / len(values)), rel=0.02)
    assert skew["pinned"] and skew["share_hot"] == 0.0


def test_the_replay_as_observed_matches_the_measured_uplinks_and_spray_spreads_them(steps):
    """Through both leaves (leaf1 bridged): paths learned from the kernels and bridges, each flow's
    rate inferred from the counters (1:2:4:8, not told), bytes and utilisation within 2% on every
    uplink."""
    found = steps["replay"]
    assert found["paths"]  # learned from the kernel, hop by hop
    assert all("spine0" in path[1] for key, path in found["paths"].items() if key.startswith(("h0", "h1")))
    assert [len(path) for path in found["paths"].values()] == [4, 4, 4, 4]  # host, up, down, host
    assert found["max_relative_error"] < 0.02, found
    assert found["max_utilisation_error"] < 0.02, found
    for flow, sent in found["sent_mbit"].items():
        assert found["inferred_mbit"][flow] == pytest.approx(sent, rel=0.02), (flow, found)
    rows = {row["label"]: row for row in found["comparison"]}
    assert rows["AS_OBSERVED"]["busiest_port"] == "leaf0/p3" and rows["AS_OBSERVED"]["idle_ports"] == 1
    spray = found["uplink_bytes_by_mode"]["SPRAY"]
    assert spray["leaf0/p3"] == pytest.approx(spray["leaf0/p4"], rel=0.01)
    assert rows["SPRAY"]["busiest_utilisation"] < rows["AS_OBSERVED"]["busiest_utilisation"] * 0.6


def test_the_drops_of_an_overloaded_uplinks_tbf_are_a_lossy_link_finding_as_many_as_tc_counted(steps):
    """Two hosts' worth of traffic pinned on one 100 Mb/s uplink: its tbf drops (tc counts them,
    node_exporter's qdisc collector reports them); the diagnosis, and the mirror's own after each
    poll, name the uplink lossy by its egress queue."""
    found = steps["overload"]
    assert found["tc_drops"] > 100, found  # the uplink was overloaded
    lossy = [f for f in found["findings"] if f["kind"] == 2]  # FINDING_KIND_LOSSY_LINK
    assert [f["ports"] for f in lossy] == [["leaf0/p3"]], found
    assert f"{found['tc_drops']} discarded by its egress queue" in lossy[0]["evidence"], found
    assert "egress queue overflowed" in lossy[0]["suggestion"]
    assert not found["mirror_diagnosis_errors"], found
    said = [f for f in found["mirror_findings"] if f["kind"] == "LOSSY_LINK"]
    assert said and all(f["ports"] == ["leaf0/p3"] for f in said), found


def test_a_leaf_uplink_taken_down_is_down_in_the_fabric_within_two_intervals(steps):
    found = steps["link_down"]
    assert found["state"] == 2  # LINK_STATE_DOWN
    assert found["seconds"] <= 2 * INTERVAL_S + 1.0
    # Both ends of the veth pair go down; the mirror says so at the first poll that saw either, naming
    # every end it saw down by then (the two switches' exporters are scraped a moment apart, so the
    # first poll may have seen one end or both: CI saw "spine1/p1 operationally down" alone once).
    link = found["link"]
    downs = [said for said in found["mirror_said"] if said["link"] == link and said["state"] == "DOWN"]
    assert downs, found["mirror_said"]
    ends = downs[0]["reason"].removesuffix(" operationally down").split(", ")
    assert ends and set(ends) <= {"leaf0/p4", "spine1/p1"}, downs[0]


def test_the_mirror_stops_cleanly_on_sigterm(steps):
    assert steps["stop"] == {"step": "stop", "exit_code": 0, "traceback": False}
