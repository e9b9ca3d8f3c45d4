"""The table of distinct equal-cost groups: one entry per (routing row, set of layout columns).

Engines describe candidates as a boolean block [rows, layout columns, classes]; `GroupTable.assign`
turns each (row, class) cell into a group id, creating a group the first time its (row, mask)
appears. Ids are never reused and groups never change, so two routes sharing a table compare
groups by id; an incremental reroute extends a copy of its predecessor's table.
"""

from __future__ import annotations

import numpy as np

from services.common.snapshot import DELIVER, NO_ROUTE
from services.topology.routing.graph import RowLayout

__all__ = ["GroupTable"]


class GroupTable:
    """Distinct groups of a fabric's rows; channels of each group in port order."""

    def __init__(self, layout: RowLayout) -> None:
        self.layout = layout
        self.words = max(1, -(-layout.padded.shape[1] // 64))
        self.offsets = np.zeros(1, dtype=np.int64)
        self.row = np.zeros(0, dtype=np.int64)
        self.local = np.zeros(0, dtype=np.int64)  # index of the group among its row's groups
        self.channels = np.zeros(0, dtype=np.int64)
        self.columns = np.zeros(0, dtype=np.int64)  # layout column of each channel
        self.row_count = np.zeros(layout.num_rows, dtype=np.int64)
        self._index: dict[tuple[int, bytes], int] = {}
        self.lineage = object()  # shared by extended copies: their ids mean the same groups

    @property
    def num_groups(self) -> int:
        return int(self.row.shape[0])

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    def extended(self) -> GroupTable:
        """A copy that can grow without changing this table (arrays are shared until appended to)."""
        other = GroupTable.__new__(GroupTable)
        other.__dict__.update(self.__dict__)
        other.row_count = self.row_count.copy()
        other._index = dict(self._index)
        return other

    def assign(self, first_row: int, valid: np.ndarray, deliver: np.ndarray) -> np.ndarray:
        """Group ids [n, C] for rows first_row.. of candidates `valid` [n, W, C] (W: layout width);
        cells with no candidate are NO_ROUTE, cells where `deliver` is set are DELIVER."""
        n, _, columns = valid.shape
        out = np.full((n, columns), NO_ROUTE, dtype=np.int32)
        if n == 0 or columns == 0:
            return out
        packed = np.packbits(valid, axis=1, bitorder="little")  # [n, bytes, C]
        buffer = np.zeros((n, columns, self.words * 8), dtype=np.uint8)
        buffer[:, :, : packed.shape[1]] = packed.transpose(0, 2, 1)
        keys = buffer.view("<u8")  # [n, C, words]
        new_rows: list[int] = []
        new_masks: list[np.ndarray] = []
        next_id = self.num_groups
        for i in range(n):
            row = first_row + i
            if self.words == 1:
                unique, inverse = np.unique(keys[i, :, 0], return_inverse=True)
                masks = unique[:, None]
            else:
                masks, inverse = np.unique(keys[i], axis=0, return_inverse=True)
            ids = np.full(masks.shape[0], NO_ROUTE, dtype=np.int32)
            for j, mask in enumerate(masks):
                if not mask.any():
                    continue
                key = (row, mask.tobytes())
                gid = self._index.get(key)
                if gid is None:
                    gid = self._index[key] = next_id
                    next_id += 1
                    new_rows.append(row)
                    new_masks.append(mask)
                ids[j] = gid
            out[i] = ids[inverse.reshape(-1)]
        out[deliver] = DELIVER
        if new_rows:
            self._append(np.array(new_rows, dtype=np.int64), np.stack(new_masks))
        return out

    def _append(self, rows: np.ndarray, masks: np.ndarray) -> None:
        bits = np.unpackbits(masks.astype("<u8").view(np.uint8), axis=1, bitorder="little")
        group, column = np.nonzero(bits[:, : self.layout.padded.shape[1]])
        sizes = np.bincount(group, minlength=rows.shape[0])
        self.channels = np.concatenate([self.channels, self.layout.padded[rows[group], column]])
        self.columns = np.concatenate([self.columns, column.astype(np.int64)])
        self.offsets = np.concatenate([self.offsets, self.offsets[-1] + np.cumsum(sizes)])
        # Local index: the row's count so far plus the rank among this batch's groups of the row.
        order = np.argsort(rows, kind="stable")
        rank = np.empty(rows.shape[0], dtype=np.int64)
        boundary = np.r_[True, rows[order][1:] != rows[order][:-1]]
        start = np.maximum.accumulate(np.where(boundary, np.arange(rows.shape[0]), 0))
        rank[order] = np.arange(rows.shape[0]) - start
        self.local = np.concatenate([self.local, self.row_count[rows] + rank])
        self.row = np.concatenate([self.row, rows])
        np.add.at(self.row_count, rows, 1)

    def masks(self) -> np.ndarray:
        """[G, words] uint64: bit c of a group's mask is set when layout column c is in the group."""
        masks = np.zeros((self.num_groups, self.words), dtype=np.uint64)
        if self.num_groups:
            owner = np.repeat(np.arange(self.num_groups), self.sizes)
            bits = np.uint64(1) << (self.columns % 64).astype(np.uint64)
            np.bitwise_or.at(masks, (owner, self.columns // 64), bits)
        return masks

    @staticmethod
    def contains(masks: np.ndarray, group_ids: np.ndarray, columns: np.ndarray) -> np.ndarray:
        """Whether each group (ids >= 0) holds the layout column beside it (-1: no column, False)."""
        col = np.maximum(columns, 0)
        word = masks[group_ids, np.minimum(col // 64, masks.shape[1] - 1)]
        return (columns >= 0) & (((word >> (col % 64).astype(np.uint64)) & np.uint64(1)) == 1)

    def set_hashes(self, channel_hash: np.ndarray) -> np.ndarray:
        """[G] uint64 order-free hash of each group's channel set (for comparing groups across tables)."""
        out = np.zeros(self.num_groups, dtype=np.uint64)
        if self.channels.size:
            nonempty = self.sizes > 0
            sums = np.add.reduceat(channel_hash[self.channels], self.offsets[:-1][nonempty])
            out[nonempty] = sums
        return out
