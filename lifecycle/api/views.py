"""`/api/v1/audit-events/`: the audit trail, read-only, for every role."""
from __future__ import annotations

from rest_framework.viewsets import ReadOnlyModelViewSet

from lifecycle.api.serializers import AuditEventSerializer
from lifecycle.filtersets import AuditEventFilterSet
from lifecycle.models import AuditEvent


class AuditEventViewSet(ReadOnlyModelViewSet):
    queryset = AuditEvent.objects.all()
    serializer_class = AuditEventSerializer
    filterset_class = AuditEventFilterSet
    lookup_value_regex = r"[0-9]+"
    ordering_fields = ["at", "verb", "object_type", "actor"]
