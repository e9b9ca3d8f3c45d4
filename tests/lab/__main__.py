"""`make lab`: build the namespace lab, mirror it through the real services, print what was found.
First, the InfiniBand lab: OpenSM on ibsim against the twin's forwarding tables (tests/lab/ib_report.py).

One JSON line per step (discover, mirror, diagnose, replay, overload, link_down, stop), then short
tables.
Exits 0 when every check of tests/lab/test_lab_mirror.py would hold, 1 when one does not, and 0
with the reason when the lab cannot run here (no root, no CAP_NET_ADMIN, a missing package).
"""

from __future__ import annotations

import json
import pathlib
import sys
import tempfile
import time

from services.stack import running_stack
from tests.lab.ib_report import run_ib_lab
from tests.lab.mirror_lab import run_mirror_lab
from tests.lab.netns_fabric import build_lab, lab_unavailable_reason


def _table(steps: dict[str, dict]) -> str:
    mirror, diagnose, replay, down = (steps.get(k, {}) for k in ("mirror", "diagnose", "replay", "link_down"))
    lines = ["", "PORT       EXPORTER_B     TWIN_B   AS_OBSERVED_B      SPRAY_B   ADAPTIVE_B"]
    by_mode = replay.get("uplink_bytes_by_mode", {})
    for port, measured in mirror.get("uplink_bytes_exporter", {}).items():
        lines.append(
            f"{port:<9} {measured:>11,.0f} {mirror['uplink_bytes_twin'][port]:>10,.0f} "
            f"{replay.get('uplink_bytes_as_observed', {}).get(port, 0):>15,.0f} "
            f"{by_mode.get('SPRAY', {}).get(port, 0):>12,.0f} "
            f"{by_mode.get('ADAPTIVE', {}).get(port, 0):>12,.0f}"
        )
    lines.append("")
    lines.append("MODE          BUSIEST     UTIL  MAX/MEAN  IDLE")
    for row in replay.get("comparison", []):
        lines.append(
            f"{row['label']:<12} {row['busiest_port']:<10} {row['busiest_utilisation']:>5.0%} "
            f"{row['max_over_mean']:>9.2f} {row['idle_ports']:>5}"
        )
    lines.append("")
    lines.append("PORT       UTIL_LIVE  UTIL_REPLAY")
    for port, live in replay.get("uplink_utilisation_measured", {}).items():
        replayed = replay["uplink_utilisation_as_observed"].get(port, 0)
        lines.append(f"{port:<9} {live:>10.2%} {replayed:>12.2%}")
    lines.append("")
    lines.append("FLOW      SENT_MBIT  INFERRED_MBIT")
    for flow, sent in replay.get("sent_mbit", {}).items():
        lines.append(f"{flow:<8} {sent:>10.3f} {replay['inferred_mbit'].get(flow, 0):>14.3f}")
    lines.append("")
    lines.append(
        f"twin vs node_exporter: max error {mirror.get('max_relative_error', float('nan')):.3%}; "
        f"replay vs measured: bytes {replay.get('max_relative_error', float('nan')):.3%}, "
        f"utilisation {replay.get('max_utilisation_error', float('nan')):.2%}"
    )
    overload = steps.get("overload", {})
    lossy = [f["ports"] for f in overload.get("findings", []) if f["kind"] == 2]
    lines.append(
        f"hot uplink diagnosed: {diagnose.get('hot')}; overloaded uplink: {overload.get('tc_drops')} tc "
        f"drops, lossy: {lossy}; link down seen in {down.get('seconds')} s"
    )
    return "\n".join(lines)


def main() -> int:
    ib_ok = run_ib_lab()  # the InfiniBand lab: OpenSM on ibsim against the twin's tables
    reason = lab_unavailable_reason()
    if reason is not None:
        print(json.dumps({"step": "skipped", "reason": reason}))
        return 0 if ib_ok else 1
    started = time.monotonic()
    steps: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="fabrictwin-lab-") as tmp, build_lab() as lab:
        print(
            json.dumps(
                {
                    "step": "build",
                    "seconds": round(lab.timings["build_s"], 2),
                    "namespaces": [lab.namespace(n) for n in lab.nodes],
                }
            ),
            flush=True,
        )
        with running_stack(f"{tmp}/stack") as stack:
            for step in run_mirror_lab(lab, stack, pathlib.Path(tmp)):
                steps[step["step"]] = step
                print(json.dumps(step), flush=True)
    print(_table(steps))
    print(f"\nlab done in {time.monotonic() - started:.1f} s; namespaces and daemons torn down")
    lossy = [f["ports"] for f in steps.get("overload", {}).get("findings", []) if f["kind"] == 2]
    ok = (
        steps.get("mirror", {}).get("max_relative_error", 1) < 0.01
        and steps.get("diagnose", {}).get("hot") == ["leaf0/p3"]
        and steps.get("replay", {}).get("max_relative_error", 1) < 0.02
        and steps.get("replay", {}).get("max_utilisation_error", 1) < 0.02
        and lossy == [["leaf0/p3"]]
        and steps.get("link_down", {}).get("state") == 2
        and steps.get("stop", {}).get("exit_code") == 0
    )
    return 0 if ok and ib_ok else 1


if __name__ == "__main__":
    sys.exit(main())
