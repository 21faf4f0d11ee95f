"""ClusterSnapshot: the cluster as columns, so that filters and scores are array operations.

A plain Python loop over 5,000 nodes costs milliseconds per decision; numpy operations over
1-D columns cost microseconds. The snapshot therefore keeps, per node, the figures the plugins
read as arrays indexed by node id (the position in ``nodes``). numpy's reductions over a
node's few GPUs (``(nodes, 8).any(axis=1)``) are slow, so the hot path never does them:

- node-level aggregates answer the per-GPU questions (free whole GPUs and their memory, GPUs
  with a free slot, the largest free weighted share, free MIG instances per profile,
  usable free milli-GPU, load ...);
- each node's *offers* (``NodeRow``) list the distinct units a new single-GPU placement could
  get there, sorted, 8 per node: "does the request fit, and which unit" is one comparison over
  an ``(nodes, 8)`` array whose rows are read as single uint64 words (``row_words``).

Static properties that filters look at (ready, cordoned, model, mode, R, MIG, taints) are also
interned into *node groups*: a filter decides once per group (a few dozen) and maps the verdict
to nodes with one lookup. Labels have an inverted index (``label_mask``).

The ``NodeState`` objects stay the source of truth: ``reserve`` / ``release`` /
``update_node`` change one node's objects and then recompute that node's row from them
(``node_row``, the single definition of every column), so the columns cannot drift from the
objects; a property test checks them against a from-scratch rebuild after random sequences.

Per-GPU columns ``(nodes, G)``, G a multiple of 8, for exact checks and the packing scores
("unit" = what one new placement on that GPU could be given):

- ``gpu_whole_free``: the GPU can be handed out whole (exclusive node, or a MIG node's GPU with
  MIG disabled) and nobody holds any part of it.
- ``gpu_free_share_milli`` / ``gpu_free_memory_mib``: 1000 / memory minus what occupants hold.
- ``gpu_free_slots``: R minus occupants, for mps, mps-weighted and timeslice GPUs; else 0.
- ``gpu_max_unit_milli``: the largest compute share one new placement could get on this GPU
  (1000 for a free whole GPU, the largest free MIG instance, 1000 // R for a free MPS or
  time-slice slot, the free share of a weighted GPU with a free slot), 0 when none.
- ``gpu_free_milli``: capacity still usable by new placements (free whole GPU 1000, free MIG
  instances' shares summed, a slot GPU's free share while it has a free slot), the quantity
  that best-fit and fragmentation scoring count.
- ``gpu_mig_free[n, g, p]``: free MIG instances of geometry row p (catalog profile order).
"""
from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from nodes.catalog import CATALOG
from nodes.vocabulary import SHARE_MILLI_FULL, PartitionKind, SharingMode, Taint
from scheduler.core.types import (
    Assignment,
    GPUState,
    NodeState,
    PartitionState,
    gpu_family,
    mig_share_milli,
    slot_share_milli,
)

# Mode and kind ids used in the integer columns.
MODES: tuple[SharingMode, ...] = (
    SharingMode.EXCLUSIVE,
    SharingMode.MIG,
    SharingMode.MPS,
    SharingMode.MPS_WEIGHTED,
    SharingMode.TIMESLICE,
)
MODE_ID: dict[SharingMode, int] = {mode: i for i, mode in enumerate(MODES)}
KINDS: tuple[PartitionKind, ...] = (
    PartitionKind.EXCLUSIVE,
    PartitionKind.MIG,
    PartitionKind.MPS,
    PartitionKind.MPS_WEIGHTED,
    PartitionKind.TIMESLICE,
)
KIND_ID: dict[PartitionKind, int] = {kind: i for i, kind in enumerate(KINDS)}

_KIND_EXCLUSIVE = KIND_ID[PartitionKind.EXCLUSIVE]
_KIND_MIG = KIND_ID[PartitionKind.MIG]
_KIND_MPS = KIND_ID[PartitionKind.MPS]
_KIND_WEIGHTED = KIND_ID[PartitionKind.MPS_WEIGHTED]
_KIND_TIMESLICE = KIND_ID[PartitionKind.TIMESLICE]

MIG_PROFILE_ROWS = 6  # geometry rows of DESIGN.md section 4, the catalog's profile order
UNKNOWN_MODEL_ID = 0

_SLOT_MODES = frozenset({SharingMode.MPS, SharingMode.MPS_WEIGHTED, SharingMode.TIMESLICE})


class CapacityError(ValueError):
    """A reservation that does not fit what is free on the node (over-allocation refused)."""


@dataclass(frozen=True)
class ModelFacts:
    """Per-model figures as arrays indexed by model id; id 0 is the unknown model (all zero)."""

    keys: tuple[str, ...]
    families: tuple[str, ...]  # family name per model id ("" for unknown)
    fp16_tflops: np.ndarray
    tdp_w: np.ndarray
    milli_tflops_per_w: np.ndarray  # int: 1000 * TFLOPS / W
    memory_mib: np.ndarray
    mps_max_clients: np.ndarray
    mig_share_milli: np.ndarray  # (models, 6)
    mig_memory_mib: np.ndarray  # (models, 6), 0 where the model has no such profile
    mig_profiles: tuple[tuple[str, ...], ...]  # profile names per model id

    @classmethod
    def build(cls, keys: Iterable[str]) -> ModelFacts:
        """Facts for "" (unknown) followed by ``keys``; a key the catalog lacks gets zeros."""
        ordered = ("",) + tuple(keys)
        count = len(ordered)
        tflops = np.zeros(count)
        tdp = np.zeros(count, dtype=np.int64)
        memory = np.zeros(count, dtype=np.int64)
        clients = np.zeros(count, dtype=np.int64)
        shares = np.zeros((count, MIG_PROFILE_ROWS), dtype=np.int64)
        mig_memory = np.zeros((count, MIG_PROFILE_ROWS), dtype=np.int64)
        names: list[tuple[str, ...]] = []
        families: list[str] = []
        for i, key in enumerate(ordered):
            model = CATALOG.get(key)
            if model is None:
                names.append(())
                families.append("")
                continue
            families.append(gpu_family(key))
            tflops[i] = model.fp16_tflops
            tdp[i] = model.tdp_w
            memory[i] = model.memory_mib
            clients[i] = model.mps_max_clients
            names.append(tuple(p.name for p in model.mig_profiles))
            for row, profile in enumerate(model.mig_profiles):
                shares[i, row] = mig_share_milli(profile.compute_slices)
                mig_memory[i, row] = profile.memory_mib
        per_w = np.where(tdp > 0, (tflops * 1000) // np.maximum(tdp, 1), 0).astype(np.int64)
        return cls(
            keys=ordered,
            families=tuple(families),
            fp16_tflops=tflops,
            tdp_w=tdp,
            milli_tflops_per_w=per_w,
            memory_mib=memory,
            mps_max_clients=clients,
            mig_share_milli=shares,
            mig_memory_mib=mig_memory,
            mig_profiles=tuple(names),
        )


def _max(values: Iterable[int]) -> int:
    return max(values, default=0)


# Column names by storage block. Each block is one 2-D array (column, node) so writing a node's
# row is one assignment per block; every column is exposed as a contiguous attribute view.
_INT_COLUMNS: tuple[str, ...] = (
    "model_id", "mode_id", "replicas", "taint_set_id", "group_id", "gpu_count",
    "whole_free", "whole_free_max_memory_mib", "whole_free_min_memory_mib",
    "slot_gpus", "max_slot_memory_mib", "max_slot_share_milli",
    "free_milli", "max_unit_milli", "offer_count",
    "fp16_tflops", "tdp_w", "milli_tflops_per_w", "unloaded_pct",
)
_FLOAT_COLUMNS: tuple[str, ...] = ("util_pct", "load_pct", "memory_used_pct", "power_w")
_BOOL_COLUMNS: tuple[str, ...] = ("ready", "cordoned", "has_mig_gpu", "has_metrics")
_GPU_INT_COLUMNS: tuple[str, ...] = (
    "gpu_memory_mib", "gpu_free_share_milli", "gpu_free_memory_mib", "gpu_free_slots",
    "gpu_max_unit_milli", "gpu_free_milli",
)
# Offers: (nodes, offer_slots), 8 wide unless some node has more (a weighted-MPS node of more
# than 8 GPUs); at 8 wide a node's booleans are one uint64 word (``row_words``).
_OFFER_COLUMNS: tuple[str, ...] = ("offer_share_milli", "offer_memory_mib", "offer_kind", "offer_mig_row")
_GPU_BOOL_COLUMNS: tuple[str, ...] = ("gpu_present", "gpu_whole_free")
_GPU_FLOAT_COLUMNS: tuple[str, ...] = ("gpu_util_pct", "gpu_memory_used_pct")
_OFFER_FILL = {"offer_kind": -1, "offer_mig_row": -1}
_GROUP_COLUMNS = ("ready", "cordoned", "model_id", "mode_id", "replicas", "has_mig_gpu", "taint_set_id")
_BOOL_GROUP_COLUMNS = frozenset({"ready", "cordoned", "has_mig_gpu"})

_KIND_RANK_WHOLE_FIRST = {KIND_ID[PartitionKind.EXCLUSIVE]: 0}  # a whole GPU wins a tie with a MIG instance


@dataclass(frozen=True)
class NodeRow:
    """The column values of one node, computed from its objects by ``node_row``.

    ``offers`` are the distinct units a new single-GPU placement could get on the node now, as
    (share milli, memory MiB, kind id, MIG row), ascending by share then memory (a whole GPU
    before a MIG instance of equal size): a request fits iff some offer covers both its share
    and its memory, and the first such offer is the unit it gets. Whole GPUs and uniform slots
    give one offer each (the largest memory), MIG one per free profile, weighted MPS one per GPU
    with a free slot (share and memory must be free on the same GPU).
    """

    ints: dict[str, int]
    floats: dict[str, float]
    bools: dict[str, bool]
    gpu_ints: dict[str, list[int]]
    gpu_bools: dict[str, list[bool]]
    gpu_floats: dict[str, list[float]]
    gpu_mig_free: list[list[int]]
    offers: list[tuple[int, int, int, int]]

    @property
    def group_key(self) -> tuple[object, ...]:
        values = {**self.ints, **self.bools}
        return tuple(values[name] for name in _GROUP_COLUMNS)


def node_row(node: NodeState, model_id: int, taint_set_id: int, models: ModelFacts) -> NodeRow:
    """Compute a node's column values from its ``NodeState`` (the single definition of every column)."""
    mode = SharingMode(node.sharing_mode)
    replicas = max(int(node.sharing_replicas), 1)
    whole_mode = mode in (SharingMode.EXCLUSIVE, SharingMode.MIG)
    slot_share = slot_share_milli(replicas)
    mig_profiles = models.mig_profiles[model_id]
    profile_row = {name: row for row, name in enumerate(mig_profiles)}
    memory, free_share, free_memory, free_slots, max_unit, free_milli = [], [], [], [], [], []
    whole_free, util, mem_pct, mig_free = [], [], [], []
    whole_memory: list[int] = []
    slot_memory: list[int] = []
    slot_shares: list[int] = []
    offers: set[tuple[int, int, int, int]] = set()
    util_sum = 0.0
    util_count = 0
    load_sum = 0.0
    used_mib = 0
    metric_mib = 0
    power = 0.0
    for gpu in node.gpus:
        occupied = [p for p in gpu.partitions if p.occupant]
        allocated = sum(p.share_milli for p in occupied)
        share_left = SHARE_MILLI_FULL - allocated
        memory_left = gpu.memory_mib - sum(p.memory_mib for p in occupied)
        counts = [0] * MIG_PROFILE_ROWS
        slots = 0
        is_whole_free = False
        if gpu.mig_enabled:
            free_instances = [p for p in gpu.partitions if p.kind == PartitionKind.MIG and not p.occupant]
            for p in free_instances:
                row = profile_row.get(p.mig_profile)
                if row is not None:  # an instance of a profile the model lacks is never handed out
                    counts[row] += 1
                    offers.add((p.share_milli, p.memory_mib, _KIND_MIG, row))
            unit = _max(p.share_milli for p in free_instances)
            usable = sum(p.share_milli for p in free_instances)
        elif whole_mode:
            is_whole_free = not occupied
            unit = usable = SHARE_MILLI_FULL if is_whole_free else 0
            if is_whole_free:
                whole_memory.append(gpu.memory_mib)
        else:
            slots = max(replicas - len(occupied), 0)
            if slots == 0:
                unit = usable = 0
            else:
                usable = share_left
                if mode == SharingMode.MPS_WEIGHTED:
                    unit = share_left
                    offers.add((share_left, memory_left, _KIND_WEIGHTED, -1))
                else:
                    unit = min(slot_share, share_left)
                # MPS pins memory / R per client; the others count memory actually handed out.
                slot_memory.append(gpu.memory_mib // replicas if mode == SharingMode.MPS else memory_left)
                slot_shares.append(unit)
        memory.append(gpu.memory_mib)
        whole_free.append(is_whole_free)
        free_share.append(share_left)
        free_memory.append(memory_left)
        free_slots.append(slots)
        max_unit.append(unit)
        free_milli.append(usable)
        mig_free.append(counts)
        if gpu.utilization_pct is None:
            util.append(float("nan"))
        else:
            util.append(float(gpu.utilization_pct))
            util_sum += gpu.utilization_pct
            util_count += 1
        # Load counts the larger of what telemetry measures and what gpuplane has handed out,
        # so placements made since the last sample already count (no herding on one node).
        load_sum += max(gpu.utilization_pct or 0.0, allocated / 10)
        if gpu.memory_used_mib is None or gpu.memory_mib <= 0:
            mem_pct.append(float("nan"))
        else:
            mem_pct.append(100.0 * gpu.memory_used_mib / gpu.memory_mib)
            used_mib += gpu.memory_used_mib
            metric_mib += gpu.memory_mib
        power += gpu.power_w or 0.0
    if whole_memory:
        offers.add((SHARE_MILLI_FULL, max(whole_memory), _KIND_EXCLUSIVE, -1))
    if slot_memory and mode in (SharingMode.MPS, SharingMode.TIMESLICE):
        kind = _KIND_MPS if mode == SharingMode.MPS else _KIND_TIMESLICE
        offers.add((min(slot_share, max(slot_shares)), max(slot_memory), kind, -1))
    ordered = sorted(offers, key=lambda o: (o[0], o[1], _KIND_RANK_WHOLE_FIRST.get(o[2], 1), o[3]))
    count = len(node.gpus)
    load = load_sum / count if count else 0.0
    return NodeRow(
        ints={
            "model_id": model_id,
            "mode_id": MODE_ID[mode],
            "replicas": replicas,
            "taint_set_id": taint_set_id,
            "group_id": -1,  # interned by the snapshot
            "gpu_count": count,
            "whole_free": len(whole_memory),
            "whole_free_max_memory_mib": _max(whole_memory),
            "whole_free_min_memory_mib": min(whole_memory, default=0),
            "slot_gpus": len(slot_memory),
            "max_slot_memory_mib": _max(slot_memory),
            "max_slot_share_milli": _max(slot_shares),
            "free_milli": sum(free_milli),
            "max_unit_milli": _max(max_unit),
            "offer_count": len(ordered),
            "fp16_tflops": int(models.fp16_tflops[model_id]),
            "tdp_w": int(models.tdp_w[model_id]),
            "milli_tflops_per_w": int(models.milli_tflops_per_w[model_id]),
            "unloaded_pct": min(max(math.floor(100.0 - load), 0), 100),
        },
        floats={
            "util_pct": util_sum / util_count if util_count else 0.0,
            "load_pct": load,
            "memory_used_pct": 100.0 * used_mib / metric_mib if metric_mib else 0.0,
            "power_w": power,
        },
        bools={
            "ready": bool(node.ready),
            "cordoned": bool(node.cordoned),
            "has_mig_gpu": any(gpu.mig_enabled for gpu in node.gpus),
            "has_metrics": util_count > 0,
        },
        gpu_ints={
            "gpu_memory_mib": memory,
            "gpu_free_share_milli": free_share,
            "gpu_free_memory_mib": free_memory,
            "gpu_free_slots": free_slots,
            "gpu_max_unit_milli": max_unit,
            "gpu_free_milli": free_milli,
        },
        gpu_bools={"gpu_present": [True] * count, "gpu_whole_free": whole_free},
        gpu_floats={"gpu_util_pct": util, "gpu_memory_used_pct": mem_pct},
        gpu_mig_free=mig_free,
        offers=ordered,
    )


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


class ClusterSnapshot:
    """Columnar view of a list of ``NodeState`` (node id = position in ``nodes``).

    Not thread-safe: one scheduling cycle at a time mutates it (the services serialise
    placement through database locks anyway, and each cycle builds or refreshes its snapshot).
    Node groups: ``group_id[node]`` indexes the ``group_<column>`` arrays of static properties.
    """

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
        self.groups: list[tuple[object, ...]] = []
        self._group_ids: dict[tuple[object, ...], int] = {}
        # Per-request tables that depend only on groups, taint sets and models (PreFilter results
        # of static filters); cleared whenever one of those gains an entry.
        self.static_cache: dict[tuple[object, ...], object] = {}
        for name in _GROUP_COLUMNS:
            setattr(self, f"group_{name}", np.zeros(0, dtype=np.bool_ if name in _BOOL_GROUP_COLUMNS else np.int64))
        self._labels: dict[tuple[str, str], set[int]] = {}
        self._label_arrays: dict[tuple[str, str], np.ndarray] = {}
        widest = max((len(node.gpus) for node in self.nodes), default=1)
        self.gpu_slots = 8 * max(1, -(-widest // 8))  # a multiple of 8: see row_words
        self.offer_slots = 8
        self._offer_fill = np.array([_OFFER_FILL.get(name, 0) for name in _OFFER_COLUMNS], dtype=np.int32)
        self._allocate(len(self.nodes), self.gpu_slots, self.offer_slots)
        # Tie-break rank per node (lower wins among equal totals): node order unless replaced,
        # e.g. by a random permutation drawn once per seed in a trace replay.
        self.tie_rank = np.arange(len(self.nodes), dtype=np.int64)
        for i, node in enumerate(self.nodes):
            self._index_labels(i, node.labels)
            self._write_row(i)

    # ---- structure -------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.nodes)

    def _allocate(self, count: int, gpu_slots: int, offer_slots: int) -> None:
        self._ints = np.zeros((len(_INT_COLUMNS), count), dtype=np.int64)
        self._floats = np.zeros((len(_FLOAT_COLUMNS), count), dtype=np.float64)
        self._bools = np.zeros((len(_BOOL_COLUMNS), count), dtype=np.bool_)
        self._gpu_ints = np.zeros((len(_GPU_INT_COLUMNS), count, gpu_slots), dtype=np.int32)
        self._gpu_bools = np.zeros((len(_GPU_BOOL_COLUMNS), count, gpu_slots), dtype=np.bool_)
        self._gpu_floats = np.full((len(_GPU_FLOAT_COLUMNS), count, gpu_slots), np.nan, dtype=np.float32)
        self._offers = np.zeros((len(_OFFER_COLUMNS), count, offer_slots), dtype=np.int32)
        self._offers[:] = self._offer_fill[:, None, None]
        self.gpu_mig_free = np.zeros((count, gpu_slots, MIG_PROFILE_ROWS), dtype=np.int16)
        self.mig_free = np.zeros((count, MIG_PROFILE_ROWS), dtype=np.int64)
        self._bind_views()

    def _bind_views(self) -> None:
        for block, names in ((self._ints, _INT_COLUMNS), (self._floats, _FLOAT_COLUMNS), (self._bools, _BOOL_COLUMNS),
                             (self._gpu_ints, _GPU_INT_COLUMNS), (self._gpu_bools, _GPU_BOOL_COLUMNS),
                             (self._gpu_floats, _GPU_FLOAT_COLUMNS), (self._offers, _OFFER_COLUMNS)):
            for position, name in enumerate(names):
                setattr(self, name, block[position])

    def _resize(self, count: int, gpu_slots: int, offer_slots: int) -> None:
        """Reallocate for ``count`` nodes and wider GPU / offer columns, keeping existing rows."""
        old = (self._ints, self._floats, self._bools, self._gpu_ints, self._gpu_bools, self._gpu_floats,
               self.gpu_mig_free, self.mig_free, self._offers)
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

    def _group_for(self, key: tuple[object, ...]) -> int:
        group = self._group_ids.get(key)
        if group is None:
            group = len(self.groups)
            self._group_ids[key] = group
            self.groups.append(key)
            self.static_cache.clear()
            for position, name in enumerate(_GROUP_COLUMNS):
                dtype = np.bool_ if name in _BOOL_GROUP_COLUMNS else np.int64
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
        node = self.nodes[i]
        if len(node.gpus) > self.gpu_slots:
            self._resize(len(self.nodes), 8 * -(-len(node.gpus) // 8), self.offer_slots)
        model_id = self._model_id_for(node.gpu_model)
        row = node_row(node, model_id, self._taint_set_for(tuple(node.taints)), self.models)
        if len(row.offers) > self.offer_slots:
            self._resize(len(self.nodes), self.gpu_slots, 8 * -(-len(row.offers) // 8))
        ints = row.ints
        ints["group_id"] = self._group_for(row.group_key)
        self._ints[:, i] = [ints[name] for name in _INT_COLUMNS]
        self._floats[:, i] = [row.floats[name] for name in _FLOAT_COLUMNS]
        self._bools[:, i] = [row.bools[name] for name in _BOOL_COLUMNS]
        count = len(node.gpus)
        self._gpu_ints[:, i] = 0
        self._gpu_bools[:, i] = False
        self._gpu_floats[:, i] = np.nan
        self._offers[:, i] = self._offer_fill[:, None]
        if row.offers:
            self._offers[:, i, : len(row.offers)] = list(zip(*row.offers, strict=True))
        if count:
            self._gpu_ints[:, i, :count] = [row.gpu_ints[name] for name in _GPU_INT_COLUMNS]
            self._gpu_bools[:, i, :count] = [row.gpu_bools[name] for name in _GPU_BOOL_COLUMNS]
            self._gpu_floats[:, i, :count] = [row.gpu_floats[name] for name in _GPU_FLOAT_COLUMNS]
        self.gpu_mig_free[i] = 0
        if count:
            self.gpu_mig_free[i, :count] = row.gpu_mig_free
        self.mig_free[i] = [sum(c[r] for c in row.gpu_mig_free) for r in range(MIG_PROFILE_ROWS)]

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
        gpu = _gpu(self.nodes[i], gpu_index)
        gpu.utilization_pct = utilization_pct
        gpu.memory_used_mib = memory_used_mib
        gpu.power_w = power_w
        self._write_row(i)

    def reserve(self, assignment: Assignment) -> None:
        """Give the assignment's partitions to ``assignment.key`` and refresh the node's row.

        Raises ``CapacityError`` (changing nothing) when any partition is not free: a MIG
        instance already held, no free slot, a taken slot number, or share / memory beyond what
        the GPU has left. Over-allocation is impossible in the core as well as in the database.
        """
        i = self.index[assignment.node]
        node = self.nodes[i]
        mode = SharingMode(node.sharing_mode)
        replicas = max(node.sharing_replicas, 1)
        changes: list[tuple[GPUState, PartitionState | None, PartitionState | None]] = []
        pending: dict[int, list[PartitionState]] = {}
        for grant in assignment.partitions:
            gpu = _gpu(node, grant.gpu_index)
            added = pending.setdefault(gpu.index, [])
            occupied = [p for p in gpu.partitions if p.occupant] + added
            if grant.kind == PartitionKind.MIG:
                target = next((p for p in gpu.partitions if p.kind == PartitionKind.MIG and p.slot == grant.slot), None)
                if (not gpu.mig_enabled or target is None or target.occupant or target in added
                        or target.mig_profile != grant.mig_profile):
                    raise CapacityError(f"{node.name}/gpu{gpu.index}: MIG instance {grant.slot} is not free")
                added.append(target)
                changes.append((gpu, target, None))
                continue
            if gpu.mig_enabled:
                raise CapacityError(f"{node.name}/gpu{gpu.index} is MIG-enabled; only its instances can be given")
            share_left = SHARE_MILLI_FULL - sum(p.share_milli for p in occupied)
            memory_left = gpu.memory_mib - sum(p.memory_mib for p in occupied)
            if grant.kind == PartitionKind.EXCLUSIVE:
                ok = mode in (SharingMode.EXCLUSIVE, SharingMode.MIG) and not occupied
                limit = 1
            else:
                ok = mode in _SLOT_MODES and str(grant.kind) == str(mode) and len(occupied) < replicas
                limit = replicas
            if not ok or grant.share_milli > share_left or grant.memory_mib > memory_left:
                raise CapacityError(
                    f"{node.name}/gpu{gpu.index}: no room for {grant.kind} {grant.share_milli} milli, "
                    f"{grant.memory_mib} MiB (free {share_left} milli, {memory_left} MiB; "
                    f"{len(occupied)}/{limit} held)"
                )
            if any(p.slot == grant.slot for p in occupied):
                raise CapacityError(f"{node.name}/gpu{gpu.index}: slot {grant.slot} is taken")
            partition = PartitionState(kind=grant.kind, slot=grant.slot, share_milli=grant.share_milli,
                                       memory_mib=grant.memory_mib, occupant=assignment.key)
            added.append(partition)
            changes.append((gpu, None, partition))
        # Every grant checked: apply them all (nothing was changed if any check failed).
        for gpu, target, partition in changes:
            if target is not None:
                target.occupant = assignment.key
            elif partition is not None:
                # Drop a listed-but-free row with the same slot so a slot is never listed twice.
                gpu.partitions[:] = [p for p in gpu.partitions if p.occupant or p.slot != partition.slot]
                gpu.partitions.append(partition)
        self._write_row(i)

    def release(self, node: str, key: str) -> int:
        """Free everything ``key`` holds on ``node``; returns how many partitions were freed."""
        i = self.index[node]
        freed = 0
        for gpu in self.nodes[i].gpus:
            kept: list[PartitionState] = []
            for partition in gpu.partitions:
                if partition.occupant != key:
                    kept.append(partition)
                    continue
                freed += 1
                if partition.kind == PartitionKind.MIG:
                    partition.occupant = ""  # MIG instances stay: the layout does not change
                    kept.append(partition)
            gpu.partitions[:] = kept
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
        names = (_INT_COLUMNS + _FLOAT_COLUMNS + _BOOL_COLUMNS + _GPU_INT_COLUMNS + _GPU_BOOL_COLUMNS
                 + _GPU_FLOAT_COLUMNS + _OFFER_COLUMNS)
        out: dict[str, np.ndarray] = {name: getattr(self, name) for name in names}
        out["model_id"] = np.array([self.models.keys[m] for m in self.model_id], dtype=object)
        out["taint_set_id"] = np.array([repr(self.taint_sets[t]) for t in self.taint_set_id], dtype=object)
        out["group_id"] = np.array([repr(self._group_meaning(g)) for g in self.group_id], dtype=object)
        out["gpu_mig_free"] = self.gpu_mig_free
        out["mig_free"] = self.mig_free
        return out

    def _group_meaning(self, group: int) -> tuple[object, ...]:
        key = dict(zip(_GROUP_COLUMNS, self.groups[group], strict=True))
        key["model_id"] = self.models.keys[key["model_id"]]  # type: ignore[index]
        key["taint_set_id"] = self.taint_sets[key["taint_set_id"]]  # type: ignore[index]
        return tuple(key.items())


def _gpu(node: NodeState, gpu_index: int) -> GPUState:
    for gpu in node.gpus:
        if gpu.index == gpu_index:
            return gpu
    raise KeyError(f"{node.name} has no GPU {gpu_index}")
