"""The deployments' one FilterSet, shared by the REST API and the HTML list (NetBox-style)."""
from __future__ import annotations

import django_filters
from django.db.models import QuerySet

from nodes.filtersets import MAX_COLUMN_INT, IntegerFilter, MultiValueCharFilter, StrictBooleanFilter
from scheduler.choices import MOVE_IN_FLIGHT, DeploymentStatus, MoveKind, MoveRequester, MoveStatus
from scheduler.models import Deployment, Move


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


class InFlightFilter(StrictBooleanFilter):
    """`true`: moves not ended yet; `false`: those ended (a boolean filter, so the schema says boolean)."""

    def filter(self, qs: QuerySet[Move], value: bool | None) -> QuerySet[Move]:
        if value is None:
            return qs
        return qs.filter(status__in=MOVE_IN_FLIGHT) if value else qs.exclude(status__in=MOVE_IN_FLIGHT)


class MoveFilterSet(django_filters.FilterSet):
    """The moves' one FilterSet (the Disruptions page and `/api/v1/moves/`): `?status=`, `?kind=`
    (move or removal) and `?requested_by=` (repeatable; an unknown value is a 400 / a form error), `?deployment=` (its id),
    `?in_flight=true|false` and `?lost=true|false`."""

    status = django_filters.MultipleChoiceFilter(choices=MoveStatus.choices(), label="Status")
    kind = django_filters.MultipleChoiceFilter(choices=MoveKind.choices(), label="Kind")
    requested_by = django_filters.MultipleChoiceFilter(choices=MoveRequester.choices(), label="Asked by")
    deployment = IntegerFilter(field_name="deployment_id", label="Deployment id", min_value=1, max_value=MAX_COLUMN_INT)
    in_flight = InFlightFilter(label="In flight")
    lost = StrictBooleanFilter(label="Lost a replica")

    class Meta:
        model = Move
        fields = ["status", "kind", "requested_by", "deployment", "in_flight", "lost"]

