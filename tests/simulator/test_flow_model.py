import math

import numpy as np
import pytest

from services.simulator.flow.model import max_min_rates
from services.simulator.paths import route_workload
from services.simulator.runner import run_simulation
from services.simulator.spec import SimulationSpec
from services.simulator.workload import build_workload
from tests.simulator.fabrics import NDR_BPS, fat_tree, leaf_spine, two_links_in_a_row
from tests.simulator.wire import wire_bytes

G = 1_000_000_000


def spec(jobs, mode="ADAPTIVE", **extra):
    lb = dict(mode=mode, **extra.pop("lb", {}))
    return SimulationSpec.from_dict(dict(fabric="fabrics/test", jobs=jobs, load_balancing=lb, **extra))


def p2p(*flows, **job):
    return dict(
        collective="POINT_TO_POINT",
        flows=[dict(source=s, destination=d, size_bytes=b) for s, d, b in flows],
        **job,
    )


def test_max_min_gives_a_flow_bottlenecked_elsewhere_its_own_share_and_splits_the_rest():
    # Channel 0 (10) carries flows 0, 1, 2; channel 1 (2) also carries flow 2.
    rates = max_min_rates(
        np.array([0, 1, 2, 2]), np.array([0, 0, 0, 1]), np.ones(4), np.array([10.0, 2.0]), 3
    )
    assert rates.tolist() == pytest.approx([4.0, 4.0, 2.0])


def test_max_min_counts_fractions_of_split_flows():
    # Flow 0 puts half of its rate on each of channels 0 and 1; flow 1 uses channel 0 alone.
    rates = max_min_rates(
        np.array([0, 0, 1]), np.array([0, 1, 0]), np.array([0.5, 0.5, 1.0]), np.array([9.0, 9.0]), 2
    )
    assert rates.tolist() == pytest.approx([6.0, 6.0])


def random_sharing(rng, flows, channels, caps):
    """Entries of `flows` flows on 1-4 of `channels` channels (some split, some crossing one
    twice), capacities and (optionally) caps drawn from a few values so that shares tie."""
    entry_flow, entry_channel, entry_fraction = [], [], []
    for f in range(flows):
        length = int(rng.integers(1, 5))
        entry_flow += [f] * length
        entry_channel += rng.choice(channels, length).tolist()
        entry_fraction += rng.choice([1.0, 1.0, 0.5, 0.25, 1 / 3], length).tolist()
    capacity = rng.choice([100.0, 200.0, 400.0], channels) * G
    cap = (
        np.where(rng.random(flows) < 0.3, rng.choice([10.0, 37.5, 150.0], flows) * G, np.inf)
        if caps
        else None
    )
    return np.array(entry_flow), np.array(entry_channel), np.array(entry_fraction), capacity, flows, cap


@pytest.mark.parametrize("seed", range(40))
def test_max_min_rates_are_max_min_fair(seed):
    # No channel is over capacity, and every flow is at its cap or crosses a saturated channel on
    # which no flow gets more (its bottleneck): the definition, checked without the filling.
    flow, channel, fraction, capacity, flows, cap = random_sharing(
        np.random.default_rng(seed), 12, 9, seed % 2
    )
    rates = max_min_rates(flow, channel, fraction, capacity, flows, cap)
    load = np.bincount(channel, weights=fraction * rates[flow], minlength=len(capacity))
    assert (load <= capacity * (1 + 1e-12)).all()
    saturated = load >= capacity * (1 - 1e-12)
    for f in range(flows):
        if cap is not None and rates[f] >= cap[f] * (1 - 1e-12):
            continue
        bottlenecks = [
            c
            for c in channel[flow == f]
            if saturated[c] and rates[f] >= rates[flow[channel == c]].max() * (1 - 1e-12)
        ]
        assert bottlenecks, f"flow {f} has no bottleneck"


@pytest.mark.parametrize("seed", range(40))
def test_a_flow_rate_depends_on_its_component_alone_to_the_bit(seed):
    # Two independent sharing problems side by side (channels renumbered apart) give each flow
    # exactly the rate it gets alone: what lets the compiled loop refill only the components
    # whose flows changed.
    rng = np.random.default_rng(100 + seed)
    a = random_sharing(rng, 7, 6, seed % 2)
    b = random_sharing(rng, 9, 5, seed % 2)
    # The two problems' entries interleaved at random, each keeping its own order.
    total = len(a[0]) + len(b[0])
    from_a = np.zeros(total, dtype=bool)
    from_a[rng.choice(total, len(a[0]), replace=False)] = True
    flow, channel, fraction = np.zeros(total, np.int64), np.zeros(total, np.int64), np.zeros(total)
    flow[from_a], channel[from_a], fraction[from_a] = a[0], a[1], a[2]
    flow[~from_a], channel[~from_a], fraction[~from_a] = b[0] + a[4], b[1] + len(a[3]), b[2]
    cap = None if a[5] is None else np.r_[a[5], b[5]]
    together = max_min_rates(flow, channel, fraction, np.r_[a[3], b[3]], a[4] + b[4], cap)
    alone = np.r_[max_min_rates(*a), max_min_rates(*b)]
    assert together.tobytes() == alone.tobytes()


def test_two_flows_sharing_one_link_get_half_each():
    fabric = two_links_in_a_row([100 * G] * 5)
    size = 1_000_000
    alone = run_simulation(spec([p2p(("host-0", "host-2", size))]), fabric)
    shared = run_simulation(spec([p2p(("host-0", "host-2", size), ("host-1", "host-3", size))]), fabric)
    assert alone.jobs[0].completion_ns == math.ceil(wire_bytes(size) * 8 * 1e9 / (100 * G))
    assert shared.jobs[0].completion_ns == math.ceil(2 * wire_bytes(size) * 8 * 1e9 / (100 * G))
    middle = shared.channels.display_names.index("switch-0->switch-1")
    # Busy all along; the makespan is rounded up to whole ns.
    assert shared.channels.mean_utilisation[middle] == pytest.approx(1.0, rel=1e-5)
    assert shared.channels.flows[middle] == 2


def test_a_flow_bottlenecked_on_its_own_link_leaves_the_rest_of_the_shared_link_to_the_other():
    fabric = two_links_in_a_row([100 * G, 100 * G, 100 * G, 100 * G, 25 * G])  # host-3 at 25G
    size = 3_000_000
    outcome = run_simulation(spec([p2p(("host-0", "host-2", size), ("host-1", "host-3", size))]), fabric)
    finish = dict(zip(outcome.flows.destination.tolist(), outcome.flows.finish_ns.tolist(), strict=True))
    on_the_wire = wire_bytes(size)
    # 75G while the other takes 25G.
    assert finish[2] == pytest.approx(on_the_wire * 8 * 1e9 / (75 * G), abs=2)
    assert finish[3] == pytest.approx(on_the_wire * 8 * 1e9 / (25 * G), abs=2)


def test_completion_adds_path_latency_of_links_and_switches():
    fabric = two_links_in_a_row([100 * G] * 5, latency_ns=500)
    outcome = run_simulation(spec([p2p(("host-0", "host-2", 1000))], switch_latency_ns=300), fabric)
    # 1000 bytes and an 82-byte header: 86.56 ns on the wire, three links of 500 ns, two switches of 300 ns.
    assert outcome.jobs[0].completion_ns == 87 + 3 * 500 + 2 * 300


def ring_closed_form_ns(n, size, rate_bps, hop_latency_ns):
    return 2 * (n - 1) / n * size * 8 / rate_bps * 1e9 + 2 * (n - 1) * hop_latency_ns


@pytest.mark.parametrize(
    ("fabric", "n", "hop_latency_ns"),
    [
        (fat_tree(4), 16, 6 * 500 + 5 * 200),  # worst ring hop: across pods
        (leaf_spine(8, 4, 4), 32, 4 * 500 + 3 * 200),
    ],
)
def test_adaptive_ring_all_reduce_on_a_non_blocking_fabric_meets_the_closed_form(fabric, n, hop_latency_ns):
    size = 64 * 1024 * 1024
    job = dict(collective="ALL_REDUCE", size_bytes=size, rank_count=n, placement="SCATTERED")
    outcome = run_simulation(spec([job], switch_latency_ns=200), fabric)
    result = outcome.jobs[0]
    closed_form = ring_closed_form_ns(n, size, NDR_BPS, hop_latency_ns)
    assert 2 * (n - 1) / n * size * 8 / NDR_BPS * 1e9 < result.completion_ns <= closed_form * 1.03
    assert result.completion_ns == pytest.approx(result.ideal_completion_ns, rel=0.03)
    assert result.algbw_gbps == pytest.approx(size * 8 / result.completion_ns)
    assert result.busbw_gbps == pytest.approx(result.algbw_gbps * 2 * (n - 1) / n)
    assert any("even split over equal-cost paths" in note for note in outcome.model_notes)


def test_ecmp_ring_with_scattered_ranks_is_slower_and_leaves_hot_and_idle_uplinks():
    fabric = leaf_spine(8, 4, 4)
    job = dict(collective="ALL_REDUCE", size_bytes=64 * 1024 * 1024, rank_count=32, placement="SCATTERED")
    adaptive = run_simulation(spec([job], mode="ADAPTIVE"), fabric)
    ecmp = run_simulation(spec([job], mode="ECMP"), fabric)
    assert ecmp.jobs[0].completion_ns > 1.2 * adaptive.jobs[0].completion_ns
    skew = ecmp.uplink_skew
    assert skew.links == 32
    assert skew.share_hot > 0 and skew.share_idle > 0
    assert skew.max_over_mean > 1.5 > adaptive.uplink_skew.max_over_mean


def test_ecmp_pins_a_flow_to_one_uplink():
    fabric = leaf_spine(4, 4, 4)
    s = spec(
        [dict(collective="ALL_REDUCE", size_bytes=1 << 20, rank_count=8, placement="SCATTERED")], mode="ECMP"
    )
    workload = build_workload(s, fabric)
    routes, flow_route = route_workload(s.load_balancing, fabric, workload, 0)
    assert routes.pinned and (routes.fractions == 1.0).all()
    assert (np.diff(routes.offsets) == 4).all()  # host->leaf->spine->leaf->host, one channel each
    # Every step of a connection hashes the same header, so it keeps the same path.
    assert len(np.unique(flow_route)) == 8


def test_ecmp_paths_follow_the_hash_seed_and_are_deterministic():
    fabric = leaf_spine(4, 8, 4)
    job = dict(collective="ALL_REDUCE", size_bytes=1 << 20, rank_count=16, placement="SCATTERED")

    def channels(seed):
        s = spec([job], mode="ECMP", lb=dict(seed=seed))
        routes, _ = route_workload(s.load_balancing, fabric, build_workload(s, fabric), 0)
        return routes.channels.tolist()

    assert channels(1) == channels(1)
    assert channels(1) != channels(2)


def expected_busy_share(n):
    return 1 - (1 - 1 / n) ** n


def test_n_equal_flows_hashed_onto_n_uplinks_keep_about_63_percent_busy():
    n = 16
    fabric = leaf_spine(2, n, n)
    flows = [(f"host-{i}", f"host-{n + i}", 1000) for i in range(n)]
    leaf0 = fabric.node_names.index("leaf-0")
    uplinks = np.flatnonzero(
        (fabric.channel_source() == leaf0) & (fabric.node_tier[fabric.channel_target()] == 2)
    )
    shares = []
    for trial in range(300):
        s = spec([p2p(*flows)], mode="ECMP", seed=trial, lb=dict(seed=10_000 + trial))
        routes, _ = route_workload(s.load_balancing, fabric, build_workload(s, fabric), 0)
        shares.append(len(np.intersect1d(routes.channels, uplinks)) / n)
    assert np.mean(shares) == pytest.approx(expected_busy_share(n), rel=0.03)


def test_a_run_is_deterministic_for_a_seed():
    fabric = leaf_spine(4, 4, 4)
    job = dict(
        collective="ALL_REDUCE", size_bytes=1 << 22, rank_count=16, placement="RANDOM", qps_per_connection=2
    )
    a = run_simulation(spec([job], mode="ECMP", seed=5), fabric)
    b = run_simulation(spec([job], mode="ECMP", seed=5), fabric)
    assert a.jobs == b.jobs
    assert np.array_equal(a.series.bytes, b.series.bytes)
    assert np.array_equal(a.flows.finish_ns, b.flows.finish_ns)


def test_hashing_the_destination_qp_changes_the_paths():
    fabric = leaf_spine(4, 8, 4)
    job = dict(collective="ALL_REDUCE", size_bytes=1 << 20, rank_count=16, placement="SCATTERED")
    plain = spec([job], mode="ECMP")
    enhanced = spec([job], mode="ECMP", lb=dict(hash_destination_qp=True))
    a, _ = route_workload(plain.load_balancing, fabric, build_workload(plain, fabric), 0)
    b, _ = route_workload(enhanced.load_balancing, fabric, build_workload(enhanced, fabric), 0)
    assert a.channels.tolist() != b.channels.tolist()


def member_indices_up_the_tree(fabric, routes, destinations):
    """For each flow, the index of the chosen member in the equal-cost group at leaf and at spine."""
    picks = []
    for r, destination in enumerate(destinations):
        hops = routes.channels[routes.offsets[r] : routes.offsets[r + 1]]
        chosen = []
        for channel in hops[1:3]:  # leaf -> spine, spine -> core
            node = int(fabric.channel_source()[channel])
            chosen.append(fabric.next_channels(node, int(destination)).tolist().index(int(channel)))
        picks.append(tuple(chosen))
    return picks


@pytest.mark.parametrize("same_seed", [True, False])
def test_the_same_seed_everywhere_polarises_choices_and_per_switch_seeds_do_not(same_seed):
    from services.simulator.paths import pin_flows_by_hash

    fabric = fat_tree(4)
    sources = np.arange(8)  # pods 0-1 ...
    destinations = sources + 8  # ... to pods 2-3: every flow climbs to the core
    ports = 49152 + np.arange(8) * 7
    routes = pin_flows_by_hash(fabric, sources, destinations, ports, None, "MURMUR3", 99, same_seed, 0)
    picks = member_indices_up_the_tree(fabric, routes, destinations)
    polarised = all(leaf == spine for leaf, spine in picks)
    assert polarised == same_seed
