"""Learning the paths live flows take, by asking the fabric's switches, hop by hop.

A switch's ECMP hash is its own (seed, function, fields), so the twin cannot compute which uplink
the real fabric gives a flow; it can ask. On a Linux switch (SONiC, Cumulus, a namespace lab),
`ip route get DST from SRC iif IF ipproto udp sport S dport D` answers with the next hop the
kernel's multipath hash picks for that 5-tuple, arriving on IF. `trace_path` follows a flow from
its source host to its destination, one such question per switch, and returns the links it crosses
(display names, as `FlowSpec.path_links` takes them), named through the interface names the fabric
keeps (LLDP-imported fabrics do).

`route_get` is any callable (node, flow, ingress ifname) -> egress ifname; `linux_route_get` builds
one that runs `ip route get` through a per-node command prefix (`ssh {node}`, `ip netns exec NS`).
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
from collections.abc import Callable, Iterable, Mapping

from fabrictwin.errors import FailedPreconditionError, InvalidArgumentError
from fabrictwin.v1 import topology_pb2

__all__ = ["LiveFlow", "RouteGet", "linux_route_get", "trace_path"]

ROCE_PORT = 4791


@dataclasses.dataclass(frozen=True)
class LiveFlow:
    """A flow seen on a live fabric: its hosts (node names), addresses and UDP ports."""

    source: str
    destination: str
    source_ip: str
    destination_ip: str
    udp_source_port: int
    udp_destination_port: int = ROCE_PORT


RouteGet = Callable[[str, LiveFlow, str], str]  # (node, flow, ingress ifname or "") -> egress ifname

_DEV = re.compile(r"\bdev\s+(\S+)")


def linux_route_get(
    prefix: str | Mapping[str, str] | Callable[[str], str], *, timeout_s: float = 10.0
) -> RouteGet:
    """A RouteGet that runs `PREFIX ip route get ...` with /bin/sh and reads its `dev`.

    `prefix` is a template over {node} (`ssh {node}`), a mapping node -> prefix, or a callable.
    """

    def prefix_of(node: str) -> str:
        if callable(prefix):
            return prefix(node)
        if isinstance(prefix, Mapping):
            return prefix[node]
        return prefix.replace("{node}", node)

    def route_get(node: str, flow: LiveFlow, ingress: str) -> str:
        command = f"{prefix_of(node)} ip route get {flow.destination_ip} from {flow.source_ip}"
        if ingress:
            command += f" iif {ingress}"
        command += f" ipproto udp sport {flow.udp_source_port} dport {flow.udp_destination_port}"
        try:
            done = subprocess.run(
                ["/bin/sh", "-c", command], capture_output=True, text=True, timeout=timeout_s
            )
        except subprocess.TimeoutExpired:
            raise FailedPreconditionError(f"{node}: `{command}` timed out after {timeout_s:g} s") from None
        match = _DEV.search(done.stdout)
        if done.returncode != 0 or match is None:
            why = (done.stderr.strip() or done.stdout.strip())[:200]
            raise FailedPreconditionError(f"{node}: `{command}` gave no route: {why}")
        return match[1]

    return route_get


def _short(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def trace_path(links: Iterable[topology_pb2.Link], flow: LiveFlow, route_get: RouteGet) -> list[str]:
    """The links `flow` crosses, from its source host to its destination, as the switches route it."""
    by_port: dict[
        tuple[str, str], tuple[topology_pb2.Link, str, str]
    ] = {}  # (node, ifname) -> link, peer, peer if
    for link in links:
        a, b = _short(link.node_a), _short(link.node_b)
        if link.port_name_a:
            by_port[(a, link.port_name_a)] = (link, b, link.port_name_b)
        if link.port_name_b:
            by_port[(b, link.port_name_b)] = (link, a, link.port_name_a)
    if not by_port:
        raise InvalidArgumentError("links: the fabric keeps no interface names (import it from LLDP)")
    nodes = {node for node, _ in by_port}
    for end in (flow.source, flow.destination):
        if end not in nodes:
            raise InvalidArgumentError(f"flow: {end!r} is not a node of the fabric")
    path: list[str] = []
    node, ingress = flow.source, ""
    for _ in range(len(nodes)):
        egress = route_get(node, flow, ingress)
        if (node, egress) not in by_port:
            raise FailedPreconditionError(
                f"{node} routes {flow.source_ip}->{flow.destination_ip} sport {flow.udp_source_port} out of "
                f"{egress}, which is no link of the fabric"
            )
        link, peer, peer_port = by_port[(node, egress)]
        path.append(link.display_name)
        if peer == flow.destination:
            return path
        node, ingress = peer, peer_port
    raise FailedPreconditionError(
        f"{flow.source}->{flow.destination}: no arrival after {len(path)} hops (a loop?)"
    )
