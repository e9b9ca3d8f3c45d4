"""FabricSnapshot: the arrays form of a fabric and its routes, shared by topology and simulator.

The topology service builds it from its fabric model and routing tables; the simulator decodes it
once per run. Conventions (also in topology.proto):

- nodes 0..N-1, links 0..L-1; hosts are numbered 0..H-1 and `host_nodes[h]` is the node of host h;
- every link is full duplex: channel 2*l runs a->b, channel 2*l+1 runs b->a;
- routes are CSR over (node, destination host): the equal-cost next channels of node n toward host
  h are `route_next_channels[route_offsets[n*H+h] : route_offsets[n*H+h+1]]`; the first one is the
  LFT (single-port) choice. An empty group means "no route" (or n is the destination itself).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from fabrictwin.v1 import topology_pb2

from services.common.arrays import from_numeric_array, to_numeric_array

__all__ = ["FabricSnapshot"]

_ARRAY_FIELDS = (
    "node_kind",
    "node_tier",
    "host_nodes",
    "host_ip",
    "host_rail",
    "link_a",
    "link_b",
    "link_rate_bps",
    "link_latency_ns",
    "link_state",
    "link_ber",
    "route_offsets",
    "route_next_channels",
)


@dataclasses.dataclass
class FabricSnapshot:
    """A fabric and its routes as flat numpy arrays."""

    fabric: str
    routing_version: int
    node_kind: np.ndarray  # int8 [N], NodeKind values
    node_tier: np.ndarray  # int8 [N]
    node_names: list[str]
    host_nodes: np.ndarray  # int32 [H]
    host_ip: np.ndarray  # uint32 [H]
    host_rail: np.ndarray  # int32 [H]
    link_a: np.ndarray  # int32 [L]
    link_b: np.ndarray  # int32 [L]
    link_rate_bps: np.ndarray  # int64 [L]
    link_latency_ns: np.ndarray  # int64 [L]
    link_state: np.ndarray  # int8 [L], LinkState values
    link_ber: np.ndarray  # float64 [L]
    link_names: list[str]
    route_offsets: np.ndarray  # int64 [N*H+1]
    route_next_channels: np.ndarray  # int32 [route_offsets[-1]]

    @property
    def num_nodes(self) -> int:
        return int(self.node_kind.shape[0])

    @property
    def num_hosts(self) -> int:
        return int(self.host_nodes.shape[0])

    @property
    def num_links(self) -> int:
        return int(self.link_a.shape[0])

    @property
    def num_channels(self) -> int:
        return 2 * self.num_links

    def channel_source(self) -> np.ndarray:
        """[2L] node each channel leaves from."""
        out = np.empty(self.num_channels, dtype=np.int32)
        out[0::2] = self.link_a
        out[1::2] = self.link_b
        return out

    def channel_target(self) -> np.ndarray:
        """[2L] node each channel arrives at."""
        out = np.empty(self.num_channels, dtype=np.int32)
        out[0::2] = self.link_b
        out[1::2] = self.link_a
        return out

    def channel_rate_bps(self) -> np.ndarray:
        """[2L] rate of each channel (both directions of a link run at its rate)."""
        return np.repeat(self.link_rate_bps, 2)

    def next_channels(self, node: int, host: int) -> np.ndarray:
        """Equal-cost channels leaving `node` toward host index `host`."""
        i = node * self.num_hosts + host
        return self.route_next_channels[self.route_offsets[i] : self.route_offsets[i + 1]]

    def channel_name(self, channel: int) -> str:
        link, direction = divmod(channel, 2)
        a, b = int(self.link_a[link]), int(self.link_b[link])
        if direction:
            a, b = b, a
        return f"{self.node_names[a]}->{self.node_names[b]}"

    def to_proto(self) -> topology_pb2.FabricSnapshot:
        message = topology_pb2.FabricSnapshot(
            fabric=self.fabric,
            routing_version=self.routing_version,
            node_names=self.node_names,
            link_names=self.link_names,
        )
        for name in _ARRAY_FIELDS:
            getattr(message, name).CopyFrom(to_numeric_array(getattr(self, name)))
        return message

    @classmethod
    def from_proto(cls, message: topology_pb2.FabricSnapshot) -> FabricSnapshot:
        arrays = {name: from_numeric_array(getattr(message, name), name) for name in _ARRAY_FIELDS}
        return cls(
            fabric=message.fabric,
            routing_version=message.routing_version,
            node_names=list(message.node_names),
            link_names=list(message.link_names),
            **arrays,
        )
