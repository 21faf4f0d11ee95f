"""Strict input, for every API endpoint: what the API cannot use is refused, never ignored.

A misspelt field (`replica: 3`) or query parameter (`?sharing=mig` on a list that filters by
`sharing_mode`) that is silently dropped makes the API answer a different question from the one
asked, and the caller never learns. So:

- a body field the endpoint does not take is a 400 under that field's name
  (`RejectUnknownFieldsMixin`, the base of every request serializer);
- an integer is a whole number: `2` (or "2" from a form post), never `2.0`, "2.0", `2.5` or
  `true` (`StrictIntegerField`);
- a query parameter that is not one of the view's filters or DRF's own (paging, ordering,
  search, format) is a 400 naming it: `StrictQueryParametersFilter`, the first default filter
  backend, covers what viewsets filter (list, retrieve, destroy); `StrictQueryParametersMixin`
  every other API view and viewsets that create.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from django.db import models
from django.db.models import QuerySet
from rest_framework import exceptions, serializers
from rest_framework.filters import BaseFilterBackend, OrderingFilter, SearchFilter
from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.utils import html
from rest_framework.views import APIView

# Keys a browser or DRF's browsable API adds to form posts; they are transport, not input.
TRANSPORT_FIELDS = frozenset({"csrfmiddlewaretoken"})
_DIGITS = re.compile(r"-?[0-9]{1,18}")


class StrictStringField(serializers.CharField):
    """A CharField that refuses numbers and booleans instead of turning them into text."""

    default_error_messages = {"invalid": "Enter a string."}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """A whole number: a JSON integer, or its decimal digits as a string (form posts send text).

    DRF's IntegerField takes 2.0 and "2.0" as 2; here they are refused like 2.5 and true, because
    a client that sends them has a bug (a float where a count belongs) that rounding would hide.
    """

    default_error_messages = {"invalid": "Enter a whole number, such as 2 (not 2.0, 2.5, a quoted decimal or true)."}

    def to_internal_value(self, data: Any) -> int:
        whole = isinstance(data, int) or (isinstance(data, str) and _DIGITS.fullmatch(data) is not None)
        if isinstance(data, bool) or not whole:
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictFloatField(serializers.FloatField):
    """A FloatField that refuses booleans (JSON true is not 1 GB)."""

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """JSON true or false; in a form-encoded body the text `true` or `false`.

    DRF's BooleanField also takes 1, 0, "yes", "on", "t" ..., and reads a form post that leaves
    the field out as false rather than as its default; here an omitted field gets its default.
    """

    default_error_messages = {"invalid": "Enter true or false."}
    default_empty_html = serializers.empty
    FORM_VALUES = {"true": True, "false": False}

    def to_internal_value(self, data: Any) -> bool:
        if isinstance(data, bool):
            return data
        if isinstance(data, str) and data in self.FORM_VALUES and html.is_html_input(getattr(self.parent, "initial_data", None)):
            return self.FORM_VALUES[data]
        self.fail("invalid")
        raise AssertionError("unreachable")  # fail() raises


class RejectUnknownFieldsMixin:
    """A body key the serializer does not take is a 400 under that key, with the field errors.

    Read-only fields count as unknown input: the client cannot set them, and accepting them
    silently would let it believe it had.
    """

    def to_internal_value(self, data: Any) -> Any:
        errors: dict[str, Any] = {}
        value: Any = None
        try:
            value = super().to_internal_value(data)  # type: ignore[misc]
        except serializers.ValidationError as exc:
            errors = dict(exc.detail) if isinstance(exc.detail, Mapping) else {"non_field_errors": exc.detail}
        if isinstance(data, Mapping):
            fields = self.fields  # type: ignore[attr-defined]
            writable = sorted(name for name, field in fields.items() if not field.read_only)
            for key in data:
                if key in TRANSPORT_FIELDS or _names_writable_field(key, data, fields):
                    continue
                why = "is read-only" if key in fields else "is not a field of this request"
                errors[str(key)] = [f"Unknown field: {key!s} {why}; accepted fields: {', '.join(writable)}."]
        if errors:
            raise serializers.ValidationError(errors)
        return value


def _names_writable_field(key: Any, data: Mapping[str, Any], fields: Mapping[str, Any]) -> bool:
    """Whether a body key sets a writable field: its name, or in a form post DRF's nested notation
    for it (`labels.team`, `items[0]`)."""
    name = str(key)
    if html.is_html_input(data):
        name = re.split(r"[.\[]", name, maxsplit=1)[0]
    return name in fields and not fields[name].read_only


class StrictSerializer(RejectUnknownFieldsMixin, serializers.Serializer):
    """Base of request bodies: a Serializer that refuses unknown fields."""


class StrictModelFieldsMixin:
    """For a ModelSerializer: the model's numbers and booleans become the strict fields above."""

    serializer_field_mapping = {
        **serializers.ModelSerializer.serializer_field_mapping,
        **dict.fromkeys((models.IntegerField, models.SmallIntegerField, models.BigIntegerField,
                         models.PositiveIntegerField, models.PositiveSmallIntegerField,
                         models.PositiveBigIntegerField), StrictIntegerField),
        models.FloatField: StrictFloatField,
        models.BooleanField: StrictBooleanField,
    }


class NoFieldsSerializer(StrictSerializer):
    """The body of an action that takes none (start, pause, ...): any field in it is a 400."""


def drf_query_parameters(view: APIView) -> set[str]:
    """The query parameters DRF itself reads for `view`: paging, ordering, search and format."""
    names = {api_settings.URL_FORMAT_OVERRIDE or "format"}
    paginator = getattr(view, "paginator", None)
    for attribute in ("limit_query_param", "offset_query_param", "page_query_param", "page_size_query_param",
                      "cursor_query_param"):
        name = getattr(paginator, attribute, None)
        if name:
            names.add(name)
    for backend in getattr(view, "filter_backends", ()):
        if issubclass(backend, OrderingFilter):
            names.add(backend.ordering_param)
        if issubclass(backend, SearchFilter):
            names.add(backend.search_param)
    names.discard("")
    return names


def filterset_parameters(request: Request, queryset: QuerySet[Any], view: APIView) -> set[str]:
    """The query parameters of the view's FilterSet (django-filter), if it has one."""
    from django_filters.rest_framework import DjangoFilterBackend

    filterset_class = DjangoFilterBackend().get_filterset_class(view, queryset)
    if filterset_class is None:
        return set()
    names: set[str] = set()
    for name, filter_ in filterset_class.base_filters.items():
        names.add(name)
        # Range-style filters read name_min/name_max (their widget's suffixes).
        suffixes: Iterable[str] = getattr(filter_.field_class.widget, "suffixes", ()) or ()
        names.update(f"{name}_{suffix}" for suffix in suffixes if suffix)
    return names


def refuse_unknown_query_parameters(request: Request, allowed: Iterable[str]) -> None:
    """Raise a 400 naming each query parameter outside `allowed`, with what is accepted."""
    allowed = set(allowed)
    unknown = sorted(set(request.query_params) - allowed)
    if unknown:
        accepted = ", ".join(sorted(allowed)) or "none"
        raise exceptions.ValidationError({
            name: [f"Unknown query parameter: {name} is not a parameter of this endpoint; accepted: {accepted}."]
            for name in unknown
        })


def refuse_empty_typed_filters(request: Request, queryset: QuerySet[Any], view: APIView) -> None:
    """Raise a 400 for `?ready=` and the like: an empty value of a yes/no, number or choice filter.

    The HTML lists' filter forms send empty fields for "any", so the FilterSets read them as unset;
    an API client that sends one means something the schema (boolean, integer, enum) does not
    allow, so it is told to leave the parameter out instead of getting every row.
    """
    import django_filters
    from django_filters.rest_framework import DjangoFilterBackend

    filterset_class = DjangoFilterBackend().get_filterset_class(view, queryset)
    if filterset_class is None:
        return
    errors = {}
    for name, filter_ in filterset_class.base_filters.items():
        free_text = isinstance(filter_, django_filters.CharFilter) or getattr(filter_, "accepts_any_value", False)
        if free_text or "" not in request.query_params.getlist(name):
            continue
        errors[name] = ["An empty value is not allowed: leave the parameter out to not filter by it."]
    if errors:
        raise exceptions.ValidationError(errors)


class StrictQueryParametersFilter(BaseFilterBackend):
    """Answers 400 for any query parameter a generic view does not read (it would be ignored otherwise).

    Listed first in DEFAULT_FILTER_BACKENDS, so every list and detail view of a viewset has it;
    a view with parameters of its own names them in `query_parameters`.
    """

    def filter_queryset(self, request: Request, queryset: QuerySet[Any], view: APIView) -> QuerySet[Any]:
        allowed = drf_query_parameters(view) | filterset_parameters(request, queryset, view)
        refuse_unknown_query_parameters(request, allowed | set(getattr(view, "query_parameters", ())))
        refuse_empty_typed_filters(request, queryset, view)
        return queryset

    def get_schema_operation_parameters(self, view: APIView) -> list[dict[str, Any]]:
        return []  # it adds no parameter; it refuses the undocumented ones


class StrictQueryParametersMixin:
    """For a view or viewset action that no filter backend sees (a plain APIView, `create`):
    only `query_parameters`, DRF's own parameters and the view's filters are accepted.

    Checked after authentication and permissions, so an anonymous caller still gets its 401.
    """

    query_parameters: tuple[str, ...] = ()

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)  # type: ignore[misc]
        allowed = {*self.query_parameters, *drf_query_parameters(self)}
        if hasattr(self, "get_queryset"):
            allowed |= filterset_parameters(request, self.get_queryset(), self)
        refuse_unknown_query_parameters(request, allowed)
