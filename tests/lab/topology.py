"""The lab's fixed plan: nodes, veth links (switch-style port names), addresses, MACs and static routes.

Pure data, no side effects. Addressing (all inside the namespaces):
- a routed leaf (leaf0): host hK in 10.1.K.0/24, the leaf's port facing it is .1, the host .2;
- a bridged leaf (leaf1, the Cumulus/SONiC design): its host ports are members of a Linux bridge
  `br0` that holds the leaf's address for its hosts, 10.1.(2L).1/23, and the hosts (10.1.K.2/23)
  use it as their gateway; the kernel routes to them out of `br0`, and the bridge's forwarding
  database says which member port leads to each;
- leaf L's hosts aggregate to 10.1.(2L).0/23 either way;
- leaf L <-> spine S: the /31 10.2.S.(2L), the spine takes the even address, the leaf the odd one.
"""

from __future__ import annotations

from dataclasses import dataclass

SPINES = ("spine0", "spine1")
LEAVES = ("leaf0", "leaf1")
HOSTS = ("h0", "h1", "h2", "h3")
SWITCHES = SPINES + LEAVES
NODES = SPINES + LEAVES + HOSTS
HOSTS_PER_LEAF = 2
BRIDGED_LEAVES = ("leaf1",)
BRIDGE = "br0"


@dataclass(frozen=True)
class Link:
    """One veth pair: end a (a switch) and end b, each with its ifname, MAC and address (CIDR)."""

    a: str
    a_if: str
    a_mac: str
    a_addr: str  # "" where the port is a bridge member (the bridge holds the address)
    b: str
    b_if: str
    b_mac: str
    b_addr: str

    def ends(self) -> tuple[tuple[str, str], tuple[str, str]]:
        """((node, ifname), (node, ifname)) for both ends."""
        return (self.a, self.a_if), (self.b, self.b_if)


@dataclass(frozen=True)
class Route:
    """A static IPv4 route in one node; several (gateway, dev) next hops make a kernel multipath route."""

    node: str
    dst: str
    nexthops: tuple[tuple[str, str], ...]


def _mac(node: str, port: int) -> str:
    """A stable, locally administered MAC for port `port` of `node` (port 0 = a host's eth0)."""
    return f"02:66:74:{NODES.index(node):02x}:{port:02x}:00"


def _ip(cidr: str) -> str:
    return cidr.split("/")[0]


def leaf_of(host: str) -> str:
    """The leaf a host hangs off (h0,h1 -> leaf0; h2,h3 -> leaf1)."""
    return LEAVES[HOSTS.index(host) // HOSTS_PER_LEAF]


def host_port(host: str) -> str:
    """The leaf port facing `host`: swp1 or swp2."""
    return f"swp{HOSTS.index(host) % HOSTS_PER_LEAF + 1}"


def is_bridged(leaf: str) -> bool:
    """Whether `leaf` bridges its host ports (br0) rather than routing each."""
    return leaf in BRIDGED_LEAVES


def host_ingress(host: str) -> str:
    """The interface `host`'s packets arrive on at its leaf's IP layer: its port, or the bridge."""
    return BRIDGE if is_bridged(leaf_of(host)) else host_port(host)


def bridge_address(leaf: str) -> str:
    """A bridged leaf's address for its hosts (on br0): the first of its /23."""
    return f"10.1.{HOSTS_PER_LEAF * LEAVES.index(leaf)}.1/23"


def bridge_mac(leaf: str) -> str:
    """The bridge's MAC (port 0 of the switch)."""
    return _mac(leaf, 0)


def gateway(host: str) -> str:
    """The address `host` routes through: its leaf port's, or its bridged leaf's br0."""
    leaf = leaf_of(host)
    if is_bridged(leaf):
        return _ip(bridge_address(leaf))
    return f"10.1.{HOSTS.index(host)}.1"


def uplink(leaf: str, spine: str) -> str:
    """The leaf port facing `spine`: swp3 (spine0) or swp4 (spine1)."""
    return f"swp{HOSTS_PER_LEAF + 1 + SPINES.index(spine)}"


def downlink(spine: str, leaf: str) -> str:
    """The spine port facing `leaf`: swp1 (leaf0) or swp2 (leaf1)."""
    return f"swp{LEAVES.index(leaf) + 1}"


def host_ip(host: str) -> str:
    """The host's address, 10.1.K.2."""
    return f"10.1.{HOSTS.index(host)}.2"


def leaf_subnet(leaf: str) -> str:
    """The /23 covering both host subnets of `leaf`."""
    return f"10.1.{HOSTS_PER_LEAF * LEAVES.index(leaf)}.0/23"


def host_links() -> list[Link]:
    """Leaf swp1/swp2 <-> host eth0, one /24 per host."""
    links = []
    for k, host in enumerate(HOSTS):
        leaf, port = leaf_of(host), host_port(host)
        bridged = is_bridged(leaf)
        links.append(
            Link(
                a=leaf,
                a_if=port,
                a_mac=_mac(leaf, int(port[3:])),
                a_addr="" if bridged else f"10.1.{k}.1/24",
                b=host,
                b_if="eth0",
                b_mac=_mac(host, 0),
                b_addr=f"10.1.{k}.2/23" if bridged else f"10.1.{k}.2/24",
            )
        )
    return links


def fabric_links() -> list[Link]:
    """Spine swpN <-> leaf swp3/swp4, one /31 per link."""
    links = []
    for s, spine in enumerate(SPINES):
        for l_idx, leaf in enumerate(LEAVES):
            sp_if, lf_if = downlink(spine, leaf), uplink(leaf, spine)
            links.append(
                Link(
                    a=spine,
                    a_if=sp_if,
                    a_mac=_mac(spine, int(sp_if[3:])),
                    a_addr=f"10.2.{s}.{2 * l_idx}/31",
                    b=leaf,
                    b_if=lf_if,
                    b_mac=_mac(leaf, int(lf_if[3:])),
                    b_addr=f"10.2.{s}.{2 * l_idx + 1}/31",
                )
            )
    return links


def all_links() -> list[Link]:
    """Every veth pair of the lab."""
    return fabric_links() + host_links()


def routes() -> list[Route]:
    """Hosts default via their leaf; leaves reach the other leaf over both spines; spines reach each leaf."""
    out = []
    for link in host_links():
        out.append(Route(link.b, "default", ((gateway(link.b), "eth0"),)))
    fabric = fabric_links()
    for leaf in LEAVES:
        for other in LEAVES:
            if other == leaf:
                continue
            hops = tuple((_ip(lk.a_addr), lk.b_if) for lk in fabric if lk.b == leaf)
            out.append(Route(leaf, leaf_subnet(other), hops))
    for lk in fabric:
        out.append(Route(lk.a, leaf_subnet(lk.b), ((_ip(lk.b_addr), lk.a_if),)))
    return out


def expected_neighbors(node: str) -> dict[str, tuple[str, str]]:
    """What LLDP should show on `node`: local ifname -> (neighbour system name, neighbour port ifname)."""
    seen: dict[str, tuple[str, str]] = {}
    for link in all_links():
        if link.a == node:
            seen[link.a_if] = (link.b, link.b_if)
        if link.b == node:
            seen[link.b_if] = (link.a, link.a_if)
    return seen
