"""Scraping many targets at once, each with a timeout, and backing off the ones that keep failing.

`Scraper.scrape(targets)` fetches every target that is not backing off, all at the same time (one
thread per target in flight, at most `max_workers`): a URL with urllib, a command with /bin/sh. A
target that fails (timeout, refused, non-zero exit, HTTP error) is reported with why, and skipped
for the next 1, 2, 4, then 8 intervals after 1, 2, 3, 4+ consecutive failures, so a dead switch costs one
timeout now and then instead of one per interval; a success clears its back-off. One target
failing never stops the others.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence

from fabrictwin.mirror_config import TargetConfig

__all__ = ["MAX_BACKOFF_INTERVALS", "ScrapeResult", "Scraper"]

MAX_BACKOFF_INTERVALS = 8
_MAX_BYTES = 64 * 1024 * 1024  # one scrape; node_exporter on a 64-port switch sends ~200 kB


@dataclasses.dataclass(frozen=True)
class ScrapeResult:
    """One target's scrape: its text (or the error) and when it was taken."""

    target: TargetConfig
    time_ns: int
    text: str = ""
    error: str = ""
    seconds: float = 0.0
    skipped: bool = False  # backing off: not tried this interval


def _fetch(target: TargetConfig, timeout_s: float) -> str:
    if target.url:
        with urllib.request.urlopen(target.url, timeout=timeout_s) as response:
            data: bytes = response.read(_MAX_BYTES + 1)
        if len(data) > _MAX_BYTES:
            raise OSError(f"more than {_MAX_BYTES} bytes")
        return data.decode("utf-8", errors="replace")
    done = subprocess.run(
        ["/bin/sh", "-c", target.command], capture_output=True, text=True, errors="replace", timeout=timeout_s
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [""])[-1][:200]
        raise OSError(f"exited with {done.returncode}: {last}")
    return done.stdout


def _scrape_one(target: TargetConfig, timeout_s: float) -> ScrapeResult:
    at = time.time_ns()
    started = time.monotonic()
    try:
        text = _fetch(target, timeout_s)
    except subprocess.TimeoutExpired:
        error = f"timed out after {timeout_s:g} s"
    except urllib.error.HTTPError as exc:
        error = f"HTTP {exc.code} {exc.reason}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        error = f"timed out after {timeout_s:g} s" if "timed out" in str(reason) else str(reason)[:200]
    else:
        return ScrapeResult(target, at, text=text, seconds=time.monotonic() - started)
    return ScrapeResult(target, at, error=error, seconds=time.monotonic() - started)


class Scraper:
    """Concurrent scrapes with per-target timeouts and back-off (module docstring)."""

    def __init__(self, timeout_s: float, max_workers: int = 64) -> None:
        self.timeout_s = timeout_s
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix="scrape"
        )
        self._failures: dict[str, int] = {}
        self._skip: dict[str, int] = {}

    def backing_off(self, target: TargetConfig) -> int:
        """Intervals the target will still be skipped for (0: it is tried)."""
        return self._skip.get(target.where, 0)

    def scrape(self, targets: Sequence[TargetConfig]) -> list[ScrapeResult]:
        """Scrape every target not backing off; results in the order of `targets`."""
        now = time.time_ns()
        futures: dict[int, concurrent.futures.Future[ScrapeResult]] = {}
        results: list[ScrapeResult | None] = [None] * len(targets)
        for i, target in enumerate(targets):
            skip = self._skip.get(target.where, 0)
            if skip:
                self._skip[target.where] = skip - 1
                results[i] = ScrapeResult(target, now, error=f"backing off ({skip} more)", skipped=True)
            else:
                futures[i] = self._pool.submit(_scrape_one, target, self.timeout_s)
        for i, future in futures.items():
            result = future.result()
            if result.error:
                self.failed(result.target)
            else:
                self._failures.pop(result.target.where, None)
            results[i] = result
        return [result for result in results if result is not None]

    def failed(self, target: TargetConfig) -> None:
        """Count a failure of `target` (also one found after the scrape, such as text that does not
        parse) and back it off accordingly."""
        failures = self._failures.get(target.where, 0) + 1
        self._failures[target.where] = failures
        self._skip[target.where] = min(2 ** (failures - 1), MAX_BACKOFF_INTERVALS)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
