"""ECMP hashing of RoCEv2 5-tuples, vectorised over numpy arrays of flows.

A switch picks the next hop of a flow as `group[hash(5-tuple, switch seed) % len(group)]`.
The hash input is a fixed byte packing of the header fields, in network byte order as they
appear on the wire:

    offset  size  field
    0       4     source IPv4 address
    4       4     destination IPv4 address
    8       1     IP protocol (17, UDP)
    9       2     UDP source port (derived from the source QP number)
    11      2     UDP destination port (4791, RoCEv2)
    13      3     destination QP number (24 bits, from the BTH), only with `hash_destination_qp`

so a key is 13 bytes, or 16 bytes with the destination QP ("enhanced ECMP").

Two hash functions, both over that packing:

- MurmurHash3 x86_32 seeded with the switch seed (what ns-3 HPCC does);
- CRC-32 (IEEE 802.3, as `zlib.crc32`) of the key, xored with the switch seed. CRC is linear, so
  xoring a seed only permutes the buckets of a power-of-two group: switches stay correlated
  (real hardware has the same weakness, which is why vendors seed inside the polynomial state).

Per-switch seeds are `murmur3_32(uint32 node index, little-endian, seed=base seed)` unless the
same seed is used everywhere (which shows hash polarisation).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "ROCEV2_UDP_PORT",
    "UDP_PROTOCOL",
    "crc32",
    "ecmp_next_hop",
    "flow_hash",
    "murmur3_32",
    "murmur3_32_bytes",
    "pack_five_tuples",
    "switch_seeds",
]

ROCEV2_UDP_PORT = 4791
UDP_PROTOCOL = 17

_C1 = np.uint32(0xCC9E2D51)
_C2 = np.uint32(0x1B873593)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _fmix(h: np.ndarray) -> np.ndarray:
    h ^= h >> np.uint32(16)
    h *= np.uint32(0x85EBCA6B)
    h ^= h >> np.uint32(13)
    h *= np.uint32(0xC2B2AE35)
    h ^= h >> np.uint32(16)
    return h


def murmur3_32(keys: np.ndarray, seeds: np.ndarray | int) -> np.ndarray:
    """MurmurHash3 x86_32 of each row of `keys` (uint8 [M, L]) with a seed per row (or one seed).

    Returns uint32 [M]. Every row has the same length L; uint32 arithmetic wraps modulo 2^32 as in
    the reference C code.

    >>> hex(int(murmur3_32(np.frombuffer(b"hello", np.uint8)[None, :], 0)[0]))
    '0x248bfa47'
    """
    keys = np.ascontiguousarray(keys, dtype=np.uint8)
    if keys.ndim != 2:
        raise ValueError("keys must be a 2-D uint8 array, one key per row")
    rows, length = keys.shape
    h = np.empty(rows, dtype=np.uint32)
    h[:] = np.asarray(seeds, dtype=np.uint64).astype(np.uint32)
    nblocks = length // 4
    if nblocks:
        blocks = keys[:, : nblocks * 4].copy().view("<u4").astype(np.uint32)
        for i in range(nblocks):
            k = blocks[:, i] * _C1
            k = _rotl(k, 15) * _C2
            h ^= k
            h = _rotl(h, 13) * np.uint32(5) + np.uint32(0xE6546B64)
    tail = keys[:, nblocks * 4 :].astype(np.uint32)
    if tail.shape[1]:
        k1 = np.zeros(rows, dtype=np.uint32)
        for i in range(tail.shape[1] - 1, -1, -1):
            k1 ^= tail[:, i] << np.uint32(8 * i)
        k1 = _rotl(k1 * _C1, 15) * _C2
        h ^= k1
    h ^= np.uint32(length & 0xFFFFFFFF)
    return _fmix(h)


def murmur3_32_bytes(data: bytes, seed: int = 0) -> int:
    """MurmurHash3 x86_32 of one byte string (convenience for tests and seeds)."""
    return int(murmur3_32(np.frombuffer(data, dtype=np.uint8).reshape(1, len(data)), seed)[0])


def _crc_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> np.uint32(1)) ^ np.uint32(0xEDB88320), table >> np.uint32(1))
    return table.astype(np.uint32)


_CRC_TABLE = _crc_table()


def crc32(keys: np.ndarray, seeds: np.ndarray | int = 0) -> np.ndarray:
    """CRC-32 (IEEE, reflected polynomial 0xEDB88320, as zlib.crc32) of each row, xored with the seed."""
    keys = np.ascontiguousarray(keys, dtype=np.uint8)
    crc = np.full(keys.shape[0], 0xFFFFFFFF, dtype=np.uint32)
    for i in range(keys.shape[1]):
        crc = _CRC_TABLE[(crc ^ keys[:, i]) & np.uint32(0xFF)] ^ (crc >> np.uint32(8))
    crc ^= np.uint32(0xFFFFFFFF)
    return crc ^ np.asarray(seeds, dtype=np.uint64).astype(np.uint32)


def _big_endian_bytes(values: np.ndarray, width: int) -> np.ndarray:
    values = np.asarray(values, dtype=np.uint64)
    shifts = np.arange(width - 1, -1, -1, dtype=np.uint64) * np.uint64(8)
    return ((values[:, None] >> shifts[None, :]) & np.uint64(0xFF)).astype(np.uint8)


def pack_five_tuples(
    src_ip: np.ndarray,
    dst_ip: np.ndarray,
    src_port: np.ndarray,
    dst_port: int = ROCEV2_UDP_PORT,
    protocol: int = UDP_PROTOCOL,
    dest_qp: np.ndarray | None = None,
) -> np.ndarray:
    """Pack RoCEv2 headers into hash keys (uint8 [M, 13], or [M, 16] with `dest_qp`); see module doc."""
    src_ip = np.asarray(src_ip, dtype=np.uint64)
    count = src_ip.shape[0]
    parts = [
        _big_endian_bytes(src_ip, 4),
        _big_endian_bytes(np.asarray(dst_ip, dtype=np.uint64), 4),
        np.full((count, 1), protocol, dtype=np.uint8),
        _big_endian_bytes(np.asarray(src_port, dtype=np.uint64), 2),
        _big_endian_bytes(np.full(count, dst_port, dtype=np.uint64), 2),
    ]
    if dest_qp is not None:
        parts.append(_big_endian_bytes(np.asarray(dest_qp, dtype=np.uint64) & np.uint64(0xFFFFFF), 3))
    return np.concatenate(parts, axis=1)


def switch_seeds(base_seed: int, num_nodes: int, same_seed_everywhere: bool = False) -> np.ndarray:
    """uint32 [num_nodes]: the ECMP seed of every node (hosts too, for multi-homed NICs)."""
    if same_seed_everywhere:
        return np.full(num_nodes, base_seed & 0xFFFFFFFF, dtype=np.uint32)
    node_ids = np.arange(num_nodes, dtype="<u4").view(np.uint8).reshape(num_nodes, 4)
    return murmur3_32(node_ids, base_seed & 0xFFFFFFFF)


def flow_hash(function: str, keys: np.ndarray, seeds: np.ndarray | int) -> np.ndarray:
    """Hash packed keys with `function` ("MURMUR3" or "CRC32") and per-row seeds."""
    if function == "MURMUR3":
        return murmur3_32(keys, seeds)
    if function == "CRC32":
        return crc32(keys, seeds)
    raise ValueError(f"unknown ECMP hash function {function!r}")


def ecmp_next_hop(group_size: np.ndarray | int, hashes: np.ndarray | int) -> np.ndarray:
    """Index of the chosen member of each equal-cost group: hash % group size."""
    return np.asarray(hashes, dtype=np.int64) % np.asarray(group_size, dtype=np.int64)
