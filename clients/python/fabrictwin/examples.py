"""The example scenarios shipped with FabricTwin: transports and faults, each a comparison.

`fabrictwin example run NAME` (or `all`) creates the example's fabric if it is missing, runs its
simulations side by side and prints what they show. Every example is a few simulations of a small
fabric, seconds each:

- `go-back-n-marginal`: Go-Back-N under a marginal transceiver (bursty loss) against the same mean
  loss as independent bit errors, and a clean run.
- `pfc-incast`: an incast without and with PFC, and an innocent flow that shares the paused ports.
- `dcqcn-fair-share`: four senders into one port, PFC alone against PFC with ECN/DCQCN.
- `ib-credits-incast`: the PFC example's incast on InfiniBand credits, against lossy RoCEv2.
- `sharp-vs-ring`: AllReduce with SHARP in-network reduction against the ring, on InfiniBand.
- `link-failure-reroute`: an uplink failing under the three routing reactions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, TypedDict

from fabrictwin.client import Client
from fabrictwin.errors import NotFoundError
from fabrictwin.format import format_duration_ns, render_table
from fabrictwin.v1 import common_pb2, simulation_pb2, topology_pb2

__all__ = ["EXAMPLES", "Example", "run_example"]

S = simulation_pb2
GBN = S.RoceConfig(window_bytes=256 * 1024)


@dataclasses.dataclass(frozen=True)
class Example:
    """One shipped scenario: its fabric, its runs (label, spec) and what to read in the results."""

    name: str
    title: str
    fabric_id: str
    runs: Callable[[Client, str], list[tuple[str, simulation_pb2.SimulationSpec]]]
    explain: Callable[[list[tuple[str, simulation_pb2.Simulation]]], list[str]]


def _fabric(client: Client, fabric_id: str) -> str:
    """The example's fabric, created on first use (fat-trees and leaf-spines at 100 Gb/s)."""
    name = f"fabrics/{fabric_id}"
    try:
        client.fabrics.get(name)
    except NotFoundError:
        if fabric_id == "example-ft4":
            client.fabrics.create_fat_tree(4, fabric_id=fabric_id, link_speed_gbps=100)
        else:  # example-ls: two leaves of four hosts under one spine
            client.fabrics.create_leaf_spine(2, 1, 4, fabric_id=fabric_id, link_speed_gbps=100)
    return name


def _hosts(client: Client, fabric: str) -> list[str]:
    return [node.display_name for node in client.fabrics.nodes(fabric, kind="host")]


def _uplink(client: Client, fabric: str) -> topology_pb2.Link:
    """The fabric's first switch-to-switch link."""
    hosts = {node.name for node in client.fabrics.nodes(fabric, kind="host")}
    return next(link for link in client.fabrics.links(fabric) if hosts.isdisjoint({link.node_a, link.node_b}))


def _host_link(client: Client, fabric: str) -> topology_pb2.Link:
    """The link of the fabric's first host."""
    first = next(iter(client.fabrics.nodes(fabric, kind="host"))).name
    return next(link for link in client.fabrics.links(fabric) if first in (link.node_a, link.node_b))


def _spec(
    fabric: str, jobs: Sequence[simulation_pb2.Job], mode: str = "ECMP", **fields: Any
) -> S.SimulationSpec:
    return S.SimulationSpec(
        fabric=fabric,
        fidelity=fields.pop("fidelity", S.FIDELITY_PACKET),
        jobs=list(jobs),
        load_balancing=common_pb2.LoadBalancing(
            mode=common_pb2.LoadBalancingMode.Value(f"LOAD_BALANCING_MODE_{mode}")
        ),
        seed=1,
        **fields,
    )


def _ring(size: int, placement: S.PlacementPolicy.ValueType = S.PLACEMENT_POLICY_PACKED) -> S.Job:
    return S.Job(collective=S.COLLECTIVE_ALL_REDUCE, size_bytes=size, rank_count=16, placement=placement)


def _flows(label: str, hosts: list[str], pairs: Sequence[tuple[int, int]], size: int) -> S.Job:
    flows = [S.FlowSpec(source=hosts[s], destination=hosts[d], size_bytes=size) for s, d in pairs]
    return S.Job(label=label, collective=S.COLLECTIVE_POINT_TO_POINT, flows=flows)


def _job(simulation: S.Simulation, label: str) -> S.JobResult:
    return next(job for job in simulation.result.jobs if job.label == label)


# ---- 1. Go-Back-N under a marginal transceiver --------------------------------------------------------
# Gilbert-Elliott: P(good->bad) 0.002, P(bad->good) 0.1 per packet: 2% of packets in the bad state,
# losing half there, so 1% on average, in bursts of about ten packets. The same mean loss as
# independent bit errors: 0.0098 = 1 - (1 - BER)^(4178 x 8).
class _GilbertElliott(TypedDict):
    """A Fault's Gilbert-Elliott fields (typed, for `S.Fault(..., **MARGINAL)`)."""

    good_loss: float
    bad_loss: float
    p_good_to_bad: float
    p_bad_to_good: float


MARGINAL = _GilbertElliott(good_loss=0.0, bad_loss=0.5, p_good_to_bad=0.002, p_bad_to_good=0.1)
SAME_MEAN_BER = 2.95e-7


def _gbn_runs(client: Client, fabric: str) -> list[tuple[str, S.SimulationSpec]]:
    link = str(_host_link(client, fabric).index)
    marginal = S.Fault(link=link, kind=S.FAULT_KIND_GILBERT_ELLIOTT, **MARGINAL)
    ber = S.Fault(link=link, kind=S.FAULT_KIND_BIT_ERRORS, bit_error_rate=SAME_MEAN_BER)
    jobs = [_ring(16 << 20)]
    return [
        ("clean", _spec(fabric, jobs, "ADAPTIVE", roce=GBN)),
        ("marginal-bursty", _spec(fabric, jobs, "ADAPTIVE", roce=GBN, faults=[marginal])),
        ("same-mean-independent", _spec(fabric, jobs, "ADAPTIVE", roce=GBN, faults=[ber])),
    ]


def _gbn_explain(results: list[tuple[str, S.Simulation]]) -> list[str]:
    lines = []
    for label, sim in results:
        job = sim.result.jobs[0]
        lines.append(
            f"{label}: {sim.result.corrupted_packets} packets lost (PortRcvErrors), "
            f"{job.retransmitted_packets} resent ({job.retransmitted_bytes / 2**20:.1f} MiB), "
            f"longest recovery {format_duration_ns(job.max_recovery_ns)}"
        )
    lines.append(
        "A loss costs Go-Back-N everything sent after it, and a lost tail a retransmission timeout: the "
        "ring waits for the flow behind the bad link. Losses in a burst mostly fall in one window and "
        "share one resend; the same mean loss spread out costs a window each, so it resends more."
    )
    return lines


# ---- 2. PFC incast and head-of-line blocking -------------------------------------------------------
def _incast_jobs(hosts: list[str]) -> list[S.Job]:
    # host-1, host-2 (leaf-0) and host-4 (leaf-1) into host-0; the innocent flow host-5 -> host-3 shares
    # spine -> leaf-0 with the incast, though host-3 is idle.
    return [
        _flows("incast", hosts, [(1, 0), (2, 0), (4, 0)], 2 << 20),
        _flows("innocent", hosts, [(5, 3)], 1 << 20),
    ]


def _pfc_runs(client: Client, fabric: str) -> list[tuple[str, S.SimulationSpec]]:
    jobs = _incast_jobs(_hosts(client, fabric))
    return [
        ("innocent-alone", _spec(fabric, jobs[1:], roce=GBN, buffer_bytes=256 * 1024)),
        ("lossy-go-back-n", _spec(fabric, jobs, roce=GBN, buffer_bytes=256 * 1024)),
        (
            "pfc",
            _spec(
                fabric, jobs, roce=S.RoceConfig(pfc=True, window_bytes=256 * 1024), buffer_bytes=256 * 1024
            ),
        ),
    ]


def _pfc_explain(results: list[tuple[str, S.Simulation]]) -> list[str]:
    alone = _job(results[0][1], "innocent").completion_ns
    lines = []
    for label, sim in results[1:]:
        innocent = _job(sim, "innocent").completion_ns
        pauses = sum(link.pause_frames for link in sim.result.links)
        lines.append(
            f"{label}: {sim.result.drops} drops, {pauses} PAUSE frames; the innocent flow takes "
            f"{format_duration_ns(innocent)} ({innocent / alone:.2f}x its time alone)"
        )
    lines.append(
        "PFC removes the drops but pauses spine -> leaf-0 for host-0's backlog: the innocent flow to an "
        "idle host waits behind it (head-of-line blocking)."
    )
    return lines


# ---- 3. DCQCN convergence to a fair share --------------------------------------------------------------
# A parking lot: host-1 (on leaf-0) and three senders behind the spine into host-0. leaf-0's FIFO serves
# its two input ports alike, so PFC alone gives host-1 half of host-0's port and the others a sixth each.
# "Tuned": a CNP per 4 us (ConnectX's minimum interval), marking from 5 KB to Pmax 0.2 at 50 KB, R_AI
# 500 Mb/s.
class _DcqcnTuning(TypedDict):
    """RoceConfig's DCQCN tuning fields (typed, for `S.RoceConfig(..., **TUNED_DCQCN)`)."""

    cnp_interval_ns: int
    ecn_kmax_bytes: int
    ecn_pmax: float
    rate_ai_mbps: float


class _LosslessRoce(TypedDict):
    """RoceConfig's PFC and Go-Back-N fields."""

    pfc: bool
    window_bytes: int


TUNED_DCQCN = _DcqcnTuning(cnp_interval_ns=4000, ecn_kmax_bytes=50_000, ecn_pmax=0.2, rate_ai_mbps=500.0)


def _dcqcn_runs(client: Client, fabric: str) -> list[tuple[str, S.SimulationSpec]]:
    jobs = [_flows("incast", _hosts(client, fabric), [(1, 0), (4, 0), (5, 0), (6, 0)], 16 << 20)]
    common = _LosslessRoce(pfc=True, window_bytes=1 << 20)
    return [
        ("pfc-only", _spec(fabric, jobs, roce=S.RoceConfig(**common), buffer_bytes=4 << 20)),
        (
            "dcqcn-defaults",
            _spec(fabric, jobs, roce=S.RoceConfig(**common, dcqcn=True), buffer_bytes=4 << 20),
        ),
        (
            "dcqcn-tuned",
            _spec(fabric, jobs, roce=S.RoceConfig(**common, dcqcn=True, **TUNED_DCQCN), buffer_bytes=4 << 20),
        ),
    ]


def _dcqcn_explain(results: list[tuple[str, S.Simulation]]) -> list[str]:
    lines = []
    for label, sim in results:
        rates = [f.size_bytes * 8 / max(1, f.finish_ns - f.start_ns) for f in sim.result.flows]
        jain = sum(rates) ** 2 / (len(rates) * sum(r * r for r in rates))
        pauses = sum(link.pause_frames for link in sim.result.links)
        lines.append(
            f"{label}: per-sender Gb/s {' '.join(f'{r:.1f}' for r in rates)} (Jain {jain:.3f}); "
            f"{pauses} PAUSE frames, {sim.result.ecn_marked_packets} ECN-marked, {sim.result.cnp_sent} CNPs"
        )
    lines.append(
        "PFC alone is fair per input port, not per flow: host-1 gets half of host-0's port. DCQCN cuts "
        "whoever its marks and CNPs find sending too fast: with the paper's defaults (CNPs at most every "
        "50 us, R_AI 40 Mb/s) it barely converges at 100 Gb/s; marking earlier with faster CNPs evens the "
        "senders out, at some cost in utilisation while rates recover."
    )
    return lines


# ---- 4. InfiniBand credits under the same incast --------------------------------------------------
def _ib_runs(client: Client, fabric: str) -> list[tuple[str, S.SimulationSpec]]:
    jobs = _incast_jobs(_hosts(client, fabric))
    ib = S.InfinibandConfig(vl_buffer_bytes=64 * 1024)
    return [
        ("rocev2-lossy", _spec(fabric, jobs, roce=GBN, buffer_bytes=256 * 1024)),
        ("infiniband-credits", _spec(fabric, jobs, transport=S.TRANSPORT_INFINIBAND, infiniband=ib)),
    ]


def _ib_explain(results: list[tuple[str, S.Simulation]]) -> list[str]:
    lines = []
    for label, sim in results:
        peak = max(link.peak_input_buffer_bytes for link in sim.result.links)
        lines.append(
            f"{label}: {sim.result.drops} congestion drops, {sim.result.retransmitted_packets} resent, "
            f"PortXmitWait {format_duration_ns(sim.result.xmit_wait_ns)} in all, peak input buffer "
            f"{peak / 1024:.0f} KiB"
        )
    lines.append(
        "A sender transmits only with credit for the next buffer: nothing overflows (the peak never "
        "passes the 64 KiB VL buffer) and the backlog shows as PortXmitWait instead of drops."
    )
    return lines


# ---- 5. SHARP against the ring ---------------------------------------------------------------------------
def _sharp_runs(client: Client, fabric: str) -> list[tuple[str, S.SimulationSpec]]:
    ring = _ring(256 << 20)
    sharp = S.Job()
    sharp.CopyFrom(ring)
    sharp.algorithm = S.COLLECTIVE_ALGORITHM_SHARP
    return [
        ("ring", _spec(fabric, [ring], fidelity=S.FIDELITY_FLOW, transport=S.TRANSPORT_INFINIBAND)),
        ("sharp", _spec(fabric, [sharp], fidelity=S.FIDELITY_FLOW, transport=S.TRANSPORT_INFINIBAND)),
    ]


def _sharp_explain(results: list[tuple[str, S.Simulation]]) -> list[str]:
    (_, ring), (_, sharp) = results
    n = ring.result.jobs[0].ranks
    host_bytes = [sum(link.bytes for link in sim.result.links if link.tier == 1) for sim in (ring, sharp)]
    return [
        f"host-link traffic: ring {host_bytes[0] / 2**30:.2f} GiB, SHARP {host_bytes[1] / 2**30:.2f} GiB "
        f"({host_bytes[1] / max(1, host_bytes[0]):.2f}x)",
        f"time: SHARP/ring {sharp.result.jobs[0].completion_ns / ring.result.jobs[0].completion_ns:.3f}; "
        f"closed form n/(2(n-1)) = {n / (2 * (n - 1)):.3f} for n={n}",
        "Each host sends and receives S once instead of 2(n-1)/n x S: close to half the time at scale, "
        "the vendor's 'up to 50%'. Small messages gain less: the tree's latency does not shrink.",
    ]


# ---- 6. A link failure under three routing reactions --------------------------------------------------
def _failure_runs(client: Client, fabric: str) -> list[tuple[str, S.SimulationSpec]]:
    uplink = str(_uplink(client, fabric).index)
    jobs = [_ring(16 << 20, S.PLACEMENT_POLICY_SCATTERED)]
    runs = [("no-failure", _spec(fabric, jobs, "SPRAY", roce=GBN))]
    for name in ("SUBNET_MANAGER", "ROUTING_PROTOCOL", "FAST_RECOVERY"):
        fault = S.Fault(
            link=uplink,
            kind=S.FAULT_KIND_LINK_DOWN,
            start_ns=20_000,
            reroute=S.RerouteModel.Value(f"REROUTE_MODEL_{name}"),
        )
        runs.append((name.lower().replace("_", "-"), _spec(fabric, jobs, "SPRAY", roce=GBN, faults=[fault])))
    return runs


def _failure_explain(results: list[tuple[str, S.Simulation]]) -> list[str]:
    lines = []
    for label, sim in results[1:]:
        reaction = next((n for n in sim.result.model_notes if "reroute takes effect" in n), "")
        lines.append(
            f"{label}: {sim.result.xmit_discards} discarded at the dead port (PortXmitDiscards), "
            f"{sim.result.lost_on_wire} lost on its wire, {sim.result.discarded_packets} discarded out of "
            f"order by Go-Back-N receivers; {reaction}"
        )
    lines.append(
        "The leaf stops spraying onto its dead uplink at once (a switch sees its own link state), but "
        "until the routes change the switches above keep sending down through the aggregation switch, "
        "whose only port to that leaf is dead: it discards, Go-Back-N resends, and the ring stalls for "
        "the routing reaction's delay, microseconds to a second. After the repair the pod has fewer "
        "uplinks, sprayed packets arrive out of order, and a Go-Back-N receiver throws away everything "
        "after a gap: even fast recovery leaves the ring several times slower (spraying wants a "
        "reordering NIC, not Go-Back-N)."
    )
    return lines


EXAMPLES = {
    e.name: e
    for e in (
        Example(
            "go-back-n-marginal",
            "Go-Back-N under a marginal transceiver",
            "example-ft4",
            _gbn_runs,
            _gbn_explain,
        ),
        Example("pfc-incast", "PFC incast and head-of-line blocking", "example-ls", _pfc_runs, _pfc_explain),
        Example(
            "dcqcn-fair-share", "DCQCN convergence to a fair share", "example-ls", _dcqcn_runs, _dcqcn_explain
        ),
        Example(
            "ib-credits-incast",
            "InfiniBand credits under the same incast",
            "example-ls",
            _ib_runs,
            _ib_explain,
        ),
        Example(
            "sharp-vs-ring",
            "SHARP in-network reduction against the ring",
            "example-ft4",
            _sharp_runs,
            _sharp_explain,
        ),
        Example(
            "link-failure-reroute",
            "A link failure: subnet manager, routing protocol, fast recovery",
            "example-ft4",
            _failure_runs,
            _failure_explain,
        ),
    )
}


def run_example(
    client: Client, name: str, timeout: float | None = None
) -> tuple[str, list[tuple[str, S.Simulation]]]:
    """Run one example; returns its report and the finished simulations, in run order."""
    example = EXAMPLES[name]
    fabric = _fabric(client, example.fabric_id)
    runs = example.runs(client, fabric)
    started = [(label, client.simulations.start(spec).name) for label, spec in runs]
    for _, simulation_name in started:
        client.simulations.wait(simulation_name, timeout=timeout)
    # with per-flow results
    finished = [(label, client.simulations.get(simulation_name)) for label, simulation_name in started]
    failed = [(label, sim) for label, sim in finished if sim.state != common_pb2.JOB_STATE_SUCCEEDED]
    if failed:
        label, sim = failed[0]
        raise RuntimeError(
            f"{name}: run {label} ended {common_pb2.JobState.Name(sim.state)}: {sim.error.message}"
        )
    first = finished[0][1].result.makespan_ns
    rows = [
        [
            label,
            format_duration_ns(r.makespan_ns),
            f"{r.makespan_ns / first:.2f}x",
            r.drops,
            r.retransmitted_packets,
            sum(link.pause_frames for link in r.links),
            r.ecn_marked_packets,
            r.cnp_sent,
            r.xmit_discards + r.lost_on_wire,
        ]
        for label, r in ((label, sim.result) for label, sim in finished)
    ]
    table = render_table(
        [
            "RUN",
            "COMPLETION",
            "VS_FIRST",
            "DROPS",
            "RESENT",
            "PAUSES",
            "ECN_MARKED",
            "CNPS",
            "LINK_DOWN_LOST",
        ],
        rows,
    )
    report = "\n".join([f"== {example.name}: {example.title} ({fabric})", table, *example.explain(finished)])
    return report, finished
