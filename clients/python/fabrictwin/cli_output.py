"""`--output csv|parquet FILE` of the result and query commands: their answer as a table file.

The file holds the DataFrame `fabrictwin.frames.to_pandas` makes of the same messages (pandas: the
`fabrictwin[pandas]` extra; Parquet also pyarrow: `fabrictwin[parquet]`). The command then prints
one line on stderr instead of its table.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from google.protobuf.message import Message

from fabrictwin import frames
from fabrictwin.cli_common import InputError, warn

__all__ = ["add_output_option", "write_output"]


def add_output_option(parser: argparse.ArgumentParser, tables: Sequence[str] = ()) -> None:
    """Add `--output FORMAT FILE` (and `--table`, when the result holds several tables)."""
    parser.add_argument(
        "--output",
        nargs=2,
        default=None,
        metavar=("{csv,parquet}", "FILE"),
        help="write the answer as a CSV or Parquet table to FILE instead of printing it",
    )
    if tables:
        parser.add_argument(
            "--table",
            choices=tables,
            default=tables[0],
            help=f"which table --output writes (default {tables[0]})",
        )


def write_output(args: argparse.Namespace, data: Message) -> bool:
    """With --output, write `data`'s DataFrame and return True; without it, return False."""
    if not getattr(args, "output", None):
        return False
    file_format, path = args.output
    if file_format not in frames.OUTPUT_FORMATS:
        raise InputError(f"--output: {file_format!r} is not one of {', '.join(frames.OUTPUT_FORMATS)}")
    frame = frames.to_pandas(data, table=getattr(args, "table", "jobs"))
    frames.write_frame(frame, path, file_format)
    warn(f"wrote {len(frame)} rows x {len(frame.columns)} columns to {path} ({file_format})")
    return True
