"""`Fabric` -> networkx node-link JSON (export only), for tools that read graphs the networkx way.

The graph is an undirected `networkx.MultiGraph` (parallel cables stay separate edges) written by
`networkx.node_link_data` with the installed networkx's default keys (networkx 3.6: `nodes`,
`edges`, `source`, `target`, `key`, `id`), so `networkx.node_link_graph(json.loads(text))` loads it.

- node `id` = the node name; attributes `kind` (`HOST`/`SWITCH`), `tier`, `radix`, `guid` (0x hex
  string), `lid`, `rail`, `group`, `ip` (dotted, `""` for none) - the fields of the JSON format;
- edge `key` = the link index; attributes `name`, `a`, `a_port`, `b`, `b_port`, `speed_gbps`,
  `latency_ns`, `state`, `ber`. `a`/`b` are repeated because an undirected graph may list an edge
  from either end, and ports belong to a particular end.
"""

from __future__ import annotations

import json

import networkx as nx

from services.topology.fabric import Fabric
from services.topology.formats.json_format import export_json

__all__ = ["export_node_link_json", "fabric_graph"]


def fabric_graph(fabric: Fabric) -> nx.MultiGraph:
    """The fabric as a networkx MultiGraph with the attributes listed in the module docstring.

    >>> from services.topology.generators import fat_tree
    >>> g = fabric_graph(fat_tree(4))
    >>> g.number_of_nodes(), g.number_of_edges(), g.nodes["core-0"]["tier"]
    (36, 48, 3)
    """
    # The JSON format already turns every array into named, typed fields; reuse it so the two
    # exports can never describe a node differently.
    document = json.loads(export_json(fabric))
    graph: nx.MultiGraph[str] = nx.MultiGraph(name="fabric")
    graph.add_nodes_from((node.pop("name"), node) for node in document["nodes"])
    # Keyed by link index: one edge per cable, parallel cables included.
    for index, (link, name) in enumerate(zip(document["links"], fabric.link_names, strict=True)):
        graph.add_edge(link["a"], link["b"], key=index, **{"name": name, **link})
    return graph


def export_node_link_json(fabric: Fabric) -> str:
    """networkx node-link JSON of the fabric (see the module docstring)."""
    return json.dumps(nx.node_link_data(fabric_graph(fabric)))
