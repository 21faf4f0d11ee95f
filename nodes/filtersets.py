"""One FilterSet per inventory model, shared by the REST API and the HTML lists (NetBox-style).

Every filter validates its value: a value it cannot read (`?ready=maybe`, `?sharing_mode=bogus`,
`?utilization_pct__gte=abc`, a NUL byte) makes the form invalid, which the API turns into HTTP 400
with a message per field and the HTML list shows next to the field. No bad value may reach the
database, where it would raise (a 500) or be silently ignored.

Free-text attributes (GPU model, node name, GPU UUID, MIG profile) accept any value and may be
repeated (`?gpu_model=A&gpu_model=B` means A or B); a value that names nothing matches nothing.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import django_filters
from django import forms
from django.core.exceptions import ValidationError
from django.core.validators import ProhibitNullCharactersValidator
from django.db.models import Exists, F, OuterRef, QuerySet

from nodes.holds import free_partition_filter, occupied_partition_filter
from nodes.models import GPU, Node, Partition
from nodes.vocabulary import PartitionKind, SharingMode

# Largest value a PositiveIntegerField column holds on every supported database; a bigger
# filter value is refused before SQLite raises OverflowError on it.
MAX_COLUMN_INT = 2**31 - 1

_TRUE_WORDS = frozenset({"true", "1", "yes", "on"})
_FALSE_WORDS = frozenset({"false", "0", "no", "off"})


class StrictBooleanField(forms.Field):
    """A yes/no/unset form field that refuses anything it cannot read.

    Django's and django-filter's boolean fields read an unknown word as "unset", so
    `?ready=maybe` would silently return every node; this field raises instead.
    Accepted (case-insensitive): true/1/yes/on, false/0/no/off; empty means "not filtered".
    """

    default_error_messages = {"invalid": "Enter true or false."}

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault(
            "widget", forms.Select(choices=[("", "Any"), ("true", "Yes"), ("false", "No")])
        )
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> bool | None:
        if value is None or value == "":
            return None
        if isinstance(value, bool):
            return value
        word = str(value).strip().lower()
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
        raise ValidationError(self.error_messages["invalid"], code="invalid")


class StrictBooleanFilter(django_filters.BooleanFilter):
    """A BooleanFilter whose unreadable values are errors (see StrictBooleanField)."""

    field_class = StrictBooleanField


class AnyValueMultipleChoiceField(forms.MultipleChoiceField):
    """A multiple-value field that takes any string; its choices only feed the HTML widget."""

    def valid_value(self, value: str) -> bool:
        return True

    def validate(self, value: list[str]) -> None:
        super().validate(value)
        # PostgreSQL cannot store or compare a NUL character; refuse it here, as CharField does.
        null_check = ProhibitNullCharactersValidator()
        for item in value:
            null_check(item)


class MultiValueCharFilter(django_filters.MultipleChoiceFilter):
    """Exact match on any of one or more values (`?f=a&f=b`); unknown values match nothing.

    `choices` is optional and may be a callable; it is only evaluated to render the HTML
    widget, so an API request costs no extra query.
    """

    field_class = AnyValueMultipleChoiceField
    accepts_any_value = True  # free text: an empty value is a value (gpuplane.strict_input)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("choices", ())
        # Only single-valued paths are filtered here, so DISTINCT would be pure cost.
        kwargs.setdefault("distinct", False)
        super().__init__(*args, **kwargs)


class IntegerFilter(django_filters.NumberFilter):
    """A NumberFilter for whole numbers (`1.5` is refused, not rounded)."""

    field_class = forms.IntegerField


def _distinct_values(model: type[Any], field_name: str) -> Callable[[], Iterable[tuple[str, str]]]:
    """A lazy choices callable: the distinct non-empty values of one column, sorted."""

    def choices() -> list[tuple[str, str]]:
        values = (
            model.objects.exclude(**{field_name: ""})
            .order_by(field_name)
            .values_list(field_name, flat=True)
            .distinct()
        )
        return [(value, value) for value in values]

    return choices


class NodeFilterSet(django_filters.FilterSet):
    q = django_filters.CharFilter(
        field_name="name", lookup_expr="icontains", label="Search", help_text="Part of the node name."
    )
    gpu_model = MultiValueCharFilter(
        choices=_distinct_values(Node, "gpu_model"), label="GPU model", help_text="Catalog GPU model (exact)."
    )
    sharing_mode = django_filters.MultipleChoiceFilter(
        choices=SharingMode.choices(), distinct=False, label="Sharing mode"
    )
    ready = StrictBooleanFilter(label="Ready")
    cordoned = StrictBooleanFilter(label="Cordoned")
    has_free_gpu = StrictBooleanFilter(
        method="filter_has_free_gpu",
        label="Has a free GPU",
        help_text="true: at least one GPU with nothing allocated on it; false: none.",
    )

    class Meta:
        model = Node
        fields = ["q", "gpu_model", "sharing_mode", "ready", "cordoned", "has_free_gpu"]

    def filter_has_free_gpu(self, queryset: QuerySet[Node], name: str, value: bool) -> QuerySet[Node]:
        # A subquery rather than a join, so that GPU aggregates annotated on the queryset
        # (utilization, allocation counts) are not changed by this filter.
        free_gpu = Exists(GPU.objects.filter(node=OuterRef("pk"), allocated_milli=0))
        return queryset.filter(free_gpu if value else ~free_gpu)


class GPUFilterSet(django_filters.FilterSet):
    node = MultiValueCharFilter(
        field_name="node__name", choices=_distinct_values(Node, "name"), label="Node", help_text="Node name."
    )
    model = MultiValueCharFilter(choices=_distinct_values(GPU, "model"), label="Model", help_text="Catalog GPU model.")
    mig_enabled = StrictBooleanFilter(label="MIG enabled")
    utilization_pct__gte = django_filters.NumberFilter(
        field_name="utilization_pct",
        lookup_expr="gte",
        min_value=0,
        max_value=100,
        label="Utilization at least (%)",
        help_text="GPUs without telemetry never match.",
    )
    utilization_pct__lte = django_filters.NumberFilter(
        field_name="utilization_pct",
        lookup_expr="lte",
        min_value=0,
        max_value=100,
        label="Utilization at most (%)",
        help_text="GPUs without telemetry never match.",
    )
    min_free_memory_mib = IntegerFilter(
        method="filter_min_free_memory_mib",
        min_value=0,
        max_value=MAX_COLUMN_INT,
        label="Free memory at least (MiB)",
        help_text="Memory not yet allocated to partitions, in MiB.",
    )

    class Meta:
        model = GPU
        fields = ["node", "model", "mig_enabled", "utilization_pct__gte", "utilization_pct__lte", "min_free_memory_mib"]

    def filter_min_free_memory_mib(self, queryset: QuerySet[GPU], name: str, value: int) -> QuerySet[GPU]:
        return queryset.alias(free_memory_mib=F("memory_mib") - F("allocated_memory_mib")).filter(
            free_memory_mib__gte=value
        )


class PartitionFilterSet(django_filters.FilterSet):
    node = MultiValueCharFilter(
        field_name="gpu__node__name", choices=_distinct_values(Node, "name"), label="Node", help_text="Node name."
    )
    gpu = MultiValueCharFilter(field_name="gpu__uuid", label="GPU", help_text="GPU UUID.")
    kind = django_filters.MultipleChoiceFilter(choices=PartitionKind.choices(), distinct=False, label="Kind")
    mig_profile = MultiValueCharFilter(
        choices=_distinct_values(Partition, "mig_profile"), label="MIG profile", help_text="e.g. 3g.40gb"
    )
    free = StrictBooleanFilter(
        method="filter_free", label="Free", help_text="true: held by no placement and no pod."
    )

    class Meta:
        model = Partition
        fields = ["node", "gpu", "kind", "mig_profile", "free"]

    def filter_free(self, queryset: QuerySet[Partition], name: str, value: bool) -> QuerySet[Partition]:
        # The holder's ids are a subquery, so the filtered list (and its count) stay one statement each.
        return queryset.filter(free_partition_filter() if value else occupied_partition_filter())
