"""The cluster overview's figures: every count with a breakdown that adds up to it.

Counts of different things are never added up as equal units: allocation is stated in
GPU-equivalents (nodes.figures: a whole GPU 1, a 3g MIG instance 3/7, an MPS slot or time-slice
replica 1/R, a weighted share its percentage) and in GB of memory, and partitions are counted
per kind, each in its own unit ("3 of 32 time-slice replicas"). Idle and allocated GPUs are
counted by the rules /metrics counts by (nodes.summaries.is_idle / is_allocated, in SQL as
idle_filter / allocated_filter), so the page and gpuplane_gpus_idle / gpuplane_gpus_allocated
agree. Four queries whatever the size (nodes, their GPUs summed per node, GPUs without
partitions, partition groups), all counted and summed by the database: no row per GPU.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction

from django.db.models import Count, Sum

from nodes.figures import format_gb, format_number, gpu_equivalent, largest_remainder
from nodes.fleet import NodeFigures, node_figures
from nodes.holds import occupied_partition_filter
from nodes.models import GPU, Partition
from nodes.vocabulary import SHARE_MILLI_FULL, PartitionKind, SharingMode

# What one partition of each kind is called, singular and plural, in a per-kind count.
_UNIT_NAMES: dict[str, tuple[str, str]] = {
    PartitionKind.EXCLUSIVE: ("whole GPU", "whole GPUs"),
    PartitionKind.MIG: ("MIG instance", "MIG instances"),
    PartitionKind.MPS: ("MPS slot", "MPS slots"),
    PartitionKind.MPS_WEIGHTED: ("weighted share", "weighted shares"),
    PartitionKind.TIMESLICE: ("time-slice replica", "time-slice replicas"),
}


@dataclass(frozen=True)
class Part:
    """One line of a breakdown: a label, its figure as shown, and a bar width in percent."""

    label: str
    value: str
    pct: float = 0.0
    note: str = ""
    key: str = ""  # a stable name for tests and scripts (a sharing mode, a state)


@dataclass
class ModeAllocation:
    """What is handed out on the GPUs of one sharing mode."""

    mode: str
    gpus: int = 0
    gpu_equivalents: Fraction = Fraction(0)
    memory_mib: int = 0
    memory_allocated_mib: int = 0
    partitions: Counter[str] = field(default_factory=Counter)  # by kind: all
    partitions_used: Counter[str] = field(default_factory=Counter)  # by kind: occupied


@dataclass(frozen=True)
class ClusterOverview:
    """Everything the overview cards show, formatted; each `*_parts` list adds up to its total."""

    nodes_total: int
    node_parts: list[Part]
    gpus_total: int
    mode_parts: list[Part]
    use_parts: list[Part]  # allocated / nothing allocated
    idle_parts: list[Part]  # idle / busy, as /metrics counts idle
    reporting_gpus: int
    power_gpus: int
    power_w: float | None

    @property
    def power(self) -> str:
        """Power drawn for people: "850 W", "12.2 kW"; "—" without any power reading."""
        if self.power_w is None:
            return "—"
        if self.power_w < 1000:
            return f"{self.power_w:.0f} W"
        return f"{format_number(self.power_w / 1000, 1)} kW"
    mean_utilization_pct: float | None
    allocated_gpu_equivalents: str
    allocated_pct: float
    allocation_parts: list[Part]  # per sharing mode, in GPU-equivalents
    memory_allocated: str
    memory_total: str
    memory_pct: float
    memory_parts: list[Part]  # per sharing mode, in GB


def _pct(part: float | Fraction, whole: float | Fraction) -> float:
    return float(part * 100 / whole) if whole else 0.0


def _count_phrase(kind: str, used: int, total: int) -> str:
    singular, plural = _UNIT_NAMES.get(kind, (kind, kind))
    if kind == PartitionKind.MPS_WEIGHTED:  # created when handed out: there is no "of"
        return f"{used} {singular if used == 1 else plural}"
    return f"{used} of {total} {singular if total == 1 else plural}"


def _partitions_note(allocation: ModeAllocation) -> str:
    """The mode's partitions in use, per kind and in each kind's own unit."""
    return " · ".join(
        _count_phrase(kind, allocation.partitions_used[kind], n) for kind, n in sorted(allocation.partitions.items())
    )


# What the cards sum over the nodes.
_TOTALS = ("gpus", "allocated", "idle", "reporting", "utilization_sum", "power_n", "power_w")


def cluster_overview(figures: list[NodeFigures] | None = None) -> ClusterOverview:
    """The overview's figures from the inventory's rows: nodes and GPUs summed from the per-node
    figures (nodes.fleet.node_figures, the ones /metrics and the node map add up; read here when
    not passed in) and partitions counted by the database per mode, kind and size."""
    mode_labels = dict(SharingMode.choices())
    nodes = node_figures() if figures is None else figures
    # The counts /metrics shares, by the same rules (is_allocated, is_idle, counted in SQL per node).
    figures_total = {key: sum(getattr(node, key) for node in nodes) for key in _TOTALS}
    by_mode: dict[str, ModeAllocation] = {}
    mig_on = 0
    for node in nodes:
        if not node.gpus:
            continue
        allocation = by_mode.get(node.sharing_mode)
        if allocation is None:
            allocation = by_mode[node.sharing_mode] = ModeAllocation(node.sharing_mode)
        allocation.gpus += node.gpus
        allocation.memory_mib += node.memory_mib
        allocation.memory_allocated_mib += node.allocated_memory_mib
        mig_on += node.mig_on if node.sharing_mode == SharingMode.MIG else 0
    # A GPU without partition rows: its own counter is all there is.
    unpartitioned = GPU.objects.filter(partitions__isnull=True).values("node__sharing_mode").annotate(
        milli=Sum("allocated_milli")
    ).order_by()
    for row in unpartitioned:
        by_mode[row["node__sharing_mode"]].gpu_equivalents += Fraction(row["milli"] or 0, SHARE_MILLI_FULL)
    # Partitions of one mode, kind and size are alike: counted in SQL, weighed once per group.
    groups = Partition.objects.values("gpu__node__sharing_mode", "kind", "share_milli", "mig_profile").annotate(
        n=Count("id"), used=Count("id", filter=occupied_partition_filter())
    ).order_by()
    for group in groups:
        allocation = by_mode[group["gpu__node__sharing_mode"]]
        kind = group["kind"]
        allocation.partitions[kind] += group["n"]
        allocation.partitions_used[kind] += group["used"]
        allocation.gpu_equivalents += gpu_equivalent(kind, group["share_milli"], group["mig_profile"]) * group["used"]
    modes = sorted(by_mode.values(), key=lambda a: (-a.gpus, a.mode))
    gpus_total = figures_total["gpus"]

    state_counts = Counter(node.state for node in nodes)
    node_parts = [
        Part(label, str(state_counts[state]), _pct(state_counts[state], len(nodes)), note, state)
        for state, label, note in (
            ("ready", "Schedulable", "ready, not cordoned"),
            ("cordoned", "Cordoned", "ready, kept free of new work"),
            ("notready", "Not ready", "cordoned or not"),
        )
    ]
    mode_parts = [
        Part(mode_labels.get(a.mode, a.mode), str(a.gpus), _pct(a.gpus, gpus_total),
             f"{mig_on} with MIG on, {a.gpus - mig_on} whole" if a.mode == SharingMode.MIG else "", a.mode)
        for a in modes
    ]
    allocated_n, idle_n = figures_total["allocated"], figures_total["idle"]
    use_parts = [
        Part("With work allocated", str(allocated_n), _pct(allocated_n, gpus_total), key="allocated"),
        Part("Nothing allocated", str(gpus_total - allocated_n), _pct(gpus_total - allocated_n, gpus_total), key="unallocated"),
    ]
    idle_parts = [
        Part("Idle", str(idle_n), _pct(idle_n, gpus_total), "barely used by their latest telemetry", "idle"),
        Part("Busy", str(gpus_total - idle_n), _pct(gpus_total - idle_n, gpus_total), key="busy"),
    ]

    # Rounded so that the parts shown add up to the total shown (largest remainder).
    equivalents = [a.gpu_equivalents for a in modes]
    total_equivalents = sum(equivalents, Fraction(0))
    shown_equivalents = largest_remainder(equivalents, 2)
    allocation_parts = [
        Part(mode_labels.get(a.mode, a.mode), format_number(shown, 2), _pct(a.gpu_equivalents, a.gpus),
             _partitions_note(a), a.mode)
        for a, shown in zip(modes, shown_equivalents, strict=True)
    ]
    memory_allocated = sum(a.memory_allocated_mib for a in modes)
    memory_total = sum(a.memory_mib for a in modes)
    shown_gb = largest_remainder([Fraction(a.memory_allocated_mib, 1024) for a in modes], 1)
    memory_parts = [
        Part(mode_labels.get(a.mode, a.mode), f"{format_number(gb, 1)} GB", _pct(a.memory_allocated_mib, a.memory_mib),
             format_gb(a.memory_mib), a.mode)
        for a, gb in zip(modes, shown_gb, strict=True)
    ]
    return ClusterOverview(
        nodes_total=len(nodes),
        node_parts=node_parts,
        gpus_total=gpus_total,
        mode_parts=mode_parts,
        use_parts=use_parts,
        idle_parts=idle_parts,
        reporting_gpus=figures_total["reporting"],
        power_gpus=figures_total["power_n"],
        power_w=figures_total["power_w"] if figures_total["power_n"] else None,
        mean_utilization_pct=figures_total["utilization_sum"] / figures_total["reporting"] if figures_total["reporting"] else None,
        allocated_gpu_equivalents=format_number(sum(shown_equivalents, Fraction(0)), 2),
        allocated_pct=_pct(total_equivalents, gpus_total),
        allocation_parts=allocation_parts,
        memory_allocated=f"{format_number(sum(shown_gb, Fraction(0)), 1)} GB",
        memory_total=format_gb(memory_total),
        memory_pct=_pct(memory_allocated, memory_total),
        memory_parts=memory_parts,
    )
