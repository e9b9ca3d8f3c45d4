"""Topology import benchmark: an ibnetdiscover dump of a generated k=16 fat-tree (12,867 lines)."""

from __future__ import annotations

import statistics
import time

from bench.registry import benchmark
from services.topology.formats import export_fabric, import_fabric
from services.topology.generators import fat_tree

_RUNS = 5


@benchmark("topology.import.ibnetdiscover")
def import_ibnetdiscover_k16() -> dict:
    # 1,024 hosts and 320 switches: 6,144 port lines plus five lines of header per node, over the
    # issue's 10,000-line bar. Written once, outside the timing.
    text = export_fabric(fat_tree(16), "ibnetdiscover")
    timings = []
    for _ in range(_RUNS):
        start = time.perf_counter()
        fabric = import_fabric("ibnetdiscover", text)
        timings.append(time.perf_counter() - start)
    return {
        "seconds": round(statistics.median(timings), 4),
        "seconds_min": round(min(timings), 4),
        "runs": _RUNS,
        "lines": text.count("\n"),
        "nodes": fabric.num_nodes,
        "links": fabric.num_links,
    }
