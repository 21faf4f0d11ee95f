"""The consolidation plans' one FilterSet, shared by the REST API and the plans page (NetBox-style)."""
from __future__ import annotations

import django_filters

from consolidation.choices import PlanStatus
from consolidation.models import ConsolidationPlan


class PlanFilterSet(django_filters.FilterSet):
    """`?status=` (repeatable, any of them; an unknown status is a 400 in the API, a form error on the page)."""

    status = django_filters.MultipleChoiceFilter(choices=PlanStatus.choices(), label="Status")

    class Meta:
        model = ConsolidationPlan
        fields = ["status"]
