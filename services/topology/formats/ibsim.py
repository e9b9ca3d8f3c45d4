"""`Fabric` -> an ibsim net file, to bring a twin fabric up in the ibsim fabric simulator.

ibsim (`ibsim -s NETFILE`, Debian package ibsim-utils) reads ibnetdiscover's layout. What it needs
and what this writes, one record per node, separated by blank lines:

    caguid=0xfab0000000000100
    Ca      1 "H-fab0000000000100"  # "host-0"
    [1]     "S-fab0000000000200"[1] # lid 0 lmc 0 "leaf-0" lid 0 4xQDR

    switchguid=0xfab0000000000200
    Switch  2 "S-fab0000000000200"  # "leaf-0"
    [1]     "H-fab0000000000100"[1] # "host-0" lid 0 4xQDR
    [2]     "S-fab0000000000300"[1] # "spine-0" lid 0 4xDDR

- GUIDs: `export_guids`, the node's or, where it is 0, the synthetic one every export writes, so
  ibsim's nodes (and what ibnetdiscover and OpenSM report about them) carry the twin's identity; a
  CA's port GUID is its GUID + port, as ibsim derives it.
- Names: the node name as the description (`# "..."`), which ibsim reports as the NodeDescription.
- Rates: each port line ends as ibnetdiscover's does, `lid <lid> <width>x<speed>` (ibsim 0.10,
  sim_net.c `parse_port_link_width_and_speed`, enables that width and the speeds up to that one on
  the port, and a link comes up at the best both ends enable: the twin's rate); a rate that is no
  InfiniBand width x speed is InvalidArgument naming the link. The LIDs written are 0 (a CA port
  line also gives the port's own, `lid 0 lmc 0`): the subnet manager assigns them. ibsim 0.10 knows
  speeds up to HDR: it brings an NDR or XDR link up at SDR, its width kept, warning `cannot parse
  speed / invalid speed` for each such port; the token is written all the same (a later ibsim reads
  NDR) and a comment at the top of the file lists them. ibsim reads `<letter>=<value>` anywhere on a
  port line as a port option (`w=`, `s=`, `e=`), so a peer whose name holds `=` is named there by
  its id; its own record keeps the name.
- Links in state DOWN are not written (ibsim has no cable that is present but down); DEGRADED links
  are written as cabled.
- `order` writes the records in another order (a permutation of node indices); ibsim attaches its
  clients (OpenSM, ibnetdiscover) at the first record, and OpenSM hands out LIDs in the order it
  discovers nodes, so the order changes the LIDs, never the GUIDs.

ibsim's limits are checked here, naming the node: at most 255 ports per node (`MAXNETPORTS`
aside, the SMP port number is one byte).
"""

from __future__ import annotations

import numpy as np

from services.common.errors import InvalidArgument
from services.topology.fabric import Fabric, LinkState, NodeKind
from services.topology.formats.ibnetdiscover_export import _check_names, _rate_tokens, export_guids

__all__ = ["IBSIM_0_10_SPEEDS", "IBSIM_MAX_PORTS", "export_ibsim"]

IBSIM_MAX_PORTS = 255
# The speeds ibsim 0.10's net-file parser knows (sim_net.c, LINKSPEED_STR_*).
IBSIM_0_10_SPEEDS = ("SDR", "DDR", "QDR", "FDR10", "FDR", "EDR", "HDR")


def export_ibsim(fabric: Fabric, order: np.ndarray | None = None) -> str:
    """The fabric as an ibsim net file (see the module docstring).

    >>> from services.topology.generators import leaf_spine
    >>> fabric = leaf_spine(1, 1, 1, link_speed_gbps=20.0, host_link_speed_gbps=40.0)
    >>> print(export_ibsim(fabric).split("\\n\\n")[2].replace("\\t", " "))
    switchguid=0xfab0000000000200
    Switch 2 "S-fab0000000000200" # "leaf-0"
    [1] "H-fab0000000000100"[1] # "host-0" lid 0 4xQDR
    [2] "S-fab0000000000300"[1] # "spine-0" lid 0 4xDDR
    """
    _check_names(fabric.node_names)
    guid = export_guids(fabric).tolist()
    is_switch = (fabric.node_kind == NodeKind.SWITCH).tolist()
    radix = fabric.node_radix.tolist()
    for i, ports in enumerate(radix):
        if ports > IBSIM_MAX_PORTS:
            raise InvalidArgument(
                f"nodes[{i}].radix",
                f"{fabric.node_names[i]} has {ports} ports; ibsim takes at most {IBSIM_MAX_PORTS}",
            )
    if order is None:
        order = np.arange(fabric.num_nodes)
    order = np.asarray(order, dtype=np.int64)
    if sorted(order.tolist()) != list(range(fabric.num_nodes)):
        raise InvalidArgument("order", "must be a permutation of the node indices")
    ids = [f"{'S' if sw else 'H'}-{g:016x}" for sw, g in zip(is_switch, guid, strict=True)]

    cabled = np.flatnonzero(fabric.link_state != LinkState.DOWN)
    token = _rate_tokens(fabric, cabled)
    node = np.concatenate([fabric.link_a[cabled], fabric.link_b[cabled]])
    port = np.concatenate([fabric.link_port_a[cabled], fabric.link_port_b[cabled]])
    peer = np.concatenate([fabric.link_b[cabled], fabric.link_a[cabled]])
    peer_port = np.concatenate([fabric.link_port_b[cabled], fabric.link_port_a[cabled]])
    tokens = np.concatenate([token, token])
    by_end = np.lexsort((port, node))
    node, port, peer, peer_port = node[by_end], port[by_end], peer[by_end], peer_port[by_end]
    starts = np.searchsorted(node, np.arange(fabric.num_nodes + 1)).tolist()
    port, peer, peer_port, tokens = port.tolist(), peer.tolist(), peer_port.tolist(), tokens[by_end].tolist()
    # How a port line names its peer: by name, unless ibsim would read an `=` in it as an option.
    described = [name if "=" not in name else ids[i] for i, name in enumerate(fabric.node_names)]

    out = ["# ibsim net file written by FabricTwin"]
    by_rate = np.argsort(fabric.link_rate_bps[cabled], kind="stable")
    beyond = [t for t in dict.fromkeys(token[by_rate].tolist()) if t.split("x")[1] not in IBSIM_0_10_SPEEDS]
    if beyond:
        out.append(
            f"# {', '.join(beyond)}: beyond ibsim 0.10, which knows speeds up to HDR and brings these links"
            " up at SDR (width kept)"
        )
    for i in order.tolist():
        out.append("")
        if is_switch[i]:
            out.append(f"switchguid={guid[i]:#x}")
            out.append(f'Switch\t{radix[i]} "{ids[i]}"\t# "{fabric.node_names[i]}"')
            own = ""
        else:
            out.append(f"caguid={guid[i]:#x}")
            out.append(f'Ca\t{radix[i]} "{ids[i]}"\t# "{fabric.node_names[i]}"')
            own = "lid 0 lmc 0 "
        for e in range(starts[i], starts[i + 1]):
            q = peer[e]
            out.append(f'[{port[e]}]\t"{ids[q]}"[{peer_port[e]}]\t# {own}"{described[q]}" lid 0 {tokens[e]}')
    return "\n".join(out) + "\n"
