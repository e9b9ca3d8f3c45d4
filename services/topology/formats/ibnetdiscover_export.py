"""`Fabric` -> ibnetdiscover text, in the layout ibnetdiscover itself writes (see ibnetdiscover.py).

- one block per node in node order: `vendid=0x0`, `devid=0x0` (unknown), `switchguid=`/`caguid=`,
  the `Switch`/`Ca` header with the node name as description (and a switch's LID), then one line
  per linked port in port order, with the peer's description and LID and the link's width x speed;
- GUIDs: a node's GUID, or for GUID 0 (unknown, as in generated fabrics) a synthetic one,
  `0xfab0000000000000 + ((node index + 1) << 8)`, so CA port GUIDs (GUID + port) stay distinct
  (`export_guids`: the ibsim export and the OpenSM LFT dump write the same ones);
- a CA's LID is written on each of its port lines (`# lid <lid> lmc 0 ...`);
- every link is written from both ends, whatever its state: the format describes cabling and has
  no room for state, BER or latency, so those come back as UP, 0 and the importer's default.

Import of the export gives back the same nodes (names, kinds, radix, GUIDs where non-zero, LIDs of
switches and linked CAs), links (ends, ports, rates) and tiers where the fabric's tiers are the
inferred ones. A rate that is no InfiniBand width x speed, a name with `"` or a line break, or two
nodes with one GUID cannot be written, and raise InvalidArgument naming the link or node.
"""

from __future__ import annotations

import numpy as np

from services.common.errors import InvalidArgument
from services.topology.fabric import Fabric, NodeKind
from services.topology.formats.link_speeds import width_speed

__all__ = ["SYNTHETIC_GUID_BASE", "export_guids", "export_ibnetdiscover", "synthetic_guid"]

SYNTHETIC_GUID_BASE = 0xFAB0_0000_0000_0000


def synthetic_guid(index: int) -> int:
    """The GUID exports give node `index` when the fabric has none (see export_guids)."""
    return SYNTHETIC_GUID_BASE + ((index + 1) << 8)


def export_guids(fabric: Fabric, *, unique: bool = True) -> np.ndarray:
    """[N] uint64: each node's GUID, synthetic where it is 0; InvalidArgument if two nodes share one.

    The one definition of the GUIDs every export writes (ibnetdiscover, ibsim, the OpenSM LFT dump);
    a CA's port GUID is its GUID + port number. Routing orders nodes by the same values
    (`routing.balance.node_guid_keys`), so an OpenSM run on an export sees the twin's order.
    `unique=False` skips the check (for matching a dump against the fabric).

    >>> from services.topology.generators import leaf_spine
    >>> [f"{g:#x}" for g in export_guids(leaf_spine(1, 1, 1)).tolist()]
    ['0xfab0000000000100', '0xfab0000000000200', '0xfab0000000000300']
    """
    index = np.arange(fabric.num_nodes, dtype=np.uint64)
    guid = np.where(
        fabric.node_guid == 0,
        np.uint64(SYNTHETIC_GUID_BASE) + ((index + np.uint64(1)) << np.uint64(8)),
        fabric.node_guid,
    ).astype(np.uint64)
    if not unique:
        return guid
    values, counts = np.unique(guid, return_counts=True)
    if (counts > 1).any():
        dup = values[counts > 1][0]
        both = np.flatnonzero(guid == dup)[:2]
        raise InvalidArgument(
            f"node_guid[{both[1]}]",
            f"{fabric.node_names[both[1]]} and {fabric.node_names[both[0]]} share GUID {int(dup):#018x}",
        )
    return guid


def _check_names(names: list[str]) -> None:
    for i, name in enumerate(names):
        if '"' in name or "\n" in name or "\r" in name:
            raise InvalidArgument(
                f"node_names[{i}]",
                f"{name!r} contains a quote or line break, which ibnetdiscover cannot write",
            )


def _rate_tokens(fabric: Fabric, links: np.ndarray | None = None) -> np.ndarray:
    """[L] (or one per index of `links`) `<width>x<speed>` tokens; InvalidArgument naming the first
    link whose rate is no InfiniBand width x speed."""
    if links is None:
        links = np.arange(fabric.num_links)
    rates, inverse = np.unique(fabric.link_rate_bps[links], return_inverse=True)
    tokens = []
    for rate in rates.tolist():
        token = width_speed(rate)
        if token is None:
            bad = int(links[np.flatnonzero(fabric.link_rate_bps[links] == rate)[0]])
            raise InvalidArgument(
                f"links[{bad}]",
                f"{fabric.link_names[bad]} runs at {rate / 1e9:g} Gb/s, which is no InfiniBand width x speed "
                "(e.g. 4xEDR = 100, 4xNDR = 400)",
            )
        tokens.append(token)
    return np.asarray(tokens, dtype=object)[inverse]


def export_ibnetdiscover(fabric: Fabric) -> str:
    """The fabric as ibnetdiscover text; import_ibnetdiscover reads it back (see the module docstring).

    >>> from services.topology.generators import leaf_spine
    >>> text = export_ibnetdiscover(leaf_spine(1, 1, 1))
    >>> print(text.split("\\n\\n")[2].replace("\\t", " "))
    vendid=0x0
    devid=0x0
    switchguid=0xfab0000000000200(fab0000000000200)
    Switch 2 "S-fab0000000000200"  # "leaf-0" enhanced port 0 lid 2 lmc 0
    [1] "H-fab0000000000100"[1](fab0000000000101)   # "host-0" lid 1 4xNDR
    [2] "S-fab0000000000300"[1]  # "spine-0" lid 3 4xNDR
    """
    _check_names(fabric.node_names)
    guid = export_guids(fabric)
    token = _rate_tokens(fabric)
    is_switch = fabric.node_kind == NodeKind.SWITCH
    ids = [f"{'S' if sw else 'H'}-{g:016x}" for sw, g in zip(is_switch.tolist(), guid.tolist(), strict=True)]
    names, lids = fabric.node_names, fabric.node_lid.tolist()

    # Both directions of every link as rows (node, port, peer, peer port, token), sorted by node then
    # port so each block's lines come out in one pass.
    node = np.concatenate([fabric.link_a, fabric.link_b])
    port = np.concatenate([fabric.link_port_a, fabric.link_port_b])
    peer = np.concatenate([fabric.link_b, fabric.link_a])
    peer_port = np.concatenate([fabric.link_port_b, fabric.link_port_a])
    tokens = np.concatenate([token, token])
    order = np.lexsort((port, node))
    node, port, peer, peer_port, tokens = (
        node[order],
        port[order],
        peer[order],
        peer_port[order],
        tokens[order],
    )
    starts = np.searchsorted(node, np.arange(fabric.num_nodes + 1))

    guids = guid.tolist()
    radix = fabric.node_radix.tolist()
    out: list[str] = []
    for i in range(fabric.num_nodes):
        out.append("")
        out.append("vendid=0x0")
        out.append("devid=0x0")
        if is_switch[i]:
            out.append(f"switchguid={guids[i]:#x}({guids[i]:x})")
            out.append(f'Switch\t{radix[i]} "{ids[i]}"\t\t# "{names[i]}" enhanced port 0 lid {lids[i]} lmc 0')
        else:
            out.append(f"caguid={guids[i]:#x}")
            out.append(f'Ca\t{radix[i]} "{ids[i]}"\t\t# "{names[i]}"')
        lo, hi = int(starts[i]), int(starts[i + 1])
        for p, q, pp, tok in zip(
            port[lo:hi].tolist(),
            peer[lo:hi].tolist(),
            peer_port[lo:hi].tolist(),
            tokens[lo:hi].tolist(),
            strict=True,
        ):
            peer_guid = "" if is_switch[q] else f"({guids[q] + pp:x}) "
            if is_switch[i]:
                out.append(f'[{p}]\t"{ids[q]}"[{pp}]{peer_guid}\t\t# "{names[q]}" lid {lids[q]} {tok}')
            else:
                out.append(
                    f'[{p}]({guids[i] + p:x}) \t"{ids[q]}"[{pp}]{peer_guid}\t\t'
                    f'# lid {lids[i]} lmc 0 "{names[q]}" lid {lids[q]} {tok}'
                )
    header = ["#", "# Topology file: written by FabricTwin", "#"]
    return "\n".join(header + out) + "\n"
