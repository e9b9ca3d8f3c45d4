import dataclasses
import datetime as dt
import secrets

import numpy as np
import pytest

from services.common.db import make_engine
from services.common.errors import AlreadyExists, NotFound
from services.topology.fabric import LinkState
from services.topology.generators import fat_tree, leaf_spine
from services.topology.store import FabricRecord, RoutingOutcome, TopologyStore

ARRAYS = [
    "node_kind", "node_tier", "node_radix", "node_group", "node_rail", "node_guid", "node_lid", "node_ip",
    "link_a", "link_port_a", "link_b", "link_port_b", "link_rate_bps", "link_latency_ns", "link_state",
    "link_ber",
]  # fmt: skip


def record_for(fabric, fabric_id="fab-one", **changes):
    now = dt.datetime.now(dt.UTC)
    record = FabricRecord(
        id=fabric_id,
        display_name="a fabric",
        spec={"fat_tree": {"k": 4}},
        imported_format=None,
        labels={"team": "net"},
        routing_engine="minhop",
        routing_version=1,
        host_count=fabric.num_hosts,
        switch_count=fabric.num_switches,
        link_count=fabric.num_links,
        create_time=now,
        update_time=now,
    )
    return dataclasses.replace(record, **changes)


def assert_same_fabric(a, b):
    for name in ARRAYS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
        assert getattr(a, name).dtype == getattr(b, name).dtype, name
    assert a.node_names == b.node_names
    assert a.link_names == b.link_names


def round_trip(store):
    fabric = fat_tree(16)
    fabric.link_state[7] = LinkState.DEGRADED
    fabric.link_ber[7] = 1e-6
    fabric.node_guid[3] = np.uint64(0xF452_1403_0012_3456)  # above 2^63: stored as its signed twin
    store.add(record_for(fabric), fabric)
    assert_same_fabric(store.load_fabric("fab-one"), fabric)
    got = store.get("fab-one")
    assert got.labels == {"team": "net"}
    assert got.spec == {"fat_tree": {"k": 4}}
    assert got.create_time.tzinfo is not None
    with pytest.raises(AlreadyExists):
        store.add(record_for(fabric), fabric)
    small = leaf_spine(2, 1, 1)
    store.add(record_for(small, "fab-two"), small)
    assert [r.id for r in store.list(0, 10)] == ["fab-one", "fab-two"]
    assert [r.id for r in store.list(1, 10)] == ["fab-two"]
    updated = store.set_routing("fab-two", "minhop", 2, dt.datetime.now(dt.UTC))
    assert updated.routing_version == 2
    routing_round_trip(store, fabric)
    store.delete("fab-one")
    with pytest.raises(NotFound):
        store.get("fab-one")
    with pytest.raises(NotFound):
        store.load_fabric("fab-one")
    with pytest.raises(NotFound):
        store.delete("fab-one")
    assert store.count() == 1


def routing_round_trip(store, fabric):
    """Root GUIDs, the reroute mode, how the tables were made and a sweep's kept LFTs, on "fab-one"."""
    roots = [0x0002_C903_0000_0010, 0xF452_1403_0012_3456]
    outcome = RoutingOutcome("minhop", "ERR AB26: CN port ...", (roots[1],), "given")
    got = store.set_routing("fab-one", "ftree", 2, dt.datetime.now(dt.UTC), outcome=outcome, roots=roots)
    assert (got.routing_roots, got.reroute, got.outcome) == (roots, "incremental", outcome)
    lft = np.random.default_rng(1).integers(0, 33, size=(320, 1024)).astype(np.uint8)
    later = RoutingOutcome("minhop", "ERR AB0D: ...", (), "")
    store.set_link_states("fab-one", [(5, int(LinkState.DOWN), 0.0)], 3, dt.datetime.now(dt.UTC), lft, later)
    kept = store.stored_lft("fab-one", 3)
    assert kept is not None and kept.dtype == np.uint8
    np.testing.assert_array_equal(kept, lft)
    assert store.stored_lft("fab-one", 2) is None  # only the version they were made for
    again = store.get("fab-one")
    assert again.routing_roots == roots and again.outcome == later  # the settings stay as they were
    store.set_routing("fab-one", "ftree", 4, dt.datetime.now(dt.UTC), reroute="fresh")
    assert store.stored_lft("fab-one", 4) is None and store.get("fab-one").reroute == "fresh"


def test_a_k16_fat_tree_survives_a_round_trip_through_sqlite(tmp_path):
    store = TopologyStore(make_engine(f"sqlite:///{tmp_path / 'topology.db'}"))
    store.create_tables()
    round_trip(store)
    # A new store on the same file (a restart) still has the fabric.
    again = TopologyStore(make_engine(f"sqlite:///{tmp_path / 'topology.db'}"))
    again.create_tables()
    assert again.get("fab-two").routing_version == 2


@pytest.mark.postgres
def test_a_k16_fat_tree_survives_a_round_trip_through_postgresql(postgres_url):
    store = TopologyStore(make_engine(postgres_url), table_prefix=f"t{secrets.token_hex(4)}_")
    store.create_tables()
    try:
        round_trip(store)
    finally:
        store.drop_tables()
        store.engine.dispose()


def test_link_states_labels_and_the_file_engines_dump_survive_a_new_store_on_the_same_database(tmp_path):
    url = f"sqlite:///{tmp_path / 'topology.db'}"
    store = TopologyStore(make_engine(url))
    store.create_tables()
    fabric = fat_tree(4)
    store.add(record_for(fabric), fabric)
    now = dt.datetime.now(dt.UTC)
    record = store.set_link_states("fab-one", [(7, int(LinkState.DEGRADED), 1e-6)], 2, now)
    assert record.routing_version == 2
    store.update_fabric("fab-one", {"display_name": "renamed", "labels": {"x": "y"}}, now)
    store.set_routing("fab-one", "file", 3, now, lfts_dump="Unicast lids ...\n")
    again = TopologyStore(make_engine(url))
    again.create_tables()
    loaded = again.load_fabric("fab-one")
    assert loaded.link_state[7] == LinkState.DEGRADED and loaded.link_ber[7] == 1e-6
    assert (loaded.link_state == LinkState.UP).sum() == fabric.num_links - 1
    got = again.get("fab-one")
    assert (got.display_name, got.labels, got.routing_engine, got.routing_version) == (
        "renamed",
        {"x": "y"},
        "file",
        3,
    )
    assert again.routing_file("fab-one") == "Unicast lids ...\n"
    with pytest.raises(NotFound):  # the first link exists: all or nothing
        again.set_link_states("fab-one", [(3, 2, 0.0), (999, 2, 0.0)], 4, now)
    assert again.get("fab-one").routing_version == 3  # nothing changed
    assert again.load_fabric("fab-one").link_state[3] == LinkState.UP
    again.delete("fab-one")
    assert again.routing_file("fab-one") is None
