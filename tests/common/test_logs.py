"""Structured logs: one JSON object per line for machines, plain text for a person at a terminal."""

from __future__ import annotations

import io
import json
import logging
import re
import sys

import pytest

from services.common.logs import JsonFormatter, configure_logging


class _Stream(io.StringIO):
    """A stderr stand-in that says whether it is a terminal."""

    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.fixture
def root_logger():
    """The root logger, put back as pytest had it after configure_logging replaced its handlers."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield root
    root.handlers[:] = handlers
    root.setLevel(level)


def _format(record_kwargs: dict, service: str = "topology") -> dict:
    record = logging.makeLogRecord(record_kwargs)
    line = JsonFormatter(service).format(record)
    assert "\n" not in line
    return json.loads(line)


def test_a_json_line_has_ts_level_service_and_msg():
    entry = _format(
        {"name": "fabrictwin.server", "levelname": "INFO", "msg": "routed %d fabrics", "args": (3,)}
    )
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", entry["ts"])
    assert entry["level"] == "INFO"
    assert entry["service"] == "topology"
    assert entry["logger"] == "fabrictwin.server"
    assert entry["msg"] == "routed 3 fabrics"


def test_extra_fields_become_keys_and_odd_values_become_text():
    entry = _format(
        {"msg": "serving", "address": "127.0.0.1:50051", "port": 50051, "ready": True, "peer": object()}
    )
    assert entry["address"] == "127.0.0.1:50051"
    assert entry["port"] == 50051
    assert entry["ready"] is True
    assert entry["peer"].startswith("<object object")


def test_an_extra_field_cannot_overwrite_the_standard_keys():
    entry = _format({"msg": "hello", "service": "impostor", "ts": "yesterday"})
    assert entry["service"] == "topology"
    assert entry["extra_service"] == "impostor"
    assert entry["extra_ts"] == "yesterday"


def test_an_exception_is_logged_in_the_same_json_line():
    try:
        1 / 0  # noqa: B018
    except ZeroDivisionError:
        logger = logging.getLogger("x")
        record = logger.makeRecord("x", logging.ERROR, __file__, 1, "rpc failed", (), exc_info=sys.exc_info())
    entry = json.loads(JsonFormatter("simulator").format(record))
    assert entry["level"] == "ERROR"
    assert "ZeroDivisionError" in entry["exc"]


@pytest.mark.parametrize(
    ("fmt", "tty", "json_expected"),
    [
        ("json", True, True),
        ("json", False, True),
        ("text", False, False),
        ("auto", False, True),
        ("auto", True, False),
    ],
)
def test_configure_logging_picks_json_or_text(root_logger, monkeypatch, fmt, tty, json_expected):
    stream = _Stream(tty)
    monkeypatch.setattr("sys.stderr", stream)
    configure_logging("telemetry", "DEBUG", fmt)
    logging.getLogger("fabrictwin.test").info("ingested", extra={"rows": 12})
    line = stream.getvalue().strip()
    assert len(line.splitlines()) == 1
    if json_expected:
        entry = json.loads(line)
        assert (entry["service"], entry["msg"], entry["rows"]) == ("telemetry", "ingested", 12)
    else:
        assert not line.startswith("{")
        assert "telemetry INFO fabrictwin.test: ingested" in line


def test_configure_logging_sets_the_level_and_replaces_earlier_handlers(root_logger, monkeypatch):
    stream = _Stream(False)
    monkeypatch.setattr("sys.stderr", stream)
    configure_logging("telemetry", "warning", "json")
    configure_logging("telemetry", "warning", "json")
    logging.getLogger("fabrictwin.test").info("too chatty")
    logging.getLogger("fabrictwin.test").warning("disk full")
    assert [json.loads(line)["msg"] for line in stream.getvalue().splitlines()] == ["disk full"]
