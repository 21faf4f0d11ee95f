"""`/activity/`: the audit trail as a page, filterable like `/api/v1/audit-events/` (same FilterSet,
same visibility: admins see every event, other roles the cluster's and their own)."""
from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.views.generic import ListView

from gpuplane.roles import ADMIN, has_role
from gpuplane.web import RoleRequiredMixin, filter_list_context
from lifecycle.filtersets import AuditEventFilterSet
from lifecycle.models import AuditEvent
from lifecycle.visibility import visible_events


class ActivityView(RoleRequiredMixin, ListView):
    template_name = "lifecycle/activity.html"
    context_object_name = "events"
    paginate_by = 100

    def get_queryset(self) -> QuerySet[AuditEvent]:
        queryset = visible_events(AuditEvent.objects.all(), self.request.user)
        self.filterset = AuditEventFilterSet(self.request.GET or None, queryset=queryset)
        if self.filterset.is_bound and not self.filterset.is_valid():
            return queryset.none()
        return self.filterset.qs

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context.update(filter_list_context(self.request, self.filterset))
        context.update(item_name="event", item_name_plural="events", sees_everything=has_role(self.request.user, ADMIN),
                       api_query=context["querystring"])
        return context
