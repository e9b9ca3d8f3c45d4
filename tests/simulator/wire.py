"""Wire bytes of a flow as both engines count them: payload cut into packets of at most the MTU,
each with the transport's header (RoCEv2: 82 bytes, the default)."""

from __future__ import annotations

MTU, ROCEV2_HEADER = 4096, 82


def wire_bytes(payload: int, mtu: int = MTU, header: int = ROCEV2_HEADER) -> int:
    """>>> wire_bytes(4096), wire_bytes(4097), wire_bytes(0)
    (4178, 4261, 0)"""
    return payload + -(-payload // mtu) * header
