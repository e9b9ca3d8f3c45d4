"""The CLI never shows a traceback: files it cannot read or decode are usage errors (exit 2) naming the
file, and anything unexpected is one line (exit 1). No server is needed: every file here is read, and
refused, before a call is made."""

from __future__ import annotations

import io
import os
import pathlib
import subprocess
import sys

import pytest
from fabrictwin import cli_fabric
from fabrictwin.cli import main
from fabrictwin.cli_common import InputError
from fabrictwin.cli_telemetry_ingest import csv_batches

# Latin-1 text, as an old tool or a hand edit leaves it: byte 0xe9 ('é') is not UTF-8 on its own.
NOT_UTF8 = 'Switch 8 "S-0000000000000001" # "caf\xe9 leaf"\n'.encode("latin-1")
OFFSET = NOT_UTF8.index(b"\xe9")
UNREACHABLE = ["--topology", "127.0.0.1:1", "--telemetry", "127.0.0.1:1", "--timeout", "2"]


@pytest.fixture
def latin1(tmp_path) -> pathlib.Path:
    path = tmp_path / "dump.topo"
    path.write_bytes(NOT_UTF8)
    return path


def _usage_error(capsys, argv: list[str]) -> str:
    assert main([*UNREACHABLE, *argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err


def test_a_dump_that_is_not_utf8_is_a_usage_error_naming_the_file_and_the_byte(latin1, capsys) -> None:
    # Measured before: a UnicodeDecodeError traceback.
    err = _usage_error(capsys, ["fabric", "import", "--format", "ibnetdiscover", str(latin1)])
    assert f"{latin1}: not UTF-8 text (byte 0xe9 at offset {OFFSET})" in err


def test_a_dump_on_stdin_that_is_not_utf8_is_a_usage_error(monkeypatch, capsys) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(NOT_UTF8), encoding="utf-8"))
    err = _usage_error(capsys, ["fabric", "import", "--format", "ibnetdiscover", "-"])
    assert f"<stdin>: not UTF-8 text (byte 0xe9 at offset {OFFSET})" in err


def test_an_lfts_dump_that_is_not_utf8_is_a_usage_error(latin1, capsys) -> None:
    err = _usage_error(capsys, ["fabric", "reroute", "ft8", "--routing", "file", "--lfts-dump", str(latin1)])
    assert f"{latin1}: not UTF-8 text" in err


def test_a_counter_text_that_is_not_utf8_is_a_usage_error(latin1, capsys) -> None:
    argv = ["telemetry", "import", "--format", "perfquery", "--source", "s", str(latin1)]
    assert f"{latin1}: not UTF-8 text" in _usage_error(capsys, argv)


def test_a_csv_that_is_not_utf8_names_the_file_and_line(tmp_path) -> None:
    path = tmp_path / "counters.csv"
    path.write_bytes(b"time_ns,port,utilisation\n0,leaf-0/p1,0.5\n0,caf\xe9/p1,0.5\n")
    # As the CLI reads it (bytes, decoded line by line): the very line and column.
    with open(path, "rb") as stream, pytest.raises(InputError) as failed:
        list(csv_batches(stream, str(path), "s", {}, 100))
    assert str(failed.value) == f"{path}: not UTF-8 text (byte 0xe9 on line 3, column 6)"
    # A text stream (an SDK caller's) reads ahead: where it failed is known to the chunk.
    with open(path, newline="", encoding="utf-8") as stream, pytest.raises(InputError) as failed:
        list(csv_batches(stream, str(path), "s", {}, 100))
    assert str(failed.value).startswith(f"{path}: not UTF-8 text (byte 0xe9")


def test_lldp_tables_that_cannot_be_read_are_usage_errors(tmp_path, capsys) -> None:
    tables = tmp_path / "lldp"
    tables.mkdir()
    (tables / "leaf0.json").write_bytes(b'{"lldp": {"x": "caf\xe9"}}')
    err = _usage_error(capsys, ["fabric", "import", "--format", "lldp", str(tables)])
    assert "leaf0.json: not UTF-8 text" in err
    (tables / "leaf0.json").unlink()
    (tables / "spine0.json").mkdir()  # a directory where a table should be
    err = _usage_error(capsys, ["fabric", "import", "--format", "lldp", str(tables)])
    assert "spine0.json" in err


def test_a_mirror_configuration_that_is_not_utf8_is_a_usage_error(tmp_path, capsys) -> None:
    config = tmp_path / "mirror.toml"
    config.write_bytes(b'fabric = "caf\xe9"\n')
    assert "not UTF-8 text" in _usage_error(capsys, ["mirror", "--config", str(config)])


def test_an_unexpected_error_is_one_line_and_exit_one(monkeypatch, latin1, capsys) -> None:
    def broken(path: str) -> str:
        raise RuntimeError("the disk caught fire")

    monkeypatch.setattr(cli_fabric, "_read_input", broken)
    monkeypatch.delenv("FABRICTWIN_DEBUG", raising=False)
    assert main([*UNREACHABLE, "fabric", "import", "--format", "json", str(latin1)]) == 1
    err = capsys.readouterr().err
    assert err == (
        "fabrictwin: internal error: RuntimeError: the disk caught fire "
        "(FABRICTWIN_DEBUG=1 shows the traceback)\n"
    )
    monkeypatch.setenv("FABRICTWIN_DEBUG", "1")
    assert main([*UNREACHABLE, "fabric", "import", "--format", "json", str(latin1)]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_the_real_process_prints_no_traceback_for_a_file_that_is_not_utf8(latin1) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "fabrictwin.cli",
            *UNREACHABLE,
            "fabric",
            "import",
            "--format",
            "json",
            str(latin1),
        ],
        capture_output=True,
        text=True,
        env={key: value for key, value in os.environ.items() if key != "FABRICTWIN_DEBUG"},
        timeout=60,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and "not UTF-8 text" in done.stderr
