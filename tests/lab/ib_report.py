"""`make lab`'s InfiniBand part: OpenSM on ibsim against the twin, agreement per fabric and engine."""

from __future__ import annotations

import json
import pathlib
import tempfile
import time

from tests.lab.ib_compare import KNOWN_GAPS, LAB_FABRICS, LIVE_CASES, compare_engine, compare_live
from tests.lab.ib_live import ReLink, Unlink, cable
from tests.lab.ib_opensm import IbLabError, ibsim_lab_unavailable_reason

ENGINES = ("minhop", "updn", "ftree", "file")
SHIFT_FABRIC = "fat-tree-k8-shuffled"  # the shift permutations are counted on this one


def run_ib_lab() -> bool:
    """Print one JSON line per (fabric, engine) and tables (agreement, `*` where OpenSM and the twin
    both fell back to minhop; shift permutations on the shuffled k=8 fat-tree; a running OpenSM's
    reroutes against the twin's); True when every engine agrees everywhere but the KNOWN_GAPS (or
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
                    # file: the twin loads the tables a minhop OpenSM dumped (its engine is `file`)
                    used = "file" if engine == "file" else result.get("opensm_engine")
                    same = result.get("twin_engine") == used
                    ok &= (result.get("agreement") == 1.0 and same) or (name, engine) in KNOWN_GAPS
        live = _live(pathlib.Path(tmp))
        ok &= all(r["agreement"] == 1.0 and r["opensm_changed"] == r["twin_changed"] for r in live)
    print("\nFABRIC                              " + "".join(f"{e:>9}" for e in ENGINES))
    for i in range(0, len(rows), len(ENGINES)):
        cells = rows[i : i + len(ENGINES)]
        print(f"{cells[0]['fabric']:<36}" + "".join(_cell(c) for c in cells))
    print("  * OpenSM refused the engine and routed with minhop; so did the twin, for the same reason")
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
    header = f"{'A RUNNING OPENSM: A CABLE DOWN, THEN UP':<40}{'':<6}{'ENGINE':<8}{'USED':>8}{'AGREE':>10}"
    print(f"\n{header}{'CHANGED (OPENSM / TWIN)':>27}")
    for r in live:
        print(
            f"{r['case']:<40}{r['step']:<6}{r['engine']:<8}{r['opensm_engine']:>8} {r['agreement']:>9.1%}"
            f"{r['opensm_changed']:>11} / {r['twin_changed']}"
        )
    print(f"\nInfiniBand lab (OpenSM 3.3.23 on ibsim) done in {time.monotonic() - started:.1f} s")
    return ok


def _cell(result: dict) -> str:
    fell_back = result.get("opensm_engine") == "minhop" and result.get("engine") not in ("minhop", "file")
    return f"{result['agreement']:>8.1%}" + ("*" if fell_back else " ")


def _live(workdir: pathlib.Path) -> list[dict]:
    """Each live case and engine: OpenSM keeps running while ibsim unlinks a cable and relinks it."""
    out = []
    for case, (make, ends) in LIVE_CASES.items():
        net = make()
        a, port, _, _ = cable(net, *ends)
        for engine in ("minhop", "updn", "ftree"):
            try:
                sweeps = compare_live(
                    net, engine, workdir, [Unlink(a.node_id, port), ReLink(a.node_id, port)]
                )
            except (IbLabError, OSError) as exc:
                print(json.dumps({"step": "ib_live", "case": case, "engine": engine, "error": str(exc)}))
                out.append({"case": case, "step": "error", "engine": engine, "opensm_engine": "-",
                            "agreement": 0.0, "opensm_changed": -1, "twin_changed": 0})  # fmt: skip
                continue
            for label, result in zip(("down", "up"), sweeps[1:], strict=True):
                row = {"case": case, "engine": engine, **result.as_dict(), "step": label}
                print(json.dumps({"step_kind": "ib_live", **row}), flush=True)
                out.append(row)
    return out
