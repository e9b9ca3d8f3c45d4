"""What the FLOW model does and does not model for a spec, in words a reader can check."""

from __future__ import annotations

from services.simulator.flow.steady import SteadyRun
from services.simulator.modes import mode_of
from services.simulator.pinning import flow_option_notes
from services.simulator.spec import Algorithm, SimulationSpec, Transport, job_labels, wire_overhead_bytes

__all__ = ["flow_model_notes", "steady_model_notes"]


def flow_model_notes(spec: SimulationSpec) -> list[str]:
    """The FLOW engine's notes for `spec` (validated), its load-balancing mode's among them."""
    lb = spec.load_balancing
    assert lb is not None and lb.mode is not None
    overhead = (
        "wire overhead (header_bytes)" if spec.header_bytes else f"{spec.transport.value} wire overhead"
    )
    notes = [
        "FLOW fidelity: max-min fair sharing of link bandwidth, recomputed at every flow start and "
        "end; no queues, drops, PFC or retransmissions.",
        f"Each packet of up to {spec.mtu_bytes} payload bytes carries {wire_overhead_bytes(spec)} bytes of "
        f"{overhead}: "
        "flows move wire bytes at the link rate, links count wire bytes, and so does the ideal "
        "completion.",
        "Collective steps wait per rank, not at a global barrier: a chunk is sent once the data it "
        "needs has arrived and the rank's previous send on the connection has left.",
    ]
    notes += mode_of(lb).flow_notes(lb)
    if any(job.iterations > 1 for job in spec.jobs):
        notes.append("With several iterations, completion_ns covers all of them; algbw/busbw use the mean.")
    if spec.transport == Transport.INFINIBAND:
        notes.append("InfiniBand transport: credits and VLs do not change FLOW results.")
    notes += flow_option_notes(spec)
    if any(job.algorithm == Algorithm.SHARP for job in spec.jobs):
        notes.append(
            "SHARP at FLOW fidelity: one aggregation tree per job; each switch reduces a chunk once it has "
            "arrived from all its children and forwards it whole (SHARP hardware streams packets); SHARP "
            "hops stay on the tree's links whatever the load-balancing mode."
        )
    return notes


def steady_model_notes(
    spec: SimulationSpec, run: SteadyRun, completions: list[int], flows: int, kept: int
) -> list[str]:
    """FLOW_STEADY's notes: FLOW's, its first line replaced by what the steady state keeps and leaves."""
    notes = flow_model_notes(spec)
    notes[0] = (
        "FLOW_STEADY fidelity: each QP flow of a ring sends at one rate whenever it sends "
        f"({run.rates_bps.min() / 1e9:.1f} to {run.rates_bps.max() / 1e9:.1f} Gb/s here): its max-min "
        "fair rate with all sending, raised where the connections it shares links with send only part "
        "of the time (it meets each as often as that one sends, as if their phases were independent); "
        "the rings' steps follow from those rates. FLOW recomputes rates as flows start and end. No "
        "queues, drops, PFC or retransmissions."
    )
    settled = "settled" if run.converged else "had not settled (the last one kept)"
    notes.append(
        f"The rings' {flows} flows were computed step by step in {run.passes} passes (the rates {settled}), "
        f"none held; per-flow results list the first {kept}."
    )
    labels = job_labels(spec.jobs)
    for label, all_meet, completion in zip(labels, run.all_meet_ns, completions, strict=True):
        if completion > 0 and all_meet != completion:
            notes.append(
                "Had every flow met the flows it shares links with all the time (its max-min rate, the "
                f"first passes), {label} would have ended {all_meet} ns after its start "
                f"({100 * (all_meet / completion - 1):+.1f}%): FLOW's completion usually lies between the "
                'two (README, "FLOW, FLOW_STEADY or PACKET").'
            )
    if len(labels) > 1:
        notes.append(
            "With several jobs a run has phases, from one job's start or end to the next: a transfer "
            "takes the rates of the phase it starts in (the jobs running then), and a connection's "
            "duty is counted per phase. Against FLOW: -1.6% to +2.6% per job on the pairs of rings "
            "measured."
        )
    return notes
