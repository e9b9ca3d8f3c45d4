"""Point-to-point flows pinned to a path, as observed on a live fabric: `path` / `path_links` -> channels.

A POINT_TO_POINT flow may name the path it takes (`FlowSpec.path`: node names from its source host to
its destination host) or the links of it (`FlowSpec.path_links`: link display names in order from
the source). Either resolves to the channels the flow crosses (channel 2l is link l a->b, 2l+1
b->a), which the workload carries per flow (`Workload.pinned_offsets` / `pinned_channels`) and both
engines follow whatever the load-balancing mode.

A path must be one the fabric can carry: it starts at the flow's source and ends at its destination,
consecutive nodes share exactly one link (parallel links are ambiguous in `path`: `path_links` names
one), no link on it is DOWN, no node appears twice (loop-free; it need not be a shortest path), and
only switches forward (hosts never relay). Anything else is InvalidArgument naming the element,
`jobs[0].flows[2].path[3]: node 'spine9' is not in fabrics/f`. `place_jobs` runs this before a
simulation is accepted; `build_workload` runs it again to build the workload.

Checks are vectorised over every pinned flow of a job (names are looked up once each).
"""

from __future__ import annotations

import numpy as np

from services.common.errors import InvalidArgument, quote
from services.common.snapshot import FabricSnapshot
from services.simulator.placement import HostDirectory
from services.simulator.spec import Collective, Fidelity, JobSpec, SimulationSpec

__all__ = ["PathResolver", "flow_option_notes", "pinned_flows_by_link"]

_NODE_KIND_HOST = 1
_LINK_STATE_DOWN = 2


class PathResolver:
    """Resolves the pinned paths of POINT_TO_POINT jobs on one snapshot (name tables built once)."""

    def __init__(self, snapshot: FabricSnapshot, directory: HostDirectory | None = None) -> None:
        self.snapshot = snapshot
        self.directory = directory or HostDirectory(snapshot)
        self._nodes: dict[str, int] | None = None
        self._links: dict[str, int] | None = None
        self._channel_keys: np.ndarray | None = None
        self._channel_order: np.ndarray | None = None

    # -- name tables ---------------------------------------------------------------------------------
    @property
    def nodes(self) -> dict[str, int]:
        if self._nodes is None:
            self._nodes = {name: i for i, name in enumerate(self.snapshot.node_names)}
        return self._nodes

    def link_index(self, name: str) -> int:
        """A link by display name (or, as faults take them, by index or `fabrics/f/links/l`); -1: none."""
        if self._links is None:
            self._links = {name: i for i, name in enumerate(self.snapshot.link_names)}
        found = self._links.get(name)
        if found is not None:
            return found
        tail = name.rsplit("/links/", 1)[-1]
        return int(tail) if tail.isdigit() and int(tail) < self.snapshot.num_links else -1

    def _channels_between(self, u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(first channel from u to v, number of such channels) per pair; -1 / 0 where unlinked."""
        if self._channel_keys is None:
            n = self.snapshot.num_nodes
            keys = self.snapshot.channel_source().astype(np.int64) * n + self.snapshot.channel_target()
            self._channel_order = np.argsort(keys, kind="stable")
            self._channel_keys = keys[self._channel_order]
        assert self._channel_order is not None
        key = u * self.snapshot.num_nodes + v
        lo = np.searchsorted(self._channel_keys, key, side="left")
        hi = np.searchsorted(self._channel_keys, key, side="right")
        first = np.where(hi > lo, self._channel_order[np.minimum(lo, len(self._channel_order) - 1)], -1)
        return first, hi - lo

    # -- resolution ---------------------------------------------------------------------------------
    def job_paths(self, index: int, job: JobSpec) -> tuple[np.ndarray, np.ndarray] | None:
        """CSR over the job's listed flows: (offsets int64 [m+1], channels int32) of each flow's pinned
        path, in order from its source (an empty row: not pinned); None when no flow is pinned."""
        pinned = [j for j, flow in enumerate(job.flows) if flow.pinned]
        if not pinned:
            return None
        by_nodes = [j for j in pinned if job.flows[j].path]
        by_links = [j for j in pinned if not job.flows[j].path]
        field = f"jobs[{index}].flows"
        paths: dict[int, np.ndarray] = {}
        if by_nodes:
            paths.update(self._from_nodes(field, job, by_nodes))
        if by_links:
            paths.update(self._from_links(field, job, by_links))
        lengths = np.array([len(paths.get(j, ())) for j in range(len(job.flows))], dtype=np.int64)
        offsets = np.zeros(len(job.flows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        channels = np.concatenate([paths[j] for j in sorted(paths)]).astype(np.int32)
        return offsets, channels

    def _ends(self, field: str, job: JobSpec, flows: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Nodes of the flows' source and destination hosts."""
        hosts = self.snapshot.host_nodes.astype(np.int64)
        lookup = self.directory.lookup
        source = [lookup(job.flows[j].source, f"{field}[{j}].source") for j in flows]
        destination = [lookup(job.flows[j].destination, f"{field}[{j}].destination") for j in flows]
        return hosts[source], hosts[destination]

    def _from_nodes(self, field: str, job: JobSpec, flows: list[int]) -> dict[int, np.ndarray]:
        """`path`: node names, source to destination."""
        lengths = np.array([len(job.flows[j].path) for j in flows], dtype=np.int64)
        names = [name for j in flows for name in job.flows[j].path]
        nodes = np.array([self.nodes.get(name, -1) for name in names], dtype=np.int64)
        where = _Positions(field, flows, lengths, "path")
        unknown = np.flatnonzero(nodes < 0)
        if len(unknown):
            e = int(unknown[0])
            raise InvalidArgument(where.name(e), f"node {names[e]!r} is not in {self.snapshot.fabric}")
        source, destination = self._ends(field, job, flows)
        self._check_nodes(where, nodes, source, destination)
        # Each step (u, v) must be exactly one link.
        step = np.flatnonzero(where.flow[1:] == where.flow[:-1])
        u, v = nodes[step], nodes[step + 1]
        channel, count = self._channels_between(u, v)
        names_of = self.snapshot.node_names
        unlinked = np.flatnonzero(count == 0)
        if len(unlinked):
            i = int(unlinked[0])
            raise InvalidArgument(
                where.name(int(step[i]) + 1), f"{names_of[u[i]]} and {names_of[v[i]]} are not linked"
            )
        parallel = np.flatnonzero(count > 1)
        if len(parallel):
            i = int(parallel[0])
            raise InvalidArgument(
                where.name(int(step[i]) + 1),
                f"{names_of[u[i]]} and {names_of[v[i]]} are joined by {count[i]} parallel links "
                f"({', '.join(self._parallel_names(u[i], v[i]))}); name the one the flow takes in path_links",
            )
        self._check_up(where, channel, step + 1)
        return where.split(channel, lengths - 1)

    def _parallel_names(self, u: int, v: int) -> list[str]:
        s = self.snapshot
        joined = np.flatnonzero(((s.link_a == u) & (s.link_b == v)) | ((s.link_a == v) & (s.link_b == u)))
        return [s.link_names[int(link)] for link in joined]

    def _from_links(self, field: str, job: JobSpec, flows: list[int]) -> dict[int, np.ndarray]:
        """`path_links`: link names in order from the source; each link continues from the last node."""
        s = self.snapshot
        lengths = np.array([len(job.flows[j].path_links) for j in flows], dtype=np.int64)
        names = [name for j in flows for name in job.flows[j].path_links]
        links = np.array([self.link_index(name) for name in names], dtype=np.int64)
        where = _Positions(field, flows, lengths, "path_links")
        unknown = np.flatnonzero(links < 0)
        if len(unknown):
            e = int(unknown[0])
            raise InvalidArgument(where.name(e), f"{quote(names[e])} is not a link of {s.fabric}")
        a, b = s.link_a[links].astype(np.int64), s.link_b[links].astype(np.int64)
        source, destination = self._ends(field, job, flows)
        # The node each link is entered from: the flow's source for its first link, else the end it
        # shares with the link before (checked below to be where that link led).
        first = where.position == 0
        previous = np.maximum(np.arange(len(links)) - 1, 0)
        shared = np.where((a == a[previous]) | (a == b[previous]), a, b)
        entry = np.where(first, source[where.flow], shared)
        exit_ = np.where(entry == a, b, a)
        starts = (entry == a) | (entry == b)
        continues = first | (exit_[previous] == entry)
        bad = ~(starts & continues)
        if bad.any():
            e = int(np.flatnonzero(bad)[0])
            if first[e]:
                problem = f"{names[e]} does not start at the flow's source {s.node_names[entry[e]]}"
            else:
                problem = f"{names[e]} does not continue the path from {s.node_names[exit_[e - 1]]}"
            raise InvalidArgument(where.name(e), problem)
        # Node k of a path is the source (k = 0) or where link k-1 leads: positions of `exit_` + 1.
        node_lengths = lengths + 1
        nodes = np.empty(int(node_lengths.sum()), dtype=np.int64)
        node_start = np.r_[0, np.cumsum(node_lengths)[:-1]]
        nodes[node_start] = source
        nodes[np.delete(np.arange(len(nodes)), node_start)] = exit_
        node_where = _Positions(field, flows, node_lengths, "path_links", shift=-1)
        self._check_nodes(node_where, nodes, source, destination)
        channel = 2 * links + (entry == b)
        self._check_up(where, channel, np.arange(len(links)))
        return where.split(channel, lengths)

    def _check_nodes(
        self, where: _Positions, nodes: np.ndarray, source: np.ndarray, destination: np.ndarray
    ) -> None:
        """Endpoints, forwarding nodes and loops of node sequences (flat, CSR by `where`)."""
        s = self.snapshot
        names = s.node_names
        head = np.flatnonzero(where.position == 0)
        tail = np.r_[head[1:], len(nodes)] - 1
        wrong_start = nodes[head] != source
        if wrong_start.any():
            i = int(np.flatnonzero(wrong_start)[0])
            raise InvalidArgument(
                where.name(int(head[i])),
                f"the path starts at {names[nodes[head[i]]]}, not at the flow's source {names[source[i]]}",
            )
        wrong_end = nodes[tail] != destination
        if wrong_end.any():
            i = int(np.flatnonzero(wrong_end)[0])
            raise InvalidArgument(
                where.name(int(tail[i])),
                f"the path ends at {names[nodes[tail[i]]]}, "
                f"not at the flow's destination {names[destination[i]]}",
            )
        # Loop-free: no node twice in one path (reported at its second appearance).
        key = where.flow * s.num_nodes + nodes
        order = np.lexsort((np.arange(len(nodes)), key))
        again = np.flatnonzero(key[order][1:] == key[order][:-1])
        if len(again):
            e = int(order[again + 1].min())
            raise InvalidArgument(
                where.name(e), f"the path comes back to {names[nodes[e]]}; a pinned path must not loop"
            )
        inner = np.ones(len(nodes), dtype=bool)
        inner[head] = inner[tail] = False
        relays = inner & (s.node_kind[nodes] == _NODE_KIND_HOST)
        if relays.any():
            e = int(np.flatnonzero(relays)[0])
            raise InvalidArgument(where.name(e), f"{names[nodes[e]]} is a host; hosts do not forward")

    def _check_up(self, where: _Positions, channel: np.ndarray, element: np.ndarray) -> None:
        s = self.snapshot
        down = s.link_state[channel // 2] == _LINK_STATE_DOWN
        if down.any():
            i = int(np.flatnonzero(down)[0])
            raise InvalidArgument(
                where.name(int(element[i])),
                f"link {s.link_names[int(channel[i]) // 2]} is DOWN in {s.fabric} "
                f"(routing version {s.routing_version})",
            )


class _Positions:
    """Flat elements of several flows' lists (CSR by `lengths`) and the field each one is."""

    def __init__(self, field: str, flows: list[int], lengths: np.ndarray, name: str, shift: int = 0) -> None:
        self.field, self.flows, self.label, self.shift = field, flows, name, shift
        self.lengths = lengths
        self.flow = np.repeat(np.arange(len(flows)), lengths)
        self.position = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)

    def name(self, element: int) -> str:
        j = self.flows[int(self.flow[element])]
        return f"{self.field}[{j}].{self.label}[{max(0, int(self.position[element]) + self.shift)}]"

    def split(self, values: np.ndarray, lengths: np.ndarray) -> dict[int, np.ndarray]:
        """Per flow (by its index in the job), its slice of `values` (CSR by `lengths`)."""
        ends = np.cumsum(lengths).tolist()
        return {
            j: values[end - length : end]
            for j, length, end in zip(self.flows, lengths.tolist(), ends, strict=True)
        }


def flow_option_notes(spec: SimulationSpec) -> list[str]:
    """Model notes on point-to-point flows pinned to a path, given a source port or a rate cap."""
    flows = [flow for job in spec.jobs for flow in job.flows]
    pinned = sum(1 for flow in flows if flow.pinned)
    ported = sum(1 for flow in flows if flow.udp_source_port)
    capped = sum(1 for flow in flows if flow.rate_gbps)
    assert spec.load_balancing is not None and spec.load_balancing.mode is not None
    mode = spec.load_balancing.mode.value
    notes = []
    if pinned:
        others = f"; the other {len(flows) - pinned} follow {mode}" if len(flows) > pinned else ""
        notes.append(
            f"{pinned} of {len(flows)} point-to-point flows pinned to the path given (path / path_links): "
            f"every packet of them crosses exactly those links, whatever {mode} would choose{others}."
        )
    if ported:
        notes.append(
            f"{ported} point-to-point flows use the UDP source port given (udp_source_port) in their "
            "5-tuple, for ECMP's hash and in the flow results."
        )
    if capped:
        how = (
            "a per-flow bound in the max-min fair sharing"
            if spec.fidelity == Fidelity.FLOW
            else "a static rate limiter per QP pacing the flow's packets (wire bytes, headers included)"
        )
        notes.append(
            f"{capped} point-to-point flows capped at their rate_gbps: {how}; with q QPs per connection "
            "each QP is capped at 1/q of it."
        )
    return notes


def pinned_flows_by_link(spec: SimulationSpec, snapshot: FabricSnapshot) -> dict[int, list[str]]:
    """The pinned flows (`jobs[i].flows[j]`) crossing each link, for the links any pinned path uses."""
    resolver = PathResolver(snapshot)
    crossing: dict[int, list[str]] = {}
    for index, job in enumerate(spec.jobs):
        if job.collective != Collective.POINT_TO_POINT:
            continue
        paths = resolver.job_paths(index, job)
        if paths is None:
            continue
        offsets, channels = paths
        for j in range(len(job.flows)):
            for link in sorted({int(c) // 2 for c in channels[offsets[j] : offsets[j + 1]]}):
                crossing.setdefault(link, []).append(f"jobs[{index}].flows[{j}]")
    return crossing
