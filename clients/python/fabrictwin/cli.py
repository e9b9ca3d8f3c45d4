"""The `fabrictwin` command line: `fabrictwin --help`, then `fabrictwin <command> --help`.

Exit codes: 0 success; 1 the server refused or failed (its message on stderr, no traceback), or a
job did not succeed; 2 usage (bad options, unreadable, non-UTF-8 or malformed input files); 130
interrupted. Nothing ends in a traceback: an unexpected error is one line on stderr and exit 1
(FABRICTWIN_DEBUG=1 prints the traceback too).
Addresses and the token come from the options or FABRICTWIN_*_ADDRESS / FABRICTWIN_TOKEN.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import re
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from fabrictwin import (
    __version__,
    cli_example,
    cli_fabric,
    cli_mirror,
    cli_plot,
    cli_scenario,
    cli_simulation,
    cli_telemetry,
    cli_whatif,
)
from fabrictwin.cli_common import InputError, leaf, not_utf8, print_json, structured_as_yaml, warn
from fabrictwin.client import SERVICE_NAMES, Addresses, Client, read_token_file
from fabrictwin.errors import FabricTwinError, InvalidArgumentError
from fabrictwin.extras import MissingExtraError, require
from fabrictwin.tables import health_table

__all__ = ["build_parser", "main"]

_EPILOG = """\
examples:
  fabrictwin health
  fabrictwin fabric create fat-tree --k 8 --id ft8
  fabrictwin simulate --fabric ft8 --ranks 16 --placement scattered --size 256MiB \\
      --mode ecmp --mode adaptive --wait
  fabrictwin scenario create --fabric ft8 --ranks 16 --placement scattered --size 256MiB --id demo
  fabrictwin scenario run demo --wait
  fabrictwin fabric list --json | jq '.[].name'

exit codes: 0 ok, 1 server error or failed job, 2 usage or bad input file
"""


def _read_pem(path: str) -> bytes | None:
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from None


def _client(args: argparse.Namespace) -> Client:
    return Client(
        args.topology,
        args.simulator.split(",")[0].strip(),
        args.telemetry,
        args.orchestrator,
        token=read_token_file(args.token_file, "--token-file") if args.token_file else args.token or None,
        root_certificates=_read_pem(args.tls_ca),
        private_key=_read_pem(args.tls_key),
        certificate_chain=_read_pem(args.tls_cert),
        timeout=args.timeout if args.timeout > 0 else None,
    )


def _service_arg(text: str) -> str:
    # argparse's `choices` with nargs="*" rejects the empty default on Python 3.11; check here instead.
    if text not in SERVICE_NAMES:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(SERVICE_NAMES)}")
    return text


def _health(client: Client, args: argparse.Namespace) -> int:
    status = client.health(args.service or None)
    addresses = client.addresses()
    if args.json:
        print_json({s: {"address": addresses[s], "status": v} for s, v in status.items()})
    else:
        print(health_table(status, addresses))
    return 0 if all(v == "SERVING" for v in status.values()) else 1


class _Parser(argparse.ArgumentParser):
    """argparse, with one-line usage errors: the command, what was wrong, a "did you mean" for a
    mistyped command, and where the usage is (instead of argparse's usage dump)."""

    def error(self, message: str) -> NoReturn:
        choice = _INVALID_CHOICE.match(message)
        if choice is not None:
            known = re.findall(r"'?([\w-]+)'?", choice["known"])
            close = difflib.get_close_matches(choice["given"], known, n=1, cutoff=0.6)
            hint = f"; did you mean '{close[0]}'?" if close else f"; one of {', '.join(known)}"
            what = f"a value of {choice['argument']}" if choice["argument"].startswith("-") else "a command"
            self.exit(2, f"{self.prog}: '{choice['given']}' is not {what}{hint} ({self.prog} --help)\n")
        self.exit(2, f"{self.prog}: {message} ({self.prog} --help)\n")


_INVALID_CHOICE = re.compile(
    r"argument (?P<argument>\S+?): invalid choice: '(?P<given>[^']*)' \(choose from (?P<known>.*)\)"
)


def build_parser(env: dict[str, str] | None = None) -> argparse.ArgumentParser:
    """The whole command tree; defaults for addresses and token come from `env` (os.environ)."""
    found = Addresses.from_env(env if env is not None else dict(os.environ))
    parser = _Parser(
        prog="fabrictwin",
        description="FabricTwin: a network digital twin of AI-training fabrics. Talks to the topology, "
        "simulator, telemetry and orchestrator services.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"fabrictwin {__version__}")
    for service in SERVICE_NAMES:
        variable = f"FABRICTWIN_{service.upper()}_ADDRESS"
        parser.add_argument(
            f"--{service}",
            default=getattr(found, service),
            metavar="HOST:PORT",
            help=f"{service} service address (env {variable}, now {getattr(found, service)})",
        )
    parser.add_argument(
        "--token",
        default=found.token or "",
        help="bearer token: visible in the process list, prefer --token-file or env FABRICTWIN_TOKEN_FILE",
    )
    parser.add_argument("--token-file", default="", metavar="FILE", help="file holding the bearer token")
    parser.add_argument("--timeout", type=float, default=30.0, help="deadline of each call, s (0: none)")
    parser.add_argument("--tls-ca", default="", metavar="PEM", help="root certificates: use TLS")
    parser.add_argument("--tls-cert", default="", metavar="PEM", help="client certificate chain (mutual TLS)")
    parser.add_argument("--tls-key", default="", metavar="PEM", help="client private key (mutual TLS)")
    parser.add_argument("--json", dest="global_json", action="store_true", help="JSON output for any command")
    parser.add_argument(
        "-o",
        "--output-format",
        choices=["table", "wide", "json", "yaml"],
        default="table",
        help="table (default), wide (lists with more columns), json (as --json) or yaml (the JSON as YAML)",
    )

    # Typed as plain ArgumentParser's: every subcommand's parser is a _Parser (argparse makes them of
    # the parent's class), which the commands' modules need not know.
    root: argparse._SubParsersAction[argparse.ArgumentParser] = parser.add_subparsers(  # type: ignore[assignment]
        title="commands", dest="command", metavar="COMMAND"
    )
    root.required = True
    p = leaf(
        root,
        "health",
        _health,
        "health of the four services (exit 1 unless all asked are SERVING)",
        "Check each service with the standard gRPC health protocol: SERVING, NOT_SERVING,\n"
        "SERVICE_UNKNOWN, or UNAVAILABLE when it cannot be reached. Exit 0 only if all are SERVING.",
    )
    p.add_argument(
        "service",
        nargs="*",
        type=_service_arg,
        metavar="SERVICE",
        help=f"only these ({', '.join(SERVICE_NAMES)})",
    )
    p = leaf(
        root,
        "completion",
        _completion,
        "print the shell code that completes fabrictwin's commands and options",
        "Tab completion of commands, options and choices (argcomplete, the fabrictwin[cli] extra):\n"
        '  eval "$(fabrictwin completion bash)"      # or add it to ~/.bashrc; zsh and fish too',
    )
    p.add_argument("shell", nargs="?", default="bash", choices=["bash", "zsh", "fish", "tcsh"])
    cli_fabric.register(root)
    cli_simulation.register(root)
    cli_telemetry.register(root)
    cli_mirror.register(root)
    cli_scenario.register(root)
    cli_whatif.register(root)
    cli_example.register(root)
    cli_plot.register(root)
    return parser


def _complete(parser: argparse.ArgumentParser) -> None:
    """Answer the shell's completion request (argcomplete, the `fabrictwin[cli]` extra) and exit."""
    with contextlib.suppress(MissingExtraError):
        require("argcomplete", "cli", "shell completion").autocomplete(parser)


def _completion(client: Client, args: argparse.Namespace) -> int:
    """Print the shell code that completes `fabrictwin` (source it, or add it to your shell's rc)."""
    argcomplete = require("argcomplete", "cli", "shell completion")
    print(argcomplete.shellcode(["fabrictwin"], shell=args.shell))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run one `fabrictwin` command; returns the exit code (console script: `sys.exit(main())`)."""
    try:
        parser = build_parser()  # reads FABRICTWIN_TOKEN_FILE
    except InvalidArgumentError as exc:
        warn(f"fabrictwin: error: {exc.details}")
        return 2
    if "_ARGCOMPLETE" in os.environ:  # the shell asks for completions (`fabrictwin completion`)
        _complete(parser)
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
    except SystemExit as exc:  # --help, --version (0) and usage errors (2)
        return exc.code if isinstance(exc.code, int) else 0
    args.json = getattr(args, "json", False) or args.global_json or args.output_format in ("json", "yaml")
    structured_as_yaml(args.output_format == "yaml")
    try:
        client = _client(args)
    except (InputError, ValueError) as exc:
        warn(f"fabrictwin: error: {exc}")
        return 2
    try:
        return int(args.handler(client, args))
    except InvalidArgumentError as exc:
        warn(f"error: {exc}")
        return 1 if exc.service else 2  # raised by the SDK before any call: a usage error
    except FabricTwinError as exc:
        warn(f"error: {exc}")
        return 1
    except InputError as exc:
        warn(f"fabrictwin: error: {exc}")
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `fabrictwin fabric links x | head`: stop quietly
        # Point stdout at /dev/null so that the interpreter's final flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except OSError as exc:  # a file read or written on the way (an LLDP table that is a directory, ...)
        where = f"{exc.filename}: " if exc.filename else ""
        warn(f"fabrictwin: error: {where}{exc.strerror or exc}")
        return 2
    except UnicodeDecodeError as exc:  # text read on the way by code that did not name its file
        warn(f"fabrictwin: error: {not_utf8('input', exc)}")
        return 2
    except Exception as exc:
        return _unexpected(exc)
    finally:
        client.close()


def _unexpected(exc: Exception) -> int:
    """One line for a bug (ours or a library's): exit 1; FABRICTWIN_DEBUG=1 adds the traceback."""
    if os.environ.get("FABRICTWIN_DEBUG", "").strip().lower() not in ("", "0", "false", "no", "off"):
        traceback.print_exception(exc, file=sys.stderr)
    detail = str(exc)
    detail = detail if len(detail) <= 300 else detail[:300] + "..."
    warn(
        f"fabrictwin: internal error: {type(exc).__name__}: {detail} (FABRICTWIN_DEBUG=1 shows the traceback)"
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
