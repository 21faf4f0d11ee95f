"""Server-rendered inventory pages: the node list, a node's detail with its MIG slot diagram and
telemetry charts, and one GPU's page.

Views only read; presentation values (labels, formatted quantities, MIG grid positions) are
computed here in small pure functions so that templates stay free of arithmetic.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django import forms
from django.conf import settings
from django.db.models import Avg, Count, IntegerField, OuterRef, Prefetch, QuerySet, Subquery, Sum
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.views.generic import DetailView, ListView, TemplateView

from gpuplane.web import RoleRequiredMixin, filter_list_context
from nodes.api.series import DEFAULT_RANGE, RANGES
from nodes.catalog import MIG_MEMORY_SLICES
from nodes.filtersets import NodeFilterSet
from nodes.holds import HolderInfo, describe_held, occupied_partition_filter, with_holder_id
from nodes.inventory.audit import node_events
from nodes.models import GPU, Node, Partition
from nodes.summaries import memory_used_pct
from nodes.vocabulary import SHARE_MILLI_FULL, SharingMode

# Modes where the node advertises R replicas per GPU, so R belongs in the label.
_REPLICATED_MODES: frozenset[str] = frozenset({SharingMode.MPS, SharingMode.MPS_WEIGHTED, SharingMode.TIMESLICE})
_SHORT_MODE_LABELS: dict[str, str] = {
    SharingMode.EXCLUSIVE: "Exclusive",
    SharingMode.MIG: "MIG",
    SharingMode.MPS: "MPS",
    SharingMode.MPS_WEIGHTED: "Weighted MPS",
    SharingMode.TIMESLICE: "Time-slicing",
}

# What isolation each mode really gives (DESIGN.md section 4); the detail page states it plainly.
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


def format_mib(memory_mib: int | None) -> str:
    """Memory for people: "80 GiB", "39.5 GiB", "512 MiB"; "—" when unknown."""
    if memory_mib is None:
        return "—"
    if memory_mib < 1024:
        return f"{memory_mib} MiB"
    return f"{memory_mib / 1024:.1f}".removesuffix(".0") + " GiB"


def format_share(share_milli: int) -> str:
    """A compute share in thousandths as a percentage: 250 -> "25 %", 333 -> "33.3 %"."""
    return f"{share_milli / 10:.1f}".removesuffix(".0") + " %"


def occupant_of(partition: Partition, holders: Mapping[int, HolderInfo]) -> str | None:
    """Who holds a partition: its holder's label ("namespace/deployment #replica" for a placement),
    the pod, or None if free. `holders` is what `partition_holder().describe()` said of the page's
    partitions."""
    holder = holders.get(partition.pk) if partition.pk is not None else None
    if holder is not None:
        return holder.label
    return partition.pod or None


@dataclass(frozen=True)
class MIGCell:
    """One box of the MIG slot diagram: a MIG instance spanning [start, start+size), or an unused slice.

    `column` and `span` are CSS grid coordinates (1-based column line); `lane` is the grid row,
    greater than 1 only when stored instances overlap, which a valid layout never does.
    """

    start: int
    size: int
    lane: int
    profile: str = ""
    occupant: str | None = None

    @property
    def is_instance(self) -> bool:
        return bool(self.profile)

    @property
    def profile_compute(self) -> str:
        """The part of the profile before its first dot ("3g" of "3g.40gb"), so pages can wrap there."""
        return self.profile.partition(".")[0]

    @property
    def profile_memory(self) -> str:
        return self.profile.partition(".")[2]

    @property
    def is_used(self) -> bool:
        return self.occupant is not None

    @property
    def column(self) -> int:
        return self.start + 1

    @property
    def end(self) -> int:
        """Last memory slice covered (inclusive), for people: a 3g at start 0 covers slices 0–3."""
        return self.start + self.size - 1

    @property
    def slices_text(self) -> str:
        return f"slice {self.start}" if self.size == 1 else f"slices {self.start}–{self.end}"

    @property
    def aria_label(self) -> str:
        if not self.is_instance:
            return f"{self.slices_text} unused"
        state = f"in use by {self.occupant}" if self.is_used else "free"
        return f"{self.profile} at {self.slices_text}, {state}"


def mig_diagram(partitions: list[Partition], holders: Mapping[int, HolderInfo] | None = None) -> list[MIGCell]:
    """Lay a GPU's MIG partitions out on the 8 memory slices, sorted by lane, then start.

    Every MIG instance becomes a cell spanning its [start, start+size), clipped to the 8 slices;
    each slice that no instance covers becomes an empty one-slice cell in lane 1. An instance
    overlapping an earlier one goes to the next free lane, so that broken data shows up instead of
    hiding under another block (a valid layout always fits in lane 1). `holders` names the held
    instances' occupants (see `occupant_of`).
    """
    holders = holders or {}
    placed = sorted(
        ((p.mig_start, p.mig_size, p) for p in partitions if p.mig_start is not None and p.mig_size),
        key=lambda item: (item[0], item[2].slot),
    )
    cells: list[MIGCell] = []
    lanes: list[set[int]] = []
    for raw_start, raw_size, partition in placed:
        start = min(raw_start, MIG_MEMORY_SLICES - 1)
        size = max(1, min(raw_size, MIG_MEMORY_SLICES - start))
        covered = set(range(start, start + size))
        lane = next((i for i, used in enumerate(lanes) if not used & covered), len(lanes))
        if lane == len(lanes):
            lanes.append(set())
        lanes[lane] |= covered
        cells.append(MIGCell(start, size, lane + 1, partition.mig_profile, occupant_of(partition, holders)))
    taken: set[int] = set().union(*lanes)
    cells.extend(MIGCell(s, 1, 1) for s in range(MIG_MEMORY_SLICES) if s not in taken)
    return sorted(cells, key=lambda c: (c.lane, c.start))


@dataclass(frozen=True)
class PartitionRow:
    partition: Partition
    kind_label: str
    share: str
    memory: str
    occupant: str | None


@dataclass
class GPURow:
    """A GPU with what the detail page shows about it, already formatted."""

    gpu: GPU
    memory: str
    allocated_share: str
    allocated_memory: str
    allocated_pct: int
    partitions: list[PartitionRow] = field(default_factory=list)
    mig_cells: list[MIGCell] = field(default_factory=list)

    @property
    def mig_lanes(self) -> int:
        return max((c.lane for c in self.mig_cells), default=1)


def gpu_row(gpu: GPU, holders: Mapping[int, HolderInfo]) -> GPURow:
    """Format one GPU (its partitions prefetched) for the detail page; `holders` as for `occupant_of`."""
    partitions = list(gpu.partitions.all())
    return GPURow(
        gpu=gpu,
        memory=format_mib(gpu.memory_mib),
        allocated_share=format_share(gpu.allocated_milli),
        allocated_memory=format_mib(gpu.allocated_memory_mib),
        allocated_pct=round(gpu.allocated_milli * 100 / SHARE_MILLI_FULL),
        partitions=[
            PartitionRow(
                p, p.get_kind_display(), format_share(p.share_milli), format_mib(p.memory_mib), occupant_of(p, holders)
            )
            for p in partitions
        ],
        mig_cells=mig_diagram(partitions, holders) if gpu.mig_enabled else [],
    )


def _partition_count(*, used_only: bool = False) -> Coalesce:
    """A per-node count of partitions (all, or only those with an occupant) as a correlated subquery.

    Subqueries rather than joined aggregates: joining GPUs and partitions in one query would
    weight the utilization mean by each GPU's partition count.
    """
    qs = Partition.objects.filter(gpu__node=OuterRef("pk"))
    if used_only:
        qs = qs.filter(occupied_partition_filter())
    counted = qs.order_by().values("gpu__node").annotate(n=Count("id")).values("n")
    return Coalesce(Subquery(counted, output_field=IntegerField()), 0)


def node_list_queryset() -> QuerySet[Node]:
    """Nodes annotated with `gpus_n`, `mean_utilization_pct` (None without telemetry), `partitions_n`,
    `partitions_used_n` and `allocated_milli` (compute handed out, summed over the node's GPUs)."""
    gpus = GPU.objects.filter(node=OuterRef("pk")).order_by().values("node")
    return Node.objects.annotate(
        gpus_n=Coalesce(Subquery(gpus.annotate(n=Count("id")).values("n"), output_field=IntegerField()), 0),
        mean_utilization_pct=Subquery(gpus.annotate(u=Avg("utilization_pct")).values("u")),
        partitions_n=_partition_count(),
        partitions_used_n=_partition_count(used_only=True),
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


class ListDropdown(forms.Select):
    """A drop-down for a multi-value filter field: one pick on the page, a list for the form.

    NodeFilterSet's multi-value filters (`?gpu_model=A&gpu_model=B`) would render as tall
    multi-select boxes; a filter bar reads better with drop-downs that start at "Any".
    """

    def value_from_datadict(self, data: Any, files: Any, name: str) -> list[str]:
        values = data.getlist(name) if hasattr(data, "getlist") else [data.get(name)]
        return [value for value in values if value]


def use_dropdowns(form: forms.Form) -> None:
    """Swap multi-select widgets of a filter form for ListDropdown, keeping their choices."""
    for bound_field in form:
        field = bound_field.field
        if isinstance(field, forms.MultipleChoiceField):
            field.widget = ListDropdown(choices=[("", "Any"), *field.choices])


class NodeListView(RoleRequiredMixin, ListView):
    """`/nodes/`: every node with GPUs, sharing mode, utilization, allocation and status; filterable."""

    template_name = "nodes/node_list.html"
    context_object_name = "nodes"
    paginate_by = 50

    def get_queryset(self) -> QuerySet[Node]:
        self.filterset = NodeFilterSet(self.request.GET or None, queryset=node_list_queryset(), request=self.request)
        use_dropdowns(self.filterset.form)  # before validation: the widget reads the values
        # An invalid filter value shows the form error and an empty table, never every node.
        if self.filterset.is_bound and not self.filterset.is_valid():
            return self.filterset.queryset.none()
        return self.filterset.qs

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        for node in context["nodes"]:
            node.sharing_label = sharing_label(node.sharing_mode, node.sharing_replicas)
            # Measured in GPU share, not partition count: weighted-MPS shares exist as partitions
            # only once handed out, so "2 / 2 partitions" would read as a full node.
            capacity_milli = node.gpus_n * SHARE_MILLI_FULL
            node.allocated_pct = round(node.allocated_milli * 100 / capacity_milli) if capacity_milli else 0
            node.allocated_gpus = node.allocated_milli / SHARE_MILLI_FULL
        context.update(filter_list_context(self.request, self.filterset))
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
        context.update(
            gpu_rows=rows,
            mig_rows=[row for row in rows if row.gpu.mig_enabled],
            sharing_label=sharing_label(node.sharing_mode, node.sharing_replicas),
            sharing_note=SHARING_NOTES.get(node.sharing_mode, ""),
            mean_utilization_pct=sum(utilizations) / len(utilizations) if utilizations else None,
            partitions_n=len(partitions),
            partitions_used_n=sum(1 for p in partitions if p.occupant is not None),
            # In GPU share, as on the list: weighted-MPS shares exist only once handed out.
            allocated_gpus=sum(row.gpu.allocated_milli for row in rows) / SHARE_MILLI_FULL,
            config_pending=bool(node.desired_config) and node.desired_config != node.applied_config,
            memory_allocatable=format_mib(node.memory_allocatable_mib) if node.memory_allocatable_mib else "—",
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
            memory_used=format_mib(gpu.memory_used_mib),
            memory_used_pct=memory_used_pct(gpu),
            partitions_used_n=sum(1 for p in row.partitions if p.occupant is not None),
            telemetry_gpu_index=gpu.index,
            **telemetry_context(
                self.request, reverse("nodes-api:gpu-series", args=[gpu.uuid]), has_samples=gpu.sampled_at is not None
            ),
        )
        return context
