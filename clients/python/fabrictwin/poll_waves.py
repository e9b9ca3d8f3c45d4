"""A mirror poll's scrapes parsed as they come, and sent in waves: `PollWaves`.

The targets are cut into waves of `WAVE` in their configured order. Each scrape is parsed when it
arrives: the protobuf exposition here at once (a target whose families kept their layout is read by
its template, `prometheus.parse_scrape_columns`: a quarter of a millisecond for a switch), the text
format in worker processes when the poll is large (prometheus_client's parser takes ~7 us a line).
Once every target of the next wave is in and parsed, that wave's columns are merged and handed on
(`ready`), so the service can store them while the later waves are still being scraped. Waves go in
order, so what the service receives is what one merge of the whole poll would give, in pieces.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import gc
import multiprocessing
import threading
from collections.abc import Callable, Iterator

from fabrictwin.errors import InvalidArgumentError
from fabrictwin.importers import SampleColumns, ScrapeColumns, merge_columns, prometheus
from fabrictwin.mirror_config import TargetConfig
from fabrictwin.scrape import ScrapeResult

__all__ = ["WAVE", "PollWaves", "collector_paused", "new_pool", "parse_scrape"]

WAVE = 250  # targets a wave
PARALLEL_FROM = 64  # targets in a poll from which text scrapes are parsed by worker processes
# The layouts of the protobuf families last read, per target, in this process (see
# prometheus.ProtobufPlans): a target's next scrape reads its values without decoding its families.
_PLANS = prometheus.ProtobufPlans()

_PROTOBUF = "application/vnd.google.protobuf"  # parsed here, whatever its parameters say
_Parsing = concurrent.futures.Future[ScrapeColumns | str | None]  # a text scrape in a worker process
_Item = tuple[bytes, str, int, TargetConfig, dict[str, str] | None]


def parse_scrape(item: _Item, template_only: bool = False) -> ScrapeColumns | str | None:
    """One scrape (body, Content-Type, time, target, its interfaces' port names or None) as columns,
    or the parse error (a FormatError names the line or message); `template_only`: only if its
    template reads it (`prometheus.parse_scrape_columns`), else None."""
    body, content_type, time_ns, target, names = item
    try:
        return prometheus.parse_scrape_columns(
            body,
            content_type,
            time_ns,
            where=f"{target.node} ({target.where[:200]})",
            node=target.node,
            device_port_name=target.port_name,
            port_names=names,
            plans=_PLANS,
            rate_bps=target.speed_gbps * 1e9,
            template_only=template_only,
        )
    except InvalidArgumentError as exc:  # a FormatError, or a port_name template that does not format
        return None if template_only else exc.details


_pausing = threading.Lock()
_paused = [0, False]  # polls under way that paused the collector; whether it ran before the first


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused for a poll. A poll makes and drops a few hundred
    thousand short-lived objects; a collection in the middle of it walks every object the mirror
    keeps (the targets' plans and templates), 0.1-0.2 s of a 1,000-target poll. Paused, the poll's
    objects are freed by their reference counts as before, and any cyclic garbage it left is
    collected once the collector runs again (it is restored as it was when no poll is under way)."""
    with _pausing:
        if _paused[0] == 0:
            _paused[1] = gc.isenabled()
            gc.disable()
        _paused[0] += 1
    try:
        yield
    finally:
        with _pausing:
            _paused[0] -= 1
            if _paused[0] == 0 and _paused[1]:
                gc.enable()


def new_pool(workers: int) -> concurrent.futures.ProcessPoolExecutor:
    """Processes that parse text scrapes. Spawned, not forked: the mirror's process holds gRPC
    channels and their threads."""
    return concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))


class PollWaves:
    """One poll's scrapes, parsed as they arrive and handed on wave by wave (module docstring).

    `names(node)` gives a target's interface -> port names (None: its port_name template names
    them); `pool` (None: parse every text here) parses the text scrapes.
    """

    def __init__(
        self,
        targets: int,
        names: Callable[[TargetConfig], dict[str, str] | None],
        pool: concurrent.futures.ProcessPoolExecutor | None,
    ) -> None:
        self.results: list[ScrapeResult | None] = [None] * targets
        self.parsed: list[ScrapeColumns | str | None] = [None] * targets
        self._names = names
        self._pool = pool
        self._text: dict[int, _Parsing] = {}
        self._wave = wave = WAVE
        self._waiting = [min(wave, targets - start) for start in range(0, targets, wave)]  # per wave
        self._next = 0  # the first wave not handed on

    def parse(self, result: ScrapeResult) -> ScrapeColumns | str | _Parsing | None:
        """What can be made of a fetched scrape where it was fetched (`Scraper.scrape_each`'s `after`,
        on the scrape loop's thread): a protobuf scrape its template reads (a quarter of a
        millisecond), or a text scrape sent to a worker process; None for the rest, parsed by
        `arrived` (a parse there would hold up the loop, and the other targets' timeouts with it)."""
        if result.content_type.lower().startswith(_PROTOBUF):
            return parse_scrape(self._item(result), template_only=True)
        if self._pool is not None:
            return self._pool.submit(parse_scrape, self._item(result))
        return None

    def _item(self, result: ScrapeResult) -> _Item:
        target = result.target
        return result.body, result.content_type, result.time_ns, target, self._names(target)

    def arrived(self, position: int, result: ScrapeResult, parsed: object) -> None:
        """A target's scrape (or its failure) and what `parse` made of it (None: parsed here)."""
        self.results[position] = result
        if isinstance(parsed, concurrent.futures.Future):
            self._text[position] = parsed
        elif isinstance(parsed, ScrapeColumns | str):
            self.parsed[position] = parsed
        elif not result.skipped and not result.error:
            self.parsed[position] = parse_scrape(self._item(result))
        self._waiting[position // self._wave] -= 1

    def ready(self, wait: bool = False) -> Iterator[list[SampleColumns]]:
        """The merged columns of each next wave whose targets are all in and parsed, in order
        (`wait`: every wave, waiting for the text still being parsed)."""
        while self._next < len(self._waiting) and self._waiting[self._next] == 0:
            wave = self._wave
            positions = range(self._next * wave, min((self._next + 1) * wave, len(self.results)))
            text = [self._text[p] for p in positions if p in self._text]
            if not wait and not all(future.done() for future in text):
                return
            for position in positions:
                if position in self._text:
                    self.parsed[position] = self._text.pop(position).result()
            self._next += 1
            chunks = [
                chunk
                for p in positions
                if isinstance(parsed := self.parsed[p], ScrapeColumns)
                for chunk in parsed.chunks
            ]
            if chunks:
                yield merge_columns(chunks)
