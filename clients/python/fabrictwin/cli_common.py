"""What every `fabrictwin` command module shares: argument types, leaf parsers with `--json`, output.

A command handler is `handler(client, args) -> exit code`. It prints a human table, or with `--json`
the protobuf message(s) as JSON (field names as in the .proto files, default values included,
int64 values as strings per the proto3 JSON mapping; lists as a JSON array).
"""

from __future__ import annotations

import argparse
import inspect
import itertools
import json
import sys
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.message import Message

from fabrictwin.client import Client
from fabrictwin.extras import require
from fabrictwin.names import enum_choices
from fabrictwin.units import parse_duration_ns, parse_size

__all__ = [
    "Handler",
    "InputError",
    "choice",
    "duration_arg",
    "emit",
    "emit_list",
    "key_value_arg",
    "leaf",
    "message_dict",
    "not_utf8",
    "print_json",
    "read_text",
    "size_arg",
    "subcommands",
    "warn",
]

Handler = Callable[[Client, argparse.Namespace], int]
ShownMessage = TypeVar("ShownMessage", bound=Message)
T = TypeVar("T")


class InputError(ValueError):
    """A problem with what the user gave the CLI (a file, a CSV line): exit code 2, no traceback."""


def not_utf8(name: str, exc: UnicodeDecodeError, where: str = "") -> InputError:
    """The InputError for text that does not decode: `name: not UTF-8 text (byte 0xe9 at offset 36)`."""
    byte = exc.object[exc.start] if exc.start < len(exc.object) else None
    what = f"byte 0x{byte:02x}" if byte is not None else "a truncated character"
    return InputError(f"{name}: not UTF-8 text ({what} {where or f'at offset {exc.start}'})")


def read_text(path: str) -> str:
    """The UTF-8 text of FILE, or of stdin for `-`; InputError naming the file when it cannot be read
    or is not UTF-8 (a Latin-1 dump, a binary file)."""
    name = "<stdin>" if path == "-" else path
    try:
        if path == "-":
            raw = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read()
        else:
            with open(path, "rb") as f:
                raw = f.read()
    except OSError as exc:
        raise InputError(f"cannot read {name}: {exc.strerror}") from None
    if isinstance(raw, str):
        return raw
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise not_utf8(name, exc) from None


def size_arg(text: str) -> int:
    """argparse type: bytes from `256MiB`, `1GiB`, `1e6`, `4096`."""
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def duration_arg(text: str) -> int:
    """argparse type: nanoseconds from `500` (ns), `10us`, `1.5ms`, `2s`."""
    try:
        return parse_duration_ns(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def key_value_arg(text: str) -> tuple[str, str]:
    """argparse type: `key=value`."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key.strip(), value.strip()


def choice(enum_type: Any) -> dict[str, Any]:
    """add_argument keywords for an enum given by short name (`rail-aligned` = `rail_aligned`)."""
    choices = enum_choices(enum_type)
    return {
        "type": lambda text: text.strip().lower().replace("-", "_"),
        "choices": choices,
        "metavar": "{" + ",".join(choices) + "}",
    }


def subcommands(
    parser: argparse.ArgumentParser, title: str
) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    """A required group of subcommands (`fabrictwin fabric` alone is a usage error, exit 2)."""
    group = parser.add_subparsers(title=title, dest=f"{title}_command", metavar="COMMAND")
    group.required = True
    return group


def leaf(
    group: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    handler: Handler,
    summary: str,
    description: str = "",
) -> argparse.ArgumentParser:
    """A runnable subcommand with `--help` and `--json`, calling `handler`."""
    parser = group.add_parser(
        name,
        help=summary,
        description=description or summary,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--json", action="store_true", help="print JSON (protobuf JSON mapping) instead of a table"
    )
    parser.set_defaults(handler=handler)
    return parser


def message_dict(message: Message) -> dict[str, Any]:
    """A message as a JSON-ready dict, proto field names, default values included."""
    return json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )


# `-o yaml` prints as YAML whatever a command prints as JSON (set by `cli.main` for the command).
_STRUCTURED = {"yaml": False}


def structured_as_yaml(on: bool) -> None:
    """Whether print_json writes YAML (`-o yaml`) instead of JSON."""
    _STRUCTURED["yaml"] = on


def print_json(value: Any) -> None:
    """Print a JSON value (dicts, lists, messages inside) to stdout; YAML with `-o yaml`."""
    text = json.dumps(
        value, indent=2, default=lambda m: message_dict(m) if isinstance(m, Message) else str(m)
    )
    if _STRUCTURED["yaml"]:
        yaml = require("yaml", "cli", "YAML output (-o yaml)")
        print(yaml.safe_dump(json.loads(text), sort_keys=False, allow_unicode=True).rstrip())
        return
    print(text)


def emit(args: argparse.Namespace, message: ShownMessage, human: Callable[[ShownMessage], str]) -> None:
    """Print one message: JSON with --json, else `human(message)`."""
    if args.json:
        print_json(message_dict(message))
    else:
        print(human(message))


def emit_list(args: argparse.Namespace, messages: Iterable[Message], human: Callable[..., str]) -> None:
    """Print a list of messages: a JSON (or YAML) array with --json / -o json|yaml, else
    `human(messages)`, with its extra columns (`wide=True`) for `-o wide` where it has some."""
    items = list(messages)
    if args.json:
        print_json([message_dict(m) for m in items])
    elif getattr(args, "output_format", "table") == "wide" and "wide" in inspect.signature(human).parameters:
        print(human(items, wide=True))
    else:
        print(human(items))


def warn(text: str) -> None:
    """A line on stderr (progress, failures) that never mixes with the JSON on stdout."""
    print(text, file=sys.stderr)


def pinning_options(parser: argparse.ArgumentParser) -> None:
    """The ECMP pinning rule's thresholds (`scenario diagnose`, `telemetry skew`), 0 for each default."""
    parser.add_argument(
        "--max-over-mean",
        type=float,
        default=0.0,
        help="pinned when max/mean is at least this (default 1.5) ...",
    )
    parser.add_argument(
        "--spread", type=float, default=0.0, help="... and max - min at least this utilisation (default 0.3)"
    )
    parser.add_argument(
        "--hot-above", type=float, default=0.0, help="or some above this utilisation (default 0.8) ..."
    )
    parser.add_argument(
        "--idle-below", type=float, default=0.0, help="... while others are below this (default 0.2)"
    )


def add_list_options(parser: argparse.ArgumentParser, default_limit: int = 50) -> None:
    """--filter, --order-by and --limit of a list command."""
    parser.add_argument(
        "--filter",
        default="",
        help="AIP-160 filter over the fields, e.g. 'state = FAILED AND display_name : \"pod\"'",
    )
    parser.add_argument(
        "--order-by", default="", help="e.g. 'create_time desc' (default: the service's order)"
    )
    parser.add_argument(
        "--limit",
        type=int,
        default=default_limit,
        help=f"show at most this many (default {default_limit}; 0: all)",
    )


def limited(args: argparse.Namespace, items: Iterable[T]) -> list[T]:
    """The first --limit items (all with 0); says on stderr when there were more."""
    if args.limit <= 0:
        return list(items)
    shown = list(itertools.islice(items, args.limit + 1))
    if len(shown) > args.limit and not args.json:
        warn(f"(the first {args.limit} shown; --limit 0 for all, or narrow them with --filter)")
    return shown[: args.limit]
