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
On a leaf that bridges its host ports (hosts behind `br0`, a Cumulus/SONiC design) or puts them in
a VLAN (an SVI such as `vlan10` or `br0.10` on a VLAN-aware bridge) the kernel routes out of the
bridge, not a port: `linux_route_get` then asks the neighbour table for the next hop's MAC and the
bridge's forwarding database (`bridge fdb`) for the member port that leads to it, the way the
bridge itself forwards. A bond (also as a bridge member) resolves to its active member in
active-backup mode, or to its only member that is up; a bond that spreads flows by its own hash is
refused, naming it. A packet arriving on a bridge member is routed with the bridge (or the port's
VLAN interface) as its `iif`.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fabrictwin.errors import FailedPreconditionError, InvalidArgumentError
from fabrictwin.v1 import topology_pb2

__all__ = ["LiveFlow", "RouteGet", "Runner", "linux_route_get", "shell_runner", "trace_path"]

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
# (node, command) -> its standard output; raises FailedPreconditionError when the command fails
Runner = Callable[[str, str], str]

_DEV = re.compile(r"\bdev\s+(\S+)")
_VIA = re.compile(r"\bvia\s+(\S+)")


def shell_runner(
    prefix: str | Mapping[str, str] | Callable[[str], str], *, timeout_s: float = 10.0
) -> Runner:
    """A Runner that runs `PREFIX COMMAND` with /bin/sh; `prefix` is a template over {node}
    (`ssh {node}`), a mapping node -> prefix, or a callable."""

    def prefix_of(node: str) -> str:
        if callable(prefix):
            return prefix(node)
        if isinstance(prefix, Mapping):
            return prefix[node]
        return prefix.replace("{node}", node)

    def run(node: str, command: str) -> str:
        line = f"{prefix_of(node)} {command}"
        try:
            done = subprocess.run(["/bin/sh", "-c", line], capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise FailedPreconditionError(f"{node}: `{line}` timed out after {timeout_s:g} s") from None
        if done.returncode != 0:
            why = (done.stderr.strip() or done.stdout.strip())[:200]
            raise FailedPreconditionError(f"{node}: `{line}` failed: {why}")
        return done.stdout

    return run


def linux_route_get(
    prefix: str | Mapping[str, str] | Callable[[str], str] = "",
    *,
    timeout_s: float = 10.0,
    runner: Runner | None = None,
) -> RouteGet:
    """A RouteGet that asks a Linux switch's kernel (`ip route get`), and its neighbour table and
    bridge forwarding database where the route leaves by a bridge, VLAN interface or bond (module
    docstring). Commands run through `prefix` (see `shell_runner`), or `runner`."""
    run = runner or shell_runner(prefix, timeout_s=timeout_s)

    def route_get(node: str, flow: LiveFlow, ingress: str) -> str:
        links = _Links(run, node)
        command = f"ip route get {flow.destination_ip} from {flow.source_ip}"
        if ingress:
            command += f" iif {links.l3_interface(ingress)}"
        command += f" ipproto udp sport {flow.udp_source_port} dport {flow.udp_destination_port}"
        out = run(node, command)
        dev = _DEV.search(out)
        if dev is None:
            raise FailedPreconditionError(f"{node}: `{command}` gave no route: {out.strip()[:200]}")
        via = _VIA.search(out)
        return links.port_toward(dev[1], via[1] if via else flow.destination_ip)

    return route_get


class _Links:
    """One switch's interfaces as `ip -j -d link` describes them, asked as needed."""

    def __init__(self, run: Runner, node: str) -> None:
        self._run, self.node = run, node
        self._seen: dict[str, dict[str, Any]] = {}

    def info(self, ifname: str) -> dict[str, Any]:
        if ifname not in self._seen:
            found = _json(self._run(self.node, f"ip -j -d link show dev {ifname}"), self.node, ifname)
            self._seen[ifname] = found[0] if found else {}
        return self._seen[ifname]

    def kind(self, ifname: str) -> str:
        return str(self.info(ifname).get("linkinfo", {}).get("info_kind", ""))

    def l3_interface(self, ifname: str) -> str:
        """Where a packet arriving on `ifname` meets the IP layer: the port, or the bridge (its VLAN
        interface on a VLAN-aware bridge) or bond it belongs to."""
        master = str(self.info(ifname).get("master") or "")
        if not master:
            return ifname
        if self.kind(master) == "bond":
            return self.l3_interface(master)
        if self.kind(master) != "bridge":
            return ifname
        data = self.info(master).get("linkinfo", {}).get("info_data", {})
        if data.get("vlan_filtering"):
            vlans = _json(self._run(self.node, f"bridge -j vlan show dev {ifname}"), self.node, ifname)
            pvid = next(
                (
                    v.get("vlan")
                    for entry in vlans
                    for v in entry.get("vlans", [])
                    if "PVID" in v.get("flags", [])
                ),
                None,
            )
            svi = self._vlan_interface(master, pvid)
            if svi:
                return svi
        return master

    def _vlan_interface(self, bridge: str, vlan: object) -> str | None:
        for entry in _json(self._run(self.node, "ip -j -d link show type vlan"), self.node, "vlan"):
            data = entry.get("linkinfo", {}).get("info_data", {})
            if entry.get("link") == bridge and data.get("id") == vlan:
                return str(entry["ifname"])
        return None

    def port_toward(self, dev: str, neighbour: str) -> str:
        """The port a packet for `neighbour` (the next hop's address) leaves by when the route says `dev`."""
        kind = self.kind(dev)
        if kind == "bridge":
            return self._member(dev, dev, None, neighbour)
        if kind == "vlan":
            parent = str(self.info(dev).get("link", ""))
            vlan = self.info(dev).get("linkinfo", {}).get("info_data", {}).get("id")
            if parent and self.kind(parent) == "bridge":
                return self._member(dev, parent, vlan, neighbour)
            return self.port_toward(parent, neighbour) if parent else dev
        if kind == "bond":
            return self._bond_member(dev)
        return dev

    def _member(self, dev: str, bridge: str, vlan: object, neighbour: str) -> str:
        entries = _json(self._run(self.node, f"ip -j neigh show {neighbour} dev {dev}"), self.node, dev)
        mac = next((str(e["lladdr"]).lower() for e in entries if e.get("lladdr")), None)
        if mac is None:
            raise FailedPreconditionError(
                f"{self.node}: {neighbour} has no neighbour entry on {dev}, so which port of {bridge} leads "
                "to it is unknown (let it send or answer a packet first)"
            )
        fdb = _json(self._run(self.node, f"bridge -j fdb show br {bridge}"), self.node, bridge)
        for entry in fdb:
            if (
                str(entry.get("mac", "")).lower() == mac
                and entry.get("master") == bridge
                and entry.get("ifname") != bridge
                and (vlan is None or entry.get("vlan") in (None, vlan))
            ):
                port = str(entry["ifname"])
                return self._bond_member(port) if self.kind(port) == "bond" else port
        raise FailedPreconditionError(
            f"{self.node}: {bridge}'s forwarding database has no port for {mac} ({neighbour}"
            + (f", VLAN {vlan}" if vlan is not None else "")
            + ")"
        )

    def _bond_member(self, bond: str) -> str:
        data = self.info(bond).get("linkinfo", {}).get("info_data", {})
        if data.get("active_slave"):
            return str(data["active_slave"])
        members = [
            entry
            for entry in _json(self._run(self.node, f"ip -j link show master {bond}"), self.node, bond)
            if entry.get("operstate") == "UP"
        ]
        if len(members) == 1:
            return str(members[0]["ifname"])
        names = ", ".join(str(m["ifname"]) for m in members) or "no member"
        raise FailedPreconditionError(
            f"{self.node}: {bond} spreads flows over {names} by its own hash "
            f"({data.get('mode', 'mode unknown')}); which member a flow takes cannot be asked"
        )


def _json(text: str, node: str, what: str) -> list[dict[str, Any]]:
    try:
        value = json.loads(text or "[]")
    except json.JSONDecodeError:
        raise FailedPreconditionError(
            f"{node}: no JSON from iproute2 about {what}: {text.strip()[:200]}"
        ) from None
    return value if isinstance(value, list) else [value]


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
