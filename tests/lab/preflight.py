"""Can this machine build the namespace lab? (root, ip/tc/unshare, lldpd, node_exporter, namespaces)"""

from __future__ import annotations

import os
import pathlib
import shutil

from .daemons import node_exporter_binary
from .shell import LabError, in_netns, run

REQUIRED_TOOLS = ("ip", "tc", "unshare", "lldpd", "lldpcli")
CAP_NET_ADMIN, CAP_SYS_ADMIN = 12, 21


def lab_unavailable_reason() -> str | None:
    """None when this machine can build the lab; otherwise why not (for pytest.skip)."""
    if not _has_capabilities(CAP_NET_ADMIN, CAP_SYS_ADMIN):
        return "the namespace lab needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN)"
    missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
    if node_exporter_binary() is None:
        missing.append("prometheus-node-exporter")
    if missing:
        return (
            f"the namespace lab needs {', '.join(missing)}, not found on PATH"
            " (apt-get install lldpd prometheus-node-exporter iproute2)"
        )
    probe = f"ftlprobe{os.getpid()}"
    try:
        run(["ip", "netns", "add", probe], timeout=5)
    except LabError as exc:
        return f"cannot create a network namespace: {exc}"
    try:
        run(in_netns(probe, ["unshare", "--uts", "--mount", "true"]), timeout=5)
    except LabError as exc:
        return f"cannot create UTS and mount namespaces: {exc}"
    finally:
        run(["ip", "netns", "del", probe], check=False)
    return None


def _has_capabilities(*bits: int) -> bool:
    """True when the effective capability set holds every bit (always for root)."""
    if os.geteuid() == 0:
        return True
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            eff = int(line.split()[1], 16)
            return all(eff >> bit & 1 for bit in bits)
    return False
