"""Server-rendered inventory pages: the node list, a node's detail with its MIG slot diagram and
telemetry charts, and one GPU's page.

Views only read; presentation values (labels, formatted quantities, MIG grid positions) are
computed here in small pure functions so that templates stay free of arithmetic.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from django.conf import settings
from django.db.models import Avg, Count, IntegerField, OuterRef, Prefetch, QuerySet, Subquery, Sum
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.views.generic import DetailView, ListView, TemplateView

from gpuplane.web import FilteredListMixin, RoleRequiredMixin
from nodes.api.series import DEFAULT_RANGE, RANGES
from nodes.figures import format_gb, format_number, format_percent, gpu_equivalent, listed_shares
from nodes.filtersets import NodeFilterSet
from nodes.fleet import mig_share_corrections
from nodes.holds import HolderInfo, describe_held, with_holder_id
from nodes.inventory.audit import node_events
from nodes.mig_diagram import MIGCell, mig_diagram, occupant_of
from nodes.models import GPU, Node, Partition
from nodes.node_configs import applied_config, config_pending, desired_config, desired_label_value
from nodes.node_facts import config_fact, partition_facts, replicas_fact
from nodes.summaries import memory_used_pct
from nodes.vocabulary import SHARE_MILLI_FULL, PartitionKind, SharingMode

# Modes where R replicas per GPU cut the GPU, so R belongs in the label. Not weighted MPS: there
# R only bounds the pods per GPU, and shares go by weight.
_REPLICATED_MODES: frozenset[str] = frozenset({SharingMode.MPS, SharingMode.TIMESLICE})
_SHORT_MODE_LABELS: dict[str, str] = {
    SharingMode.EXCLUSIVE: "Exclusive",
    SharingMode.MIG: "MIG",
    SharingMode.MPS: "MPS",
    SharingMode.MPS_WEIGHTED: "Weighted MPS",
    SharingMode.TIMESLICE: "Time-slicing",
}

# What isolation each mode really gives (docs/design.md section 4); the detail page states it plainly.
SHARING_NOTES: dict[str, str] = {
    SharingMode.EXCLUSIVE: "Each workload gets whole GPUs.",
    SharingMode.MIG: "Hardware-isolated MIG instances: own SMs, memory and faults.",
    SharingMode.MPS: "Each of the R MPS clients gets 100/R % of the SMs and 1/R of the memory; changing R reconfigures the node.",
    SharingMode.MPS_WEIGHTED: (
        "Isolation rests on CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, "
        "which gpuplane's webhook sets on each pod; there is no fault isolation."
    ),
    SharingMode.TIMESLICE: "No memory or fault isolation: replicas take turns and gpuplane accounts memory itself.",
}


def sharing_label(mode: str, replicas: int) -> str:
    """A short human label for a node's sharing mode, with ×R where the mode has replicas.

    `sharing_label("mps", 4) == "MPS ×4"`; `sharing_label("mig", 1) == "MIG"`. An unknown mode is
    returned as stored so that a newer value is never hidden.
    """
    label = _SHORT_MODE_LABELS.get(mode, mode)
    if mode in _REPLICATED_MODES:
        return f"{label} ×{replicas}"
    return label


# What the memory column of a time-slice replica means: the plugin sets no limit per replica.
TIMESLICE_MEMORY_NOTE = (
    "Time-slicing does not divide memory: this is the GPU's memory / R replicas, a fair share. "
    "What each workload declares is counted in the GPU's Allocated column."
)


@dataclass(frozen=True)
class PartitionRow:
    """One partition as the tables show it: its share of the GPU (percent, and for MIG the exact
    fraction), its memory and who holds it."""

    partition: Partition
    kind_label: str
    share: str
    memory: str
    occupant: str | None
    fraction: str = ""  # "3/7" for a MIG instance: the exact compute share behind the percentage
    memory_note: str = ""


@dataclass
class GPURow:
    """A GPU with what the detail page shows about it, already formatted."""

    gpu: GPU
    memory: str
    allocated_share: str
    allocated_memory: str
    allocated_pct: int
    gpu_equivalents: Fraction = Fraction(0)  # allocated, exactly
    partitions: list[PartitionRow] = field(default_factory=list)
    # The part of the GPU in no partition ("14.2 %"), so the share column adds up to 100 %.
    unpartitioned_share: str = ""
    mig_cells: list[MIGCell] = field(default_factory=list)

    @property
    def mig_lanes(self) -> int:
        return max((c.lane for c in self.mig_cells), default=1)


def allocated_gpu_equivalents(gpu: GPU, partitions: list[Partition], occupied: list[bool]) -> Fraction:
    """What is handed out on `gpu` in GPU-equivalents: its occupied partitions, exactly (3g = 3/7);
    a GPU without partition rows falls back to its allocation counter."""
    if not partitions:
        return Fraction(gpu.allocated_milli, SHARE_MILLI_FULL)
    return sum(
        (gpu_equivalent(p.kind, p.share_milli, p.mig_profile) for p, used in zip(partitions, occupied, strict=True) if used),
        Fraction(0),
    )


def gpu_row(gpu: GPU, holders: Mapping[int, HolderInfo]) -> GPURow:
    """Format one GPU (its partitions prefetched) for the detail page; `holders` as for `occupant_of`."""
    partitions = list(gpu.partitions.all())
    occupants = [occupant_of(p, holders) for p in partitions]
    shares = [gpu_equivalent(p.kind, p.share_milli, p.mig_profile) for p in partitions]
    percents, rest = listed_shares(shares)
    replicas = sum(1 for p in partitions if p.kind == PartitionKind.TIMESLICE)
    rows = []
    for p, occupant, share, percent in zip(partitions, occupants, shares, percents, strict=True):
        if p.kind == PartitionKind.TIMESLICE:
            memory, note = format_gb(gpu.memory_mib / replicas), TIMESLICE_MEMORY_NOTE
        else:
            memory, note = format_gb(p.memory_mib), ""
        fraction = f"{share.numerator}/{share.denominator}" if p.kind == PartitionKind.MIG and share < 1 else ""
        rows.append(PartitionRow(p, p.get_kind_display(), format_percent(percent), memory, occupant, fraction, note))
    allocated = allocated_gpu_equivalents(gpu, partitions, [o is not None for o in occupants])
    return GPURow(
        gpu=gpu,
        memory=format_gb(gpu.memory_mib),
        allocated_share=format_percent(allocated * 100),
        allocated_memory=format_gb(gpu.allocated_memory_mib),
        allocated_pct=round(allocated * 100),
        gpu_equivalents=allocated,
        partitions=rows,
        unpartitioned_share=format_percent(rest) if partitions and rest else "",
        mig_cells=mig_diagram(partitions, holders) if gpu.mig_enabled else [],
    )


def node_list_queryset() -> QuerySet[Node]:
    """Nodes annotated with `gpus_n`, `mean_utilization_pct` (None without telemetry) and
    `allocated_milli` (compute handed out, summed over the node's GPUs)."""
    gpus = GPU.objects.filter(node=OuterRef("pk")).order_by().values("node")
    return Node.objects.annotate(
        gpus_n=Coalesce(Subquery(gpus.annotate(n=Count("id")).values("n"), output_field=IntegerField()), 0),
        mean_utilization_pct=Subquery(gpus.annotate(u=Avg("utilization_pct")).values("u")),
        allocated_milli=Coalesce(
            Subquery(gpus.annotate(s=Sum("allocated_milli")).values("s"), output_field=IntegerField()), 0
        ),
    ).order_by("name")


def telemetry_context(request: HttpRequest, series_url: str, *, has_samples: bool) -> dict[str, Any]:
    """What the Telemetry section (templates/nodes/_telemetry.html) needs: where static/js/charts.js
    fetches the series, the range picker's choices and the one selected (`?range=`, so a reload
    keeps it; an unknown value falls back to the default), and whether any GPU has reported yet
    (the empty state is rendered by the server, then kept up to date by the script)."""
    selected = request.GET.get("range", DEFAULT_RANGE)
    return {
        "series_url": series_url,
        "telemetry_ranges": list(RANGES),
        "telemetry_range": selected if selected in RANGES else DEFAULT_RANGE,
        "telemetry_has_samples": has_samples,
        # Charts refresh as often as samples arrive: faster would fetch the same points again.
        "telemetry_interval_s": settings.TELEMETRY_POLL_INTERVAL_S,
    }


class NodeListView(RoleRequiredMixin, FilteredListMixin, ListView):
    """`/nodes/`: every node with GPUs, sharing mode, utilization, allocation and status; filterable."""

    template_name = "nodes/node_list.html"
    context_object_name = "nodes"
    paginate_by = 50

    filterset_class = NodeFilterSet

    def base_queryset(self) -> QuerySet[Node]:
        return node_list_queryset()

    def filterset_kwargs(self) -> dict[str, Any]:
        return {"request": self.request}

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        nodes = list(context["nodes"])
        corrections = mig_share_corrections([node.pk for node in nodes])
        for node in nodes:
            node.sharing_label = sharing_label(node.sharing_mode, node.sharing_replicas)
            # In GPU-equivalents, not partition count: weighted-MPS shares exist as partitions
            # only once handed out, so "2 / 2 partitions" would read as a full node.
            allocated = Fraction(node.allocated_milli, SHARE_MILLI_FULL) + corrections.get(node.pk, Fraction(0))
            node.allocated_pct = round(allocated * 100 / node.gpus_n) if node.gpus_n else 0
            node.allocated_gpus = format_number(allocated, 2)
        return context


class NodeDetailView(RoleRequiredMixin, DetailView):
    """`/nodes/<name>/`: a node's status, sharing config, GPUs, partitions and MIG slot diagrams."""

    template_name = "nodes/node_detail.html"
    context_object_name = "node"
    slug_field = "name"
    slug_url_kwarg = "name"

    def get_queryset(self) -> QuerySet[Node]:
        partitions = with_holder_id(Partition.objects.order_by("slot"))
        return Node.objects.prefetch_related(
            Prefetch("gpus", queryset=GPU.objects.order_by("index").prefetch_related(Prefetch("partitions", partitions)))
        )

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        node: Node = self.object
        gpus = list(node.gpus.all())
        holders = describe_held(p for gpu in gpus for p in gpu.partitions.all())
        rows = [gpu_row(gpu, holders) for gpu in gpus]
        partitions = [p for row in rows for p in row.partitions]
        utilizations = [row.gpu.utilization_pct for row in rows if row.gpu.utilization_pct is not None]
        # The MIG instances are loaded already: the applied config needs no query of its own.
        applied = applied_config(node, [
            Counter(p.mig_profile for p in row.gpu.partitions.all() if p.kind == PartitionKind.MIG)
            for row in rows if row.gpu.mig_enabled
        ])
        context.update(
            gpu_rows=rows,
            mig_rows=[row for row in rows if row.gpu.mig_enabled],
            sharing_label=sharing_label(node.sharing_mode, node.sharing_replicas),
            sharing_note=SHARING_NOTES.get(node.sharing_mode, ""),
            mean_utilization_pct=sum(utilizations) / len(utilizations) if utilizations else None,
            config_fact=config_fact(node),
            replicas_fact=replicas_fact(node),
            partition_facts=partition_facts([(p.partition.kind, p.occupant is not None) for p in partitions]),
            # In GPU-equivalents (3g = 3/7), as on the overview: kinds are never added as counts.
            allocated_gpus=format_number(sum((row.gpu_equivalents for row in rows), Fraction(0)), 2),
            allocated_memory=format_gb(sum(row.gpu.allocated_memory_mib for row in rows)),
            total_memory=format_gb(sum(row.gpu.memory_mib for row in rows)),
            config_pending=config_pending(node, applied),
            desired_config=desired_config(node),
            desired_config_name=desired_label_value(node),
            memory_allocatable=format_gb(node.memory_allocatable_mib) if node.memory_allocatable_mib else "—",
            **telemetry_context(
                self.request,
                reverse("nodes-api:node-series", args=[node.name]),
                has_samples=any(row.gpu.sampled_at is not None for row in rows),
            ),
            events=node_events(node, [gpu.pk for gpu in gpus]),
            audit_api_query=f"object_type=nodes.node&object_id={node.pk}",
        )
        return context


class GPUDetailView(RoleRequiredMixin, TemplateView):
    """`/nodes/<name>/gpus/<index>/`: one GPU's latest telemetry, its charts, allocation and partitions."""

    template_name = "nodes/gpu_detail.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        partitions = with_holder_id(Partition.objects.order_by("slot"))
        gpu = get_object_or_404(
            GPU.objects.select_related("node").prefetch_related(Prefetch("partitions", partitions)),
            node__name=self.kwargs["name"],
            index=self.kwargs["index"],
        )
        row = gpu_row(gpu, describe_held(gpu.partitions.all()))
        context.update(
            node=gpu.node,
            gpu=gpu,
            row=row,
            sibling_indexes=list(GPU.objects.filter(node=gpu.node_id).order_by("index").values_list("index", flat=True)),
            sharing_label=sharing_label(gpu.node.sharing_mode, gpu.node.sharing_replicas),
            memory_used=format_gb(gpu.memory_used_mib),
            memory_used_pct=memory_used_pct(gpu),
            partition_facts=partition_facts([(p.partition.kind, p.occupant is not None) for p in row.partitions]),
            telemetry_gpu_index=gpu.index,
            **telemetry_context(
                self.request, reverse("nodes-api:gpu-series", args=[gpu.uuid]), has_samples=gpu.sampled_at is not None
            ),
        )
        return context
