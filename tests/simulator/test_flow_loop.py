"""The compiled FLOW loop (flow/loop.py) against a plain NumPy loop kept here as the reference:
bit-identical per-flow times, channel load records, end, event count and time-limit flag
on random workloads (split routes, shared channels, duplicate entries, empty flows, caps, ties,
dependencies waiting on arrival or departure, time limits), with the loop made to pause, grow its
slots and empty its record buffer at every turn, with component searches that give way at once,
and on whole runs of every mode."""

from __future__ import annotations

import dataclasses
import heapq

import numpy as np
import pytest

import services.simulator.flow.engine as flow_engine
from services.common.errors import FailedPrecondition
from services.simulator.flow import model
from services.simulator.flow.model import FlowRun, max_min_rates, simulate_flows
from services.simulator.routes import FlowRoutes
from services.simulator.runner import run_simulation
from services.simulator.spec import SimulationSpec
from services.simulator.workload import Workload
from tests.simulator.fabrics import fat_tree, leaf_spine

G = 1_000_000_000


class _Reference:
    """The NumPy event loop model.py had before the compiled one (max-min rates recomputed from
    scratch at every event with `max_min_rates`), but for names, progress reports, its shortcut
    for a few ending flows (plain-Python bookkeeping that did the same) and, since issue #15's
    second round, a flow's bytes left and end taken again only when its rate changes (the
    compiled loop's arithmetic)."""

    def __init__(self, workload, flow_route, routes, channel_rate_bps):
        self.w = workload
        self.flow_route = flow_route
        self.routes = routes
        self.used_channels, compact = np.unique(routes.channels, return_inverse=True)
        self.route_channel = compact.astype(np.int64)
        self.capacity = np.asarray(channel_rate_bps, dtype=np.float64)[self.used_channels]
        f, t = workload.flow_count, workload.transfer_count
        self.flow_transfer = np.repeat(np.arange(t), np.diff(workload.transfer_flow_offsets))
        self.flow_latency = routes.latency_ns[flow_route]
        self.start = np.full(f, -1, dtype=np.int64)
        self.sent = np.full(f, -1, dtype=np.int64)
        self.finish = np.full(f, -1, dtype=np.int64)
        self.flows_left = np.diff(workload.transfer_flow_offsets).astype(np.int64)
        self.waiting_on = workload.transfer_prerequisites.astype(np.int64)
        self.ready = workload.transfer_release_ns.astype(np.int64)
        self.arrival = np.zeros(t, dtype=np.int64)
        self.departure = np.zeros(t, dtype=np.int64)
        ready_now = np.flatnonzero(self.waiting_on == 0)
        self.heap = list(zip(self.ready[ready_now].tolist(), ready_now.tolist(), strict=True))
        heapq.heapify(self.heap)
        self.active = np.zeros(0, dtype=np.int64)
        self.remaining = np.zeros(0)  # bytes left when its rate last changed ...
        self.since = np.zeros(0, dtype=np.int64)  # ... at this time
        self.rate = np.zeros(0)  # its rate since then
        self.end = np.zeros(0, dtype=np.int64)
        self.entry_slot = np.zeros(0, dtype=np.int64)
        self.entry_channel = np.zeros(0, dtype=np.int64)
        self.entry_fraction = np.zeros(0)
        self.caps = None
        if workload.flow_rate_bps is not None:
            self.caps = np.zeros(0)
            self.flow_cap = np.where(workload.flow_rate_bps > 0, workload.flow_rate_bps, np.inf)
        self.load = np.zeros(len(self.used_channels))
        self.records = []

    def complete(self, flows, now):
        self.sent[flows] = now
        self.finish[flows] = now + self.flow_latency[flows]
        transfers = self.flow_transfer[flows]
        np.subtract.at(self.flows_left, transfers, 1)
        np.maximum.at(self.arrival, transfers, self.finish[flows])
        self.departure[transfers] = now
        done = np.unique(transfers[self.flows_left[transfers] == 0])
        if not len(done):
            return
        offsets = self.w.dependent_offsets
        counts = offsets[done + 1] - offsets[done]
        if not counts.sum():
            return
        index = np.repeat(offsets[done] - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
        dependents = self.w.dependents[index].astype(np.int64)
        needs_arrival = self.w.dependent_needs_arrival[index]
        waited = np.where(
            needs_arrival, np.repeat(self.arrival[done], counts), np.repeat(self.departure[done], counts)
        )
        np.maximum.at(self.ready, dependents, waited)
        np.subtract.at(self.waiting_on, dependents, 1)
        for transfer in np.unique(dependents[self.waiting_on[dependents] == 0]).tolist():
            heapq.heappush(self.heap, (int(self.ready[transfer]), transfer))

    def start_transfers(self, transfers, now):
        offsets = self.w.transfer_flow_offsets
        tr = np.asarray(transfers, dtype=np.int64)
        counts = offsets[tr + 1] - offsets[tr]
        flows = np.repeat(offsets[tr] - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
        self.start[flows] = now
        empty = self.w.flow_size_bytes[flows] == 0
        if empty.any():
            self.complete(flows[empty], now)
            flows = flows[~empty]
        route = self.flow_route[flows]
        r_off = self.routes.offsets
        n_entries = r_off[route + 1] - r_off[route]
        entries = np.repeat(r_off[route] - np.cumsum(n_entries) + n_entries, n_entries) + np.arange(
            n_entries.sum()
        )
        slots = len(self.active) + np.repeat(np.arange(len(flows)), n_entries)
        self.active = np.concatenate([self.active, flows])
        if self.caps is not None:
            self.caps = np.concatenate([self.caps, self.flow_cap[flows]])
        self.remaining = np.concatenate([self.remaining, self.w.flow_size_bytes[flows].astype(np.float64)])
        self.since = np.concatenate([self.since, np.full(len(flows), now, dtype=np.int64)])
        self.rate = np.concatenate([self.rate, np.zeros(len(flows))])
        self.end = np.concatenate([self.end, np.zeros(len(flows), dtype=np.int64)])
        self.entry_slot = np.concatenate([self.entry_slot, slots])
        self.entry_channel = np.concatenate([self.entry_channel, self.route_channel[entries]])
        self.entry_fraction = np.concatenate([self.entry_fraction, self.routes.fractions[entries]])

    def retire(self, ending):
        keep = ~ending
        new_slot = np.cumsum(keep) - 1
        keep_entry = keep[self.entry_slot]
        self.entry_slot = new_slot[self.entry_slot[keep_entry]]
        self.entry_channel = self.entry_channel[keep_entry]
        self.entry_fraction = self.entry_fraction[keep_entry]
        flows = self.active[ending]
        self.active, self.remaining = self.active[keep], self.remaining[keep]
        self.since, self.rate, self.end = self.since[keep], self.rate[keep], self.end[keep]
        if self.caps is not None:
            self.caps = self.caps[keep]
        return flows

    def rates(self, now):
        rates = max_min_rates(
            self.entry_slot,
            self.entry_channel,
            self.entry_fraction,
            self.capacity,
            len(self.active),
            self.caps,
        )
        load = np.bincount(
            self.entry_channel, weights=self.entry_fraction * rates[self.entry_slot], minlength=len(self.load)
        )
        changed = np.flatnonzero(load != self.load)
        if len(changed):
            self.records.append((now, self.used_channels[changed], load[changed]))
            self.load = load
        return rates

    def run(self, time_limit_ns):
        events, time_limited = 0, False
        now = self.heap[0][0] if self.heap else 0
        while True:
            while self.heap and self.heap[0][0] <= now:
                starting = []
                while self.heap and self.heap[0][0] <= now:
                    starting.append(heapq.heappop(self.heap)[1])
                self.start_transfers(starting, now)
            rates = self.rates(now)
            events += 1
            if len(self.active):
                if not (rates > 0).all():
                    raise FailedPrecondition("a flow crosses a channel of zero capacity (rate 0 link)")
                # A flow whose rate changed: its bytes left since its last change, its new end.
                changed = rates != self.rate
                self.remaining[changed] -= self.rate[changed] * ((now - self.since[changed]) / (8 * 1e9))
                self.since[changed] = now
                self.rate = rates
                self.end[changed] = now + np.ceil(
                    self.remaining[changed] * (8 * 1e9) / rates[changed]
                ).astype(np.int64)
                next_end = int(self.end.min())
            else:
                next_end = None
            next_start = self.heap[0][0] if self.heap else None
            candidates = [t for t in (next_end, next_start) if t is not None]
            if not candidates:
                break
            upcoming = min(candidates)
            if time_limit_ns and upcoming > time_limit_ns:
                now, time_limited = time_limit_ns, True
                break
            if len(self.active):
                ending = self.end <= upcoming
                if ending.any():
                    self.complete(self.retire(ending), upcoming)
            now = upcoming
        if self.records:
            times = np.concatenate([np.full(len(c), t, dtype=np.int64) for t, c, _ in self.records])
            channels = np.concatenate([c for _, c, _ in self.records]).astype(np.int32)
            loads = np.concatenate([v for _, _, v in self.records])
        else:
            times, channels, loads = np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0)
        end = now if time_limited else int(self.finish.max(initial=0))
        run = FlowRun(self.start, self.sent, self.finish, end, events, time_limited)
        return run, (times, channels, loads)


def reference_flows(workload, flow_route, routes, channel_rate_bps, loads, time_limit_ns=0, progress=None):
    """`simulate_flows` as it was, its records (in time order) handed to `loads` at the end."""
    reference = _Reference(workload, flow_route, routes, channel_rate_bps)
    run, (times, channels, values) = reference.run(time_limit_ns)
    loads.open(reference.used_channels.astype(np.int32))
    loads.fold(times, np.searchsorted(reference.used_channels, channels), values, len(times))
    return run


class RecordLog:
    """A LoadSink that keeps every record: by channel, then time, as the loop used to return them."""

    def open(self, channel_ids):
        self.channel_ids, self.chunks = channel_ids, []

    def fold(self, times, compact, loads, count):
        self.chunks.append((times[:count].copy(), self.channel_ids[compact[:count]], loads[:count].copy()))

    def records(self):
        empty = (np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0))
        times, channels, loads = (np.concatenate(column) for column in zip(empty, *self.chunks, strict=False))
        order = np.argsort(channels, kind="stable")
        return times[order], channels[order], loads[order]


def compiled(*case, time_limit_ns=0):
    """The compiled loop's run and its records."""
    log = RecordLog()
    return simulate_flows(*case, log, time_limit_ns), log.records()


def reference(*case, time_limit_ns=0):
    """The reference loop's run and its records."""
    log = RecordLog()
    return reference_flows(*case, log, time_limit_ns), log.records()


def assert_identical(run: tuple, want: tuple) -> None:
    (got_run, got_records), (want_run, want_records) = run, want
    for field in dataclasses.fields(FlowRun):
        got, expected = getattr(got_run, field.name), getattr(want_run, field.name)
        if isinstance(expected, np.ndarray):
            assert got.dtype == expected.dtype, field.name
            assert np.array_equal(got, expected), field.name
        else:
            assert got == expected, field.name
    for got, expected, name in zip(got_records, want_records, ("time", "channel", "load"), strict=True):
        assert np.array_equal(got, expected), name  # floats compared exactly


def random_case(seed: int, caps: bool = False):
    """A random workload on random routes: few distinct capacities and fractions so that channels
    tie (and share groups), some routes splitting a flow, crossing a channel twice or sharing all
    their channels, flows of 0 bytes, transfers waiting on others' arrival or departure."""
    rng = np.random.default_rng(seed)
    channels = int(rng.integers(3, 14))
    capacity = rng.choice([100.0, 200.0, 400.0], channels) * G
    route_count = int(rng.integers(2, 9))
    offsets, route_channels, fractions = [0], [], []
    for _ in range(route_count):
        length = int(rng.integers(1, min(6, channels + 1)))
        chosen = rng.choice(channels, length, replace=bool(rng.random() < 0.2))
        split = rng.choice([1.0, 1.0, 0.5, 0.25, 1 / 3], length)
        route_channels += chosen.tolist()
        fractions += split.tolist()
        offsets.append(offsets[-1] + length)
    routes = FlowRoutes(
        np.array(offsets, dtype=np.int64),
        np.array(route_channels, dtype=np.int32),
        np.array(fractions),
        rng.integers(0, 3000, route_count).astype(np.int64),
        False,
    )
    transfers = int(rng.integers(1, 40))
    flows_per = rng.integers(1, 4, transfers)
    flow_offsets = np.r_[0, np.cumsum(flows_per)].astype(np.int64)
    flow_count = int(flow_offsets[-1])
    prerequisites = np.zeros(transfers, dtype=np.int32)
    waits: list[list[tuple[int, bool]]] = [[] for _ in range(transfers)]
    for t in range(1, transfers):
        for before in rng.choice(t, int(rng.integers(0, min(t, 3) + 1)), replace=False).tolist():
            waits[before].append((t, bool(rng.random() < 0.7)))
            prerequisites[t] += 1
    dependent_offsets = np.r_[0, np.cumsum([len(w) for w in waits])].astype(np.int64)
    dependents = np.array([d for w in waits for d, _ in w], dtype=np.int32)
    needs_arrival = np.array([a for w in waits for _, a in w], dtype=bool)
    sizes = rng.choice([0, 1, 999, 4096, 65_536, 1_000_000, 3_333_333], flow_count)
    rate = None
    if caps:
        rate = rng.choice([0.0, 0.0, 10.0, 37.5, 150.0], flow_count) * G
    workload = Workload(
        jobs=[],
        transfer_job=np.zeros(transfers, dtype=np.int32),
        transfer_release_ns=rng.choice([0, 0, 500, 2000, 20_000], transfers).astype(np.int64),
        transfer_prerequisites=prerequisites,
        dependent_offsets=dependent_offsets,
        dependents=dependents,
        dependent_needs_arrival=needs_arrival,
        transfer_flow_offsets=flow_offsets,
        flow_job=np.zeros(flow_count, dtype=np.int32),
        flow_source=np.zeros(flow_count, dtype=np.int64),
        flow_destination=np.zeros(flow_count, dtype=np.int64),
        flow_size_bytes=sizes.astype(np.int64),
        flow_source_port=np.zeros(flow_count, dtype=np.int32),
        flow_destination_qp=np.zeros(flow_count, dtype=np.uint32),
        flow_qp=np.arange(flow_count, dtype=np.int32),
        flow_rate_bps=rate,
    )
    flow_route = rng.integers(0, route_count, flow_count).astype(np.int64)
    return workload, flow_route, routes, np.r_[capacity, rng.random(3) * G]  # channels no route uses


@pytest.fixture
def tight(monkeypatch):
    """The compiled loop driven one event per call, from one slot and with a one-event record
    buffer: every pause, growth and hand-over path at every turn."""
    monkeypatch.setattr(model, "_FIRST_SLICE", 1)
    monkeypatch.setattr(model, "_SLICE_S", 0.0)
    monkeypatch.setattr(model, "_FIRST_SLOTS", 1)
    monkeypatch.setattr(model, "_RECORD_BUFFER", 1)


@pytest.mark.parametrize("caps", [False, True])
@pytest.mark.parametrize("seed", range(60))
def test_random_workloads_run_bit_identical_to_the_reference(seed, caps):
    case = random_case(seed, caps)
    assert_identical(compiled(*case), reference(*case))


@pytest.mark.parametrize("seed", range(20))
def test_pausing_growing_and_handing_over_records_at_every_event_changes_nothing(seed, tight):
    case = random_case(1000 + seed, caps=seed % 2 == 1)
    assert_identical(compiled(*case), reference(*case))


@pytest.mark.parametrize("seed", range(20))
def test_component_searches_that_give_way_change_nothing(seed, monkeypatch):
    # A search that gives way after 6 nodes: some components filled one by one, then every flow
    # at once (with a new stamp) in the same event.
    monkeypatch.setattr(model, "_WALK_SHARE", 1 << 40)
    monkeypatch.setattr(model, "_WALK_LEAST", 6)
    case = random_case(4000 + seed, caps=seed % 2 == 1)
    assert_identical(compiled(*case), reference(*case))


@pytest.mark.parametrize("seed", range(20))
def test_a_time_limit_stops_both_at_the_same_state(seed):
    case = random_case(2000 + seed, caps=seed % 3 == 0)
    end = reference(*case)[0].end_ns
    for limit in (1, end // 3, end // 2 + 7, end - 1):
        assert_identical(compiled(*case, time_limit_ns=limit), reference(*case, time_limit_ns=limit))


def test_a_flow_on_a_channel_of_zero_capacity_is_refused():
    workload, flow_route, routes, capacity = random_case(7)
    capacity[routes.channels[0]] = 0.0
    flow_route[:] = 0
    workload.flow_size_bytes[:] = 1000
    with pytest.raises(FailedPrecondition, match="zero capacity"):
        compiled(workload, flow_route, routes, capacity)


def test_many_flows_at_once_grow_the_slots():
    # 3,000 flows start together on 40 channels (more than the 1,024 slots the loop starts with).
    rng = np.random.default_rng(5)
    workload, _, routes, _ = random_case(11)
    flows = 3000
    workload = dataclasses.replace(
        workload,
        transfer_job=np.zeros(1, dtype=np.int32),
        transfer_release_ns=np.zeros(1, dtype=np.int64),
        transfer_prerequisites=np.zeros(1, dtype=np.int32),
        dependent_offsets=np.zeros(2, dtype=np.int64),
        dependents=np.zeros(0, dtype=np.int32),
        dependent_needs_arrival=np.zeros(0, dtype=bool),
        transfer_flow_offsets=np.array([0, flows], dtype=np.int64),
        flow_job=np.zeros(flows, dtype=np.int32),
        flow_size_bytes=rng.integers(1, 10**6, flows).astype(np.int64),
        flow_rate_bps=None,
    )
    routes = FlowRoutes(
        np.arange(0, 3 * 200 + 1, 3, dtype=np.int64),
        rng.integers(0, 40, 600).astype(np.int32),
        np.ones(600),
        np.full(200, 1000, dtype=np.int64),
        True,
    )
    case = (workload, rng.integers(0, 200, flows).astype(np.int64), routes, np.full(40, 400.0 * G))
    assert_identical(compiled(*case), reference(*case))


def spec(jobs, mode, **extra):
    lb = {"mode": mode, "seed": 3, **extra.pop("lb", {})}
    return SimulationSpec.from_dict({"fabric": "fabrics/test", "jobs": jobs, "load_balancing": lb, **extra})


RING = {"collective": "ALL_REDUCE", "size_bytes": 3 << 20, "rank_count": 16, "placement": "RANDOM"}
RUNS = [
    ("ECMP", [RING], {}),
    ("ADAPTIVE", [RING], {}),
    ("SPRAY", [RING], {}),
    ("ECMP", [{**RING, "qps_per_connection": 3, "iterations": 2}], {}),
    ("ADAPTIVE", [{**RING, "rank_count": 8}, {**RING, "rank_count": 8, "start_ns": 5000}], {}),
    ("ECMP", [{**RING, "collective": "ALL_TO_ALL", "size_bytes": 1 << 20}], {}),
    ("ECMP", [{**RING, "collective": "ALL_GATHER"}], {"sample_interval_ns": 2000}),
]


@pytest.mark.parametrize("fabric", [fat_tree(4), leaf_spine(4, 2, 4)], ids=["fat_tree4", "leaf_spine"])
@pytest.mark.parametrize(("mode", "jobs", "extra"), RUNS)
def test_whole_runs_come_out_identical_to_the_reference(fabric, mode, jobs, extra, monkeypatch):
    s = spec(jobs, mode, switch_latency_ns=300, **extra)
    compiled = run_simulation(s, fabric)
    monkeypatch.setattr(flow_engine, "simulate_flows", reference_flows)
    reference = run_simulation(s, fabric)
    assert compiled.jobs == reference.jobs
    assert compiled.events == reference.events
    assert compiled.makespan_ns == reference.makespan_ns
    for name in ("bytes", "utilisation"):
        assert np.array_equal(getattr(compiled.series, name), getattr(reference.series, name))
    for name in ("start_ns", "finish_ns"):
        assert np.array_equal(getattr(compiled.flows, name), getattr(reference.flows, name))


def with_flows_on_no_channel(seed: int):
    """A random case with caps in which some flows cross no channel (an empty route): they run
    at their cap."""
    workload, flow_route, routes, capacity = random_case(seed, caps=True)
    routes = FlowRoutes(
        np.r_[routes.offsets, routes.offsets[-1]],
        routes.channels,
        routes.fractions,
        np.r_[routes.latency_ns, 250],
        False,
    )
    rng = np.random.default_rng(seed)
    lone = rng.random(len(flow_route)) < 0.3
    flow_route[lone] = len(routes.offsets) - 2
    assert workload.flow_rate_bps is not None
    workload.flow_rate_bps[lone] = rng.choice([10.0, 37.5], int(lone.sum())) * G
    return workload, flow_route, routes, capacity


@pytest.mark.parametrize("seed", range(10))
def test_flows_on_no_channel_run_at_their_cap(seed):
    case = with_flows_on_no_channel(3000 + seed)
    assert_identical(compiled(*case), reference(*case))


@pytest.mark.parametrize("seed", range(10))
def test_flows_on_no_channel_survive_a_pause_to_grow_the_slots(seed, tight):
    case = with_flows_on_no_channel(3000 + seed)
    assert_identical(compiled(*case), reference(*case))


def test_a_flow_on_no_channel_started_before_a_pause_for_slots_gets_its_rate(monkeypatch):
    # At t=0 transfer 0 (an empty flow) and transfer 1 (1,000 bytes on no channel, capped at
    # 10 Gb/s) start in one batch (after the slots grew from 1 to 2 for it); the empty flow
    # releases transfer 2 (two flows) at once, which finds one free slot: the loop pauses to grow
    # them, mid-event, and transfer 1 must still get its rate.
    monkeypatch.setattr(model, "_FIRST_SLOTS", 1)
    workload, _, _, _ = random_case(11)
    workload = dataclasses.replace(
        workload,
        transfer_job=np.zeros(3, dtype=np.int32),
        transfer_release_ns=np.zeros(3, dtype=np.int64),
        transfer_prerequisites=np.array([0, 0, 1], dtype=np.int32),
        dependent_offsets=np.array([0, 1, 1, 1], dtype=np.int64),
        dependents=np.array([2], dtype=np.int32),
        dependent_needs_arrival=np.array([False]),
        transfer_flow_offsets=np.array([0, 1, 2, 4], dtype=np.int64),
        flow_job=np.zeros(4, dtype=np.int32),
        flow_source=np.zeros(4, dtype=np.int64),
        flow_destination=np.zeros(4, dtype=np.int64),
        flow_size_bytes=np.array([0, 1000, 1000, 1000], dtype=np.int64),
        flow_source_port=np.zeros(4, dtype=np.int32),
        flow_destination_qp=np.zeros(4, dtype=np.uint32),
        flow_qp=np.arange(4, dtype=np.int32),
        flow_rate_bps=np.array([0.0, 10.0 * G, 0.0, 0.0]),
    )
    routes = FlowRoutes(
        np.array([0, 1, 1], dtype=np.int64),
        np.array([0], dtype=np.int32),
        np.ones(1),
        np.zeros(2, np.int64),
        True,
    )
    case = (workload, np.array([0, 1, 0, 0], dtype=np.int64), routes, np.array([400.0 * G]))
    run, records = compiled(*case, time_limit_ns=1_000_000)  # (a flow never given a rate never ends)
    assert run.flow_finish_ns.tolist() == [0, 800, 40, 40]
    assert_identical((run, records), reference(*case, time_limit_ns=1_000_000))
