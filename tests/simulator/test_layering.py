"""The simulator's layering, as docs/architecture.md documents it, checked on the source.

Each module imports alone, in a fresh process (a cycle that a lucky import order hides fails here).
Every import of a simulator module, function-local and TYPE_CHECKING ones included, goes to a
module of the same layer or a lower one; the imports form no cycle; no module imports another
module's `_private` name; only the PACKET engine's own code (packet/) and the engine registry
(engines.py) import PACKET-only code; the two engine packages, flow/ and packet/, do not import
each other; PACKET-only code lives under packet/.

KNOWN_VIOLATIONS lists what breaks these rules today, each entry one edge or one module: empty
since the packet engine plugged into the seam (#12). The test fails on any violation not listed,
and on any listed one that is gone, so the list only shrinks; keep it empty.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "services.simulator"
SOURCE = ROOT / "services" / "simulator"

# Lowest first. A module may import modules of its own layer or lower ones, never higher.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "foundation",
        ("__init__", "bounds", "faults", "ecmp_hash", "series", "progress", "cancel", "warm_fabric"),
    ),
    ("spec", ("spec",)),
    ("traffic", ("collectives", "placement", "pinning", "sharp")),
    ("workload", ("workload",)),
    ("routes and results", ("routes", "results", "ideal")),
    ("modes", ("modes",)),
    ("paths and validation", ("paths", "validation", "fabric_state")),
    ("engine seam", ("engine", "assemble")),
    ("engines", ("flow", "packet")),
    ("checks", ("engines", "admission", "checks")),
    ("runner", ("runner",)),
    ("service", ("registry", "convert", "peers", "servicer", "__main__")),
]
# PACKET-only code: what only the packet engine uses (transport, link faults included) lives in packet/.
PACKET_ONLY = ("packet",)
PACKET_IMPORTERS = (*PACKET_ONLY, "engines")

# What breaks the rules today (kind, importer, imported): nothing.
KNOWN_VIOLATIONS: set[tuple[str, str, str]] = set()


def _modules() -> dict[str, Path]:
    """Every module of the package by its name relative to it (`packet.engine`, `modes`, `runner`)."""
    found = {}
    for path in sorted(SOURCE.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = path.relative_to(SOURCE).with_suffix("").parts
        if len(parts) > 1 and parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _layer(module: str) -> int:
    top = module.split(".")[0]
    for index, (_, members) in enumerate(LAYERS):
        if module in members or top in members:
            return index
    raise AssertionError(f"{module} has no layer: add it to LAYERS and to docs/architecture.md")


def _resolve(name: str) -> str | None:
    """`services.simulator.x.y` -> `x.y` when it is one of our modules (or the package itself)."""
    if name == PACKAGE:
        return "__init__"
    if not name.startswith(PACKAGE + "."):
        return None
    relative = name[len(PACKAGE) + 1 :]
    return relative if relative in MODULES else None


def _imports(module: str) -> list[tuple[str, str | None]]:
    """(imported module, imported name or None) for every import of a simulator module, anywhere."""
    tree = ast.parse(MODULES[module].read_text())
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _resolve(alias.name)
                if target:
                    found.append((target, None))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            base = _resolve(node.module)
            if base is None:
                continue
            for alias in node.names:
                submodule = _resolve(f"{node.module}.{alias.name}")
                found.append((submodule, None) if submodule else (base, alias.name))
    return found


def _edges() -> set[tuple[str, str]]:
    return {(m, target) for m in MODULES for target, _ in _imports(m) if target != m}


def _cycles(edges: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """The edges that lie on a cycle (both ends in one strongly connected component)."""
    graph: dict[str, list[str]] = {}
    for a, b in edges:
        graph.setdefault(a, []).append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    component: dict[str, int] = {}

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, []):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component[member] = index[node]
                if member == node:
                    break

    for node in sorted(MODULES):
        if node not in index:
            visit(node)
    return {(a, b) for a, b in edges if component[a] == component[b]}


def _is_packet_only(module: str) -> bool:
    return module.split(".")[0] in PACKET_ONLY


def violations() -> set[tuple[str, str, str]]:
    found: set[tuple[str, str, str]] = set()
    edges = _edges()
    for a, b in edges:
        if _layer(b) > _layer(a):
            found.add(("reaches up a layer", a, b))
        if _is_packet_only(b) and a.split(".")[0] not in PACKET_IMPORTERS:
            found.add(("PACKET-only code imported from outside", a, b))
        engines = {a.split(".")[0], b.split(".")[0]}
        if engines == {"flow", "packet"}:
            found.add(("engine imports the other engine", a, b))
    for a, b in _cycles(edges):
        if (b, a) in edges or a < b:
            found.add(("cycle", *sorted((a, b))))
    for module in MODULES:
        for target, name in _imports(module):
            if name and name.startswith("_") and not name.startswith("__") and target != module:
                found.add(("private name", module, f"{target}.{name}"))
    return found


def test_every_simulator_module_has_a_documented_layer():
    for module in MODULES:
        _layer(module)
    documented = (ROOT / "docs" / "architecture.md").read_text()
    for name, _ in LAYERS:
        assert f"**{name}**" in documented, f"layer {name!r} is not in docs/architecture.md"


def test_the_layering_holds_but_for_the_known_violations():
    new = violations() - KNOWN_VIOLATIONS
    assert not new, "new layering violations:\n" + "\n".join(map(str, sorted(new)))


def test_known_violations_that_are_gone_leave_the_list():
    gone = KNOWN_VIOLATIONS - violations()
    assert not gone, "fixed, remove from KNOWN_VIOLATIONS:\n" + "\n".join(map(str, sorted(gone)))


_IMPORT_EACH_ALONE = """
import importlib, os, sys
failed = []
for name in sys.argv[1:]:
    pid = os.fork()
    if pid == 0:  # a process that has imported nothing of ours: the module comes in alone
        try:
            importlib.import_module(name)
        except BaseException as exc:
            print(f"{name}: {type(exc).__name__}: {exc}", flush=True)
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if status:
        failed.append(name)
sys.exit(1 if failed else 0)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="imports each module in a forked process")
def test_each_module_imports_alone_in_a_fresh_process():
    names = [PACKAGE if m == "__init__" else f"{PACKAGE}.{m}" for m in MODULES if m != "__main__"]
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_EACH_ALONE, *names],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
