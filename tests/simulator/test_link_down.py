"""A link going down at PACKET fidelity: packets on it are lost and recovered by Go-Back-N, the
counters name it, and the routing reaction's delay (subnet manager, routing protocol, fast
recovery) decides how long the collective stalls."""

from __future__ import annotations

import numpy as np
import pytest

from services.common.errors import FailedPrecondition, InvalidArgument
from services.simulator.packet.link_faults import down_sets
from services.simulator.runner import run_simulation
from services.simulator.spec import SimulationSpec
from tests.simulator.fabrics import fat_tree, with_links_down

GBPS = 1_000_000_000
FABRIC = fat_tree(4, rate_bps=100 * GBPS)
HOSTS = [FABRIC.node_names[h] for h in FABRIC.host_nodes]
SIZE = 4 << 20
DOWN_AT = 50_000  # ns, while the flows are running


def spec(faults=(), **more):
    return {
        "fabric": "fabrics/test",
        "fidelity": "PACKET",
        "jobs": [
            {
                "collective": "POINT_TO_POINT",
                "flows": [
                    {"source": HOSTS[0], "destination": HOSTS[15], "size_bytes": SIZE},
                    {"source": HOSTS[5], "destination": HOSTS[10], "size_bytes": SIZE},
                ],
            }
        ],
        "load_balancing": {"mode": "ECMP"},
        "window_bytes": 256 * 1024,
        "faults": list(faults),
        **more,
    }


def what_ifs(data: dict) -> dict:
    """The routes the topology service would give for each down set (min-hop, recomputed)."""
    s = SimulationSpec.from_dict(data)
    return {down: (with_links_down(FABRIC, down), 0.004) for down in down_sets(s, FABRIC)}


def run(data: dict):
    return run_simulation(data, FABRIC, what_if=what_ifs(data))


@pytest.fixture(scope="module")
def healthy():
    return run(spec())


@pytest.fixture(scope="module")
def busy_uplink(healthy) -> str:
    """A leaf -> spine link flow 0 crosses (ECMP pinned it there)."""
    flows = healthy.flows
    links = flows.path_links[flows.path_offsets[flows.route[0]] : flows.path_offsets[flows.route[0] + 1]]
    return FABRIC.link_names[int(links[1])]


def down(link: str, reroute: str, end_ns: int = 0, delay_ns: int = 0) -> dict:
    return {
        "link": link,
        "kind": "LINK_DOWN",
        "start_ns": DOWN_AT,
        "end_ns": end_ns,
        "reroute": reroute,
        "reroute_delay_ns": delay_ns,
    }


def by_name(outcome, counter: str) -> dict[str, int]:
    return dict(zip(outcome.channels.display_names, outcome.channels.counters[counter].tolist(), strict=True))


def test_a_failed_link_loses_what_it_carried_and_go_back_n_recovers_it(healthy, busy_uplink):
    outcome = run(spec([down(busy_uplink, "FAST_RECOVERY")]))
    assert outcome.packets.delivered_bytes == 2 * SIZE
    lost = outcome.packets.counters["lost_on_wire"] + outcome.packets.counters["xmit_discards"]
    assert lost > 0
    assert outcome.packets.retransmitted > 0
    assert outcome.jobs[0].counters["max_recovery_ns"] > 0
    downed = by_name(outcome, "link_downed")
    a, b = busy_uplink.split("<->")
    assert downed[f"{a}->{b}"] == 1  # LinkDownedCounter on the port that carried traffic
    assert outcome.makespan_ns > healthy.makespan_ns
    assert any("FAST_RECOVERY reroute takes effect 10000 ns later" in note for note in outcome.model_notes)


def test_the_routing_reaction_delay_orders_the_stall(busy_uplink):
    # Fast recovery (us) < subnet manager (measured recompute + sweep) < routing protocol (s); the
    # last two pinned shorter here so the test runs quickly, in the same order.
    fast = run(spec([down(busy_uplink, "FAST_RECOVERY")]))
    sm = run(spec([down(busy_uplink, "SUBNET_MANAGER", delay_ns=2_000_000)]))
    bgp = run(spec([down(busy_uplink, "ROUTING_PROTOCOL", delay_ns=10_000_000)]))
    assert fast.makespan_ns < sm.makespan_ns < bgp.makespan_ns
    # Until the reroute, the flow on the dead link makes no progress: completion >= down + delay.
    assert sm.makespan_ns > DOWN_AT + 2_000_000
    assert bgp.makespan_ns > DOWN_AT + 10_000_000
    # Packets routed to the dead port before the reroute are discarded there (PortXmitDiscards).
    assert bgp.packets.counters["xmit_discards"] >= sm.packets.counters["xmit_discards"] > 0


def test_the_subnet_manager_delay_defaults_to_the_measured_recompute_plus_the_sweep(busy_uplink):
    outcome = run(spec([down(busy_uplink, "SUBNET_MANAGER")]))
    assert any("SUBNET_MANAGER reroute takes effect 54000000 ns later" in n for n in outcome.model_notes)
    assert any("measured recompute 4.00 ms" in n for n in outcome.model_notes)
    assert outcome.makespan_ns > DOWN_AT + 54_000_000


def test_a_link_that_comes_back_is_used_again(busy_uplink):
    back_at = DOWN_AT + 1_000_000
    outcome = run(spec([down(busy_uplink, "ROUTING_PROTOCOL", end_ns=back_at, delay_ns=50_000_000)]))
    # The link returns long before the protocol would reroute: traffic resumes over it.
    assert outcome.makespan_ns < DOWN_AT + 50_000_000
    assert outcome.makespan_ns > back_at
    assert outcome.packets.delivered_bytes == 2 * SIZE
    a, b = busy_uplink.split("<->")
    assert by_name(outcome, "link_downed")[f"{a}->{b}"] == 1


def test_every_mode_delivers_everything_around_a_failed_link(busy_uplink):
    for mode in ("ADAPTIVE", "SPRAY"):
        data = spec([down(busy_uplink, "FAST_RECOVERY")], load_balancing={"mode": mode})
        outcome = run(data)
        assert outcome.packets.delivered_bytes == 2 * SIZE, mode
        assert np.all(outcome.flows.finish_ns > 0), mode


@pytest.mark.parametrize(
    ("fault", "field"),
    [
        ({"link": "0", "kind": "LINK_DOWN", "start_ns": 10}, "faults[0].reroute"),
        (
            {"link": "0", "kind": "BIT_ERRORS", "bit_error_rate": 1e-9, "reroute": "FAST_RECOVERY"},
            "faults[0].reroute",
        ),
        ({"link": "no-such-link", "kind": "LINK_DOWN", "reroute": "FAST_RECOVERY"}, "faults[0].link"),
        (
            {"link": "0", "kind": "LINK_DOWN", "start_ns": 10**9, "reroute": "FAST_RECOVERY"},
            "faults[0].start_ns",
        ),
        (
            {"link": "0", "kind": "LINK_DOWN", "reroute": "FAST_RECOVERY", "reroute_delay_ns": -1},
            "faults[0].reroute_delay_ns",
        ),
    ],
)
def test_faults_that_cannot_work_are_refused_naming_the_field(fault, field):
    with pytest.raises(InvalidArgument) as caught:
        run_simulation(spec([fault], time_limit_ns=10**8), FABRIC, what_if={})
    assert caught.value.field == field


def test_a_link_down_without_its_what_if_routes_is_a_failed_precondition(busy_uplink):
    with pytest.raises(FailedPrecondition, match="what-if"):
        run_simulation(spec([down(busy_uplink, "FAST_RECOVERY")]), FABRIC)


def test_a_host_link_down_for_good_is_refused_naming_it():
    host_link = {
        "link": "host-0<->leaf-0",
        "kind": "LINK_DOWN",
        "start_ns": DOWN_AT,
        "reroute": "FAST_RECOVERY",
    }
    with pytest.raises(InvalidArgument, match="set end_ns") as caught:
        run(spec([host_link]))
    assert caught.value.field == "faults[0].link"


def test_a_host_link_that_flaps_stalls_its_flow_until_it_is_back(healthy):
    back_at = DOWN_AT + 3_000_000
    flap = {
        "link": "host-0<->leaf-0",
        "kind": "LINK_DOWN",
        "start_ns": DOWN_AT,
        "end_ns": back_at,
        "reroute": "FAST_RECOVERY",
    }
    outcome = run(spec([flap]))
    assert outcome.packets.delivered_bytes == 2 * SIZE
    assert outcome.makespan_ns > back_at
    assert any("no route around link" in note for note in outcome.model_notes)
