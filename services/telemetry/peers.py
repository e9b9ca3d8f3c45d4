"""The telemetry service's call to the topology service: the links of a fabric, for port groups.

`TopologyLinks.fetch` reads the fabric (its create time is the version), its nodes' tiers
(ListNodes) and its links' ends and port numbers (ListLinks), paged, and returns them as
`FabricLinks`. A peer's failure becomes a domain error naming the caller's field.
"""

from __future__ import annotations

import grpc
from fabrictwin.v1 import topology_pb2, topology_pb2_grpc

from services.common.peers import PeerAuth, auth_metadata, domain_error, peer_channel
from services.telemetry.groups import FabricLinks

__all__ = ["TopologyLinks"]

_PAGE = 10_000


def _node(name: str) -> str:
    """`fabrics/f/nodes/leaf-3` -> `leaf-3` (ports are named after node display names)."""
    return name.rsplit("/nodes/", 1)[-1]


class TopologyLinks:
    """Fabric links from the topology service at `address`."""

    def __init__(self, address: str, auth_token: PeerAuth | str = "") -> None:
        self._address = address
        self._auth = auth_token
        self._metadata = auth_metadata(auth_token)
        self._channel: grpc.aio.Channel | None = None

    def _stub(self) -> topology_pb2_grpc.TopologyServiceAsyncStub:
        if self._channel is None:
            self._channel = peer_channel(self._address, self._auth)
        return topology_pb2_grpc.TopologyServiceStub(self._channel)

    async def fetch(self, fabric: str, field: str) -> FabricLinks:
        """The links of the current version of `fabric` (`fabrics/{fabric}`)."""
        stub = self._stub()
        try:
            current = await stub.GetFabric(
                topology_pb2.GetFabricRequest(name=fabric), metadata=self._metadata
            )
            tiers: dict[str, int] = {}
            token = ""
            while True:
                nodes = await stub.ListNodes(
                    topology_pb2.ListNodesRequest(parent=fabric, page_size=_PAGE, page_token=token),
                    metadata=self._metadata,
                )
                tiers.update((_node(node.name), node.tier) for node in nodes.nodes)
                token = nodes.next_page_token
                if not token:
                    break
            ends: list[tuple[str, int, str, int]] = []
            while True:
                links = await stub.ListLinks(
                    topology_pb2.ListLinksRequest(parent=fabric, page_size=_PAGE, page_token=token),
                    metadata=self._metadata,
                )
                ends += [(_node(l.node_a), l.port_a, _node(l.node_b), l.port_b) for l in links.links]  # noqa: E741
                token = links.next_page_token
                if not token:
                    break
        except grpc.aio.AioRpcError as exc:
            raise domain_error(exc, f"topology ({self._address})", field) from exc
        version = current.create_time.ToNanoseconds() or 1
        return FabricLinks(
            fabric=fabric,
            version=version,
            node_a=[a for a, _, _, _ in ends],
            port_a=[pa for _, pa, _, _ in ends],
            tier_a=[tiers.get(a, -1) for a, _, _, _ in ends],
            node_b=[b for _, _, b, _ in ends],
            port_b=[pb for _, _, _, pb in ends],
            tier_b=[tiers.get(b, -1) for _, _, b, _ in ends],
        )

    async def close(self) -> None:
        """Close the channel."""
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
