"""API glue shared by every app: the exception handler, pagination and ordering.

Authentication (settings.REST_FRAMEWORK): a token (`Authorization: Token <key>`, obtained with
`POST /api/v1/auth/token/` and a username and password; stored as a digest, gpuplane/tokens.py) or the Django session. The session is
the one made by logging in at `/admin/login/`, which only admits staff users (`is_staff`); a
non-staff user uses a token. Either way the user's role (gpuplane.roles) decides what is
allowed; being staff grants no role.

Every query-string value is validated: a value the API cannot use is answered with HTTP 400 and
a message under the parameter's name (`{"limit": ["..."]}`), never a 500 and never silently
ignored; so is a parameter the endpoint does not read, and a body field it does not take
(gpuplane/strict_input.py).
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import QuerySet
from rest_framework import exceptions
from rest_framework.filters import OrderingFilter
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from gpuplane.parsers import too_large_error
from lifecycle.errors import DomainError

MAX_PAGE_LIMIT = 500
# 18 digits always fit a signed 64-bit integer; longer numbers are refused before int() sees them.
_WHOLE_NUMBER = re.compile(r"[0-9]{1,18}")
MAX_WHOLE_NUMBER = 10**18 - 1


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, plus domain errors (``lifecycle.errors``: their status and body), and Django
    ValidationErrors (from Model.clean) and body limits turned into 400s."""
    # Django's own body limits, hit when something reads request.POST (the CSRF check) before DRF's parsers.
    if isinstance(exc, RequestDataTooBig):
        exc = too_large_error()
    elif isinstance(exc, (TooManyFieldsSent, TooManyFilesSent)):
        exc = exceptions.ParseError(str(exc))
    if isinstance(exc, DomainError):
        # A service's refusal: its own status and body (lifecycle.errors), mapped here once.
        return Response(exc.body(), status=exc.status_code)
    if isinstance(exc, DjangoValidationError):
        detail = exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        exc = exceptions.ValidationError(detail=detail)
    return drf_exception_handler(exc, context)


def _whole_number(request: Request, param: str, minimum: int, message: str) -> int | None:
    """The query parameter as an int >= minimum, None when absent; ValidationError otherwise."""
    raw = request.query_params.get(param)
    if raw is None:
        return None
    if not _WHOLE_NUMBER.fullmatch(raw) or int(raw) < minimum:
        raise exceptions.ValidationError({param: [message]})
    return int(raw)


class CappedLimitOffsetPagination(LimitOffsetPagination):
    """`?limit=&offset=` pages of `count`, `next`, `previous`, `results`.

    The default page is PAGE_SIZE (50) rows; a larger `limit` is capped at MAX_PAGE_LIMIT (500)
    and the `next` link carries the capped value. Unlike DRF's class, a limit or offset that is
    not a whole number (or a limit below 1) is a 400 instead of silently becoming the default.
    """

    max_limit = MAX_PAGE_LIMIT
    limit_query_description = f"Number of results to return per page (1 to {MAX_PAGE_LIMIT}; larger is capped)."

    def get_limit(self, request: Request) -> int | None:
        limit = _whole_number(request, self.limit_query_param, 1, "Enter a whole number of 1 or more.")
        if limit is None:
            return self.default_limit
        return min(limit, self.max_limit)

    def get_schema_operation_parameters(self, view: APIView) -> list[dict[str, Any]]:
        """DRF's parameters with the bounds this class enforces, so the schema allows only what is accepted."""
        parameters = super().get_schema_operation_parameters(view)
        minimum = {self.limit_query_param: 1, self.offset_query_param: 0}
        for parameter in parameters:
            if parameter["name"] in minimum:
                parameter["schema"].update(minimum=minimum[parameter["name"]], maximum=MAX_WHOLE_NUMBER)
        return parameters

    def get_offset(self, request: Request) -> int:
        # A huge offset is harmless: DRF returns [] without querying when offset > count.
        offset = _whole_number(request, self.offset_query_param, 0, "Enter a whole number of 0 or more.")
        return offset or 0


class StrictOrderingFilter(OrderingFilter):
    """`?ordering=a,-b` over the view's `ordering_fields`; an unknown field is a 400.

    The primary key is appended as the last sort key so that pages are stable when the
    chosen fields tie (limit/offset paging over an unstable order repeats or skips rows).
    """

    def get_ordering(self, request: Request, queryset: QuerySet[Any], view: APIView) -> Sequence[str] | None:
        params = request.query_params.get(self.ordering_param)
        if params is not None:
            terms = [term.strip() for term in params.split(",")]
            valid = {name for name, _label in self.get_valid_fields(queryset, view, {"request": request})}
            if "" in terms:  # `?ordering=` or `a,,b`: the schema allows no empty term, nor does the API
                raise exceptions.ValidationError({self.ordering_param: ["Name a field to sort by; an empty one is not allowed."]})
            unknown = [term for term in terms if term.lstrip("-") not in valid]
            if unknown:
                raise exceptions.ValidationError(
                    {
                        self.ordering_param: [
                            f"Cannot order by {', '.join(unknown)}; choose from {', '.join(sorted(valid))}."
                        ]
                    }
                )
            if terms:
                return [*terms, "pk"]
        return self.get_default_ordering(view)

    def get_schema_operation_parameters(self, view: APIView) -> list[dict[str, Any]]:
        """Document the whitelist, which DRF's generic description leaves out."""
        parameters = super().get_schema_operation_parameters(view)
        fields = [name for name, _label in self.get_valid_fields(view.get_queryset(), view, {"request": None})]
        for parameter in parameters:
            parameter["description"] = (
                "Comma-separated fields to sort by, `-` first for descending. One of: " + ", ".join(fields) + "."
            )
            # A comma-separated list of the whitelisted terms, so the schema allows only what is accepted.
            parameter["schema"] = {
                "type": "array",
                "minItems": 1,
                "items": {"type": "string", "enum": [term for name in fields for term in (name, f"-{name}")]},
            }
            parameter.update(style="form", explode=False)
        return parameters
