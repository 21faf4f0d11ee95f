"""The deployments' one FilterSet, shared by the REST API and the HTML list (NetBox-style)."""
from __future__ import annotations

import django_filters

from nodes.filtersets import MultiValueCharFilter
from scheduler.choices import DeploymentStatus
from scheduler.models import Deployment


def _namespaces() -> list[tuple[str, str]]:
    """Namespaces that hold deployments, for the page's drop-down (read only when the form renders)."""
    values = Deployment.objects.order_by("namespace").values_list("namespace", flat=True).distinct()
    return [(value, value) for value in values]


class DeploymentFilterSet(django_filters.FilterSet):
    """`?status=` (repeatable; an unknown status is a 400 in the API, a form error on the page),
    `?namespace=` (exact, repeatable; a namespace that holds nothing matches nothing) and `?name=`
    (exact: how the CLI finds `gpuplane explain chat` without paging through every row)."""

    name = django_filters.CharFilter(label="Name")
    status = django_filters.MultipleChoiceFilter(choices=DeploymentStatus.choices(), label="Status")
    namespace = MultiValueCharFilter(choices=_namespaces, label="Namespace")

    class Meta:
        model = Deployment
        fields = ["name", "status", "namespace"]
