"""Dashboard pages of the project itself: the cluster overview.

The role gate and list helpers the apps' pages share live in gpuplane.web, a base module the apps
may import; this module is the top layer, which nothing in the apps imports.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import Avg, Count, Q
from django.views.generic import TemplateView

from gpuplane.web import RoleRequiredMixin
from nodes.holds import free_partition_filter
from nodes.models import GPU, Node, Partition
from nodes.summaries import cluster_heatmap
from nodes.vocabulary import SharingMode


@dataclass(frozen=True)
class CountRow:
    """One line of a summary card: a label, a count and its share of the card's total in percent."""

    label: str
    count: int
    pct: int


def _rows(pairs: list[tuple[str, int]]) -> list[CountRow]:
    total = sum(count for _, count in pairs)
    # A card with no rows has no total; avoid a zero division and show nothing.
    return [CountRow(label, count, round(count * 100 / total) if total else 0) for label, count in pairs]


class OverviewView(RoleRequiredMixin, TemplateView):
    """`/`: cluster summary cards (nodes, GPUs by model and by sharing mode, partitions) and the
    utilization heatmap (nodes x GPUs)."""

    template_name = "nodes/overview.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        # Aliases must not shadow field names used in the filters, hence the _n suffix.
        counts = Node.objects.aggregate(
            total_n=Count("id"),
            ready_n=Count("id", filter=Q(ready=True)),
            not_ready_n=Count("id", filter=Q(ready=False)),
            cordoned_n=Count("id", filter=Q(cordoned=True)),
            schedulable_n=Count("id", filter=Q(ready=True, cordoned=False)),
        )
        nodes = {key.removesuffix("_n"): value for key, value in counts.items()}
        gpus = GPU.objects.aggregate(
            total=Count("id"),
            mig_enabled=Count("id", filter=Q(mig_enabled=True)),
            reporting=Count("utilization_pct"),
            mean_utilization_pct=Avg("utilization_pct"),
        )
        by_model = GPU.objects.values("model").annotate(n=Count("id")).order_by("-n", "model")
        mode_labels = dict(SharingMode.choices())
        by_mode = GPU.objects.values("node__sharing_mode").annotate(n=Count("id")).order_by("-n", "node__sharing_mode")
        partitions = Partition.objects.aggregate(total=Count("id"), free=Count("id", filter=free_partition_filter()))
        partitions["used"] = partitions["total"] - partitions["free"]
        partitions["used_pct"] = round(partitions["used"] * 100 / partitions["total"]) if partitions["total"] else 0
        context.update(
            nodes=nodes,
            gpus=gpus,
            gpus_by_model=_rows([(row["model"] or "Unknown model", row["n"]) for row in by_model]),
            gpus_by_mode=_rows(
                [(mode_labels.get(row["node__sharing_mode"], row["node__sharing_mode"]), row["n"]) for row in by_mode]
            ),
            partitions=partitions,
            # Drawn by static/js/charts.js, which refreshes it from /api/v1/heatmap/.
            heatmap=cluster_heatmap(),
            telemetry_interval_s=settings.TELEMETRY_POLL_INTERVAL_S,
        )
        return context
