"""The rollouts' one FilterSet, shared by the REST API and the HTML list (NetBox-style)."""
from __future__ import annotations

import django_filters

from rollouts.choices import RolloutStatus
from rollouts.models import RollingUpdate


class RolloutFilterSet(django_filters.FilterSet):
    """`?status=` (repeatable, any of them; an unknown status is a 400 in the API, a form error on the page)
    and `?name=` (exact: how the CLI finds a rollout by its name)."""

    name = django_filters.CharFilter(label="Name")
    status = django_filters.MultipleChoiceFilter(choices=RolloutStatus.choices(), label="Status")

    class Meta:
        model = RollingUpdate
        fields = ["name", "status"]
