"""Fabrics shaped like the ones users bring rather than the ones generators make.

`cluster_like(seed)`: a cluster that grew over the years: leaves with different numbers of hosts,
spines cabled to the leaves by one to three parallel cables and to some leaves not at all, QDR and
DDR links mixed, storage nodes on a spine and a management switch above the spines with hosts of its
own. Seeded, so every seed is one fixed fabric. `quasi_fat_tree()`: a two-level tree whose leaves
reach different subsets of the spines, which OpenSM's ftree accepts. The lab routes both with real
OpenSM.
"""

from __future__ import annotations

import json

import numpy as np

from services.topology.fabric import Fabric
from services.topology.formats import import_fabric
from services.topology.generators import leaf_spine
from tests.fabric_edits import edited

__all__ = ["cluster_like", "quasi_fat_tree"]

_QDR, _DDR = 40.0, 20.0  # 4xQDR, 4xDDR in Gb/s


def cluster_like(seed: int) -> Fabric:
    """A seeded irregular cluster (see the module docstring): 2-3 spines, 4-7 leaves of 3-9 hosts,
    1-3 cables per leaf and spine (a few pairs none, every leaf keeps a spine), 0-3 storage hosts on
    spine-0, and with odd seeds a management switch cabled to every spine with 1-2 hosts."""
    rng = np.random.default_rng(seed)
    spines, leaves = int(rng.integers(2, 4)), int(rng.integers(4, 8))
    nodes: list[dict] = []
    links: list[dict] = []
    next_port: dict[str, int] = {}

    def node(name: str, kind: str) -> None:
        nodes.append({"name": name, "kind": kind})
        next_port[name] = 1

    def cable(a: str, b: str, speed: float) -> None:
        links.append({"a": a, "a_port": next_port[a], "b": b, "b_port": next_port[b], "speed_gbps": speed})
        next_port[a] += 1
        next_port[b] += 1

    for s in range(spines):
        node(f"spine-{s}", "SWITCH")
    for leaf in range(leaves):
        node(f"leaf-{leaf}", "SWITCH")
        for h in range(int(rng.integers(3, 10))):
            host = f"c{leaf:02d}-{h:02d}"
            node(host, "HOST")
            cable(f"leaf-{leaf}", host, _QDR if rng.random() < 0.7 else _DDR)
    for leaf in range(leaves):
        keep = int(rng.integers(spines))  # every leaf keeps at least this spine
        for s in range(spines):
            if s != keep and rng.random() < 0.15:
                continue
            speed = _QDR if rng.random() < 0.8 else _DDR
            for _ in range(int(rng.integers(1, 4))):
                cable(f"spine-{s}", f"leaf-{leaf}", speed)
    for i in range(int(rng.integers(0, 4))):
        node(f"storage-{i}", "HOST")
        cable("spine-0", f"storage-{i}", _QDR)
    if seed % 2:
        node("mgmt", "SWITCH")
        for s in range(spines):
            cable("mgmt", f"spine-{s}", _QDR)
        for i in range(int(rng.integers(1, 3))):
            node(f"mgmt-{i}", "HOST")
            cable("mgmt", f"mgmt-{i}", _DDR)
    for entry in nodes:
        entry["radix"] = next_port[entry["name"]] - 1
    return import_fabric("json", json.dumps({"version": 1, "nodes": nodes, "links": links}))


def quasi_fat_tree(leaves: int = 8, spines: int = 4, uplinks: int = 3, hosts: int = 3) -> Fabric:
    """Leaves each cabled to `uplinks` consecutive spines (modulo): every switch of a rank alike, so
    OpenSM's ftree accepts it, but no full fat-tree (a leaf reaches only some spines; with 3 of 4 any
    two leaves still share one)."""
    drop = [(f"leaf-{leaf}", f"spine-{s}") for leaf in range(leaves) for s in range(spines)
            if (s - leaf) % spines >= uplinks]  # fmt: skip
    return edited(leaf_spine(leaves, spines, hosts), drop_links=drop)
