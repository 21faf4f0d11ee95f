"""The snapshot's columns: their layout, and ``node_row``, the single definition of every value.

A ``ClusterSnapshot`` keeps per node the figures the plugins read, as arrays indexed by node id.
``node_row`` computes one node's values from its ``NodeState`` objects; the snapshot writes them
into its arrays after every change to that node, so the columns cannot drift from the objects.

Per-node aggregates answer the per-GPU questions (free whole GPUs and their memory, GPUs with a
free slot, the largest free weighted share, free MIG instances per profile, usable free
milli-GPU, load ...). Each node's *offers* (``NodeRow``) list the distinct units a new single-GPU
placement could get there, sorted, 8 per node: "does the request fit, and which unit" is one
comparison over an ``(nodes, 8)`` array (see ``scheduler.core.fit``). Besides each offer's
kind id, ``offer_kind_bit`` holds 1 << kind (uint8), so "is the offer of a kind the request
accepts at this demand" is one AND with a mask; an empty offer slot has share -1 and kind bit 0,
so it passes no test.

Per-GPU columns ``(nodes, G)``, G a multiple of 8, for exact checks and the packing scores
("unit" = what one new placement on that GPU could be given):

- ``gpu_whole_free``: the GPU can be handed out whole (exclusive node, a MIG node's GPU with
  MIG disabled, or, to a multi-GPU replica, an mps-weighted GPU as a 100 % share) and nobody
  holds any part of it.
- ``gpu_free_share_milli`` / ``gpu_free_memory_mib``: 1000 / memory minus what occupants hold.
- ``gpu_free_slots``: R minus occupants, for mps, mps-weighted and timeslice GPUs; else 0.
- ``gpu_next_unit_milli``: on a MIG GPU, the largest free instance's share once one instance of
  the largest free profile is taken (what ``gpu_max_unit_milli`` becomes then); else 0.
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
from collections.abc import Iterable
from dataclasses import dataclass

from nodes.vocabulary import SHARE_MILLI_FULL, PartitionKind, SharingMode
from scheduler.core.model_facts import MIG_PROFILE_ROWS, ModelFacts
from scheduler.core.types import NodeState, slot_share_milli

# Free CPU / host memory of a node whose allocatable is unknown: more than any request.
UNKNOWN_HOST_FREE = 2**62

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


def _max(values: Iterable[int]) -> int:
    return max(values, default=0)


# Column names by storage block. Each block is one 2-D array (column, node) so writing a node's
# row is one assignment per block; every column is exposed as a contiguous attribute view.
INT_COLUMNS: tuple[str, ...] = (
    "model_id", "mode_id", "replicas", "taint_set_id", "group_id", "gpu_count",
    "whole_free", "whole_free_max_memory_mib", "whole_free_min_memory_mib",
    "slot_gpus", "max_slot_memory_mib", "max_slot_share_milli",
    "free_milli", "max_unit_milli", "offer_count",
    "fp16_tflops", "tdp_w", "milli_tflops_per_w", "unloaded_pct",
    "cpu_free_milli", "host_memory_free_mib",
)
FLOAT_COLUMNS: tuple[str, ...] = ("util_pct", "load_pct", "memory_used_pct", "power_w")
BOOL_COLUMNS: tuple[str, ...] = ("ready", "cordoned", "has_mig_gpu", "has_metrics")
GPU_INT_COLUMNS: tuple[str, ...] = (
    "gpu_memory_mib", "gpu_free_share_milli", "gpu_free_memory_mib", "gpu_free_slots",
    "gpu_max_unit_milli", "gpu_free_milli", "gpu_next_unit_milli",
)
# Offers: (nodes, offer_slots), 8 wide unless some node has more (a weighted-MPS node of more
# than 8 GPUs); at 8 wide a node's booleans are one uint64 word (``row_words``).
OFFER_COLUMNS: tuple[str, ...] = ("offer_share_milli", "offer_memory_mib", "offer_kind", "offer_mig_row", "offer_gpu")
# Per offer, 1 << its kind id (0 for an empty slot), uint8: "is this offer of one of these kinds"
# is one AND with a mask over a quarter of the bytes of a kind gather (``scheduler.core.fit``).
OFFER_BIT_COLUMNS: tuple[str, ...] = ("offer_kind_bit",)
GPU_BOOL_COLUMNS: tuple[str, ...] = ("gpu_present", "gpu_whole_free")
GPU_FLOAT_COLUMNS: tuple[str, ...] = ("gpu_util_pct", "gpu_memory_used_pct")
# An empty offer slot; others fill with 0. Its share of -1 fails every demand, 0 included (a
# memory-sized kind demands no share), so fit needs no separate "is there an offer" mask.
OFFER_FILL = {"offer_share_milli": -1, "offer_kind": -1, "offer_mig_row": -1, "offer_gpu": -1}
# Static properties interned into node groups: a filter decides once per group, not per node.
GROUP_COLUMNS = ("ready", "cordoned", "model_id", "mode_id", "replicas", "has_mig_gpu", "taint_set_id")
BOOL_GROUP_COLUMNS = frozenset({"ready", "cordoned", "has_mig_gpu"})

# A whole GPU comes before a MIG instance of the same share (a free 7g instance), whatever their
# memory, as `scheduler.core.assignment.assign` decides: a 7g.80gb holds less memory than the
# board (81,152 of 81,559 MiB on an H100), and that must not make it the smaller unit.
_KIND_RANK_WHOLE_FIRST = {KIND_ID[PartitionKind.EXCLUSIVE]: 0}


@dataclass(frozen=True)
class NodeRow:
    """The column values of one node, computed from its objects by ``node_row``.

    ``offers`` are the distinct units a new single-GPU placement could get on the node now, as
    (share milli, memory MiB, kind id, MIG row, GPU), ascending by share, then a whole GPU before a
    MIG instance of the same share, then memory: a request fits iff some offer covers both its
    share and its memory, and the first such offer is the unit it gets. Whole GPUs and uniform
    MPS slots give one offer each (the largest memory), MIG one per free profile, weighted MPS
    and time-slicing one per GPU with a free slot (share and memory must be free on the same
    GPU). GPU is the position of the GPU the assignment takes for that unit (the lowest of equal
    ones; for uniform MPS the one with the fewest free slots), so "which GPU" is a lookup too;
    for a whole GPU it is the first free one (the assignment also checks each GPU's memory).
    """

    ints: dict[str, int]
    floats: dict[str, float]
    bools: dict[str, bool]
    gpu_ints: dict[str, list[int]]
    gpu_bools: dict[str, list[bool]]
    gpu_floats: dict[str, list[float]]
    gpu_mig_free: list[list[int]]
    offers: list[tuple[int, int, int, int, int]]

    @property
    def group_key(self) -> tuple[int, ...]:
        """The node's static properties (``GROUP_COLUMNS``), which the snapshot interns as groups."""
        values: dict[str, int] = {**self.ints, **self.bools}
        return tuple(values[name] for name in GROUP_COLUMNS)


def node_row(node: NodeState, model_id: int, taint_set_id: int, models: ModelFacts) -> NodeRow:
    """Compute a node's column values from its ``NodeState`` (the single definition of every column)."""
    mode = SharingMode(node.sharing_mode)
    replicas = max(int(node.sharing_replicas), 1)
    whole_mode = mode in (SharingMode.EXCLUSIVE, SharingMode.MIG)
    slot_share = slot_share_milli(replicas)
    mig_profiles = models.mig_profiles[model_id]
    profile_row = {name: row for row, name in enumerate(mig_profiles)}
    memory, free_share, free_memory, free_slots, max_unit, free_milli = [], [], [], [], [], []
    next_unit: list[int] = []
    whole_free, util, mem_pct, mig_free = [], [], [], []
    whole_memory: list[int] = []
    slot_memory: list[int] = []
    slot_shares: list[int] = []
    # (share, memory, kind, MIG row) -> the lowest GPU position that gives exactly that unit.
    offers: dict[tuple[int, int, int, int], int] = {}
    mps_gpu = (replicas + 1, -1)  # (free slots, position): the GPU with the fewest free slots
    util_sum = 0.0
    util_count = 0
    load_sum = 0.0
    used_mib = 0
    metric_mib = 0
    power = 0.0
    for position, gpu in enumerate(node.gpus):
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
                    offers.setdefault((p.share_milli, p.memory_mib, _KIND_MIG, row), position)
            shares = sorted((p.share_milli for p in free_instances), reverse=True)
            unit = _max(p.share_milli for p in free_instances)
            usable = sum(p.share_milli for p in free_instances)
            next_unit.append(shares[1] if len(shares) > 1 else 0)
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
                    offers.setdefault((share_left, memory_left, _KIND_WEIGHTED, -1), position)
                    # Untouched, it is a whole GPU to a gang (a 100 % share on each of its GPUs).
                    is_whole_free = not occupied
                    if is_whole_free:
                        whole_memory.append(gpu.memory_mib)
                else:
                    unit = min(slot_share, share_left)
                    if mode == SharingMode.TIMESLICE:  # a replica goes where least memory is free
                        offers.setdefault((slot_share, memory_left, _KIND_TIMESLICE, -1), position)
                    else:
                        mps_gpu = min(mps_gpu, (slots, position))
                # MPS pins memory / R per client; the others count memory actually handed out.
                slot_memory.append(gpu.memory_mib // replicas if mode == SharingMode.MPS else memory_left)
                slot_shares.append(unit)
        if not gpu.mig_enabled:
            next_unit.append(0)
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
    if whole_memory and whole_mode:
        first_whole = next(i for i, free in enumerate(whole_free) if free)
        offers.setdefault((SHARE_MILLI_FULL, max(whole_memory), _KIND_EXCLUSIVE, -1), first_whole)
    if slot_memory and mode == SharingMode.MPS:
        offers.setdefault((min(slot_share, max(slot_shares)), max(slot_memory), _KIND_MPS, -1), mps_gpu[1])
    ordered = [(*unit, gpu) for unit, gpu in offers.items()]
    ordered.sort(key=lambda o: (o[0], _KIND_RANK_WHOLE_FIRST.get(o[2], 1), o[1], o[3], o[4]))
    count = len(node.gpus)
    load = load_sum / count if count else 0.0
    cpu_free, memory_free = node.cpu_free_milli, node.memory_free_mib
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
            "cpu_free_milli": UNKNOWN_HOST_FREE if cpu_free is None else cpu_free,
            "host_memory_free_mib": UNKNOWN_HOST_FREE if memory_free is None else memory_free,
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
            "gpu_next_unit_milli": next_unit,
        },
        gpu_bools={"gpu_present": [True] * count, "gpu_whole_free": whole_free},
        gpu_floats={"gpu_util_pct": util, "gpu_memory_used_pct": mem_pct},
        gpu_mig_free=mig_free,
        offers=ordered,
    )
