"""The `fabrictwin` command line without servers: help everywhere, usage errors exit 2."""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys

import pytest
from fabrictwin.cli import build_parser, main


def _command_paths(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and subcommand in the tree, as argv prefixes."""
    paths = [prefix]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                paths.extend(_command_paths(child, (*prefix, name)))
    return paths


COMMANDS = _command_paths(build_parser({}))


def test_the_tree_has_every_command_the_issue_asks_for() -> None:
    leaves = {" ".join(p) for p in COMMANDS}
    expected = {
        "health",
        "fabric create fat-tree",
        "fabric create leaf-spine",
        "fabric list",
        "fabric get",
        "fabric delete",
        "fabric links",
        "fabric nodes",
        "fabric paths",
        "fabric route",
        "fabric import",
        "fabric export",
        "fabric link-set",
        "fabric watch",
        "simulate",
        "simulation get",
        "simulation list",
        "simulation cancel",
        "simulation series",
        "telemetry sources",
        "telemetry query",
        "telemetry top",
        "telemetry ingest-csv",
        "scenario create",
        "scenario run",
        "scenario get",
        "scenario list",
        "scenario compare",
        "scenario diagnose",
    }
    assert expected <= leaves


@pytest.mark.parametrize("command", COMMANDS, ids=lambda p: " ".join(p) or "fabrictwin")
def test_every_command_has_help_that_exits_zero(command: tuple[str, ...], capsys) -> None:
    assert main([*command, "--help"]) == 0
    assert "usage: fabrictwin" in capsys.readouterr().out


def test_every_runnable_command_offers_json(capsys) -> None:
    runnable = [p for p in COMMANDS if p and not _has_subcommands(p)]
    for command in runnable:
        main([*command, "--help"])
        assert "--json" in capsys.readouterr().out, command


def _has_subcommands(command: tuple[str, ...]) -> bool:
    return any(len(other) > len(command) and other[: len(command)] == command for other in COMMANDS)


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["fabric"],
        ["fabric", "create"],
        ["fabric", "create", "fat-tree"],
        ["fabric", "create", "fat-tree", "--k", "eight"],
        ["simulate", "--fabric", "ft8", "--size", "12XB", "--ranks", "4"],
        ["simulate", "--fabric", "ft8", "--size", "1MiB", "--ranks", "4", "--mode", "random-walk"],
        ["fabric", "link-set", "fabrics/f/links/1", "--state", "sideways"],
        ["health", "database"],
        ["no-such-command"],
    ],
)
def test_usage_errors_exit_two_with_one_line_and_no_traceback(argv: list[str], capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("fabrictwin") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err  # one line, not the usage dump
    assert "--help" in err  # says where the usage is


@pytest.mark.parametrize(
    ("argv", "suggestion"),
    [
        (["simlate"], "simulate"),
        (["fabric", "craete"], "create"),
        (["scenario", "comapre"], "compare"),
        (["telemetry", "helth"], "health"),
    ],
)
def test_a_mistyped_command_gets_a_did_you_mean(argv: list[str], suggestion: str, capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"did you mean '{suggestion}'" in err and len(err.strip().splitlines()) == 1, err


def test_a_workload_needs_ranks_or_hosts(capsys) -> None:
    assert main(["simulate", "--fabric", "ft8", "--size", "1MiB"]) == 2
    assert "--ranks" in capsys.readouterr().err


def test_an_unreadable_import_file_is_a_usage_error(tmp_path, capsys) -> None:
    missing = tmp_path / "nope.txt"
    assert main(["fabric", "import", "--format", "ibnetdiscover", str(missing)]) == 2
    assert f"cannot read {missing}" in capsys.readouterr().err


def test_an_unreachable_server_is_exit_one_with_one_clean_line(capsys) -> None:
    assert main(["--topology", "127.0.0.1:1", "--timeout", "5", "fabric", "list"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: topology: cannot reach 127.0.0.1:1")
    assert err.count("\n") == 1


def test_addresses_and_token_default_from_the_environment() -> None:
    env = {
        "FABRICTWIN_TOPOLOGY_ADDRESS": "topo:1",
        "FABRICTWIN_SIMULATOR_ADDRESS": "sim-a:2, sim-b:2",
        "FABRICTWIN_TOKEN": "t0ken",
    }
    args = build_parser(env).parse_args(["fabric", "list"])
    assert (args.topology, args.simulator, args.telemetry, args.token) == (
        "topo:1",
        "sim-a:2",
        "127.0.0.1:50053",
        "t0ken",
    )


def _venv_env() -> dict[str, str]:
    return {**os.environ, "FABRICTWIN_TOPOLOGY_ADDRESS": "127.0.0.1:1"}


def test_the_module_runs_as_a_real_process() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fabrictwin.cli", "--help"],
        capture_output=True,
        text=True,
        env=_venv_env(),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "fabrictwin" in done.stdout and "scenario" in done.stdout


def test_the_console_script_is_installed_and_exits_with_the_documented_codes() -> None:
    script = pathlib.Path(sys.executable).parent / "fabrictwin"
    if not script.exists():
        pytest.skip(f"no console script at {script} (SDK not installed in this interpreter's environment)")
    ok = subprocess.run(
        [str(script), "scenario", "compare", "--help"], capture_output=True, text=True, timeout=60
    )
    assert ok.returncode == 0 and "RUN" in ok.stdout
    usage = subprocess.run([str(script), "fabric", "frobnicate"], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2
    down = subprocess.run(
        [str(script), "--timeout", "5", "fabric", "get", "ft8"],
        capture_output=True,
        text=True,
        env=_venv_env(),
        timeout=60,
    )
    assert down.returncode == 1 and "Traceback" not in down.stderr and "UNAVAILABLE" in down.stderr


def test_tab_completion_offers_commands_options_and_choices() -> None:
    """argcomplete's protocol, as a shell drives it: COMP_LINE/COMP_POINT in, candidates out on fd 8."""
    pytest.importorskip("argcomplete", reason="argcomplete (the fabrictwin[cli] extra) is not installed")

    def complete(line: str) -> set[str]:
        read, write = os.pipe()
        env = {
            **os.environ,
            "_ARGCOMPLETE": "1",
            "_ARGCOMPLETE_IFS": "\n",
            "COMP_LINE": line,
            "COMP_POINT": str(len(line)),
            "COMP_TYPE": "9",
        }
        code = "import os, sys; os.dup2(int(sys.argv[1]), 8); from fabrictwin.cli import main; main()"
        done = subprocess.run(
            [sys.executable, "-c", code, str(write)],
            env=env,
            pass_fds=(write,),
            capture_output=True,
            timeout=60,
        )
        os.close(write)
        with os.fdopen(read) as stream:
            answer = stream.read()
        assert done.returncode == 0, done.stderr
        return {word.strip() for word in answer.split("\n") if word.strip()}

    assert {"simulate", "scenario", "whatif"} <= complete("fabrictwin s") | complete("fabrictwin w")
    assert "--placement" in complete("fabrictwin simulate --pla")
    assert complete("fabrictwin simulate --mode ad") == {"adaptive"}


def test_the_completion_command_prints_the_shell_hook(capsys) -> None:
    pytest.importorskip("argcomplete", reason="argcomplete (the fabrictwin[cli] extra) is not installed")
    assert main(["completion", "bash"]) == 0
    assert "complete" in capsys.readouterr().out
