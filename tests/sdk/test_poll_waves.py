"""`fabrictwin.poll_waves`: what is parsed on the scrape loop (only what a template reads at once),
what is parsed by the poll's own thread (the rest), and waves handed on whole and in target order."""

from __future__ import annotations

from fabrictwin.importers import ScrapeColumns
from fabrictwin.mirror_config import TargetConfig
from fabrictwin.poll_waves import PollWaves
from fabrictwin.scrape import ScrapeResult

from .exposition import as_protobuf, as_text
from .test_prometheus_protobuf import UNSTAMPED

PROTOBUF = "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"


def result(node: str, body: bytes, content_type: str, time_ns: int = 5) -> ScrapeResult:
    return ScrapeResult(TargetConfig(node, url=f"http://{node}/metrics"), time_ns, body, content_type)


def test_only_a_templates_read_is_made_on_the_scrape_loop_the_rest_is_parsed_by_the_poll(monkeypatch):
    from fabrictwin import poll_waves

    monkeypatch.setattr(poll_waves, "WAVE", 2)
    data = as_protobuf(UNSTAMPED)
    for poll in range(3):  # the first two polls decode the families and make the plans and template
        waves = PollWaves(3, lambda target: None, None)
        text = as_text(UNSTAMPED).encode()
        down = ScrapeResult(TargetConfig("down", url="http://down/metrics"), 1, error="timed out after 1 s")
        scrapes = [result("leaf9", data, PROTOBUF, 10 + poll), result("text", text, "text/plain"), down]
        made = [waves.parse(scrapes[0]), waves.parse(scrapes[1])]
        assert made[1] is None  # text, no worker processes: parsed by the poll's thread, not the loop
        assert (made[0] is None) == (poll < 2)
        assert list(waves.ready()) == []
        waves.arrived(1, scrapes[1], made[1])
        waves.arrived(2, scrapes[2], None)
        assert list(waves.ready()) == []  # the first wave (targets 0 and 1) is not all in
        waves.arrived(0, scrapes[0], made[0])
        first, second = list(waves.ready()), list(waves.ready(wait=True))
        assert len(first) >= 1 and second == []  # the second wave's only target failed: nothing to send
        parsed = [one for one in waves.parsed[:2] if isinstance(one, ScrapeColumns)]
        assert len(parsed) == 2
        by_protobuf, by_text = (
            {port.split("/", 1)[1]: up for port, (_, up) in p.states.items()} for p in parsed
        )
        assert by_protobuf == by_text and len(by_text) >= 3  # the same scrape in either format
        assert {at for at, _ in parsed[0].states.values()} == {10 + poll}
        assert waves.parsed[2] is None
