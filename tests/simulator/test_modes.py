"""Each load-balancing mode is one module behind the `Mode` Protocol, and both engines, the checks and
the notes reach it through the registry alone."""

from __future__ import annotations

import dataclasses

import pytest

from services.common.errors import InvalidArgument
from services.simulator.engines import engine_for
from services.simulator.modes import MODES, mode_of
from services.simulator.modes.ecmp import Ecmp
from services.simulator.packet import PacketEngine, layout
from services.simulator.runner import run_simulation
from services.simulator.spec import Fidelity, LoadBalancingMode, LoadBalancingSpec, SimulationSpec
from services.simulator.validation import validate_spec
from tests.simulator.fabrics import leaf_spine, point_to_point_spec


def test_every_mode_of_the_api_is_registered():
    assert set(MODES) == set(LoadBalancingMode)
    for name, mode in MODES.items():
        assert mode.mode == name and mode_of(name) is mode


def test_each_modes_packet_code_is_the_one_the_packet_loop_switches_on():
    def code(mode, **settings):
        return MODES[mode].packet_code(LoadBalancingSpec(mode=mode, **settings))

    assert code(LoadBalancingMode.ECMP) == layout.MODE_ECMP
    assert code(LoadBalancingMode.ADAPTIVE) == layout.MODE_ADAPTIVE
    assert code(LoadBalancingMode.SPRAY) == layout.MODE_SPRAY
    assert code(LoadBalancingMode.SPRAY, spray_random=True) == layout.MODE_SPRAY_RANDOM
    assert code(LoadBalancingMode.FLOWLET, flowlet_gap_ns=2000) == layout.MODE_FLOWLET


def test_only_ecmp_pins_each_flow_to_one_path():
    assert {name for name, mode in MODES.items() if mode.pins_flows} == {LoadBalancingMode.ECMP}


def test_the_packet_engine_of_the_registry_is_the_packet_packages_own():
    assert type(engine_for(Fidelity.PACKET)) is PacketEngine


@pytest.mark.parametrize(
    ("mode", "fidelity", "settings", "field", "problem"),
    [
        ("FLOWLET", "FLOW", {"flowlet_gap_ns": 2000}, "load_balancing.mode", "FLOWLET needs PACKET fidelity"),
        ("FLOWLET", "PACKET", {}, "load_balancing.flowlet_gap_ns", "positive idle gap"),
        (
            "SPRAY",
            "FLOW",
            {"flowlet_gap_ns": 2000},
            "load_balancing.flowlet_gap_ns",
            "FLOWLET only, not SPRAY",
        ),
        ("ECMP", "FLOW", {"spray_random": True}, "load_balancing.spray_random", "SPRAY only, not ECMP"),
    ],
)
def test_a_mode_is_refused_where_it_is_not_modelled_and_so_are_other_modes_fields(
    mode, fidelity, settings, field, problem
):
    fabric = leaf_spine(2, 2, 2)
    spec = point_to_point_spec(fabric, [(0, 2, 4096)], fidelity=fidelity)
    spec["load_balancing"] = {"mode": mode, **settings}
    with pytest.raises(InvalidArgument) as caught:
        validate_spec(SimulationSpec.from_dict(spec))
    assert caught.value.field == field and problem in str(caught.value)


@dataclasses.dataclass
class _PinnedLikeEcmp(Ecmp):
    """ADAPTIVE replaced by a mode that hashes like ECMP: what a new mode module would register."""

    mode: LoadBalancingMode = LoadBalancingMode.ADAPTIVE
    fidelities: frozenset[Fidelity] = frozenset({Fidelity.FLOW})

    def flow_notes(self, lb: LoadBalancingSpec) -> list[str]:
        return ["the registered replacement ran"]


def test_the_registered_mode_is_the_one_routing_validation_and_notes_use(monkeypatch):
    fabric = leaf_spine(2, 2, 2)
    spec = point_to_point_spec(fabric, [(0, 2, 1 << 20)], fidelity="FLOW")
    spec["load_balancing"] = {"mode": "ADAPTIVE"}
    split = run_simulation(spec, fabric)
    assert split.flows.path_offsets[-1] == 0  # an even split: no single path to report
    monkeypatch.setitem(MODES, LoadBalancingMode.ADAPTIVE, _PinnedLikeEcmp())
    pinned = run_simulation(spec, fabric)
    assert pinned.flows.path_offsets[-1] == 4  # one path, four links: the replacement's split
    assert "the registered replacement ran" in pinned.model_notes
    with pytest.raises(InvalidArgument, match="ADAPTIVE needs FLOW fidelity"):
        run_simulation({**spec, "fidelity": "PACKET"}, fabric)
