import zlib

import numpy as np
import pytest

from services.simulator.ecmp_hash import (
    crc32,
    ecmp_next_hop,
    murmur3_32,
    murmur3_32_bytes,
    pack_five_tuples,
    switch_seeds,
)


def reference_murmur3_32(data: bytes, seed: int) -> int:
    """MurmurHash3 x86_32 written plainly from the reference C code, one byte string at a time."""
    mask = 0xFFFFFFFF
    c1, c2 = 0xCC9E2D51, 0x1B873593
    h = seed & mask
    blocks = len(data) // 4
    for i in range(blocks):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * c1) & mask
        k = ((k << 15) | (k >> 17)) & mask
        k = (k * c2) & mask
        h ^= k
        h = ((h << 13) | (h >> 19)) & mask
        h = (h * 5 + 0xE6546B64) & mask
    tail = data[4 * blocks :]
    k = 0
    for i, byte in enumerate(tail):
        k |= byte << (8 * i)
    if tail:
        k = (k * c1) & mask
        k = ((k << 15) | (k >> 17)) & mask
        k = (k * c2) & mask
        h ^= k
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & mask
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & mask
    h ^= h >> 16
    return h


@pytest.mark.parametrize(
    ("data", "seed", "expected"),
    [
        (b"", 0, 0),
        (b"", 1, 0x514E28B7),
        (b"", 0xFFFFFFFF, 0x81F16F39),
        (b"hello", 0, 0x248BFA47),
        (b"The quick brown fox jumps over the lazy dog", 0x9747B28C, 0x2FA826CD),
    ],
)
def test_murmur3_matches_published_vectors(data, seed, expected):
    assert reference_murmur3_32(data, seed) == expected
    assert murmur3_32_bytes(data, seed) == expected


@pytest.mark.parametrize("length", [0, 1, 2, 3, 4, 7, 13, 16])
def test_vectorised_murmur3_agrees_with_the_plain_reference_on_random_keys(length):
    rng = np.random.default_rng(length)
    keys = rng.integers(0, 256, size=(200, length), dtype=np.uint8)
    seeds = rng.integers(0, 2**32, size=200, dtype=np.uint64)
    got = murmur3_32(keys, seeds)
    expected = [reference_murmur3_32(bytes(row), int(s)) for row, s in zip(keys, seeds, strict=True)]
    assert got.tolist() == expected


def test_crc32_is_zlibs_crc_xored_with_the_seed():
    rng = np.random.default_rng(1)
    keys = rng.integers(0, 256, size=(100, 13), dtype=np.uint8)
    seeds = rng.integers(0, 2**32, size=100, dtype=np.uint64)
    got = crc32(keys, seeds)
    expected = [zlib.crc32(bytes(row)) ^ int(s) for row, s in zip(keys, seeds, strict=True)]
    assert got.tolist() == expected


def test_five_tuple_packing_is_network_order_with_optional_destination_qp():
    keys = pack_five_tuples(np.array([0x0A000001]), np.array([0x0A000002]), np.array([49153]))
    assert bytes(keys[0]) == bytes([10, 0, 0, 1, 10, 0, 0, 2, 17, 0xC0, 0x01, 0x12, 0xB7])
    with_qp = pack_five_tuples(np.array([1]), np.array([2]), np.array([3]), dest_qp=np.array([0xABCDEF]))
    assert with_qp.shape == (1, 16)
    assert bytes(with_qp[0, 13:]) == bytes([0xAB, 0xCD, 0xEF])


def test_switch_seeds_are_deterministic_and_differ_per_switch():
    seeds = switch_seeds(7, 64)
    assert np.array_equal(seeds, switch_seeds(7, 64))
    assert len(np.unique(seeds)) == 64
    assert not np.array_equal(seeds, switch_seeds(8, 64))
    assert int(seeds[5]) == murmur3_32_bytes((5).to_bytes(4, "little"), 7)


def test_same_seed_everywhere_gives_every_switch_the_base_seed():
    assert switch_seeds(7, 10, same_seed_everywhere=True).tolist() == [7] * 10


def test_ecmp_next_hop_is_hash_modulo_group_size():
    assert ecmp_next_hop(4, np.array([0, 5, 11, 2**32 - 1])).tolist() == [0, 1, 3, 3]
    assert ecmp_next_hop(np.array([3, 5]), np.array([10, 10])).tolist() == [1, 0]
