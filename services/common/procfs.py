"""Processes as Linux's /proc shows them (no psutil): the worker pool's memory checks, and the tests
and benchmarks that watch a service's workers."""

from __future__ import annotations

import os

__all__ = ["children_of", "cpu_ticks", "is_running", "peak_rss_bytes", "stat_fields"]


def stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state first), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def is_running(pid: int) -> bool:
    """The process exists and is not a zombie."""
    fields = stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def children_of(pid: int) -> list[int]:
    """Live processes whose parent is `pid` (zombies, already dead, left out)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = stat_fields(int(entry))
        if fields is not None and int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(entry))
    return found


def cpu_ticks(pid: int) -> int:
    """CPU time the process has used (user + system), in clock ticks; 0 once it is gone."""
    fields = stat_fields(pid)
    return 0 if fields is None else int(fields[11]) + int(fields[12])


def peak_rss_bytes(pid: int) -> int:
    """VmHWM (the peak resident set) of a live process, in bytes; 0 when unknown."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0
