"""`Fabric` -> an ibsim net file, to bring a twin fabric up in the ibsim fabric simulator.

ibsim (`ibsim -s NETFILE`, Debian package ibsim-utils) reads ibnetdiscover's layout. What it needs
and what this writes, one record per node, separated by blank lines:

    switchguid=0xfab0000000000200
    Switch  2 "S-fab0000000000200"  # "leaf-0"
    [1]     "H-fab0000000000100"[1]
    [2]     "S-fab0000000000300"[1]

- GUIDs: the node's, or the synthetic one the ibnetdiscover export uses where it is 0, so ibsim's
  nodes (and what ibnetdiscover and OpenSM report about them) carry the twin's identity; a CA's
  port GUID is its GUID + port, as ibsim derives it.
- Names: the node name as the description (`# "..."`), which ibsim reports as the NodeDescription.
- No LIDs (the subnet manager assigns them) and no rates: ibsim brings every link up at its default
  width x speed; routing does not depend on rates. Links in state DOWN are not written (ibsim has no
  cable that is present but down); DEGRADED links are written as cabled.
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
from services.topology.formats.ibnetdiscover_export import _check_names, export_guids

__all__ = ["IBSIM_MAX_PORTS", "export_ibsim"]

IBSIM_MAX_PORTS = 255


def export_ibsim(fabric: Fabric, order: np.ndarray | None = None) -> str:
    """The fabric as an ibsim net file (see the module docstring).

    >>> from services.topology.generators import leaf_spine
    >>> print(export_ibsim(leaf_spine(1, 1, 1)).split("\\n\\n")[1].replace("\\t", " "))
    switchguid=0xfab0000000000200
    Switch 2 "S-fab0000000000200" # "leaf-0"
    [1] "H-fab0000000000100"[1]
    [2] "S-fab0000000000300"[1]
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

    cabled = fabric.link_state != LinkState.DOWN
    node = np.concatenate([fabric.link_a[cabled], fabric.link_b[cabled]])
    port = np.concatenate([fabric.link_port_a[cabled], fabric.link_port_b[cabled]])
    peer = np.concatenate([fabric.link_b[cabled], fabric.link_a[cabled]])
    peer_port = np.concatenate([fabric.link_port_b[cabled], fabric.link_port_a[cabled]])
    by_end = np.lexsort((port, node))
    node, port, peer, peer_port = node[by_end], port[by_end], peer[by_end], peer_port[by_end]
    starts = np.searchsorted(node, np.arange(fabric.num_nodes + 1)).tolist()
    port, peer, peer_port = port.tolist(), peer.tolist(), peer_port.tolist()

    out = ["# ibsim net file written by FabricTwin"]
    for i in order.tolist():
        out.append("")
        if is_switch[i]:
            out.append(f"switchguid={guid[i]:#x}")
            out.append(f'Switch\t{radix[i]} "{ids[i]}"\t# "{fabric.node_names[i]}"')
        else:
            out.append(f"caguid={guid[i]:#x}")
            out.append(f'Ca\t{radix[i]} "{ids[i]}"\t# "{fabric.node_names[i]}"')
        for e in range(starts[i], starts[i + 1]):
            out.append(f'[{port[e]}]\t"{ids[peer[e]]}"[{peer_port[e]}]')
    return "\n".join(out) + "\n"
