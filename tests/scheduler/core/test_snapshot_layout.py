"""The snapshot's column layout (scheduler.core.node_columns) and its declared attributes agree."""
from __future__ import annotations

import numpy as np

from scheduler.core import ClusterSnapshot
from scheduler.core.node_columns import (
    BOOL_COLUMNS,
    FLOAT_COLUMNS,
    GPU_BOOL_COLUMNS,
    GPU_FLOAT_COLUMNS,
    GPU_INT_COLUMNS,
    GROUP_COLUMNS,
    INT_COLUMNS,
    OFFER_BIT_COLUMNS,
    OFFER_COLUMNS,
)
from tests.scheduler.core.builders import demo_nodes

PER_NODE = (INT_COLUMNS + FLOAT_COLUMNS + BOOL_COLUMNS + GPU_INT_COLUMNS + GPU_BOOL_COLUMNS + GPU_FLOAT_COLUMNS
            + OFFER_COLUMNS + OFFER_BIT_COLUMNS)
PER_GROUP = tuple(f"group_{name}" for name in GROUP_COLUMNS)
LAYOUT = PER_NODE + PER_GROUP


def test_every_column_of_the_layout_is_declared_once_on_the_snapshot():
    assert len(set(LAYOUT)) == len(LAYOUT)
    assert sorted(ClusterSnapshot.__annotations__) == sorted(LAYOUT)


def test_every_declared_column_is_an_array_with_a_row_per_node_or_group():
    snapshot = ClusterSnapshot(demo_nodes())
    for name in LAYOUT:
        column = getattr(snapshot, name)
        assert isinstance(column, np.ndarray), name
        assert len(column) == (len(snapshot.groups) if name in PER_GROUP else len(snapshot)), name
