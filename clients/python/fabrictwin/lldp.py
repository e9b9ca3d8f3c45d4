"""Collecting LLDP neighbour documents for `fabric import --format lldp` and the mirror.

A fabric's cabling is the set of `lldpcli -f json show neighbors` outputs of all its nodes, one per
node. They come as a directory of `NODE.json` files, a tar archive of them, or (node, text) pairs
gathered by a command run per node (`ssh NODE lldpcli -f json show neighbors`). The topology
service parses them (`services/topology/formats/lldp.py`); this module only gathers the texts.
"""

from __future__ import annotations

import os
import subprocess
import tarfile
from collections.abc import Mapping

from fabrictwin.errors import InvalidArgumentError

__all__ = ["LldpInput", "collect_documents", "read_documents"]

# (name, text) pairs, or a tar archive's bytes.
LldpInput = list[tuple[str, str]] | bytes


def read_documents(path: str) -> LldpInput:
    """The LLDP documents at `path`: a directory's `*.json` files as pairs, or a tar archive's bytes."""
    if os.path.isdir(path):
        names = sorted(name for name in os.listdir(path) if name.endswith(".json"))
        if not names:
            raise InvalidArgumentError(f"{path}: holds no NODE.json file")
        pairs = []
        for name in names:
            try:
                with open(os.path.join(path, name), encoding="utf-8") as stream:
                    pairs.append((name, stream.read()))
            except UnicodeDecodeError as exc:
                raise InvalidArgumentError(
                    f"{os.path.join(path, name)}: not UTF-8 text (byte {exc.start})"
                ) from None
        return pairs
    if os.path.isfile(path) and tarfile.is_tarfile(path):
        with open(path, "rb") as stream:
            return stream.read()
    if os.path.isfile(path):
        raise InvalidArgumentError(f"{path}: neither a directory of NODE.json files nor a tar archive")
    raise InvalidArgumentError(f"{path}: no such file or directory")


def collect_documents(
    commands: Mapping[str, str], *, timeout_s: float = 30.0
) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """Run one shell command per node (its stdout is that node's document), all at once.

    Returns the documents of the nodes whose command succeeded and, per failed node, why.
    """
    started = {
        node: subprocess.Popen(
            ["/bin/sh", "-c", command], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for node, command in commands.items()
    }
    documents: list[tuple[str, str]] = []
    failed: dict[str, str] = {}
    for node, process in started.items():
        try:
            out, err = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            failed[node] = f"timed out after {timeout_s:g} s"
            continue
        if process.returncode != 0:
            failed[node] = f"exited with {process.returncode}: {(err.strip().splitlines() or [''])[-1][:200]}"
            continue
        documents.append((node, out))
    return documents, failed
