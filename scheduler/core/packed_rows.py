"""numpy reads over the snapshot's narrow 2-D columns, without slow per-row reductions.

numpy's reductions along a short axis (``(nodes, 8).any(axis=1)``) cost far more than the work
they do, and the hot path of a scheduling cycle would do several per plugin. A C-contiguous
bool row of 8 columns is 8 bytes, so it can be read as one uint64 word instead: non-zero iff
the row has a True, and its byte k is column k. These helpers rely on a little-endian machine
(``ClusterSnapshot`` refuses any other).
"""
from __future__ import annotations

import numpy as np


def row_words(mask: np.ndarray) -> np.ndarray:
    """One uint64 per row of a C-contiguous bool ``(rows, 8)`` array: non-zero iff the row has a
    True, and byte k of the word is column k (little endian). numpy's ``any(axis=1)`` over
    short rows is ~30x slower than this view."""
    return mask.view(np.uint64)[:, 0]


def row_count(mask: np.ndarray) -> np.ndarray:
    """``mask.sum(axis=1)`` for a bool ``(rows, 8k)`` array; at 8 columns one multiply per row:
    the top byte of ``word x 0x0101010101010101`` is the sum of the word's 0/1 bytes."""
    mask = np.ascontiguousarray(mask)
    if mask.shape[1] == 8:
        return ((row_words(mask) * np.uint64(0x0101010101010101)) >> np.uint64(56)).astype(np.int64)
    return mask.sum(axis=1)


def first_set_byte(words: np.ndarray) -> np.ndarray:
    """Index of the lowest non-zero byte of each uint64 (the first True column); 0 for 0.

    The lowest set bit alone is a power of two, exact as a float64, whose exponent field is the
    bit's index: no logarithm needed.
    """
    lowest = words & (~words + np.uint64(1))
    exponent = (np.maximum(lowest, np.uint64(1)).astype(np.float64).view(np.int64) >> 52) - 1023
    return exponent >> 3


def pick(column: np.ndarray, nodes: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """``column[nodes, columns]`` for a C-contiguous 2-D column, as one flat 1-D gather (faster)."""
    return column.ravel().take(nodes * column.shape[1] + columns)
