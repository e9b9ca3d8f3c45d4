"""Per-interval counter series at PACKET fidelity: receive errors, discards, ECN marks and pauses
per link and interval add up to the run's per-link totals, reach telemetry, and a marginal
transceiver in a simulated run is diagnosed as a lossy link."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from fabrictwin import Client
from fabrictwin.specs import collective_job, marginal_transceiver, simulation_spec
from fabrictwin.v1 import common_pb2, scenario_pb2, simulation_pb2

from services.simulator.runner import run_simulation
from tests.in_process import in_process_stack
from tests.simulator.fabrics import leaf_spine, point_to_point_spec

GBPS = 1_000_000_000
FABRIC = leaf_spine(2, 1, 4, rate_bps=100 * GBPS)
HOSTS = [FABRIC.node_names[h] for h in FABRIC.host_nodes]


def run(**settings):
    flows = [(s, 0, 2 << 20) for s in (4, 5, 6, 7)]
    spec = point_to_point_spec(FABRIC, flows, window_bytes=256 * 1024, sample_interval_ns=20_000, **settings)
    return run_simulation(spec, FABRIC)


def totals(outcome, name: str) -> np.ndarray:
    channels = outcome.channels
    if name in ("rcv_errors", "pause_frames", "pause_ns"):
        return getattr(channels, name)
    return channels.counters[name]


@pytest.mark.parametrize(
    ("settings", "names"),
    [
        ({"pfc": True, "buffer_bytes": 1 << 20}, ("pause_frames", "pause_ns")),
        ({"pfc": True, "dcqcn": True, "buffer_bytes": 4 << 20}, ("ecn_marked_packets", "pause_frames")),
        (
            {"faults": [{"link": "host-4<->leaf-1", "kind": "BIT_ERRORS", "bit_error_rate": 1e-6}]},
            ("rcv_errors",),
        ),
    ],
)
def test_each_interval_series_adds_up_to_the_links_total(settings, names):
    outcome = run(**settings)
    series = outcome.series
    np.testing.assert_array_equal(series.channels, outcome.channels.channels)
    for name in names:
        per_link = series.counters[name].sum(axis=1)
        assert per_link.sum() > 0, name
        np.testing.assert_array_equal(per_link, totals(outcome, name), err_msg=name)


def test_a_run_with_nothing_to_count_carries_no_counter_series():
    assert run().series.counters == {}


@pytest.fixture
async def stack(tmp_path):
    async with in_process_stack(tmp_path) as running:
        yield running


async def test_a_marginal_transceiver_in_a_simulated_run_is_diagnosed_as_a_lossy_link(stack):
    def as_a_script_would() -> tuple[simulation_pb2.Simulation, scenario_pb2.Diagnosis]:
        with Client(**stack.addresses) as client:
            client.fabrics.create_leaf_spine(2, 2, 4, fabric_id="ls", link_speed_gbps=100)
            link = next(x for x in client.fabrics.links("ls") if "leaf" in x.display_name)
            spec = simulation_spec(
                "ls",
                [collective_job(ranks=8, size="8MiB")],
                "adaptive",
                fidelity="packet",
                faults=[
                    marginal_transceiver(
                        link.index, good_loss=0.0, bad_loss=0.5, p_good_to_bad=0.01, p_bad_to_good=0.1
                    )
                ],
                roce=simulation_pb2.RoceConfig(window_bytes=256 * 1024),
                telemetry_source="marginal-run",
            )
            done = client.simulations.wait(client.simulations.start(spec).name, timeout=120)
            series = list(client.simulations.link_series(done.name))
            assert sum(sum(x.rcv_errors) for x in series) == done.result.corrupted_packets
            # The diagnosis reads the run's telemetry: receive errors per port and interval.
            return done, client.scenarios.diagnose("marginal-run")

    done, diagnosis = await asyncio.to_thread(as_a_script_would)
    assert done.state == common_pb2.JOB_STATE_SUCCEEDED, done.error.message
    assert done.result.corrupted_packets > 0
    lossy = [f for f in diagnosis.findings if f.kind == scenario_pb2.FINDING_KIND_LOSSY_LINK]
    assert lossy, diagnosis
    assert "receive errors" in lossy[0].evidence
    # The errors are counted where the packets arrive: one of the failing link's two directions.
    errored = {link.display_name for link in done.result.links if link.rcv_errors > 0}
    assert set(lossy[0].ports) <= errored
