"""Fabrics edited through the JSON format: nodes and cables removed or added, as a user's dump might
differ from a generated fabric (a switch missing a cable, one more switch above the spines)."""

from __future__ import annotations

import json
from collections.abc import Iterable

from services.topology.fabric import Fabric
from services.topology.formats import export_fabric, import_fabric

__all__ = ["edited", "without"]


def edited(
    fabric: Fabric,
    *,
    drop: Iterable[str] = (),
    drop_links: Iterable[tuple[str, str]] = (),
    nodes: Iterable[dict] = (),
    links: Iterable[tuple[str, int, str, int]] = (),
) -> Fabric:
    """`fabric` without the nodes named in `drop` (and their cables) and the cables between the
    pairs in `drop_links`, with `nodes` (JSON node documents) and cables `links` (a, a_port, b,
    b_port) added; every node's radix grows to its highest port."""
    doc = json.loads(export_fabric(fabric, "json"))
    gone = set(drop)
    cut = {frozenset(pair) for pair in drop_links}
    doc["nodes"] = [n for n in doc["nodes"] if n["name"] not in gone] + [dict(n) for n in nodes]
    doc["links"] = [
        x
        for x in doc["links"]
        if x["a"] not in gone and x["b"] not in gone and frozenset((x["a"], x["b"])) not in cut
    ]
    doc["links"] += [{"a": a, "a_port": pa, "b": b, "b_port": pb} for a, pa, b, pb in links]
    highest: dict[str, int] = {}
    for x in doc["links"]:
        for end in ("a", "b"):
            highest[x[end]] = max(highest.get(x[end], 0), x[f"{end}_port"])
    for node in doc["nodes"]:
        node["radix"] = max(node.get("radix", 1), highest.get(node["name"], 1))
    return import_fabric("json", json.dumps(doc))


def without(fabric: Fabric, names: Iterable[str]) -> Fabric:
    """`fabric` without the named nodes and their cables."""
    return edited(fabric, drop=names)
