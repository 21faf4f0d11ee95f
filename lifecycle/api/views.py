"""`/api/v1/audit-events/`: the audit trail, read-only, for every role (admins read every event,
others the cluster's and their own: lifecycle/visibility.py)."""
from __future__ import annotations

from django.db.models import QuerySet
from rest_framework.viewsets import ReadOnlyModelViewSet

from lifecycle.api.serializers import AuditEventSerializer
from lifecycle.filtersets import AuditEventFilterSet
from lifecycle.models import AuditEvent
from lifecycle.visibility import visible_events


class AuditEventViewSet(ReadOnlyModelViewSet):
    queryset = AuditEvent.objects.all()
    serializer_class = AuditEventSerializer
    filterset_class = AuditEventFilterSet
    lookup_value_regex = r"[0-9]+"
    ordering_fields = ["at", "verb", "object_type", "actor"]

    def get_queryset(self) -> QuerySet[AuditEvent]:
        # Without a request (the schema generator, introspection) nothing is visible; the model is all it needs.
        return visible_events(super().get_queryset(), getattr(getattr(self, "request", None), "user", None))
