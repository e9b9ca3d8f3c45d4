"""Builders for the messages a script writes most: a collective job, a load-balancing mode, a spec.

They only fill protobuf messages (`fabrictwin.v1`), accepting the short names people type (`ecmp`,
`scattered`, `all_reduce`) and sizes as text (`256MiB`); anything they do not cover can be set on the
returned message directly.

>>> job = collective_job(ranks=16, size="256MiB", placement="scattered")
>>> job.rank_count, job.size_bytes
(16, 268435456)
"""

from __future__ import annotations

from collections.abc import Iterable

from fabrictwin.names import enum_value, resource_name
from fabrictwin.units import parse_size
from fabrictwin.v1 import common_pb2, simulation_pb2

__all__ = [
    "ModeLike",
    "bit_errors",
    "collective_job",
    "link_down",
    "load_balancing",
    "marginal_transceiver",
    "point_to_point_flow",
    "point_to_point_job",
    "simulation_spec",
]

# A load-balancing mode given as a message, a short name ("ecmp") or an enum number.
ModeLike = common_pb2.LoadBalancing | str | int


def collective_job(
    *,
    ranks: int = 0,
    size: int | str,
    collective: int | str = "all_reduce",
    algorithm: int | str = "ring",
    placement: int | str = "packed",
    hosts: Iterable[str] = (),
    label: str = "",
    start_ns: int = 0,
    qps_per_connection: int = 0,
    iterations: int = 0,
    chunks: int = 0,
) -> simulation_pb2.Job:
    """One collective job: `ranks` ranks placed by `placement`, or exactly `hosts`, moving `size` bytes.

    `size` is bytes or text such as "256MiB"; `collective`, `algorithm` and `placement` take short names
    (`all_reduce`, `ring`, `scattered`) or enum numbers. Zero values leave the server's defaults.
    """
    job = simulation_pb2.Job(
        label=label,
        collective=enum_value(simulation_pb2.Collective, collective, "collective"),
        algorithm=enum_value(simulation_pb2.CollectiveAlgorithm, algorithm, "algorithm"),
        size_bytes=parse_size(size),
        hosts=list(hosts),
        rank_count=ranks,
        placement=enum_value(simulation_pb2.PlacementPolicy, placement, "placement"),
        start_ns=start_ns,
        qps_per_connection=qps_per_connection,
        iterations=iterations,
        chunks=chunks,
    )
    return job


def point_to_point_flow(
    source: str,
    destination: str,
    size: int | str,
    *,
    start_ns: int = 0,
    path: Iterable[str] = (),
    path_links: Iterable[str] = (),
    udp_source_port: int = 0,
    rate_gbps: float = 0.0,
) -> simulation_pb2.FlowSpec:
    """One flow of a point-to-point job: `size` bytes (or text such as "64MiB") from host `source` to
    host `destination`, starting `start_ns` into the job.

    To replay a flow as observed on a live fabric:

    - `path`: node names from the source host to the destination host (one link between each
      consecutive pair), or `path_links`: link display names (`leaf-0/p3<->spine-1/p1`) in order from
      the source, where two nodes have parallel links. The flow then takes exactly that path in every
      load-balancing mode (it is never rebalanced); give one of the two, not both.
    - `udp_source_port`: the UDP source port of the flow's 5-tuple (1..65535; 0 derives it from the QP
      number), which ECMP hashes for a flow that is not pinned.
    - `rate_gbps`: a cap on the flow's sending rate in Gb/s (0: line rate).

    >>> flow = point_to_point_flow("host-0", "host-9", "64MiB", path=["host-0", "leaf-0", "spine-1",
    ...     "leaf-2", "host-9"], udp_source_port=49200, rate_gbps=25)
    >>> flow.size_bytes, list(flow.path)[2], flow.udp_source_port, flow.rate_gbps
    (67108864, 'spine-1', 49200, 25.0)
    """
    return simulation_pb2.FlowSpec(
        source=source,
        destination=destination,
        size_bytes=parse_size(size),
        start_ns=start_ns,
        path=list(path),
        path_links=list(path_links),
        udp_source_port=udp_source_port,
        rate_gbps=rate_gbps,
    )


def point_to_point_job(
    flows: Iterable[simulation_pb2.FlowSpec],
    *,
    label: str = "",
    start_ns: int = 0,
    iterations: int = 0,
    qps_per_connection: int = 0,
) -> simulation_pb2.Job:
    """A COLLECTIVE_POINT_TO_POINT job of `flows` (`point_to_point_flow`); each flow is a connection and
    its `iterations` run back to back. Zero values leave the server's defaults."""
    return simulation_pb2.Job(
        label=label,
        collective=simulation_pb2.COLLECTIVE_POINT_TO_POINT,
        flows=list(flows),
        start_ns=start_ns,
        iterations=iterations,
        qps_per_connection=qps_per_connection,
    )


def load_balancing(
    mode: ModeLike,
    *,
    seed: int = 0,
    ecmp_hash: int | str | None = None,
    same_seed_everywhere: bool = False,
    hash_destination_qp: bool = False,
    flowlet_gap_ns: int = 0,
    label: str = "",
    spray_random: bool = False,
) -> common_pb2.LoadBalancing:
    """A LoadBalancing message from a mode name (`ecmp`, `adaptive`, `spray`, `flowlet`) and options.

    A LoadBalancing message passed as `mode` is returned as it is (the options are then ignored).
    """
    if isinstance(mode, common_pb2.LoadBalancing):
        return mode
    message = common_pb2.LoadBalancing(
        mode=enum_value(common_pb2.LoadBalancingMode, mode, "mode"),
        same_seed_everywhere=same_seed_everywhere,
        seed=seed,
        hash_destination_qp=hash_destination_qp,
        flowlet_gap_ns=flowlet_gap_ns,
        label=label,
        spray_random=spray_random,
    )
    if ecmp_hash is not None:
        message.ecmp_hash = enum_value(common_pb2.EcmpHash, ecmp_hash, "ecmp_hash")
    return message


def simulation_spec(
    fabric: str,
    jobs: Iterable[simulation_pb2.Job],
    mode: ModeLike,
    *,
    fidelity: int | str | None = None,
    transport: int | str | None = None,
    seed: int = 0,
    faults: Iterable[simulation_pb2.Fault] = (),
    telemetry_source: str = "",
    sample_interval_ns: int = 0,
    time_limit_ns: int = 0,
    roce: simulation_pb2.RoceConfig | None = None,
    infiniband: simulation_pb2.InfinibandConfig | None = None,
) -> simulation_pb2.SimulationSpec:
    """A SimulationSpec running `jobs` on `fabric` (`ft8` or `fabrics/ft8`) under one load-balancing mode.

    `roce` (Go-Back-N window, PFC, DCQCN) and `infiniband` (credits) apply at PACKET fidelity.
    """
    spec = simulation_pb2.SimulationSpec(
        fabric=resource_name("fabrics", fabric),
        jobs=list(jobs),
        load_balancing=load_balancing(mode),
        faults=list(faults),
        seed=seed,
        telemetry_source=telemetry_source,
        sample_interval_ns=sample_interval_ns,
        time_limit_ns=time_limit_ns,
    )
    if roce is not None:
        spec.roce.CopyFrom(roce)
    if infiniband is not None:
        spec.infiniband.CopyFrom(infiniband)
    if fidelity is not None:
        spec.fidelity = enum_value(simulation_pb2.Fidelity, fidelity, "fidelity")
    if transport is not None:
        spec.transport = enum_value(simulation_pb2.Transport, transport, "transport")
    return spec


def bit_errors(link: str | int, rate: float, start_ns: int = 0, end_ns: int = 0) -> simulation_pb2.Fault:
    """Independent bit errors at `rate` on both directions of `link` (name or index)."""
    return simulation_pb2.Fault(
        link=str(link),
        kind=simulation_pb2.FAULT_KIND_BIT_ERRORS,
        bit_error_rate=rate,
        start_ns=start_ns,
        end_ns=end_ns,
    )


def marginal_transceiver(
    link: str | int,
    *,
    good_loss: float,
    bad_loss: float,
    p_good_to_bad: float,
    p_bad_to_good: float,
    start_ns: int = 0,
    end_ns: int = 0,
) -> simulation_pb2.Fault:
    """Bursty loss on `link` (Gilbert-Elliott): per-packet state changes, a loss rate per state."""
    return simulation_pb2.Fault(
        link=str(link),
        kind=simulation_pb2.FAULT_KIND_GILBERT_ELLIOTT,
        good_loss=good_loss,
        bad_loss=bad_loss,
        p_good_to_bad=p_good_to_bad,
        p_bad_to_good=p_bad_to_good,
        start_ns=start_ns,
        end_ns=end_ns,
    )


def link_down(
    link: str | int, start_ns: int, reroute: int | str, *, end_ns: int = 0, reroute_delay_ns: int = 0
) -> simulation_pb2.Fault:
    """`link` down from `start_ns` (back at `end_ns`; 0: for good), with the routing reaction
    `reroute` (`subnet_manager`, `routing_protocol`, `fast_recovery`) after its delay (0: its default)."""
    return simulation_pb2.Fault(
        link=str(link),
        kind=simulation_pb2.FAULT_KIND_LINK_DOWN,
        start_ns=start_ns,
        end_ns=end_ns,
        reroute=enum_value(simulation_pb2.RerouteModel, reroute, "reroute"),
        reroute_delay_ns=reroute_delay_ns,
    )
