"""`make lab`'s InfiniBand part: OpenSM on ibsim against the twin, agreement per fabric and engine."""

from __future__ import annotations

import json
import pathlib
import tempfile
import time

from tests.lab.ib_compare import LAB_FABRICS, compare_engine
from tests.lab.ib_opensm import IbLabError, ibsim_lab_unavailable_reason

ENGINES = ("minhop", "updn", "ftree", "file")


def run_ib_lab() -> bool:
    """Print one JSON line per (fabric, engine) and a table; True when minhop, updn and file agree
    everywhere and ftree on the full fat-trees in cabling order (or when ibsim cannot run here)."""
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
                    try:
                        result = compare_engine(name, engine, pathlib.Path(tmp)).as_dict()
                    except IbLabError as exc:
                        result = {"fabric": name, "engine": engine, "error": str(exc), "agreement": 0.0}
                    print(json.dumps({"step": "ib_compare", **result}), flush=True)
                    rows.append(result)
                    must = engine != "ftree" or (
                        name.startswith("fat-tree") and not name.endswith("shuffled")
                    )
                    ok &= not must or result.get("agreement") == 1.0
    print("\nFABRIC                              " + "".join(f"{e:>9}" for e in ENGINES))
    for i in range(0, len(rows), len(ENGINES)):
        cells = rows[i : i + len(ENGINES)]
        print(f"{cells[0]['fabric']:<36}" + "".join(f"{c['agreement']:>9.1%}" for c in cells))
    print(f"\nInfiniBand lab (OpenSM 3.3.23 on ibsim) done in {time.monotonic() - started:.1f} s")
    return ok
