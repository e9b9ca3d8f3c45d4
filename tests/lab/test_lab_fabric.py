"""Smoke test of the namespace lab: LLDP as a switch shows it, node_exporter counters, kernel ECMP pinned by
source port, a link going down, and a teardown that leaves nothing behind (also after a failure)."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess

import pytest
from fabrictwin.path_trace import LiveFlow, linux_route_get

from tests.lab.netns_fabric import LabError, LeafSpineLab, lab_unavailable_reason

pytestmark = pytest.mark.lab

RATE_MBIT = 40
SECONDS = 3.0
LAB_PROGRAMS = ("lldpd", "prometheus-node", "node_exporter", "python", "ip", "unshare", "sh")
LLDP_BYTES_ALLOWANCE = 20_000  # LLDP frames (one per second per port) also cross the counted ports


@pytest.fixture
def lab_available() -> None:
    reason = lab_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)


def metric(text: str, name: str, device: str) -> float:
    """The value of `name{device="..."}` (the sample whose labels start with device) in /metrics text."""
    found = re.search(rf'^{name}{{device="{re.escape(device)}"[^}}]*}} (\S+)$', text, re.M)
    assert found, f"no {name} for {device} in the scrape"
    return float(found.group(1))


def lab_namespaces(prefix: str) -> list[str]:
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return [line.split()[0] for line in listing.splitlines() if line.startswith(f"{prefix}-")]


def lab_process_alive(pid: int) -> bool:
    """True if `pid` still runs one of the lab's programs (guards against pid reuse)."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    comm, state = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2]
    return state != "Z" and comm.startswith(LAB_PROGRAMS)


def check_leaf0_lldp(lab: LeafSpineLab) -> None:
    neighbors = lab.lldp_neighbors("leaf0")
    seen = {ifname: (n.name, n.port_id, n.port_id_type) for ifname, n in neighbors.items()}
    assert seen == {
        "swp1": ("h0", "eth0", "ifname"),
        "swp2": ("h1", "eth0", "ifname"),
        "swp3": ("spine0", "swp1", "ifname"),
        "swp4": ("spine1", "swp1", "ifname"),
    }
    for ifname in ("swp3", "swp4"):
        assert neighbors[ifname].capabilities.get("Router") is True
        assert neighbors[ifname].capabilities.get("Station") is False
    for ifname in ("swp1", "swp2"):
        assert neighbors[ifname].capabilities.get("Station") is True
        assert neighbors[ifname].capabilities.get("Router") is False
    chassis = json.loads(lab.lldp_chassis_json("leaf0"))["local-chassis"]["chassis"]
    assert list(chassis) == ["leaf0"]
    assert {"type": "Router", "enabled": True} in chassis["leaf0"]["capability"]


def check_pinned_flows(lab: LeafSpineLab) -> None:
    """Two flows the leaf's kernel hashes onto its spine0 uplink: swp3 carries both, swp4 nothing."""
    (port_a,) = lab.pick_source_ports("h0", "h2", "spine0", 1)
    (port_b,) = lab.pick_source_ports("h1", "h3", "spine0", 1)
    before = lab.scrape("leaf0")
    lab.start_udp_flows([("h0", "h2", port_a, RATE_MBIT), ("h1", "h3", port_b, RATE_MBIT)], SECONDS)
    results = lab.wait_flows()
    after = lab.scrape("leaf0")

    sent = sum(r.wire_bytes for r in results)
    assert all(r.send_errors == 0 and r.packets > 0 for r in results), results
    # The senders ran (a loaded machine paces them slower than asked: the counters, not the pace, are
    # what the rest compares).
    assert sent > 0.3 * 2 * RATE_MBIT * 1e6 / 8 * SECONDS
    swp3 = metric(after, "node_network_transmit_bytes_total", "swp3") - metric(
        before, "node_network_transmit_bytes_total", "swp3"
    )
    swp4 = metric(after, "node_network_transmit_bytes_total", "swp4") - metric(
        before, "node_network_transmit_bytes_total", "swp4"
    )
    drops = lab.qdisc_drops("leaf0", "swp3")
    assert swp3 == pytest.approx(sent, rel=0.03), (
        f"swp3 sent {swp3:.0f} B for {sent} B of flows, tbf drops {drops}"
    )
    assert swp4 < LLDP_BYTES_ALLOWANCE, f"swp4 carried {swp4:.0f} B: the flows were not pinned to spine0"


def check_bridged_leaf(lab: LeafSpineLab) -> None:
    """leaf1 bridges its hosts: the kernel routes to them out of br0, and path learning follows the
    neighbour table and the bridge's forwarding database to the member port, as the bridge does."""
    assert lab.ip_route_get("leaf1", lab.host_ip("h2"), lab.host_ip("h0"), "swp3", 49152) == "br0"
    route_get = linux_route_get({node: f"ip netns exec {lab.namespace(node)}" for node in lab.nodes})
    for host, port in (("h2", "swp1"), ("h3", "swp2")):
        flow = LiveFlow("h0", host, lab.host_ip("h0"), lab.host_ip(host), 49152)
        assert route_get("leaf1", flow, "swp3") == port
    back = LiveFlow("h2", "h0", lab.host_ip("h2"), lab.host_ip("h0"), 49152)
    assert route_get("leaf1", back, "swp1") in ("swp3", "swp4")  # routed with iif br0, out of an uplink
    assert set(lab.lldp_neighbors("leaf1")) == {"swp1", "swp2", "swp3", "swp4"}  # members, not br0


def check_link_down(lab: LeafSpineLab) -> None:
    lab.link_down("leaf0", "swp4")
    text = lab.scrape("leaf0")
    assert metric(text, "node_network_up", "swp4") == 0
    assert re.search(r'^node_network_info\{[^}]*device="swp4"[^}]*operstate="down"', text, re.M)
    assert lab.ip_route_get("leaf0", lab.host_ip("h2"), lab.host_ip("h0"), "swp1", 49152) == "swp3"


def test_lab_fabric_lldp_counters_ecmp_and_teardown(lab_available) -> None:
    with LeafSpineLab(link_mbit=100) as lab:
        check_leaf0_lldp(lab)
        assert 'node_network_transmit_bytes_total{device="swp3"}' in lab.scrape("leaf0")
        check_pinned_flows(lab)
        check_bridged_leaf(lab)
        check_link_down(lab)
        prefix, workdir, pids = lab.prefix, lab.workdir, lab.process_ids()
        assert len(pids) >= 8 + 4 + 4  # lldpd (and its privilege-separated child), exporters, sinks
    print(f"lab timings: {lab.timings}")
    assert lab_namespaces(prefix) == []
    assert [pid for pid in pids if lab_process_alive(pid)] == []
    assert workdir is not None and not workdir.exists()


def test_lab_tears_down_after_an_exception_in_the_body(lab_available) -> None:
    with pytest.raises(RuntimeError, match="boom"), LeafSpineLab() as lab:
        pids = lab.process_ids()
        raise RuntimeError("boom")
    assert lab_namespaces(lab.prefix) == []
    assert [pid for pid in pids if lab_process_alive(pid)] == []


def test_lab_tears_down_a_half_built_lab(lab_available, monkeypatch) -> None:
    def fail(self) -> None:
        raise LabError("exporters never answered (simulated)")

    monkeypatch.setattr(LeafSpineLab, "_wait_exporters", fail)
    lab = LeafSpineLab()
    with pytest.raises(LabError, match="simulated"):
        lab.build()
    assert lab_namespaces(lab.prefix) == []
    assert lab.workdir is not None and not lab.workdir.exists()
    assert lab.process_ids() == []
    assert [d.proc.pid for d in lab._daemons.values() if lab_process_alive(d.proc.pid)] == []
