"""Filters of the audit trail (`/api/v1/audit-events/?object_type=&object_id=&verb=`)."""
from __future__ import annotations

import datetime as dt
from typing import Any

import django_filters
from django.core.exceptions import ValidationError
from django.core.validators import ProhibitNullCharactersValidator
from django_filters.fields import IsoDateTimeField

from lifecycle.models import AuditEvent

_NO_NUL = [ProhibitNullCharactersValidator()]


class _RequiredValueIsoDateTimeField(IsoDateTimeField):
    """An ISO 8601 date-time; `?at__lt=` with no value is a 400, as the schema's `date-time` format says."""

    def to_python(self, value: Any) -> Any:
        if value == "":
            raise ValidationError("Enter an ISO 8601 date and time, or leave the parameter out.", code="invalid")
        moment = super().to_python(value)
        if moment is None or moment.tzinfo is None:
            return moment
        # PostgreSQL refuses offsets beyond +/-15:59 that ISO 8601 allows ("+16:55"): compare in UTC.
        try:
            return moment.astimezone(dt.UTC)
        except OverflowError:
            raise ValidationError("Enter a date and time between years 1 and 9999.", code="invalid") from None


class StrictIsoDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = _RequiredValueIsoDateTimeField


class AuditEventFilterSet(django_filters.FilterSet):
    object_type = django_filters.CharFilter(
        validators=_NO_NUL, help_text='"app_label.model", e.g. nodes.node or scheduler.deployment'
    )
    object_id = django_filters.CharFilter(validators=_NO_NUL, help_text="Primary key of the object, as text")
    verb = django_filters.CharFilter(validators=_NO_NUL, help_text='e.g. "deployment.created"')
    actor = django_filters.CharFilter(validators=_NO_NUL)
    at__gte = StrictIsoDateTimeFilter(field_name="at", lookup_expr="gte")
    at__lt = StrictIsoDateTimeFilter(field_name="at", lookup_expr="lt")

    class Meta:
        model = AuditEvent
        fields = ["object_type", "object_id", "verb", "actor"]
