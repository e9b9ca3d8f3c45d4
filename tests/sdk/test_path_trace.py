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
    fake_ip = tmp_path / "ip"
    fake_ip.write_text('#!/bin/sh\necho "10.1.2.2 from 10.1.0.2 via 10.2.0.1 dev swp4 uid 0"\n')
    fake_ip.chmod(0o755)
    route_get = linux_route_get(f"PATH={tmp_path}:$PATH")
    assert route_get("leaf-0", FLOW, "swp1") == "swp4"
    failing = linux_route_get("false &&")
    with pytest.raises(FailedPreconditionError, match="gave no route"):
        failing("leaf-0", FLOW, "swp1")
