"""`/disruptions/`: the Disruptions page: every move of a replica, in flight and past (the mover's,
``scheduler.services.moving``): who asked and why, from and to, the PodDisruptionBudget or budget
holding one back, its timings; filterable with the moves' one FilterSet (as ``/api/v1/moves/``)."""
from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from django.views.generic import ListView

from gpuplane.web import FilteredListMixin, RoleRequiredMixin
from scheduler.choices import MOVE_DISRUPTING, MOVE_IN_FLIGHT
from scheduler.filtersets import MoveFilterSet
from scheduler.models import Move
from scheduler.services.disruption import concurrent_budget


class MoveListView(RoleRequiredMixin, FilteredListMixin, ListView):
    template_name = "scheduler/move_list.html"
    context_object_name = "moves"
    paginate_by = 50

    filterset_class = MoveFilterSet

    def base_queryset(self) -> QuerySet[Move]:
        return Move.objects.select_related("deployment", "original").order_by("-created_at", "-id")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        disrupting = Move.objects.filter(status__in=MOVE_DISRUPTING, hold=False)
        context.update(
            in_flight=Move.objects.filter(status__in=MOVE_IN_FLIGHT).count(),
            nodes_disrupted=sorted(set(disrupting.values_list("from_node", flat=True))),
            budget=concurrent_budget(), budget_setting=settings.DISRUPTION_BUDGET,
            interval_s=settings.DISRUPTION_MIN_INTERVAL_S, timeout_s=settings.MOVE_TIMEOUT_S,
        )
        return context
