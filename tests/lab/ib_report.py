"""`make lab`'s InfiniBand part: OpenSM on ibsim against the twin, agreement per fabric and engine."""

from __future__ import annotations

import json
import pathlib
import tempfile
import time

from tests.lab.ib_compare import KNOWN_GAPS, LAB_FABRICS, compare_engine
from tests.lab.ib_opensm import IbLabError, ibsim_lab_unavailable_reason

ENGINES = ("minhop", "updn", "ftree", "file")
SHIFT_FABRIC = "fat-tree-k8-shuffled"  # the shift permutations are counted on this one


def run_ib_lab() -> bool:
    """Print one JSON line per (fabric, engine) and two tables (agreement; shift permutations on
    the shuffled k=8 fat-tree); True when every engine agrees everywhere but the KNOWN_GAPS (or
    when ibsim cannot run here)."""
    reason = ibsim_lab_unavailable_reason()
    if reason is not None:
        print(json.dumps({"step": "ib_skipped", "reason": reason}))
        return True
    started = time.monotonic()
    rows, ok = [], True
    with tempfile.TemporaryDirectory(prefix="fabrictwin-ib-lab-") as tmp:
        for base in LAB_FABRICS:
            for name in (base, f"{base}-shuffled"):
                for engine in ENGINES:
                    shifts = name == SHIFT_FABRIC and engine != "file"
                    try:
                        result = compare_engine(name, engine, pathlib.Path(tmp), shifts=shifts).as_dict()
                    except IbLabError as exc:
                        result = {"fabric": name, "engine": engine, "error": str(exc), "agreement": 0.0}
                    print(json.dumps({"step": "ib_compare", **result}), flush=True)
                    rows.append(result)
                    ok &= result.get("agreement") == 1.0 or (name, engine) in KNOWN_GAPS
    print("\nFABRIC                              " + "".join(f"{e:>9}" for e in ENGINES))
    for i in range(0, len(rows), len(ENGINES)):
        cells = rows[i : i + len(ENGINES)]
        print(f"{cells[0]['fabric']:<36}" + "".join(f"{c['agreement']:>9.1%}" for c in cells))
    for (name, engine), why in KNOWN_GAPS.items():
        print(f"known gap, {engine} on {name}: {why}")
    counted = [r for r in rows if r.get("contention_free_shifts")]
    if counted:
        total = counted[0]["contention_free_shifts"]["of"]
        print(f"\nCONTENTION-FREE SHIFTS ({SHIFT_FABRIC}, of {total})", end="")
        print("  OPENSM   TWIN  (name order | ftree order)")
        for r in counted:
            c = r["contention_free_shifts"]
            print(
                f"{r['engine']:<44}{c['opensm_name_order']:>4} {c['twin_name_order']:>6}"
                f"   | {c.get('opensm_ftree_order', '-'):>4} {c.get('twin_ftree_order', '-'):>6}"
            )
    print(f"\nInfiniBand lab (OpenSM 3.3.23 on ibsim) done in {time.monotonic() - started:.1f} s")
    return ok
