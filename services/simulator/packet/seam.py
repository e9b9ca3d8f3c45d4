"""The packet engine behind the `Engine` seam (engine.py): what it refuses, what its series cost,
and the run (outcome.py).

Everything outside this package reaches the PACKET engine through `PacketEngine` alone: its limits
(packets per flow, series bytes), PFC thresholds and LINK_DOWN faults (which what-if routings a run
needs, and whether its routes survive) are refused here, before StartSimulation returns.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.common.errors import InvalidArgument
from services.common.snapshot import FabricSnapshot
from services.simulator.engine import PlacedRun, Progress, RunFabric
from services.simulator.packet.arrays import (
    MAX_BINS,
    MAX_PACKETS_PER_FLOW,
    MAX_SERIES_BYTES,
    flow_bits_bytes,
    series_cell_bytes,
)
from services.simulator.packet.link_faults import check_routes_survive, down_sets, link_fault_plan
from services.simulator.packet.outcome import run_packet_simulation
from services.simulator.packet.transport import pfc_thresholds
from services.simulator.results import SimulationOutcome
from services.simulator.series import refuse_sample_interval
from services.simulator.spec import SimulationSpec
from services.simulator.workload import Workload

__all__ = ["PacketEngine"]


def _counted(spec: SimulationSpec) -> bool:
    """Whether the run's series carry per-port counters (faults, PFC or DCQCN)."""
    return bool(spec.faults or spec.pfc or spec.dcqcn)


class PacketEngine:
    """Packets through output-queued switch ports (services.simulator.packet)."""

    def check_placed(
        self, spec: SimulationSpec, snapshot: FabricSnapshot, placed: PlacedRun
    ) -> list[tuple[int, ...]]:
        """Packets per flow, series that can fit, PFC thresholds against the buffer, LINK_DOWN faults
        (links, pinned flows, hosts that a link down for good would cut off); returns the sets of down
        links whose routings the run needs (`link_faults.down_sets`)."""
        self._check_packets_per_flow(spec, placed)
        self._check_series(spec, snapshot, placed)
        pfc_thresholds(spec, snapshot)
        down = down_sets(spec, snapshot)
        check_routes_survive(spec, snapshot, list(placed.hosts))
        return down

    def series_memory_bytes(self, spec: SimulationSpec, snapshot: FabricSnapshot, shortest_ns: int) -> int:
        """What the engine allocates at first: MAX_BINS intervals, or twice the expected run's at a
        fixed `sample_interval_ns`, one row per link direction, at most MAX_SERIES_BYTES."""
        bins = MAX_BINS
        if spec.sample_interval_ns:
            bins = 2 * -(-shortest_ns // spec.sample_interval_ns) + 2
        return min(MAX_SERIES_BYTES, snapshot.num_channels * bins * series_cell_bytes(_counted(spec)))

    def flow_memory_bytes(
        self, spec: SimulationSpec, snapshot: FabricSnapshot, flows: int, connections: Sequence[int]
    ) -> int:
        """The bitset of the flows that used each link, kept under per-packet modes (arrays.py);
        routes are counted per packet (admission)."""
        return flow_bits_bytes(spec.load_balancing, snapshot.num_channels, flows)

    def check(self, spec: SimulationSpec, fabric: RunFabric, workload: Workload) -> None:
        """LINK_DOWN faults: the routes of every link-down set must carry the workload, or the run
        could never finish (a link down for good that leaves no route is InvalidArgument naming the
        fault; a routing missing from `fabric.what_if` is FailedPrecondition)."""
        if spec.faults:
            link_fault_plan(spec, fabric.snapshot, workload, fabric.what_if)

    def simulate(
        self, spec: SimulationSpec, fabric: RunFabric, workload: Workload, progress: Progress | None
    ) -> SimulationOutcome:
        return run_packet_simulation(spec, fabric, workload, progress)

    def _check_packets_per_flow(self, spec: SimulationSpec, placed: PlacedRun) -> None:
        """The engine numbers at most MAX_PACKETS_PER_FLOW - 1 packets per QP flow."""
        for i, (job, largest) in enumerate(zip(spec.jobs, placed.largest_flow_bytes, strict=True)):
            packets = -(-largest // spec.mtu_bytes)
            if packets < MAX_PACKETS_PER_FLOW:
                continue
            field = f"jobs[{i}].size_bytes"
            if job.flows:
                biggest = max(range(len(job.flows)), key=lambda k: job.flows[k].size_bytes)
                field = f"jobs[{i}].flows[{biggest}].size_bytes"
            raise InvalidArgument(
                field,
                f"a QP flow of {largest} bytes is {packets} packets of mtu_bytes={spec.mtu_bytes}; "
                f"the packet engine carries at most {MAX_PACKETS_PER_FLOW - 1} per flow: use a larger "
                "mtu_bytes, more chunks or more qps_per_connection",
            )

    def _check_series(self, spec: SimulationSpec, snapshot: FabricSnapshot, placed: PlacedRun) -> None:
        """Refuse a sample interval whose series (a row per link direction of the fabric) cannot fit
        however the run goes; a run that turns out longer gets a wider interval, which its notes say."""
        interval = spec.sample_interval_ns
        if not interval:
            return
        channels = snapshot.num_channels
        cell = series_cell_bytes(_counted(spec))
        intervals = -(-placed.shortest_ns // interval)
        if channels * intervals * cell > MAX_SERIES_BYTES:
            refuse_sample_interval(
                interval, placed.shortest_ns, channels, MAX_SERIES_BYTES // max(1, channels * cell)
            )
