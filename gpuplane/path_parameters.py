"""Path parameters that no object can be named by are a 400, for every URL, in one place.

A NUL character (`/api/v1/nodes/%00/`) reaches the ORM as a lookup value; PostgreSQL refuses
text holding NUL with a DataError, which would escape as a 500 (SQLite just finds nothing). A
lone surrogate cannot come from a decoded URL today (Django keeps undecodable bytes
percent-encoded), but it is refused here too, so that no view has to guard either.

`PathParameterMiddleware.process_view` runs after URL resolution, before any view: the answer
names the parameter (`{"name": ["..."]}`), as JSON under `/api/`, as text elsewhere. The schema
states the same rule (`pattern` on every string path parameter, gpuplane/schema.py).
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest

# NUL, or a UTF-16 surrogate on its own (not a character: no encoder accepts it).
UNUSABLE_CHARACTER = re.compile("[\x00\ud800-\udfff]")
# The same rule for OpenAPI (ECMA-262 regex): no NUL, no lone surrogate.
PATH_PARAMETER_PATTERN = "^[^\\x00\\ud800-\\udfff]*$"
MESSAGE = "Null characters and lone surrogates are not allowed."


def unusable_parameters(kwargs: dict[str, Any]) -> dict[str, list[str]]:
    """Messages by parameter name for each string value holding NUL or a lone surrogate."""
    return {
        name: [MESSAGE]
        for name, value in kwargs.items()
        if isinstance(value, str) and UNUSABLE_CHARACTER.search(value)
    }


class PathParameterMiddleware:
    """Answers 400 naming the path parameter when it holds NUL or a lone surrogate."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(self, request: HttpRequest, view_func: Any, view_args: tuple, view_kwargs: dict[str, Any]) -> HttpResponse | None:
        errors = unusable_parameters(view_kwargs)
        if not errors:
            return None
        if request.path_info.startswith("/api/"):
            return HttpResponse(json.dumps(errors), status=400, content_type="application/json")
        return HttpResponseBadRequest("; ".join(f"{name}: {messages[0]}" for name, messages in errors.items()),
                                      content_type="text/plain; charset=utf-8")
