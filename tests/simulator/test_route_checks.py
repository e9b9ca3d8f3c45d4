"""StartSimulation's route checks (`checks.check_routes`) on each job's connections, not its workload.

The measured failure: the servicer built the whole workload to check its routes before it returned
(a 1,024-rank 64 MiB ring: 2.1M transfers, 2.4 s and ~770 MB in the service process, per call), so
that a few concurrent StartSimulation calls for large jobs held gigabytes in the process that serves
every other call. A route depends only on a flow's ends, ports, QP and pinned path, and every step,
chunk and iteration of a job reuses its connections' QPs: checking one transfer per connection
checks them all.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from services.simulator.checks import check_routes
from services.simulator.engine import RunFabric
from services.simulator.spec import SimulationSpec
from services.simulator.workload import build_workload, connection_workload
from tests.simulator.fabrics import fat_tree

FABRIC = fat_tree(8)


def spec(*jobs: dict, mode: str = "ECMP", fidelity: str = "PACKET") -> SimulationSpec:
    return SimulationSpec.from_dict(
        {"fabric": FABRIC.fabric, "fidelity": fidelity, "jobs": list(jobs), "load_balancing": {"mode": mode}}
    )


def ring(**changes) -> dict:
    return {
        "collective": "ALL_REDUCE",
        "size_bytes": 8 << 20,
        "rank_count": 128,
        "placement": "RANDOM",
        **changes,
    }


def peak_bytes(run) -> int:
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_route_checks_do_not_grow_with_the_steps_of_a_job():
    small, large = spec(ring()), spec(ring(iterations=16, chunks=4))
    once = peak_bytes(lambda: check_routes(small, RunFabric(FABRIC)))
    many = peak_bytes(lambda: check_routes(large, RunFabric(FABRIC)))
    # 64x the transfers (2.1M): the checks held them all (624 MB against 9.8 MB; now 1.7 MB each).
    assert many < 2 * once, f"{once / 1e6:.1f} MB for one iteration, {many / 1e6:.1f} MB for 16 x 4 chunks"


def flow_keys(workload) -> set[tuple[int, ...]]:
    """What a route depends on, per flow (no job here pins a path)."""
    assert workload.pinned_offsets is None
    columns = [
        workload.flow_job,
        workload.flow_source,
        workload.flow_destination,
        workload.flow_source_port,
        workload.flow_destination_qp,
    ]
    return set(map(tuple, np.stack(columns, axis=1).tolist()))


JOBS = [
    ring(rank_count=16, chunks=3, iterations=2, qps_per_connection=2),
    {**ring(rank_count=16), "collective": "REDUCE_SCATTER", "iterations": 3},
    {**ring(rank_count=8), "algorithm": "DOUBLE_BINARY_TREE", "chunks": 3, "iterations": 2},
    {**ring(rank_count=16), "algorithm": "HALVING_DOUBLING", "iterations": 2, "qps_per_connection": 3},
    {**ring(rank_count=8), "collective": "ALL_TO_ALL", "chunks": 2, "iterations": 2},
    {**ring(rank_count=8), "collective": "BROADCAST", "chunks": 4},
    {
        "collective": "POINT_TO_POINT",
        "iterations": 3,
        "qps_per_connection": 2,
        "flows": [
            {"source": "host-0", "destination": "host-9", "size_bytes": 1 << 20},
            {"source": "host-3", "destination": "host-30", "size_bytes": 5000, "udp_source_port": 50000},
        ],
    },
]


@pytest.mark.parametrize("job", JOBS, ids=lambda job: job.get("algorithm", job["collective"]))
def test_the_connections_are_every_distinct_flow_of_the_workload(job):
    both = spec(job, ring(rank_count=8, start_ns=1000))  # with a second job: job indices differ
    full, connections = build_workload(both, FABRIC), connection_workload(both, FABRIC)
    assert flow_keys(connections) == flow_keys(full)
    assert connections.flow_count <= full.flow_count


def test_a_ring_checks_one_transfer_per_rank_and_qp():
    connections = connection_workload(spec(ring(iterations=4, chunks=2, qps_per_connection=2)), FABRIC)
    assert connections.transfer_count == 128 and connections.flow_count == 256
