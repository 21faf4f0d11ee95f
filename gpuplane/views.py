"""Dashboard pages of the project itself: the cluster overview.

The role gate and list helpers the apps' pages share live in gpuplane.web, a base module the apps
may import; this module is the top layer, which nothing in the apps imports.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import Count
from django.views.generic import TemplateView

from gpuplane.observability import SCRAPE_FORMATS, inventory_text
from gpuplane.web import RoleRequiredMixin
from nodes.fleet import cached_per_poll, fleet_node_figures, fleet_node_tiles
from nodes.models import GPU
from nodes.overview import ClusterOverview, cluster_overview
from savings.services.current import current_savings
from savings.services.summary import savings_summary


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


def _overview_figures() -> tuple[ClusterOverview, list[tuple[str, int]]]:
    """The overview's cards (from the per-node figures the node map and /metrics share) and its
    GPUs by model: what the cache keeps."""
    by_model = GPU.objects.values("model").annotate(n=Count("id")).order_by("-n", "model")
    return cluster_overview(fleet_node_figures()), [(row["model"] or "Unknown model", row["n"]) for row in by_model]


def overview_figures(*, refresh: bool = False) -> tuple[ClusterOverview, list[tuple[str, int]]]:
    """_overview_figures() kept per poll and idle thresholds (`refresh`: recompute now)."""
    thresholds = (settings.IDLE_UTILIZATION_PCT, settings.IDLE_MEMORY_PCT)
    return cached_per_poll("overview", _overview_figures, *thresholds, refresh=refresh)


def refresh_fleet_pages() -> None:
    """Recompute the overview's, the savings' and /metrics' per-poll figures (registered with
    nodes.fleet.register_per_poll by gpuplane.apps, so a poll or a sync refreshes them)."""
    current_savings(refresh=True)  # before /metrics, whose savings gauges read it
    overview_figures(refresh=True)
    for accept in SCRAPE_FORMATS:
        inventory_text(accept, refresh=True)


class OverviewView(RoleRequiredMixin, TemplateView):
    """`/`: cluster summary cards (nodes, GPUs, allocation in GPU-equivalents and memory, GPUs by
    model, allocation by sharing mode), the savings headline and the node map (one tile per node, drilling down to its
    page's GPUs). The figures come from nodes.overview and nodes.fleet; every count is shown with
    a breakdown that adds up to it."""

    template_name = "nodes/overview.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        # The figures are the same for every viewer: computed once per poll interval (and again
        # whenever the inventory changes), not once per page view. The page itself is rendered per
        # request (its header names the user and carries a CSRF token).
        overview, by_model = overview_figures()
        memory_by_mode = {part.key: part for part in overview.memory_parts}
        allocation_by_mode = {part.key: part for part in overview.allocation_parts}
        context.update(
            overview=overview,
            # One row per mode: its GPUs, GPU-equivalents and memory allocated (each column adds up).
            modes=[
                {
                    "key": part.key, "label": part.label, "note": part.note, "gpus": part.value,
                    "allocated": allocation_by_mode[part.key].value, "partitions_note": allocation_by_mode[part.key].note,
                    "memory": memory_by_mode[part.key].value, "memory_of": memory_by_mode[part.key].note,
                }
                for part in overview.mode_parts
            ],
            gpus_by_model=_rows(by_model),
            idle_utilization_pct=settings.IDLE_UTILIZATION_PCT,
            idle_memory_pct=settings.IDLE_MEMORY_PCT,
            # One tile per node, drawn by static/js/charts.js, which refreshes it from /api/v1/heatmap/.
            heatmap=fleet_node_tiles(),  # the same entry as the API's
            telemetry_interval_s=settings.TELEMETRY_POLL_INTERVAL_S,
            # The headline of /savings/: the dict GET /api/v1/savings/ answers, so the numbers agree.
            savings=savings_summary(),
        )
        return context
