"""Point-to-point flows pinned to a path (`path`, `path_links`), given a UDP source port or a rate cap:
at FLOW and PACKET fidelity, in every load-balancing mode, and refused at StartSimulation when the
fabric cannot carry them."""

from __future__ import annotations

import dataclasses
import itertools
import math

import grpc
import numpy as np
import pytest
from fabrictwin.specs import point_to_point_flow, point_to_point_job, simulation_spec
from fabrictwin.v1 import common_pb2, simulation_pb2, topology_pb2, topology_pb2_grpc

from services.common.errors import InvalidArgument
from services.simulator.ecmp_hash import ecmp_next_hop, flow_hash, pack_five_tuples, switch_seeds
from services.simulator.flow.model import max_min_rates
from services.simulator.packet.link_faults import down_sets
from services.simulator.runner import run_simulation
from services.simulator.spec import SimulationSpec
from services.simulator.validation import validate_spec
from services.simulator.workload import build_workload, place_jobs
from tests.simulator import test_service
from tests.simulator.fabrics import HOST, SWITCH, build_snapshot, fat_tree, leaf_spine, with_links_down

GBPS = 1_000_000_000
RATE = 100 * GBPS
FT = fat_tree(4, rate_bps=RATE, latency_ns=500)  # host h on leaf h // 2, two leaves and spines a pod
LS = leaf_spine(2, 2, 4, rate_bps=RATE, latency_ns=500)  # hosts 0-3 on leaf-0, 4-7 on leaf-1
MIB = 1 << 20
MTU, HEADER = 4096, 82  # the packet engine's defaults (RoCEv2)

# host-0 to host-4 (pod 0 to pod 1) through spine-1 and core-3, and a loop-free detour through both
# of pod 0's spines (not a shortest path).
CROSS_POD = ["host-0", "leaf-0", "spine-1", "core-3", "spine-3", "leaf-2", "host-4"]
DETOUR = ["host-0", "leaf-0", "spine-0", "leaf-1", "spine-1", "core-2", "spine-3", "leaf-3", "host-6"]


def flow(source, destination, size, **options):
    return {"source": source, "destination": destination, "size_bytes": size, **options}


def spec(flows, mode="ECMP", fidelity="FLOW", **settings):
    lb = {"mode": mode, **({"flowlet_gap_ns": 2000} if mode == "FLOWLET" else {})}
    job = {"collective": "POINT_TO_POINT", "flows": flows, **settings.pop("job", {})}
    return {"fabric": "fabrics/test", "fidelity": fidelity, "jobs": [job], "load_balancing": lb, **settings}


def channels_along(snapshot, nodes):
    """The channels of a path given as node names (one link between each pair)."""
    index = {name: i for i, name in enumerate(snapshot.node_names)}
    source, target = snapshot.channel_source(), snapshot.channel_target()
    return [
        int(np.flatnonzero((source == index[u]) & (target == index[v]))[0])
        for u, v in itertools.pairwise(nodes)
    ]


def link_names_along(snapshot, nodes):
    return [snapshot.link_names[c // 2] for c in channels_along(snapshot, nodes)]


def channel_bytes(outcome):
    return dict(zip(outcome.channels.channels.tolist(), outcome.channels.bytes.tolist(), strict=True))


def channel_flows(outcome):
    return dict(zip(outcome.channels.channels.tolist(), outcome.channels.flows.tolist(), strict=True))


def flow_links(outcome, f):
    route = int(outcome.flows.route[f])
    return outcome.flows.path_links[outcome.flows.path_offsets[route] : outcome.flows.path_offsets[route + 1]]


def wire_bytes(size):
    return size + -(-size // MTU) * HEADER


MODES = ["ECMP", "ADAPTIVE", "SPRAY"]
PACKET_MODES = [*MODES, "FLOWLET"]


# -- FLOW fidelity ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("by", ["path", "path_links"])
def test_a_pinned_flow_keeps_its_path_whatever_the_mode(mode, by):
    pinned = CROSS_POD if by == "path" else link_names_along(FT, CROSS_POD)
    outcome = run_simulation(spec([flow("host-0", "host-4", 3 * MIB, **{by: pinned})], mode), FT)
    path = channels_along(FT, CROSS_POD)
    assert channel_bytes(outcome) == dict.fromkeys(path, wire_bytes(3 * MIB))  # nothing anywhere else
    assert set(channel_flows(outcome).values()) == {1}
    assert flow_links(outcome, 0).tolist() == [c // 2 for c in path]  # in order from the source
    # One path: 3 MiB and its packets' headers at the link rate plus six hops of 500 ns.
    assert outcome.jobs[0].completion_ns == math.ceil(wire_bytes(3 * MIB) * 8 / 100) + 6 * 500
    assert any("1 of 1 point-to-point flows pinned" in note for note in outcome.model_notes)


def test_two_flows_pinned_to_one_uplink_share_it_while_adaptive_spreads_them_over_both():
    size = 4 * MIB
    flows = [flow("host-0", "host-4", size), flow("host-1", "host-5", size)]
    uplinks = channels_along(LS, ["leaf-0", "spine-0"]) + channels_along(LS, ["leaf-0", "spine-1"])
    pinned = [dict(f, path=[f["source"], "leaf-0", "spine-1", "leaf-1", f["destination"]]) for f in flows]
    together = run_simulation(spec(pinned, "ADAPTIVE"), LS)
    spread = run_simulation(spec(flows, "ADAPTIVE"), LS)
    on = channel_bytes(together)
    assert uplinks[0] not in on and on[uplinks[1]] == 2 * wire_bytes(size)  # the other carries nothing
    assert channel_flows(together)[uplinks[1]] == 2
    # Each gets half of the uplink: 2 x S (on the wire) over the link rate, plus four hops.
    assert together.jobs[0].completion_ns == pytest.approx(2 * wire_bytes(size) * 8 / 100 + 4 * 500, rel=1e-3)
    assert (together.flows.finish_ns == together.flows.finish_ns[0]).all()
    assert [channel_bytes(spread)[c] for c in uplinks] == [wire_bytes(size)] * 2
    assert spread.jobs[0].completion_ns == pytest.approx(wire_bytes(size) * 8 / 100 + 4 * 500, rel=1e-3)


@pytest.mark.parametrize(("size", "gbps"), [(3 * MIB + 5, 12.5), (1_000_000, 0.8), (MIB, 99.0)])
def test_a_rate_capped_flow_completes_in_size_over_its_rate(size, gbps):
    outcome = run_simulation(spec([flow("host-0", "host-5", size, rate_gbps=gbps)], "ADAPTIVE"), LS)
    closed_form = wire_bytes(size) * 8 / gbps + 4 * 500  # ns: the wire bytes at the cap, plus four hops
    assert outcome.jobs[0].completion_ns == pytest.approx(closed_form, rel=1e-3)
    assert abs(outcome.jobs[0].completion_ns - closed_form) <= 1
    assert outcome.jobs[0].ideal_completion_ns == outcome.jobs[0].completion_ns  # the ideal knows the cap
    assert any("capped at their rate_gbps" in note for note in outcome.model_notes)


def test_a_cap_is_a_bound_of_the_fair_sharing_so_the_others_take_what_it_leaves():
    # Two flows out of host-0 share its 100 Gb/s link; one is capped at 10: the other gets 90, not 50
    # (clipping max-min rates afterwards would leave it at 50).
    size = 9 * MIB
    flows = [flow("host-0", "host-4", size, rate_gbps=10), flow("host-0", "host-5", size)]
    outcome = run_simulation(spec(flows, "ADAPTIVE"), LS)
    capped, free = outcome.flows.finish_ns.tolist()
    assert free == pytest.approx(wire_bytes(size) * 8 / 90 + 2000, rel=1e-3)
    # Once the free flow is done the capped one stays at its cap.
    assert capped == pytest.approx(wire_bytes(size) * 8 / 10 + 2000, rel=1e-3)
    rates = max_min_rates(
        np.array([0, 1, 1]),
        np.array([0, 0, 1]),
        np.ones(3),
        np.array([100.0, 30.0]),
        2,
        np.array([10, np.inf]),
    )
    assert rates.tolist() == [10.0, 30.0]


@pytest.mark.parametrize("qps", [1, 2])
def test_a_pinned_and_capped_flow_beside_a_balanced_one(qps):
    size = 2 * MIB
    path = ["host-0", "leaf-0", "spine-0", "leaf-1", "host-4"]
    flows = [flow("host-0", "host-4", size, path=path, rate_gbps=20), flow("host-1", "host-5", size)]
    outcome = run_simulation(spec(flows, "SPRAY", job={"qps_per_connection": qps}), LS)
    first = np.flatnonzero(outcome.flows.source == 0)  # the pinned flow's QP flows
    assert outcome.flows.finish_ns[first].max() == pytest.approx(
        wire_bytes(size) * 8 / 20 + 4 * 500, rel=1e-3
    )
    for f in first:
        assert flow_links(outcome, f).tolist() == [c // 2 for c in channels_along(LS, path)]
    # The other flow is sprayed over both uplinks; the pinned one only on spine-0's.
    on = channel_bytes(outcome)
    assert on[channels_along(LS, ["leaf-0", "spine-1"])[0]] == wire_bytes(size) // 2
    assert on[channels_along(LS, ["leaf-0", "spine-0"])[0]] == wire_bytes(size) + wire_bytes(size) // 2


def test_link_bytes_are_exactly_the_sizes_of_the_flows_pinned_across_them():
    paths = {
        ("host-0", "host-4"): CROSS_POD,
        ("host-1", "host-6"): ["host-1", *DETOUR[1:]],  # not a shortest path
        ("host-2", "host-3"): ["host-2", "leaf-1", "host-3"],
        ("host-5", "host-0"): ["host-5", "leaf-2", "spine-2", "core-1", "spine-0", "leaf-0", "host-0"],
        ("host-9", "host-14"): ["host-9", "leaf-4", "spine-4", "core-0", "spine-6", "leaf-7", "host-14"],
    }
    sizes = [3 * MIB + 1, 1_234_567, 777, 5 * MIB, 2 * MIB - 3]
    flows = [
        flow(s, d, size, **({"path": p} if i % 2 else {"path_links": link_names_along(FT, p)}))
        for i, ((s, d), p, size) in enumerate(zip(paths, paths.values(), sizes, strict=True))
    ]
    outcome = run_simulation(spec(flows, "ADAPTIVE", job={"iterations": 2}), FT)
    expected, crossing = {}, {}
    for p, size in zip(paths.values(), sizes, strict=True):
        for c in channels_along(FT, p):
            expected[c] = expected.get(c, 0) + 2 * wire_bytes(size)  # two repetitions
            crossing[c] = crossing.get(c, 0) + 2
    assert channel_bytes(outcome) == expected
    assert channel_flows(outcome) == crossing
    workload = build_workload(SimulationSpec.from_dict(spec(flows, "ADAPTIVE")), FT)
    assert workload.pinned_lengths.tolist() == [len(p) - 1 for p in paths.values()]
    # The detour's eight hops show in its latency: it finishes after its wire bytes at the link rate
    # plus 8 x 500 ns (no other flow shares its links).
    assert outcome.flows.finish_ns[1] == math.ceil(wire_bytes(1_234_567) * 8 / 100) + 8 * 500


@pytest.mark.parametrize(
    ("fidelity", "mode"), [("FLOW", mode) for mode in MODES] + [("PACKET", mode) for mode in PACKET_MODES]
)
def test_pinning_every_flow_where_ecmp_hashed_it_reproduces_the_ecmp_run_in_any_mode(fidelity, mode):
    # The twin's "as observed" replay: paths learnt from the fabric (here, from an ECMP run) pinned.
    flows = [flow(f"host-{h}", f"host-{(h + 5) % 16}", MIB + 1000 * h) for h in range(16)]
    observed = run_simulation(spec(flows, "ECMP", fidelity, seed=7), FT)
    replay = [
        dict(f, path_links=[FT.link_names[int(link)] for link in flow_links(observed, i)])
        for i, f in enumerate(flows)
    ]
    pinned = run_simulation(spec(replay, mode, fidelity, seed=7), FT)
    assert pinned.flows.finish_ns.tolist() == observed.flows.finish_ns.tolist()
    assert channel_bytes(pinned) == channel_bytes(observed)
    assert np.array_equal(pinned.series.bytes, observed.series.bytes)
    if fidelity == "PACKET":
        assert dataclasses.astuple(pinned.packets) == dataclasses.astuple(observed.packets)


def test_a_given_udp_source_port_is_what_ecmp_hashes_and_what_the_result_reports():
    ports = list(range(50_000, 50_016))
    flows = [flow("host-0", "host-13", MIB, udp_source_port=p) for p in ports]
    outcome = run_simulation(spec(flows, "ECMP", job={}, seed=2), FT)
    assert outcome.flows.udp_source_port.tolist() == ports
    # Each flow's path is the one the hash of its 5-tuple, with the port given, picks at every hop.
    seeds = switch_seeds(0, FT.num_nodes)
    taken = set()
    for i, port in enumerate(ports):
        key = pack_five_tuples(FT.host_ip[[0]], FT.host_ip[[13]], np.array([port]))
        node, hops = FT.host_nodes[0], []
        while node != FT.host_nodes[13]:
            group = FT.next_channels(int(node), 13)
            channel = int(group[ecmp_next_hop(len(group), flow_hash("MURMUR3", key, seeds[node]))[0]])
            hops.append(channel // 2)
            node = FT.channel_target()[channel]
        assert flow_links(outcome, i).tolist() == hops
        taken.add(tuple(hops))
    assert len(taken) > 1  # the port moves flows between paths
    # Without the option, the QP number decides (49152 + QPN mod 16384).
    derived = run_simulation(spec([flow("host-0", "host-13", MIB)], "ECMP"), FT)
    assert 49152 <= int(derived.flows.udp_source_port[0]) < 65536


# -- PACKET fidelity --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", PACKET_MODES)
def test_pinned_flows_cross_only_their_paths_packet_by_packet(mode):
    sizes = [MIB, 300_000]
    flows = [
        flow("host-0", "host-4", sizes[0], path=CROSS_POD),
        flow("host-1", "host-6", sizes[1], path_links=link_names_along(FT, ["host-1", *DETOUR[1:]])),
    ]
    outcome = run_simulation(spec(flows, mode, "PACKET"), FT)
    assert outcome.packets.dropped == 0
    expected = {}
    for p, size in zip([CROSS_POD, ["host-1", *DETOUR[1:]]], sizes, strict=True):
        for c in channels_along(FT, p):
            expected[c] = expected.get(c, 0) + wire_bytes(size)
    assert channel_bytes(outcome) == expected
    assert set(channel_flows(outcome).values()) == {1}
    assert outcome.packets.out_of_order == 0  # one path per flow: nothing to reorder
    assert all(job.completion_ns >= job.ideal_completion_ns - 1 for job in outcome.jobs)  # it rounds up


@pytest.mark.parametrize("mode", ["SPRAY", "ADAPTIVE"])
def test_a_pinned_flow_stays_on_its_uplink_while_an_unpinned_one_is_balanced_beside_it(mode):
    path = ["host-0", "leaf-0", "spine-1", "leaf-1", "host-4"]
    flows = [flow("host-0", "host-4", MIB, path=path), flow("host-1", "host-5", MIB)]
    outcome = run_simulation(spec(flows, mode, "PACKET"), LS)
    on = channel_bytes(outcome)
    up0, up1 = (channels_along(LS, ["leaf-0", f"spine-{s}"])[0] for s in (0, 1))
    down0 = channels_along(LS, ["spine-0", "leaf-1"])[0]
    # Only the unpinned flow reaches spine-0; the pinned one adds all of its bytes to spine-1's side.
    assert 0 < on[up0] == on[down0] < wire_bytes(MIB)
    assert on[up0] + on[up1] == 2 * wire_bytes(MIB)
    assert flow_links(outcome, 0).tolist() == [c // 2 for c in channels_along(LS, path)]
    assert len(flow_links(outcome, 1)) == 0  # balanced per packet: no one path to report


def test_two_flows_pinned_to_one_uplink_share_it_packet_by_packet():
    size = 256 * 1024  # small enough that the shared uplink's queue never overflows its 1 MiB
    flows = [flow("host-0", "host-4", size), flow("host-1", "host-5", size)]
    pinned = [dict(f, path=[f["source"], "leaf-0", "spine-1", "leaf-1", f["destination"]]) for f in flows]
    together = run_simulation(spec(pinned, "ADAPTIVE", "PACKET"), LS)
    spread = run_simulation(spec(flows, "ADAPTIVE", "PACKET"), LS)
    assert together.packets.dropped == spread.packets.dropped == 0
    on = channel_bytes(together)
    assert channels_along(LS, ["leaf-0", "spine-0"])[0] not in on
    assert on[channels_along(LS, ["leaf-0", "spine-1"])[0]] == 2 * wire_bytes(size)
    assert [channel_bytes(spread)[channels_along(LS, ["leaf-0", f"spine-{s}"])[0]] > 0 for s in (0, 1)] == [
        True,
        True,
    ]
    # The shared uplink serialises both flows, then the last packet crosses two more hops: about
    # twice the time of the spread run's transfer.
    serialise = 2 * wire_bytes(size) * 8 / 100 + 4 * 500 + 3 * (MTU + HEADER) * 8 / 100
    assert together.jobs[0].completion_ns == pytest.approx(serialise, rel=0.01)
    assert together.jobs[0].completion_ns > 1.8 * spread.jobs[0].completion_ns - 4 * 500


@pytest.mark.parametrize("transport", [{}, {"dcqcn": True}, {"window_bytes": 256 * 1024}])
@pytest.mark.parametrize("gbps", [10.0, 37.5])
def test_a_rate_capped_flow_is_paced_at_its_cap_packet_by_packet(transport, gbps):
    size = 4 * MIB
    outcome = run_simulation(
        spec([flow("host-0", "host-5", size, rate_gbps=gbps)], "ADAPTIVE", "PACKET", **transport), LS
    )
    packets, wire = size // MTU, MTU + HEADER
    # The limiter spaces the packets (wire bytes) at the cap; the last one then crosses four hops at
    # the line rate, each a serialisation and 500 ns.
    closed_form = (packets - 1) * wire * 8 / gbps + 4 * (wire * 8 / 100 + 500)
    job = outcome.jobs[0]
    assert job.completion_ns == pytest.approx(closed_form, rel=1e-3)
    # The ideal knows the cap (it rounds up, and the limiter's spacing to whole ps: 1 ns slack).
    assert job.ideal_completion_ns - 1 <= job.completion_ns <= 1.001 * job.ideal_completion_ns
    assert outcome.packets.dropped == outcome.packets.retransmitted == 0
    assert any("static rate limiter" in note for note in outcome.model_notes)


def test_a_capped_flow_leaves_the_rest_of_its_nic_to_the_others_packet_by_packet():
    size = 2 * MIB
    flows = [flow("host-0", "host-4", size, rate_gbps=20), flow("host-0", "host-5", size)]
    outcome = run_simulation(spec(flows, "ECMP", "PACKET"), LS)
    capped, free = outcome.flows.finish_ns.tolist()
    assert free == pytest.approx(wire_bytes(size) * 8 / 80, rel=0.02)  # 80 Gb/s: all the cap leaves
    assert capped == pytest.approx(wire_bytes(size) * 8 / 20, rel=0.01)


def test_a_pinned_flow_waits_for_a_failed_link_on_its_path_and_is_never_rerouted():
    path = ["host-0", "leaf-0", "spine-1", "leaf-1", "host-4"]
    link = channels_along(LS, ["leaf-0", "spine-1"])[0] // 2
    fault = {"link": str(link), "kind": "LINK_DOWN", "start_ns": 30_000, "reroute": "FAST_RECOVERY"}
    flows = [flow("host-0", "host-4", MIB, path=path), flow("host-1", "host-5", MIB)]
    settings = {"window_bytes": 64 * 1024, "faults": [dict(fault, end_ns=200_000)]}
    failing = SimulationSpec.from_dict(spec(flows, "ECMP", "PACKET", **settings))
    what_if = {down: (with_links_down(LS, down), 0.0) for down in down_sets(failing, LS)}
    outcome = run_simulation(failing, LS, what_if=what_if)
    assert all(job.completed for job in outcome.jobs)
    pinned_finish, _other_finish = outcome.flows.finish_ns.tolist()
    assert pinned_finish > 200_000  # it waited for its link to come back ...
    assert flow_links(outcome, 0).tolist() == [c // 2 for c in channels_along(LS, path)]
    assert outcome.jobs[0].counters["retransmitted_packets"] > 0  # ... and resent what it lost
    assert any("pinned across link" in note for note in outcome.model_notes)
    # For good, the flow could never finish: refused before the run, naming the fault.
    forever = SimulationSpec.from_dict(spec(flows, "ECMP", "PACKET", window_bytes=65536, faults=[fault]))
    with pytest.raises(InvalidArgument, match=r"pinned across it .* never rerouted") as caught:
        down_sets(forever, LS)
    assert caught.value.field == "faults[0].link"
    assert "jobs[0].flows[0]" in str(caught.value)


# -- what is refused --------------------------------------------------------------------------------

PARALLEL = build_snapshot(  # host-0 - leaf-0 = spine-0 (two links) - leaf-1 - host-1
    ["host-0", "host-1", "leaf-0", "leaf-1", "spine-0"],
    [HOST, HOST, SWITCH, SWITCH, SWITCH],
    [0, 0, 1, 1, 2],
    [(0, 2), (1, 3), (2, 4), (2, 4), (3, 4)],
)


def refusal(snapshot, flows, **settings):
    """The InvalidArgument of a spec of `flows`, raised where StartSimulation checks (validate_spec,
    then place_jobs against the fabric)."""
    with pytest.raises(InvalidArgument) as caught:
        run_simulation(spec(flows, **settings), snapshot)
    domain = SimulationSpec.from_dict(spec(flows, **settings))
    with pytest.raises(InvalidArgument) as again:
        validate_spec(domain)
        place_jobs(domain, snapshot)
    assert str(again.value) == str(caught.value)
    return caught.value


def along(*nodes):
    return {"path": list(nodes)}


@pytest.mark.parametrize(
    ("options", "field", "problem"),
    [
        (along("host-0", "leaf-0", "spine9", "leaf-2", "host-4"), "path[2]", "node 'spine9' is not in"),
        (along("host-0", "leaf-0", "leaf-2", "host-4"), "path[2]", "leaf-0 and leaf-2 are not linked"),
        (along("host-1", "leaf-0", "spine-0", "leaf-2", "host-4"), "path[0]", "starts at host-1, not at"),
        (along("host-0", "leaf-0", "spine-0", "leaf-1", "host-3"), "path[4]", "ends at host-3, not at"),
        (along("host-0", "leaf-0", "spine-0", "leaf-0", "host-4"), "path[3]", "comes back to leaf-0"),
        (along("host-0", "leaf-0", "host-1", "spine-0", "leaf-2", "host-4"), "path[2]", "host-1 is a host"),
        (along("host-0"), "path", "at least the source and the destination"),
        (
            {"path": CROSS_POD, "path_links": link_names_along(FT, CROSS_POD)},
            "path_links",
            "path and path_links are both set",
        ),
        (
            {"path_links": ["leaf-0<->spine-0", "host-0<->leaf-0"]},
            "path_links[0]",
            "does not start at the flow's source",
        ),
        ({"path_links": ["host-0<->leaf-0", "nowhere"]}, "path_links[1]", "'nowhere' is not a link of"),
        (
            {"path_links": ["host-0<->leaf-0", "leaf-0<->spine-0", "leaf-1<->spine-1"]},
            "path_links[2]",
            "does not continue the path from spine-0",
        ),
        ({"path_links": ["host-0<->leaf-0", "leaf-0<->spine-0"]}, "path_links[1]", "ends at spine-0"),
        ({"udp_source_port": 65536}, "udp_source_port", "must be in 1..65535"),
        ({"udp_source_port": -1}, "udp_source_port", "must be in 1..65535"),
        ({"rate_gbps": -1.0}, "rate_gbps", "finite number of Gb/s >= 0"),
        ({"rate_gbps": math.nan}, "rate_gbps", "finite number"),
        ({"rate_gbps": math.inf}, "rate_gbps", "finite number"),
        ({"rate_gbps": 1e-12}, "rate_gbps", "more than a run can count"),
    ],
)
def test_a_flow_the_fabric_cannot_carry_as_given_is_refused_naming_the_element(options, field, problem):
    error = refusal(FT, [flow("host-1", "host-6", MIB), flow("host-0", "host-4", MIB, **options)])
    assert error.field == f"jobs[0].flows[1].{field}"
    assert problem in error.problem


def test_parallel_links_a_down_link_and_a_port_for_several_qps_are_refused():
    error = refusal(
        PARALLEL, [flow("host-0", "host-1", MIB, **along("host-0", "leaf-0", "spine-0", "leaf-1", "host-1"))]
    )
    assert error.field == "jobs[0].flows[0].path[2]"
    assert "joined by 2 parallel links (leaf-0<->spine-0, leaf-0<->spine-0); name the one" in error.problem
    # path_links names one of them (by index here: the display names of this test fabric repeat).
    links = ["host-0<->leaf-0", "3", "leaf-1<->spine-0", "host-1<->leaf-1"]
    outcome = run_simulation(spec([flow("host-0", "host-1", MIB, path_links=links)], "ADAPTIVE"), PARALLEL)
    assert channel_bytes(outcome).get(4) is None and channel_bytes(outcome)[6] == wire_bytes(
        MIB
    )  # link 3, a->b
    down = with_links_down(FT, (channels_along(FT, CROSS_POD)[3] // 2,))
    error = refusal(down, [flow("host-0", "host-4", MIB, path=CROSS_POD)])
    assert error.field == "jobs[0].flows[0].path[4]"
    assert (
        "link core-3<->spine-3 is DOWN" in error.problem or "link spine-3<->core-3 is DOWN" in error.problem
    )
    error = refusal(FT, [flow("host-0", "host-4", MIB, udp_source_port=5000)], job={"qps_per_connection": 2})
    assert error.field == "jobs[0].flows[0].udp_source_port" and "qps_per_connection=2" in error.problem


# -- through the service ----------------------------------------------------------------------------

S = simulation_pb2
topology, simulator = test_service.topology, test_service.simulator  # its fixtures: real servers, port 0


def _p2p_spec(fabric, flows, fidelity="flow", mode="adaptive"):
    return simulation_spec(fabric, [point_to_point_job(flows)], mode, fidelity=fidelity)


async def test_the_service_refuses_what_the_fabric_cannot_carry_at_start_simulation(topology, simulator):
    async with grpc.aio.insecure_channel(topology) as channel:
        stub = topology_pb2_grpc.TopologyServiceStub(channel)
        doubled = topology_pb2.FabricSpec(
            leaf_spine=topology_pb2.LeafSpineSpec(leaves=2, spines=1, hosts_per_leaf=2, parallel_links=2)
        )
        await stub.CreateFabric(topology_pb2.CreateFabricRequest(fabric_id="doubled", spec=doubled))
        links = await stub.ListLinks(topology_pb2.ListLinksRequest(parent="fabrics/ls", page_size=1000))
        ends = {
            link.name: {link.node_a.rsplit("/", 1)[-1], link.node_b.rsplit("/", 1)[-1]}
            for link in links.links
        }
        failed = next(name for name, pair in ends.items() if pair == {"spine-3", "leaf-1"})
        await stub.SetLinkState(
            topology_pb2.SetLinkStateRequest(name=failed, state=topology_pb2.LINK_STATE_DOWN)
        )
    ok = ["host-0", "leaf-0", "spine-1", "leaf-1", "host-4"]
    cases = [
        (
            "ls",
            {"path": ["host-0", "leaf-0", "spine9", "leaf-1", "host-4"]},
            "spec.jobs[0].flows[0].path[2]",
            "'spine9' is not in",
        ),
        (
            "ls",
            {"path": ["host-0", "leaf-0", "leaf-1", "host-4"]},
            "spec.jobs[0].flows[0].path[2]",
            "leaf-0 and leaf-1 are not linked",
        ),
        (
            "ls",
            {"path": ["host-0", "leaf-0", "spine-3", "leaf-1", "host-4"]},
            "spec.jobs[0].flows[0].path[3]",
            "is DOWN",
        ),
        (
            "doubled",
            {"path": ["host-0", "leaf-0", "spine-0", "leaf-1", "host-2"]},
            "spec.jobs[0].flows[0].path[2]",
            "2 parallel links",
        ),
        ("ls", {"path": ok, "path_links": ["x"]}, "spec.jobs[0].flows[0].path_links", "both set"),
        ("ls", {"path": ok, "udp_source_port": 70000}, "spec.jobs[0].flows[0].udp_source_port", "1..65535"),
        ("ls", {"path": ok, "rate_gbps": -3.0}, "spec.jobs[0].flows[0].rate_gbps", ">= 0"),
        ("ls", {"rate_gbps": math.nan}, "spec.jobs[0].flows[0].rate_gbps", "finite"),
    ]
    for fabric, options, field, problem in cases:
        destination = "host-2" if fabric == "doubled" else "host-4"
        request = S.StartSimulationRequest(
            spec=_p2p_spec(fabric, [point_to_point_flow("host-0", destination, "1MiB", **options)])
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await simulator.StartSimulation(request)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (options, caught.value.details())
        assert caught.value.details().startswith(f"{field}: "), caught.value.details()
        assert problem in caught.value.details()
    listed = await simulator.ListSimulations(S.ListSimulationsRequest())
    assert not listed.simulations  # nothing was accepted


@pytest.mark.parametrize("fidelity", ["flow", "packet"])
async def test_the_service_runs_pinned_capped_flows_and_reports_them(simulator, fidelity):
    path = ["host-0", "leaf-0", "spine-2", "leaf-1", "host-4"]
    flows = [
        point_to_point_flow("host-0", "host-4", "1MiB", path=path, udp_source_port=50_001, rate_gbps=40),
        point_to_point_flow("host-1", "host-5", "1MiB"),
    ]
    started = await simulator.StartSimulation(
        S.StartSimulationRequest(spec=_p2p_spec("ls", flows, fidelity, mode="spray"))
    )
    seen = await test_service.watch_until_done(simulator, started.name)
    assert seen[-1].state == common_pb2.JOB_STATE_SUCCEEDED, seen[-1].error
    result = (await simulator.GetSimulation(S.GetSimulationRequest(name=started.name))).result
    pinned = result.flows[0]
    assert pinned.udp_source_port == 50_001
    by_name = {link.display_name: link for link in result.links}
    assert list(pinned.links) == [by_name[f"{a}->{b}"].link for a, b in itertools.pairwise(path)]
    # The sprayed flow crosses every uplink of leaf-0; the pinned one only spine-2's.
    assert [by_name[f"leaf-0->spine-{s}"].flows for s in range(4)] == [1, 1, 2, 1]
    expected_ns = (1 << 20) * 8 / 40 * (MTU + HEADER) / MTU  # the cap paces wire bytes, as at PACKET
    assert pinned.finish_ns - pinned.start_ns == pytest.approx(expected_ns, rel=0.02)
    assert any("1 of 2 point-to-point flows pinned" in note for note in result.model_notes)
