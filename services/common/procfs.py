"""Processes as Linux's /proc shows them (no psutil): the worker pool's memory checks, and the tests
and benchmarks that watch a service's workers."""

from __future__ import annotations

import os

__all__ = [
    "children_of",
    "cpu_ticks",
    "is_running",
    "memory_total_bytes",
    "peak_rss_bytes",
    "stat_fields",
    "status_bytes",
]


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


def _kib_field(path: str, key: str) -> int:
    """The `key:` line of a /proc file that counts in kB (status, meminfo), in bytes; 0 when unknown."""
    try:
        with open(path, encoding="ascii", errors="replace") as lines:
            for line in lines:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def status_bytes(pid: int | str, key: str) -> int:
    """A memory line of /proc/<pid>/status (VmRSS, VmHWM, ...; pid "self" for this process), in bytes."""
    return _kib_field(f"/proc/{pid}/status", key)


def peak_rss_bytes(pid: int | str) -> int:
    """VmHWM (the peak resident set) of a live process, in bytes; 0 when unknown."""
    return status_bytes(pid, "VmHWM")


def memory_total_bytes() -> int:
    """The machine's memory (MemTotal), in bytes; 0 when unknown."""
    return _kib_field("/proc/meminfo", "MemTotal")
