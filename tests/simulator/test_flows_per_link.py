"""`LinkTotal.flows` counts the flows that used a link, not those that could have.

Measured before: under ADAPTIVE and SPRAY the count came from each flow's equal-cost routes, so a
flow of one packet, which can take only one path, counted on every spine uplink it might have taken.
Closed forms: a one-packet flow crosses exactly its hop count of channels; n packets sprayed
round-robin over s spines use min(n, s) of them; under ECMP (a pinned path) the routes' count is
the actual one and stays.
"""

from __future__ import annotations

import pytest

from services.simulator.runner import run_simulation
from tests.simulator.fabrics import leaf_spine, point_to_point_spec

MTU = 4096


def flows_on(outcome, prefix: str) -> dict[str, int]:
    names = outcome.channels.display_names
    return {n: int(f) for n, f in zip(names, outcome.channels.flows, strict=True) if n.startswith(prefix)}


@pytest.mark.parametrize("mode", ["SPRAY", "ADAPTIVE"])
def test_a_one_packet_flow_counts_on_the_one_path_it_took(mode):
    fabric = leaf_spine(2, 4, 1)  # host-0 on leaf-0, host-1 on leaf-1, four spines between them
    spec = point_to_point_spec(fabric, [(0, 1, MTU)], fidelity="PACKET", load_balancing={"mode": mode})
    outcome = run_simulation(spec, fabric)
    used = {n: f for n, f in zip(outcome.channels.display_names, outcome.channels.flows, strict=True) if f}
    # host -> leaf -> spine -> leaf -> host: four channels, each crossed by the one flow once.
    assert sorted(used.values()) == [1, 1, 1, 1]
    assert sum(1 for n in used if n.startswith("leaf-0->spine-")) == 1


def test_sprayed_packets_count_their_flow_on_each_spine_they_used():
    fabric = leaf_spine(2, 4, 1)
    spec = point_to_point_spec(fabric, [(0, 1, 2 * MTU)], fidelity="PACKET", load_balancing={"mode": "SPRAY"})
    uplinks = flows_on(run_simulation(spec, fabric), "leaf-0->spine-")
    assert sorted(uplinks.values(), reverse=True)[:2] == [1, 1]  # two packets, round-robin: two spines
    assert sum(uplinks.values()) == 2


def test_under_ecmp_the_pinned_path_is_the_count():
    fabric = leaf_spine(2, 4, 2)
    flows = [(0, 2, 8 * MTU), (1, 3, 8 * MTU)]
    spec = point_to_point_spec(fabric, flows, fidelity="PACKET", load_balancing={"mode": "ECMP"})
    uplinks = flows_on(run_simulation(spec, fabric), "leaf-0->spine-")
    assert sum(uplinks.values()) == 2  # each flow on exactly one uplink


def test_admission_counts_the_bitset_where_it_is_kept():
    from services.simulator.admission import estimate_cost
    from services.simulator.spec import SimulationSpec
    from services.simulator.workload import place_jobs

    fabric = leaf_spine(4, 4, 4)
    job = {"collective": "ALL_REDUCE", "size_bytes": 1 << 20, "rank_count": 16, "placement": "SCATTERED"}

    def cost(mode: str):
        data = {"fabric": "f", "fidelity": "PACKET", "jobs": [job], "load_balancing": {"mode": mode}}
        spec = SimulationSpec.from_dict(data)
        return estimate_cost(spec, fabric, place_jobs(spec, fabric))

    sprayed, pinned = cost("SPRAY"), cost("ECMP")
    assert sprayed.flows == 16 * 2 * 15  # a QP flow per ring step: 2(n-1) steps of 16 ranks
    # One bit per (channel, flow), in 64-bit words: 480 flows take 8 words on each channel.
    assert sprayed.memory_bytes - pinned.memory_bytes == fabric.num_channels * 8 * 8
