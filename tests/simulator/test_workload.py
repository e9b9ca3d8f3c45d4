import dataclasses
import hashlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.common.errors import InvalidArgument
from services.simulator.placement import HostDirectory
from services.simulator.routes import unique_rows
from services.simulator.runner import run_simulation
from services.simulator.spec import SimulationSpec
from services.simulator.workload import _distinct, build_workload
from tests.simulator.fabrics import leaf_spine


def spec_with(*jobs, mode="ECMP", seed=0, **extra):
    return SimulationSpec.from_dict(
        dict(fabric="fabrics/test", jobs=list(jobs), load_balancing=dict(mode=mode), seed=seed, **extra)
    )


def ring(n=8, size=8 * 1024 * 1024, **job):
    return dict(collective="ALL_REDUCE", size_bytes=size, rank_count=n, **job)


FABRIC = leaf_spine(leaves=4, spines=4, hosts_per_leaf=4)


def test_ring_all_reduce_has_two_n_minus_one_steps_of_s_over_n_bytes():
    n, size = 8, 8 * 1024 * 1024
    workload = build_workload(spec_with(ring(n, size)), FABRIC)
    assert workload.flow_count == 2 * (n - 1) * n
    assert (workload.flow_size_bytes == size // n).all()
    sent = np.bincount(workload.flow_source, weights=workload.flow_size_bytes)
    hosts = workload.jobs[0].hosts
    assert np.allclose(sent[hosts], 2 * (n - 1) / n * size)
    # Rank i always sends to rank i+1.
    rank = {int(h): r for r, h in enumerate(hosts)}
    pairs = {
        (rank[int(s)], rank[int(d)])
        for s, d in zip(workload.flow_source, workload.flow_destination, strict=True)
    }
    assert pairs == {(i, (i + 1) % n) for i in range(n)}


def test_reduce_scatter_and_all_gather_rings_have_n_minus_one_steps():
    for collective in ("REDUCE_SCATTER", "ALL_GATHER"):
        workload = build_workload(spec_with(dict(ring(8), collective=collective)), FABRIC)
        assert workload.flow_count == 7 * 8


def test_a_step_waits_for_its_input_from_the_previous_rank_and_its_own_previous_send():
    workload = build_workload(spec_with(ring(4)), FABRIC)
    # Transfer of step 1, rank 2 (index 1*4 + 2) waits on step 0 of rank 1 (arrival) and rank 2 (departure).
    assert workload.transfer_prerequisites[6] == 2
    waiting_on_5 = workload.dependents[workload.dependent_offsets[1] : workload.dependent_offsets[2]]
    needs_arrival = workload.dependent_needs_arrival[
        workload.dependent_offsets[1] : workload.dependent_offsets[2]
    ]
    assert dict(zip(waiting_on_5.tolist(), needs_arrival.tolist(), strict=True)) == {5: False, 6: True}
    assert workload.transfer_prerequisites[:4].tolist() == [0, 0, 0, 0]


def test_each_qp_is_a_separate_flow_with_its_own_udp_source_port_kept_across_steps():
    workload = build_workload(spec_with(ring(4, qps_per_connection=4)), FABRIC)
    assert workload.flow_count == 2 * 3 * 4 * 4
    ports = workload.flow_source_port.reshape(6, 4, 4)  # step, rank, qp
    assert (ports == ports[0]).all()
    assert len(np.unique(ports[0])) == 16
    assert ((ports >= 49152) & (ports < 65536)).all()


def test_qp_numbers_are_deterministic_in_the_seed():
    a = build_workload(spec_with(ring(4), seed=1), FABRIC).flow_source_port
    b = build_workload(spec_with(ring(4), seed=1), FABRIC).flow_source_port
    c = build_workload(spec_with(ring(4), seed=2), FABRIC).flow_source_port
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_chunks_split_each_step_and_iterations_repeat_it():
    workload = build_workload(spec_with(ring(4, size=4000, chunks=2, iterations=3)), FABRIC)
    assert workload.flow_count == 3 * 6 * 4 * 2
    assert workload.flow_size_bytes.sum() == 3 * 6 * 1000 * 4


def test_packed_placement_puts_neighbouring_ranks_on_one_leaf():
    hosts = build_workload(spec_with(ring(8, placement="PACKED")), FABRIC).jobs[0].hosts
    leaf = HostDirectory(FABRIC).leaf[hosts]
    assert hosts.tolist() == list(range(8))
    assert (leaf[:4] == leaf[0]).all()


def test_scattered_placement_puts_consecutive_ranks_on_different_leaves():
    hosts = build_workload(spec_with(ring(16, placement="SCATTERED")), FABRIC).jobs[0].hosts
    leaf = HostDirectory(FABRIC).leaf[hosts]
    assert (leaf != np.roll(leaf, 1)).all()
    assert len(set(hosts.tolist())) == 16


def test_random_placement_is_seeded():
    a = build_workload(spec_with(ring(6, placement="RANDOM"), seed=3), FABRIC).jobs[0].hosts
    b = build_workload(spec_with(ring(6, placement="RANDOM"), seed=3), FABRIC).jobs[0].hosts
    c = build_workload(spec_with(ring(6, placement="RANDOM"), seed=4), FABRIC).jobs[0].hosts
    assert a.tolist() == b.tolist() and a.tolist() != c.tolist()


def test_rail_aligned_placement_uses_hosts_of_one_rail():
    hosts = build_workload(spec_with(ring(4, placement="RAIL_ALIGNED")), FABRIC).jobs[0].hosts
    assert set(FABRIC.host_rail[hosts].tolist()) == {0}


def test_concurrent_jobs_placed_by_policy_do_not_share_hosts():
    workload = build_workload(spec_with(ring(8), ring(8)), FABRIC)
    assert not set(workload.jobs[0].hosts.tolist()) & set(workload.jobs[1].hosts.tolist())


def test_explicit_hosts_are_used_in_rank_order():
    workload = build_workload(
        spec_with(dict(ring(3), rank_count=0, hosts=["host-5", "host-1", "host-9"])), FABRIC
    )
    assert workload.jobs[0].hosts.tolist() == [5, 1, 9]


def test_point_to_point_flows_repeat_back_to_back():
    flows = [dict(source="host-0", destination="host-5", size_bytes=1000, start_ns=50)]
    workload = build_workload(
        spec_with(dict(collective="POINT_TO_POINT", flows=flows, iterations=3, qps_per_connection=2)), FABRIC
    )
    assert workload.flow_count == 6
    assert workload.transfer_release_ns.tolist() == [50, 50, 50]
    assert workload.transfer_prerequisites.tolist() == [0, 1, 1]


def test_unknown_host_name_is_invalid_argument_naming_the_host():
    with pytest.raises(InvalidArgument, match=r"jobs\[0\].hosts\[1\].*host-99"):
        build_workload(spec_with(dict(ring(2), rank_count=0, hosts=["host-0", "host-99"])), FABRIC)


def test_too_many_ranks_for_the_free_hosts_is_invalid_argument():
    with pytest.raises(InvalidArgument, match=r"jobs\[1\]\.rank_count"):
        build_workload(spec_with(ring(10), ring(10)), FABRIC)


def test_ring_workloads_are_bit_identical_to_the_foundations():
    # The digest of every array of these ring workloads as the foundation's generator made them
    # (before the collectives were split out): the ring must not change by a byte.
    jobs = [
        ring(7, 1_000_003, chunks=3, iterations=2, qps_per_connection=3, placement="SCATTERED"),
        dict(ring(5, 12_345, chunks=2), collective="REDUCE_SCATTER"),
        dict(ring(4, 999, iterations=3, placement="RANDOM"), collective="ALL_GATHER"),
    ]
    workload = build_workload(spec_with(*jobs, seed=11), FABRIC)
    # Fields that only SHARP and point-to-point options fill (pinned paths, rate caps, switch
    # endpoints) are empty here.
    optional = ("pinned_offsets", "pinned_channels", "flow_rate_bps")
    assert all(getattr(workload, name) is None for name in optional) and not workload.endpoint_names
    assert workload.rings is None  # (came later: rings not held, test_stream.py, test_flow_steady.py)
    # flow_qp came later: it numbers the flows' QPs, the flows of one (job, ends, UDP port,
    # destination QP) sharing one: the same partition of the flows as those columns give.
    qp_of = [
        workload.flow_job,
        workload.flow_source,
        workload.flow_destination,
        workload.flow_source_port,
        workload.flow_destination_qp,
    ]
    by_columns = unique_rows(qp_of)[1]
    pairs = np.unique(np.stack([workload.flow_qp, by_columns], axis=1), axis=0)
    assert len(pairs) == len(np.unique(workload.flow_qp)) == len(np.unique(by_columns))
    digest = hashlib.sha256()
    for field in dataclasses.fields(workload):
        if field.name not in ("jobs", "endpoint_names", "flow_qp", "rings", *optional):
            array = np.ascontiguousarray(getattr(workload, field.name))
            digest.update(field.name.encode() + array.dtype.str.encode() + array.tobytes())
    assert digest.hexdigest() == "36e0d16832212e347bbc07bd7097698e0453590dc11b7858ae88b36514401557"


def test_sharp_on_rocev2_is_refused_naming_the_algorithm():
    with pytest.raises(InvalidArgument, match=r"SHARP needs an InfiniBand fabric.*ROCEV2") as caught:
        run_simulation(spec_with(dict(ring(4), algorithm="SHARP")), FABRIC)
    assert caught.value.field == "jobs[0].algorithm"


@given(
    st.lists(
        st.tuples(st.integers(0, 50), st.integers(-3, 3), st.integers(0, 2**24)), min_size=1, max_size=60
    )
)
def test_unique_rows_matches_numpys_row_unique(rows):
    from services.simulator.paths import unique_rows

    table = np.array(rows, dtype=np.int64)
    expected, inverse = np.unique(table, axis=0, return_inverse=True)
    got, rank = unique_rows([table[:, i] for i in range(table.shape[1])])
    assert np.array_equal(got, expected)
    assert np.array_equal(rank, inverse.reshape(-1))


@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(-2, 2)), min_size=1, max_size=60),
    st.lists(
        st.tuples(st.integers(-(2**40), 2**40), st.integers(0, 2**30), st.integers(0, 2**40)), min_size=1
    ),
)
def test_unique_rows_matches_numpy_with_small_and_overflowing_key_spaces(small, huge):
    """Small ranges take the key-table path; ranges whose product overflows int64, the column-wise one."""
    from services.simulator.paths import unique_rows

    for rows in (small, huge):
        table = np.array(rows, dtype=np.int64)
        expected, inverse = np.unique(table, axis=0, return_inverse=True)
        got, rank = unique_rows([table[:, i] for i in range(table.shape[1])])
        assert np.array_equal(got, expected)
        assert np.array_equal(rank, inverse.reshape(-1))


@pytest.mark.parametrize("spread", [10, 10**9])  # dense keys (a table), sparse ones (np.unique)
def test_distinct_keys_and_their_index_as_np_unique_gives_them(spread):
    key = np.random.default_rng(spread).integers(0, spread, 5000).astype(np.int64)
    keys, which = _distinct(key)
    want_keys, want_which = np.unique(key, return_inverse=True)
    assert np.array_equal(keys, want_keys) and np.array_equal(which, want_which.reshape(-1))
