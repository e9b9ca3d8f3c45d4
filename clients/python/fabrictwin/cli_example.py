"""`fabrictwin example ...`: the shipped example scenarios (see fabrictwin.examples)."""

from __future__ import annotations

import argparse

from fabrictwin.cli_common import InputError, leaf, message_dict, print_json, subcommands
from fabrictwin.client import Client
from fabrictwin.examples import EXAMPLES, run_example

__all__ = ["register"]


def _list(client: Client, args: argparse.Namespace) -> int:
    if args.json:
        print_json([{"name": e.name, "title": e.title, "fabric": e.fabric_id} for e in EXAMPLES.values()])
    else:
        width = max(len(name) for name in EXAMPLES)
        for example in EXAMPLES.values():
            print(f"{example.name:<{width}}  {example.title}")
    return 0


def _run(client: Client, args: argparse.Namespace) -> int:
    names = list(EXAMPLES) if args.name == "all" else [args.name]
    if names[0] not in EXAMPLES:
        raise InputError(f"no example {args.name!r}; `fabrictwin example list` shows them")
    outputs = []
    for name in names:
        report, finished = run_example(client, name, timeout=args.wait_timeout)
        if args.json:
            outputs.append({"example": name, "runs": {label: message_dict(s) for label, s in finished}})
        else:
            print(report + "\n", flush=True)
    if args.json:
        print_json(outputs)
    return 0


def register(root: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `example list` and `example run` to the root parser's subcommands."""
    example = root.add_parser("example", help="the shipped example scenarios (transports and faults)")
    example.description = "Example scenarios: each runs a few simulations side by side and explains them."
    group = subcommands(example, "example")
    leaf(group, "list", _list, "list the examples")
    p = leaf(
        group,
        "run",
        _run,
        "run an example (creating its fabric if missing) and print its comparison",
        "example: fabrictwin example run pfc-incast\n         fabrictwin example run all",
    )
    p.add_argument("name", help="example name, or all")
    p.add_argument("--wait-timeout", type=float, default=None, help="give up waiting after this many seconds")
