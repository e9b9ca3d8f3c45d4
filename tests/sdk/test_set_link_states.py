"""SetLinkStates against a REAL topology server (port 0, SQLite): several links in one routing
version, events for each, and a bad change anywhere in the request changing nothing."""

from __future__ import annotations

import pytest
from fabrictwin import Client, InvalidArgumentError
from fabrictwin.v1 import topology_pb2

from services.topology.__main__ import build

from .conftest import BackgroundServer, config


@pytest.fixture(scope="module")
def topology(tmp_path_factory):
    with BackgroundServer(build, config("topology", str(tmp_path_factory.mktemp("fabrics")))) as server:
        yield server


def states(client: Client, fabric: str) -> dict[int, tuple[int, float]]:
    return {x.index: (x.state, x.bit_error_rate) for x in client.fabrics.links(fabric, page_size=1000)}


def test_several_links_change_in_one_routing_version_with_an_event_each(topology) -> None:
    with Client(topology=topology.address, timeout=60) as client:
        client.fabrics.create_fat_tree(4, fabric_id="batch")
        before = client.fabrics.get("batch").routing_version
        events = client.fabrics.watch("batch")
        reply = client.fabrics.set_link_states(
            "batch", [(20, "down", 0.0), (21, "degraded", 1e-7), (22, "up", 0.0)]
        )
        assert [x.index for x in reply.links] == [20, 21, 22]
        assert reply.routing.routing_version == before + 1 == client.fabrics.get("batch").routing_version
        got = states(client, "batch")
        assert got[20] == (topology_pb2.LINK_STATE_DOWN, 0.0)
        assert got[21] == (topology_pb2.LINK_STATE_DEGRADED, 1e-7)
        assert got[22] == (topology_pb2.LINK_STATE_UP, 0.0)  # was UP: not an event
        kinds = [(e.kind, e.link.index) for e in (next(events) for _ in range(3))]
        assert kinds == [
            (topology_pb2.FABRIC_EVENT_KIND_LINK_STATE_CHANGED, 20),
            (topology_pb2.FABRIC_EVENT_KIND_LINK_STATE_CHANGED, 21),
            (topology_pb2.FABRIC_EVENT_KIND_ROUTES_CHANGED, 0),
        ]
        again = client.fabrics.set_link_states("batch", [(20, "down", 0.0)])  # as it is: no new version
        assert again.routing.routing_version == before + 1


@pytest.mark.parametrize(
    ("name", "changes", "field"),
    [
        ("unknown-link", [(1, "down", 0.0), (9999, "down", 0.0)], "changes[1].name"),
        ("ber-above-one", [(1, "down", 0.0), (2, "degraded", 1.5)], "changes[1].bit_error_rate"),
        ("ber-when-up", [(1, "degraded", 1e-6), (2, "up", 1e-6)], "changes[1].bit_error_rate"),
        ("unknown-name", [(1, "down", 0.0), ("nowhere<->x", "down", 0.0)], "changes[1].name"),
        ("named-twice", [(1, "down", 0.0), (1, "up", 0.0)], "changes"),
        ("foreign", [(1, "down", 0.0), ("fabrics/other/links/1", "down", 0.0)], "changes[1].name"),
    ],
)
def test_a_bad_change_anywhere_refuses_the_request_naming_it_and_changes_nothing(
    topology, name, changes, field
) -> None:
    with Client(topology=topology.address, timeout=60) as client:
        client.fabrics.create_fat_tree(4, fabric_id=name)
        before = states(client, name), client.fabrics.get(name).routing_version
        with pytest.raises(InvalidArgumentError, match=field.replace("[", r"\[").replace("]", r"\]")):
            client.fabrics.set_link_states(name, changes)
        assert (states(client, name), client.fabrics.get(name).routing_version) == before
