"""FabricTwin benchmarks: `make bench [BENCH=prefix]` prints one JSON object per line.

A benchmark is a function registered with `@benchmark("dotted.name")` in a module of this package;
it returns a dict of figures whose keys carry their unit (`seconds`, `packets_per_s`, `samples_stored`).
Each runs in its own process so that `peak_rss_mb` is that benchmark's own peak.
"""
