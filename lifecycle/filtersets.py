"""Filters of the audit trail (`/api/v1/audit-events/?object_type=&object_id=&verb=`)."""
from __future__ import annotations

import django_filters
from django.core.validators import ProhibitNullCharactersValidator

from lifecycle.models import AuditEvent

_NO_NUL = [ProhibitNullCharactersValidator()]


class AuditEventFilterSet(django_filters.FilterSet):
    object_type = django_filters.CharFilter(
        validators=_NO_NUL, help_text='"app_label.model", e.g. nodes.node or scheduler.deployment'
    )
    object_id = django_filters.CharFilter(validators=_NO_NUL, help_text="Primary key of the object, as text")
    verb = django_filters.CharFilter(validators=_NO_NUL, help_text='e.g. "deployment.created"')
    actor = django_filters.CharFilter(validators=_NO_NUL)
    at__gte = django_filters.IsoDateTimeFilter(field_name="at", lookup_expr="gte")
    at__lt = django_filters.IsoDateTimeFilter(field_name="at", lookup_expr="lt")

    class Meta:
        model = AuditEvent
        fields = ["object_type", "object_id", "verb", "actor"]
