import numpy as np
import pytest

from services.common.errors import FailedPrecondition, InvalidArgument
from services.common.pinning import PinningRule
from services.orchestrator.comparison import compare
from services.orchestrator.diagnosis import FindingKind, PortValue, ecmp_pinning, lossy_links
from services.orchestrator.messages import comparison_to_proto
from services.orchestrator.model import JobState, ModeResult, Opaque, Outcome, Run, Scenario, Skew

OK = JobState.SUCCEEDED
SCENARIO = Scenario("scenarios/s", "fabrics/ft8", (), Opaque())


def mode(label: str, makespan: int, ideal: int, hot: float = 0.0, idle: float = 0.0) -> ModeResult:
    skew = Skew(share_hot=hot, share_idle=idle, max_over_mean=1.5)
    outcome = Outcome(makespan_ns=makespan, ideal_completion_ns=ideal, uplink_skew=skew)
    return ModeResult(label, Opaque(), {}, state=OK, outcome=outcome)


def finished(*results: ModeResult) -> Run:
    return Run("scenarios/s/runs/r", SCENARIO, state=OK, results=list(results))


def test_comparison_reports_slowdowns_against_baseline_and_ideal():
    run = finished(mode("ECMP", 3_000_000, 1_000_000, 0.4, 0.3), mode("ADAPTIVE", 1_020_000, 1_000_000))
    result = comparison_to_proto(compare([run]))
    ecmp, adaptive = result.rows
    assert result.baseline == "ECMP"
    assert ecmp.slowdown_vs_baseline == 1.0
    assert adaptive.slowdown_vs_baseline == pytest.approx(0.34)
    assert ecmp.slowdown_vs_ideal == pytest.approx(3.0)
    assert ecmp.uplink_share_hot == pytest.approx(0.4)
    assert "ADAPTIVE finishes 2.94x faster than ECMP" in result.summary


def test_comparison_with_a_named_baseline_and_a_missing_one():
    run = finished(mode("ECMP", 2_000, 1_000), mode("ADAPTIVE", 1_000, 1_000))
    assert compare([run], "ADAPTIVE").rows[0].slowdown_vs_baseline == 2.0
    with pytest.raises(InvalidArgument, match="baseline"):
        compare([run], "SPRAY")


def test_unfinished_runs_cannot_be_compared():
    with pytest.raises(FailedPrecondition, match="JOB_STATE_RUNNING"):
        compare([Run("scenarios/s/runs/r", SCENARIO, state=JobState.RUNNING)])


def ports(values: dict[str, float]) -> list[PortValue]:
    return [PortValue(k, v) for k, v in values.items()]


def test_hot_and_idle_uplinks_at_once_are_diagnosed_as_ecmp_pinning():
    finding = ecmp_pinning(
        ports(
            {"leaf-0->spine-0": 0.95, "leaf-0->spine-1": 0.9, "leaf-0->spine-2": 0.05, "leaf-0->spine-3": 0.1}
        )
    )
    assert finding is not None
    assert finding.kind == FindingKind.ECMP_PINNING
    assert finding.ports == ("leaf-0->spine-0", "leaf-0->spine-1")
    assert "2 of 4 links" in finding.evidence
    assert "hot: leaf-0->spine-0 (95%), leaf-0->spine-1 (90%)" in finding.evidence
    assert "idle: leaf-0->spine-2 (5%), leaf-0->spine-3 (10%)" in finding.evidence


def test_a_pinning_finding_names_at_most_five_hot_and_five_idle_links():
    values = {f"hot-{i}": 0.9 + i / 100 for i in range(7)} | {f"idle-{i}": i / 100 for i in range(7)}
    finding = ecmp_pinning(ports(values))
    assert finding is not None
    assert "hot: hot-6 (96%)," in finding.evidence and "and 2 more" in finding.evidence
    assert "idle: idle-0 (0%), idle-1 (1%)" in finding.evidence


def test_evenly_loaded_uplinks_are_not_pinning():
    assert ecmp_pinning(ports({"a": 0.85, "b": 0.9, "c": 0.88})) is None
    assert ecmp_pinning(ports({"a": 0.5, "b": 0.4})) is None


def test_52_percent_next_to_8_is_pinning_though_nothing_runs_above_80():
    """The seeds' signature is relative: a user's leaf with one uplink at 52% and its neighbour at 8%
    (max/mean 3.46 over its four uplinks) was reported as nothing under fixed 80%/20% thresholds."""
    finding = ecmp_pinning(ports({"leaf0/p3": 0.52, "leaf0/p4": 0.08, "leaf1/p3": 0.0, "leaf1/p4": 0.0}))
    assert finding is not None and finding.ports == ("leaf0/p3",)
    assert "max/mean 3.47" in finding.evidence or "max/mean 3.46" in finding.evidence
    assert "idle: leaf1/p3 (0%), leaf1/p4 (0%), leaf0/p4 (8%)" in finding.evidence
    two = ecmp_pinning(ports({"leaf0/p3": 0.52, "leaf0/p4": 0.08}))
    assert two is not None and two.ports == ("leaf0/p3",) and "idle: leaf0/p4 (8%)" in two.evidence


def test_the_thresholds_are_the_callers():
    values = ports({"a": 0.52, "b": 0.08})
    assert ecmp_pinning(values, rule=PinningRule.of(spread=0.5)) is None  # 0.44 apart: not enough now
    assert ecmp_pinning(values, rule=PinningRule.of(max_over_mean=2.0)) is None  # 1.73: not enough
    assert ecmp_pinning(ports({"a": 0.06, "b": 0.0})) is None  # 5% next to 0: too little to matter
    assert ecmp_pinning(ports({"a": 0.06, "b": 0.0}), rule=PinningRule.of(spread=0.05)) is not None
    with pytest.raises(InvalidArgument, match="max_over_mean"):
        PinningRule.of(max_over_mean=0.5)
    with pytest.raises(InvalidArgument, match="idle_below"):
        PinningRule.of(hot_above=0.3, idle_below=0.5)


def test_the_skew_and_the_diagnosis_judge_alike():
    rule = PinningRule()
    for values in ([0.52, 0.08], [0.86, 0.0, 0.43, 0.43], [0.5, 0.4], [0.06, 0.0], [0.95, 0.9, 0.05, 0.1]):
        array = np.array(values)
        vectorised = bool(
            rule.pinned(array.max(keepdims=True), array.mean(keepdims=True), array.min(keepdims=True))[0]
        )
        assert rule.judge(values).pinned == vectorised, values


def test_links_with_drops_are_lossy_findings_most_lossy_first():
    findings = lossy_links(ports({"a": 0.0, "b": 3.0, "c": 10.0}))
    assert [f.ports[0] for f in findings] == ["c", "b"]
    assert findings[0].kind == FindingKind.LOSSY_LINK


def test_receive_errors_make_a_link_lossy_even_without_drops_and_add_up_with_them():
    findings = lossy_links(ports({"a": 2.0}), errors=ports({"b": 30.0, "a": 1.0, "c": 0.0}))
    assert [f.ports[0] for f in findings] == ["b", "a"]
    assert "30 receive errors" in findings[0].evidence
    assert (
        "3 packets lost on a" in findings[1].evidence
        and "2 dropped, 1 receive errors" in findings[1].evidence
    )


def test_packets_an_egress_queue_discarded_make_a_lossy_link_that_points_at_congestion():
    """tc's qdisc drops (node_exporter's qdisc collector) or PortXmitDiscards: lost on the port
    though its cable is fine."""
    findings = lossy_links(ports({}), discards=ports({"leaf0/p3": 1431.0, "leaf0/p4": 0.0}))
    (finding,) = findings
    assert finding.ports == ("leaf0/p3",)
    assert "1431 packets lost on leaf0/p3" in finding.evidence
    assert "1431 discarded by its egress queue" in finding.evidence
    assert "egress queue overflowed" in finding.suggestion and "transceiver" not in finding.suggestion
    (cable,) = lossy_links(ports({"a": 5.0}), discards=ports({"a": 1.0}))
    assert "transceiver" in cable.suggestion  # more dropped on receive than discarded: the cable


def swept(label: str, size: int, makespan: int) -> ModeResult:
    outcome = Outcome(makespan_ns=makespan, ideal_completion_ns=makespan // 2, uplink_skew=Skew())
    return ModeResult(label, Opaque(), {"jobs.0.size_bytes": str(size)}, state=OK, outcome=outcome)


def test_a_sweep_compares_modes_at_the_same_point_never_across_points():
    mib, big = 1 << 20, 256 << 20
    run = finished(
        swept("ECMP", mib, 100_000),
        swept("ADAPTIVE", mib, 50_000),
        swept("ECMP", big, 20_000_000),
        swept("ADAPTIVE", big, 10_000_000),
    )
    result = comparison_to_proto(compare([run]))
    slowdowns = [row.slowdown_vs_baseline for row in result.rows]
    assert slowdowns == [1.0, 0.5, 1.0, 0.5]  # each point against its own ECMP row
    assert result.baseline == "ECMP"
    assert "1MiB: ADAPTIVE finishes 2.00x faster than ECMP" in result.summary
    assert "256MiB: ADAPTIVE finishes 2.00x faster than ECMP" in result.summary
    assert "200" not in result.summary  # no ratio across points (20 ms / 100 us)
    assert compare([run], "ADAPTIVE").rows[0].slowdown_vs_baseline == 2.0  # a named baseline, per point


def test_a_point_where_the_baseline_mode_failed_has_no_slowdowns_and_says_so():
    mib = 1 << 20
    failed = ModeResult("ECMP", Opaque(), {"jobs.0.size_bytes": str(2 * mib)}, state=JobState.FAILED)
    run = finished(
        swept("ECMP", mib, 100), swept("ADAPTIVE", mib, 50), failed, swept("ADAPTIVE", 2 * mib, 70)
    )
    rows = compare([run], "ECMP").rows
    assert [r.slowdown_vs_baseline for r in rows] == [1.0, 0.5, 0.0]
