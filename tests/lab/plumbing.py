"""Kernel configuration of the lab's namespaces: sysctls, veth pairs, addresses, permanent neighbour
entries, static (multipath) routes and tbf shaping. Each function takes `ns`, mapping a node name to its
namespace, and applies one part of topology.py's plan with `ip`/`tc` (batched per namespace)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from . import topology as topo
from .shell import in_netns, run

NamespaceOf = Callable[[str], str]


def ip_batch(namespace: str, commands: Sequence[str]) -> None:
    """Run `ip` commands (without the leading `ip`) in one namespace, in order."""
    if commands:
        run(["ip", "-n", namespace, "-batch", "-"], stdin="\n".join(commands) + "\n")


def set_sysctls(namespace: str, is_switch: bool, hash_seed: int) -> None:
    """IPv6 off and lo up everywhere; on switches forwarding, the L4 (5-tuple) multipath hash, a fixed
    hash seed (the sysctl exists from kernel 6.11) and no reverse-path filter (ECMP is asymmetric)."""
    values = {
        "net/ipv6/conf/all/disable_ipv6": 1,
        "net/ipv6/conf/default/disable_ipv6": 1,
        "net/ipv4/ip_forward": 0,
    }
    if is_switch:
        values |= {
            "net/ipv4/ip_forward": 1,
            "net/ipv4/fib_multipath_hash_policy": 1,
            "net/ipv4/fib_multipath_hash_seed": hash_seed,
            "net/ipv4/conf/all/rp_filter": 0,
            "net/ipv4/conf/default/rp_filter": 0,
        }
    script = "".join(
        f"if [ -e /proc/sys/{key} ]; then echo {value} > /proc/sys/{key}; fi\n"
        for key, value in values.items()
    )
    run(in_netns(namespace, ["sh", "-ec", script]))
    ip_batch(namespace, ["link set lo up"])


def create_links(ns: NamespaceOf) -> None:
    """Every veth pair, created straight into its two namespaces with the planned names and MACs."""
    for link in topo.all_links():
        run(
            [
                *("ip", "-n", ns(link.a), "link", "add", link.a_if, "address", link.a_mac),
                *("type", "veth", "peer", "name", link.b_if, "address", link.b_mac, "netns", ns(link.b)),
            ]
        )


def neigh_command(ifname: str, peer_addr: str, peer_mac: str) -> str:
    """`ip` batch line: a permanent neighbour entry, so no flow waits on ARP."""
    return f"neigh replace {peer_addr.split('/')[0]} lladdr {peer_mac} dev {ifname} nud permanent"


def neighbor_commands(node: str, ifname: str) -> list[str]:
    """The permanent neighbour entry for the peer of `node`'s `ifname` (the kernel flushes it when the
    interface goes admin down); a bridge member's peer is the bridge's neighbour, and a host behind a
    bridge has the bridge (its gateway) as its neighbour."""
    commands = []
    for link in topo.all_links():
        if (link.a, link.a_if) == (node, ifname):
            dev = topo.BRIDGE if not link.a_addr else ifname
            commands.append(neigh_command(dev, link.b_addr, link.b_mac))
        if (link.b, link.b_if) == (node, ifname):
            if link.a_addr:
                commands.append(neigh_command(ifname, link.a_addr, link.a_mac))
            else:
                commands.append(neigh_command(ifname, topo.bridge_address(link.a), topo.bridge_mac(link.a)))
    return commands


def configure_interfaces(ns: NamespaceOf) -> None:
    """A bridge on each bridged leaf (its host ports as members), then address, link up and the peer's
    permanent neighbour entry on every veth end."""
    per_node: dict[str, list[str]] = {node: [] for node in topo.NODES}
    for leaf in topo.BRIDGED_LEAVES:
        per_node[leaf] += [
            f"link add {topo.BRIDGE} address {topo.bridge_mac(leaf)} type bridge",
            f"addr add {topo.bridge_address(leaf)} dev {topo.BRIDGE}",
            f"link set {topo.BRIDGE} up",
        ]
    for link in topo.all_links():
        for node, ifname, addr in ((link.a, link.a_if, link.a_addr), (link.b, link.b_if, link.b_addr)):
            if addr:
                per_node[node].append(f"addr add {addr} dev {ifname}")
            else:
                per_node[node].append(f"link set {ifname} master {topo.BRIDGE}")
            per_node[node].append(f"link set {ifname} up")
            per_node[node] += neighbor_commands(node, ifname)
    for node, commands in per_node.items():
        ip_batch(ns(node), commands)


def install_routes(ns: NamespaceOf) -> None:
    """The static routes; several next hops become one kernel multipath route."""
    per_node: dict[str, list[str]] = {node: [] for node in topo.NODES}
    for route in topo.routes():
        if len(route.nexthops) == 1:
            ((via, dev),) = route.nexthops
            per_node[route.node].append(f"route add {route.dst} via {via} dev {dev}")
        else:
            hops = " ".join(f"nexthop via {via} dev {dev}" for via, dev in route.nexthops)
            per_node[route.node].append(f"route add {route.dst} {hops}")
    for node, commands in per_node.items():
        ip_batch(ns(node), commands)


def shape_links(ns: NamespaceOf, link_mbit: float, burst_bytes: int, limit_bytes: int) -> None:
    """tbf at `link_mbit` as the root qdisc of every veth end, so both directions of every link."""
    for node in topo.NODES:
        commands = [
            f"qdisc replace dev {ifname} root tbf rate {link_mbit}mbit"
            f" burst {burst_bytes} limit {limit_bytes}"
            for ifname in topo.expected_neighbors(node)
        ]
        run(["tc", "-n", ns(node), "-batch", "-"], stdin="\n".join(commands) + "\n")
