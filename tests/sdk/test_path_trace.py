"""Learning a live flow's path hop by hop from the switches' own answers (`fabrictwin.path_trace`)."""

from __future__ import annotations

import pytest
from fabrictwin.errors import FailedPreconditionError, InvalidArgumentError
from fabrictwin.path_trace import LiveFlow, linux_route_get, trace_path
from fabrictwin.v1 import topology_pb2

from services.topology.formats.lldp import import_lldp, neighbour_documents
from services.topology.generators import leaf_spine
from services.topology.messages import link_message


def links_of_lab():
    """A 2-leaf, 2-spine, 4-host fabric as the LLDP import makes it (with interface names)."""
    fabric = import_lldp(neighbour_documents(leaf_spine(2, 2, 2)))
    return [link_message("lab", fabric, i) for i in range(fabric.num_links)]


FLOW = LiveFlow("host-0", "host-2", "10.1.0.2", "10.1.2.2", 49152)


def test_a_flow_is_followed_through_the_egress_each_switch_names():
    answers = {("host-0", ""): "eth0", ("leaf-0", "swp1"): "swp4", ("spine-1", "swp1"): "swp2",
               ("leaf-1", "swp4"): "swp1"}  # fmt: skip
    path = trace_path(links_of_lab(), FLOW, lambda node, flow, ingress: answers[(node, ingress)])
    assert path == ["leaf-0/p1<->host-0/p1", "spine-1/p1<->leaf-0/p4", "spine-1/p2<->leaf-1/p4",
                    "leaf-1/p1<->host-2/p1"]  # fmt: skip


def test_an_egress_that_is_no_link_and_a_routing_loop_are_refused():
    links = links_of_lab()
    with pytest.raises(FailedPreconditionError, match="out of swp9, which is no link of the fabric"):
        trace_path(links, FLOW, lambda node, flow, ingress: "eth0" if node == "host-0" else "swp9")
    bounce = {"host-0": "eth0", "leaf-0": "swp3", "spine-0": "swp1"}  # leaf-0 <-> spine-0 forever
    with pytest.raises(FailedPreconditionError, match="no arrival after"):
        trace_path(links, FLOW, lambda node, flow, ingress: bounce[node])


def test_a_fabric_without_interface_names_or_a_stranger_host_is_refused():
    with pytest.raises(InvalidArgumentError, match="keeps no interface names"):
        trace_path([topology_pb2.Link(node_a="fabrics/x/nodes/a", node_b="fabrics/x/nodes/b")], FLOW, None)
    stranger = LiveFlow("host-9", "host-2", "10.0.0.1", "10.0.0.2", 1)
    with pytest.raises(InvalidArgumentError, match="'host-9' is not a node"):
        trace_path(links_of_lab(), stranger, None)


def test_linux_route_get_reads_the_dev_of_ip_route_get_through_a_prefix(tmp_path):
    fake_ip = tmp_path / "ip"  # answers `ip -j -d link` with a plain port, `ip route get` with a route
    fake_ip.write_text(
        '#!/bin/sh\ncase "$*" in\n'
        '  *"link show"*) echo \'[{"ifname":"swp1","linkinfo":{"info_kind":"veth"}}]\' ;;\n'
        '  *) echo "10.1.2.2 from 10.1.0.2 via 10.2.0.1 dev swp4 uid 0" ;;\nesac\n'
    )
    fake_ip.chmod(0o755)
    route_get = linux_route_get(f"PATH={tmp_path}:$PATH")
    assert route_get("leaf-0", FLOW, "swp1") == "swp4"
    failing = linux_route_get("false &&")
    with pytest.raises(FailedPreconditionError, match="failed"):
        failing("leaf-0", FLOW, "")


# What iproute2 6.1 printed on a Linux leaf whose host ports are members of br0 (captured in the lab).
BRIDGED = {
    "ip route get 10.1.2.2 from 10.1.0.2 iif swp3 ipproto udp sport 49152 dport 4791": (
        "10.1.2.2 from 10.1.0.2 dev br0 \n    cache iif swp3 \n"
    ),
    "ip -j -d link show dev swp3": '[{"ifname":"swp3","linkinfo":{"info_kind":"veth"}}]',
    "ip -j -d link show dev br0": '[{"ifname":"br0","linkinfo":{"info_kind":"bridge","info_data":{}}}]',
    "ip -j neigh show 10.1.2.2 dev br0": (
        '[{"dst":"10.1.2.2","lladdr":"02:66:74:06:00:00","state":["PERMANENT"]}]'
    ),
    "bridge -j fdb show br br0": (
        '[{"mac":"02:66:74:06:00:00","ifname":"swp1","flags":[],"master":"br0","state":""},'
        '{"mac":"02:66:74:03:01:00","ifname":"swp1","flags":[],"master":"br0","state":"permanent"},'
        '{"mac":"01:80:c2:00:00:0e","ifname":"swp1","flags":["self"],"state":"permanent"},'
        '{"mac":"02:66:74:07:00:00","ifname":"swp2","flags":[],"master":"br0","state":""}]'
    ),
    "ip route get 10.1.0.2 from 10.1.2.2 iif br0 ipproto udp sport 49152 dport 4791": (
        "10.1.0.2 from 10.1.2.2 via 10.2.1.2 dev swp4 \n    cache iif br0 \n"
    ),
    "ip -j -d link show dev swp1": (
        '[{"ifname":"swp1","master":"br0","linkinfo":{"info_kind":"veth","info_slave_kind":"bridge"}}]'
    ),
    "ip -j -d link show dev swp4": '[{"ifname":"swp4","linkinfo":{"info_kind":"veth"}}]',
    "ip -j -d link show dev swp2": (
        '[{"ifname":"swp2","master":"br0","linkinfo":{"info_kind":"veth","info_slave_kind":"bridge"}}]'
    ),
}


def answering(answers):
    def run(node, command):
        if command not in answers:
            raise FailedPreconditionError(f"{node}: `{command}` failed: no such answer")
        return answers[command]

    return run


def test_a_route_out_of_a_bridge_leaves_by_the_member_its_forwarding_database_names():
    route_get = linux_route_get(runner=answering(BRIDGED))
    toward_h2 = LiveFlow("h0", "h2", "10.1.0.2", "10.1.2.2", 49152)
    assert route_get("leaf1", toward_h2, "swp3") == "swp1"
    # Arriving on a member port, a packet meets the IP layer at the bridge: `iif br0`.
    from_h2 = LiveFlow("h2", "h0", "10.1.2.2", "10.1.0.2", 49152)
    assert route_get("leaf1", from_h2, "swp1") == "swp4"


def test_an_svi_on_a_vlan_aware_bridge_resolves_by_the_vlans_forwarding_entry():
    answers = dict(BRIDGED)
    answers["ip route get 10.1.2.2 from 10.1.0.2 iif swp3 ipproto udp sport 49152 dport 4791"] = (
        "10.1.2.2 from 10.1.0.2 dev vlan10 \n"
    )
    answers["ip -j -d link show dev vlan10"] = (
        '[{"ifname":"vlan10","link":"br0","linkinfo":{"info_kind":"vlan","info_data":{"protocol":"802.1Q","id":10}}}]'
    )
    answers["ip -j neigh show 10.1.2.2 dev vlan10"] = '[{"dst":"10.1.2.2","lladdr":"02:66:74:07:00:00"}]'
    answers["bridge -j fdb show br br0"] = (
        '[{"mac":"02:66:74:07:00:00","ifname":"swp1","vlan":20,"master":"br0"},'
        '{"mac":"02:66:74:07:00:00","ifname":"swp2","vlan":10,"master":"br0"}]'
    )
    route_get = linux_route_get(runner=answering(answers))
    assert route_get("leaf1", LiveFlow("h0", "h3", "10.1.0.2", "10.1.2.2", 49152), "swp3") == "swp2"


def test_a_bond_resolves_to_its_active_member_and_a_hashing_bond_is_refused_by_name():
    answers = dict(BRIDGED)
    answers["bridge -j fdb show br br0"] = '[{"mac":"02:66:74:06:00:00","ifname":"bond1","master":"br0"}]'
    answers["ip -j -d link show dev bond1"] = (
        '[{"ifname":"bond1","linkinfo":{"info_kind":"bond","info_data":{"mode":"active-backup","active_slave":"swp6"}}}]'
    )
    toward_h2 = LiveFlow("h0", "h2", "10.1.0.2", "10.1.2.2", 49152)
    assert linux_route_get(runner=answering(answers))("leaf1", toward_h2, "swp3") == "swp6"
    answers["ip -j -d link show dev bond1"] = (
        '[{"ifname":"bond1","linkinfo":{"info_kind":"bond","info_data":{"mode":"802.3ad"}}}]'
    )
    answers["ip -j link show master bond1"] = (
        '[{"ifname":"swp5","operstate":"UP"},{"ifname":"swp6","operstate":"UP"}]'
    )
    with pytest.raises(
        FailedPreconditionError, match=r"bond1 spreads flows over swp5, swp6 by its own hash \(802.3ad\)"
    ):
        linux_route_get(runner=answering(answers))("leaf1", toward_h2, "swp3")


def test_a_neighbour_the_bridge_has_not_learnt_is_a_clear_error():
    answers = dict(BRIDGED)
    answers["bridge -j fdb show br br0"] = "[]"
    with pytest.raises(
        FailedPreconditionError, match=r"br0's forwarding database has no port for 02:66:74:06:00:00"
    ):
        linux_route_get(runner=answering(answers))(
            "leaf1", LiveFlow("h0", "h2", "10.1.0.2", "10.1.2.2", 49152), "swp3"
        )
