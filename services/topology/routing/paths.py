"""The paths routes give between two hosts: every way through the ECMP groups, LFT path first."""

from __future__ import annotations

import dataclasses

from services.common.errors import FailedPrecondition, InvalidArgument
from services.topology.fabric import Fabric, NodeKind
from services.topology.routing.routes import Routes

__all__ = ["Path", "PathListing", "list_paths"]

_INT64_MAX = 2**63 - 1


@dataclasses.dataclass(frozen=True)
class Path:
    """Nodes from source to destination and the links between them."""

    nodes: list[int]
    links: list[int]
    lft: bool  # True for the path the LFT (first entry of every group) gives


@dataclasses.dataclass(frozen=True)
class PathListing:
    paths: list[Path]  # at most max_paths, the LFT path first
    total_paths: int  # all equal-cost paths (capped at 2^63-1)


def _targets(fabric: Fabric, channels: list[int]) -> list[int]:
    return [int(fabric.link_b[c // 2]) if c % 2 == 0 else int(fabric.link_a[c // 2]) for c in channels]


def list_paths(
    fabric: Fabric, routes: Routes, source: int, destination: int, max_paths: int = 64
) -> PathListing:
    """Paths from host node `source` to host node `destination` following the ECMP groups.

    The first path (when max_paths >= 1) follows the LFT choice at every hop. Raises
    InvalidArgument if either node is not a host, FailedPrecondition if the routes loop.

    >>> from services.topology.generators import fat_tree
    >>> from services.topology.routing.minhop import MinHop
    >>> f = fat_tree(4)
    >>> list_paths(f, MinHop().compute(f), 0, 15, 2).total_paths
    4
    """
    for field, node in (("source", source), ("destination", destination)):
        if not 0 <= node < fabric.num_nodes or fabric.node_kind[node] != NodeKind.HOST:
            raise InvalidArgument(field, f"node {node} is not a host")
    if max_paths < 0:
        raise InvalidArgument("max_paths", f"must not be negative, got {max_paths}")
    host = int(fabric.node_host[destination])
    groups: dict[int, tuple[list[int], list[int]]] = {}

    def hops(node: int) -> tuple[list[int], list[int]]:
        if node not in groups:
            channels = routes.group(fabric, node, host).tolist()
            groups[node] = (channels, _targets(fabric, channels))
        return groups[node]

    # Count paths over the routing DAG (post-order, with loop detection on the current stack).
    count: dict[int, int] = {destination: 1}
    stack: list[tuple[int, int]] = [(source, 0)]
    on_stack = {source}
    while stack:
        node, i = stack[-1]
        if node in count:
            stack.pop()
            on_stack.discard(node)
            continue
        _, targets = hops(node)
        if i < len(targets):
            stack[-1] = (node, i + 1)
            nxt = targets[i]
            if nxt in on_stack:
                raise FailedPrecondition(
                    f"routes toward {fabric.node_names[destination]} loop at {fabric.node_names[nxt]}"
                )
            if nxt not in count:
                stack.append((nxt, 0))
                on_stack.add(nxt)
            continue
        count[node] = min(_INT64_MAX, sum(count[t] for t in targets))
        stack.pop()
        on_stack.discard(node)

    paths: list[Path] = []
    if count[source] == 0 or max_paths == 0:
        return PathListing(paths, count[source])

    def walk(node: int, nodes: list[int], links: list[int], lft: bool) -> None:
        if len(paths) >= max_paths:
            return
        if node == destination:
            paths.append(Path(list(nodes), list(links), lft))
            return
        channels, targets = hops(node)
        for i, (channel, nxt) in enumerate(zip(channels, targets, strict=True)):
            if count.get(nxt, 0) == 0:
                continue
            nodes.append(nxt)
            links.append(channel // 2)
            walk(nxt, nodes, links, lft and i == 0)
            nodes.pop()
            links.pop()

    walk(source, [source], [], True)
    return PathListing(paths, count[source])
