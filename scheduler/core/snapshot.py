"""ClusterSnapshot: the cluster as columns, so that filters and scores are array operations.

A plain Python loop over 5,000 nodes costs milliseconds per decision; numpy operations over
1-D columns cost microseconds. The snapshot therefore keeps, per node, the figures the plugins
read as arrays indexed by node id (the position in ``nodes``). Which columns exist, and how one
node's values are computed, is ``scheduler.core.node_columns``; the hot path reads its narrow
2-D columns through ``scheduler.core.packed_rows``.

Static properties that filters look at (ready, cordoned, model, mode, R, MIG, taints) are also
interned into *node groups*: a filter decides once per group (a few dozen) and maps the verdict
to nodes with one lookup. Labels have an inverted index (``label_mask``). GPU models are
interned into ``models`` (``scheduler.core.model_facts``).

The ``NodeState`` objects stay the source of truth: ``reserve`` / ``release`` /
``update_node`` change one node's objects (``scheduler.core.reservation`` holds the capacity
rules) and then recompute that node's row from them with ``node_row``, so the columns cannot
drift from the objects; a property test checks them against a from-scratch rebuild after
random sequences.
"""
from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping

import numpy as np

from nodes.catalog import CATALOG
from nodes.vocabulary import Taint
from scheduler.core.model_facts import MIG_PROFILE_ROWS, UNKNOWN_MODEL_ID, ModelFacts
from scheduler.core.node_columns import (
    BOOL_COLUMNS,
    BOOL_GROUP_COLUMNS,
    FLOAT_COLUMNS,
    GPU_BOOL_COLUMNS,
    GPU_FLOAT_COLUMNS,
    GPU_INT_COLUMNS,
    GROUP_COLUMNS,
    INT_COLUMNS,
    OFFER_BIT_COLUMNS,
    OFFER_COLUMNS,
    OFFER_FILL,
    node_row,
)
from scheduler.core.reservation import find_gpu, release_partitions, reserve_partitions
from scheduler.core.types import Assignment, NodeState


class ClusterSnapshot:
    """Columnar view of a list of ``NodeState`` (node id = position in ``nodes``).

    Not thread-safe: one scheduling cycle at a time mutates it (the services serialise
    placement through database locks anyway, and each cycle builds or refreshes its snapshot).
    Node groups: ``group_id[node]`` indexes the ``group_<column>`` arrays of static properties.
    """

    # Column views, bound by ``_bind_views`` from the layout in ``node_columns`` (declared here
    # for readers and type checkers; a test keeps the two lists equal).
    # per node, int64
    model_id: np.ndarray
    mode_id: np.ndarray
    replicas: np.ndarray
    taint_set_id: np.ndarray
    group_id: np.ndarray
    gpu_count: np.ndarray
    whole_free: np.ndarray
    whole_free_max_memory_mib: np.ndarray
    whole_free_min_memory_mib: np.ndarray
    slot_gpus: np.ndarray
    max_slot_memory_mib: np.ndarray
    max_slot_share_milli: np.ndarray
    free_milli: np.ndarray
    max_unit_milli: np.ndarray
    offer_count: np.ndarray
    fp16_tflops: np.ndarray
    tdp_w: np.ndarray
    milli_tflops_per_w: np.ndarray
    unloaded_pct: np.ndarray
    cpu_free_milli: np.ndarray
    host_memory_free_mib: np.ndarray
    # per node, float64
    util_pct: np.ndarray
    load_pct: np.ndarray
    memory_used_pct: np.ndarray
    power_w: np.ndarray
    # per node, bool
    ready: np.ndarray
    cordoned: np.ndarray
    has_mig_gpu: np.ndarray
    has_metrics: np.ndarray
    # (nodes, gpu_slots) int32
    gpu_memory_mib: np.ndarray
    gpu_free_share_milli: np.ndarray
    gpu_free_memory_mib: np.ndarray
    gpu_free_slots: np.ndarray
    gpu_max_unit_milli: np.ndarray
    gpu_free_milli: np.ndarray
    gpu_next_unit_milli: np.ndarray
    # (nodes, gpu_slots) bool
    gpu_present: np.ndarray
    gpu_whole_free: np.ndarray
    # (nodes, gpu_slots) float32, NaN where no sample
    gpu_util_pct: np.ndarray
    gpu_memory_used_pct: np.ndarray
    # (nodes, offer_slots) int32
    offer_share_milli: np.ndarray
    offer_memory_mib: np.ndarray
    offer_kind: np.ndarray
    offer_mig_row: np.ndarray
    offer_gpu: np.ndarray
    # (nodes, offer_slots) uint8
    offer_kind_bit: np.ndarray
    # per node group (``group_id`` indexes them)
    group_ready: np.ndarray
    group_cordoned: np.ndarray
    group_model_id: np.ndarray
    group_mode_id: np.ndarray
    group_replicas: np.ndarray
    group_has_mig_gpu: np.ndarray
    group_taint_set_id: np.ndarray

    def __init__(self, nodes: Iterable[NodeState]) -> None:
        if sys.byteorder != "little":  # pragma: no cover - row_words reads bytes as columns
            raise RuntimeError("ClusterSnapshot needs a little-endian machine")
        self.nodes: list[NodeState] = list(nodes)
        self.names: list[str] = [node.name for node in self.nodes]
        self.index: dict[str, int] = {name: i for i, name in enumerate(self.names)}
        if len(self.index) != len(self.names):
            raise ValueError("node names in a snapshot must be unique")
        keys = sorted({node.gpu_model for node in self.nodes if node.gpu_model in CATALOG})
        self.models = ModelFacts.build(keys)
        self.model_ids: dict[str, int] = {key: i for i, key in enumerate(self.models.keys) if key}
        self.taint_sets: list[tuple[Taint, ...]] = [()]
        self._taint_set_ids: dict[tuple[Taint, ...], int] = {(): 0}
        self.groups: list[tuple[int, ...]] = []
        self._group_ids: dict[tuple[int, ...], int] = {}
        # Per-request tables that depend only on groups, taint sets and models (PreFilter results
        # of static filters); cleared whenever one of those gains an entry.
        self.static_cache: dict[tuple[object, ...], object] = {}
        for name in GROUP_COLUMNS:
            setattr(self, f"group_{name}", np.zeros(0, dtype=np.bool_ if name in BOOL_GROUP_COLUMNS else np.int64))
        self._labels: dict[tuple[str, str], set[int]] = {}
        self._label_arrays: dict[tuple[str, str], np.ndarray] = {}
        widest = max((len(node.gpus) for node in self.nodes), default=1)
        self.gpu_slots = 8 * max(1, -(-widest // 8))  # a multiple of 8: see row_words
        self.offer_slots = 8
        self._offer_fill = np.array([OFFER_FILL.get(name, 0) for name in OFFER_COLUMNS], dtype=np.int32)
        self._allocate(len(self.nodes), self.gpu_slots, self.offer_slots)
        # Tie-break rank per node (lower wins among equal totals): node order unless replaced,
        # e.g. by a random permutation drawn once per seed in a trace replay.
        self.tie_rank = np.arange(len(self.nodes), dtype=np.int64)
        # When each node's row was last written (a counter): score plugins that keep per-node
        # figures between cycles (``derived``, e.g. each node's fragmentation) recompute just
        # the rows written since they last looked.
        self.row_version = np.zeros(len(self.nodes), dtype=np.int64)
        self._writes = 0
        self.derived: dict[object, object] = {}
        for i, node in enumerate(self.nodes):
            self._index_labels(i, node.labels)
            self._write_row(i)

    # ---- structure -------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.nodes)

    def _allocate(self, count: int, gpu_slots: int, offer_slots: int) -> None:
        self._ints = np.zeros((len(INT_COLUMNS), count), dtype=np.int64)
        self._floats = np.zeros((len(FLOAT_COLUMNS), count), dtype=np.float64)
        self._bools = np.zeros((len(BOOL_COLUMNS), count), dtype=np.bool_)
        self._gpu_ints = np.zeros((len(GPU_INT_COLUMNS), count, gpu_slots), dtype=np.int32)
        self._gpu_bools = np.zeros((len(GPU_BOOL_COLUMNS), count, gpu_slots), dtype=np.bool_)
        self._gpu_floats = np.full((len(GPU_FLOAT_COLUMNS), count, gpu_slots), np.nan, dtype=np.float32)
        self._offers = np.zeros((len(OFFER_COLUMNS), count, offer_slots), dtype=np.int32)
        self._offers[:] = self._offer_fill[:, None, None]
        self._offer_bits = np.zeros((len(OFFER_BIT_COLUMNS), count, offer_slots), dtype=np.uint8)
        self.gpu_mig_free = np.zeros((count, gpu_slots, MIG_PROFILE_ROWS), dtype=np.int16)
        self.mig_free = np.zeros((count, MIG_PROFILE_ROWS), dtype=np.int64)
        self._bind_views()

    def _bind_views(self) -> None:
        for block, names in ((self._ints, INT_COLUMNS), (self._floats, FLOAT_COLUMNS), (self._bools, BOOL_COLUMNS),
                             (self._gpu_ints, GPU_INT_COLUMNS), (self._gpu_bools, GPU_BOOL_COLUMNS),
                             (self._gpu_floats, GPU_FLOAT_COLUMNS), (self._offers, OFFER_COLUMNS),
                             (self._offer_bits, OFFER_BIT_COLUMNS)):
            for position, name in enumerate(names):
                setattr(self, name, block[position])

    def _resize(self, count: int, gpu_slots: int, offer_slots: int) -> None:
        """Reallocate for ``count`` nodes and wider GPU / offer columns, keeping existing rows."""
        old = (self._ints, self._floats, self._bools, self._gpu_ints, self._gpu_bools, self._gpu_floats,
               self.gpu_mig_free, self.mig_free, self._offers, self._offer_bits)
        rows = old[0].shape[1]
        slots = old[3].shape[2]
        offers = old[8].shape[2]
        self._allocate(count, gpu_slots, offer_slots)
        self._ints[:, :rows] = old[0]
        self._floats[:, :rows] = old[1]
        self._bools[:, :rows] = old[2]
        self._gpu_ints[:, :rows, :slots] = old[3]
        self._gpu_bools[:, :rows, :slots] = old[4]
        self._gpu_floats[:, :rows, :slots] = old[5]
        self.gpu_mig_free[:rows, :slots] = old[6]
        self.mig_free[:rows] = old[7]
        self._offers[:, :rows, :offers] = old[8]
        self._offer_bits[:, :rows, :offers] = old[9]
        self.gpu_slots = gpu_slots
        self.offer_slots = offer_slots

    def _model_id_for(self, key: str) -> int:
        if key not in CATALOG:
            return UNKNOWN_MODEL_ID
        if key not in self.model_ids:
            # A model new to this snapshot: rebuild the (tiny) table with it appended, so the
            # ids of models already in use do not change.
            self.models = ModelFacts.build(self.models.keys[1:] + (key,))
            self.model_ids = {k: i for i, k in enumerate(self.models.keys) if k}
            self.static_cache.clear()
        return self.model_ids[key]

    def _taint_set_for(self, taints: tuple[Taint, ...]) -> int:
        key = tuple(sorted(taints, key=lambda t: (t.key, t.value, t.effect)))
        if key not in self._taint_set_ids:
            self._taint_set_ids[key] = len(self.taint_sets)
            self.taint_sets.append(key)
            self.static_cache.clear()
        return self._taint_set_ids[key]

    def _group_for(self, key: tuple[int, ...]) -> int:
        group = self._group_ids.get(key)
        if group is None:
            group = len(self.groups)
            self._group_ids[key] = group
            self.groups.append(key)
            self.static_cache.clear()
            for position, name in enumerate(GROUP_COLUMNS):
                dtype = np.bool_ if name in BOOL_GROUP_COLUMNS else np.int64
                setattr(self, f"group_{name}", np.array([g[position] for g in self.groups], dtype=dtype))
        return group

    def _index_labels(self, i: int, labels: Mapping[str, str]) -> None:
        for pair in labels.items():
            self._labels.setdefault(pair, set()).add(i)
            self._label_arrays.pop(pair, None)

    def _unindex_labels(self, i: int, labels: Mapping[str, str]) -> None:
        for pair in labels.items():
            ids = self._labels.get(pair)
            if ids is not None:
                ids.discard(i)
                self._label_arrays.pop(pair, None)

    def label_mask(self, selector: Mapping[str, str]) -> np.ndarray:
        """Bool per node: the node has every ``key=value`` of ``selector`` (inverted index, no node loop)."""
        mask = np.ones(len(self.nodes), dtype=np.bool_)
        for pair in selector.items():
            ids = self._label_arrays.get(pair)
            if ids is None:
                ids = np.fromiter(sorted(self._labels.get(pair, ())), dtype=np.int64)
                self._label_arrays[pair] = ids
            hit = np.zeros(len(self.nodes), dtype=np.bool_)
            hit[ids] = True
            mask &= hit
        return mask

    def _write_row(self, i: int) -> None:
        self._writes += 1
        self.row_version[i] = self._writes
        node = self.nodes[i]
        if len(node.gpus) > self.gpu_slots:
            self._resize(len(self.nodes), 8 * -(-len(node.gpus) // 8), self.offer_slots)
        model_id = self._model_id_for(node.gpu_model)
        row = node_row(node, model_id, self._taint_set_for(tuple(node.taints)), self.models)
        if len(row.offers) > self.offer_slots:
            self._resize(len(self.nodes), self.gpu_slots, 8 * -(-len(row.offers) // 8))
        ints = row.ints
        ints["group_id"] = self._group_for(row.group_key)
        self._ints[:, i] = [ints[name] for name in INT_COLUMNS]
        self._floats[:, i] = [row.floats[name] for name in FLOAT_COLUMNS]
        self._bools[:, i] = [row.bools[name] for name in BOOL_COLUMNS]
        count = len(node.gpus)
        if count < self.gpu_slots:  # padding GPUs; a full row is overwritten below
            self._gpu_ints[:, i] = 0
            self._gpu_bools[:, i] = False
            self._gpu_floats[:, i] = np.nan
            self.gpu_mig_free[i] = 0
        self._offers[:, i] = self._offer_fill[:, None]
        self._offer_bits[:, i] = 0
        if row.offers:
            self._offers[:, i, : len(row.offers)] = list(zip(*row.offers, strict=True))
            self._offer_bits[0, i, : len(row.offers)] = [1 << offer[2] for offer in row.offers]
        if count:
            self._gpu_ints[:, i, :count] = [row.gpu_ints[name] for name in GPU_INT_COLUMNS]
            self._gpu_bools[:, i, :count] = [row.gpu_bools[name] for name in GPU_BOOL_COLUMNS]
            self._gpu_floats[:, i, :count] = [row.gpu_floats[name] for name in GPU_FLOAT_COLUMNS]
        if count:
            self.gpu_mig_free[i, :count] = row.gpu_mig_free
        self.mig_free[i] = self.gpu_mig_free[i].sum(axis=0)  # one numpy sum, not a Python one per profile

    # ---- changes ---------------------------------------------------------------------------

    def add_node(self, node: NodeState) -> int:
        """Append a node (rare: the arrays are reallocated); returns its id."""
        if node.name in self.index:
            raise ValueError(f"node {node.name!r} is already in the snapshot")
        i = len(self.nodes)
        self.nodes.append(node)
        self.names.append(node.name)
        self.index[node.name] = i
        self._resize(i + 1, self.gpu_slots, self.offer_slots)
        self.tie_rank = np.append(self.tie_rank, i)
        self.row_version = np.append(self.row_version, 0)
        self._label_arrays.clear()  # cached masks are sized by the node count
        self._index_labels(i, node.labels)
        self._write_row(i)
        return i

    def update_node(self, node: NodeState) -> None:
        """Replace a node's state (labels, mode, readiness, telemetry ...) and refresh its row."""
        i = self.index[node.name]
        self._unindex_labels(i, self.nodes[i].labels)
        self.nodes[i] = node
        self._index_labels(i, node.labels)
        self._write_row(i)

    def update_telemetry(self, node: str, gpu_index: int, *, utilization_pct: float | None,
                         memory_used_mib: int | None, power_w: float | None = None) -> None:
        """Record a GPU's latest sample and refresh the node's row."""
        i = self.index[node]
        gpu = find_gpu(self.nodes[i], gpu_index)
        gpu.utilization_pct = utilization_pct
        gpu.memory_used_mib = memory_used_mib
        gpu.power_w = power_w
        self._write_row(i)

    def reserve(self, assignment: Assignment) -> None:
        """Give the assignment's partitions to ``assignment.key`` and refresh the node's row.

        Raises ``CapacityError`` (changing nothing) when any partition is not free (see
        ``reservation.reserve_partitions``): over-allocation is impossible in the core as well
        as in the database.
        """
        i = self.index[assignment.node]
        reserve_partitions(self.nodes[i], assignment)
        self._write_row(i)

    def release(self, node: str, key: str) -> int:
        """Free everything ``key`` holds on ``node``; returns how many partitions were freed."""
        i = self.index[node]
        freed = release_partitions(self.nodes[i], key)
        if freed:
            self._write_row(i)
        return freed

    def unreserve(self, assignment: Assignment) -> None:
        """Undo ``reserve(assignment)``."""
        self.release(assignment.node, assignment.key)

    # ---- checks ----------------------------------------------------------------------------

    def columns(self) -> dict[str, np.ndarray]:
        """Every column by name (for tests comparing an updated snapshot with a rebuilt one).

        Interned ids (model, taint set, group) are replaced by what they stand for, so two
        snapshots that interned in a different order still compare equal.
        """
        names = (INT_COLUMNS + FLOAT_COLUMNS + BOOL_COLUMNS + GPU_INT_COLUMNS + GPU_BOOL_COLUMNS
                 + GPU_FLOAT_COLUMNS + OFFER_COLUMNS + OFFER_BIT_COLUMNS)
        out: dict[str, np.ndarray] = {name: getattr(self, name) for name in names}
        out["model_id"] = np.array([self.models.keys[m] for m in self.model_id], dtype=object)
        out["taint_set_id"] = np.array([repr(self.taint_sets[t]) for t in self.taint_set_id], dtype=object)
        out["group_id"] = np.array([repr(self._group_meaning(g)) for g in self.group_id], dtype=object)
        out["gpu_mig_free"] = self.gpu_mig_free
        out["mig_free"] = self.mig_free
        return out

    def _group_meaning(self, group: int) -> tuple[object, ...]:
        values = dict(zip(GROUP_COLUMNS, self.groups[group], strict=True))
        meaning: dict[str, object] = {**values, "model_id": self.models.keys[values["model_id"]],
                                      "taint_set_id": self.taint_sets[values["taint_set_id"]]}
        return tuple(meaning.items())
