"""Any body, on any endpoint, is parsed or refused with a 400: never a 500 (issue 8).

The endpoints come from the URL resolver, not from a hand list, so a new endpoint is covered
the day it is added. Each DRF view is asked with every method it answers that parses a body
(POST, PUT, PATCH), anonymously (where the endpoint allows it: the token endpoint) and as an
admin, which reaches the parser on every endpoint.
"""
from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils.crypto import get_random_string
from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.test import APIClient
from rest_framework.views import APIView

from gpuplane.parsers import MAX_JSON_DEPTH, LimitedFormParser, LimitedJSONParser, LimitedMultiPartParser, json_depth

BODY_METHODS = ("post", "put", "patch")
DEEP = "[" * 100_000 + "]" * 100_000


def _walk(resolver: URLResolver, prefix: str = "") -> Iterator[tuple[str, URLPattern]]:
    for entry in resolver.url_patterns:
        if isinstance(entry, URLResolver):
            yield from _walk(entry, prefix + str(entry.pattern))
        else:
            yield prefix + str(entry.pattern), entry


def _concrete(route: str) -> str:
    """A request path for a route: every captured parameter filled with a placeholder."""
    # re_path() groups (routers) first: their names are in angle brackets too.
    path = re.sub(r"\(\?P<\w+>[^)]*\)", "1", route)
    path = re.sub(r"<(?:\w+:)?(\w+)>", "1", path)  # path() converters
    return "/" + path.replace("^", "").replace("$", "")


def body_endpoints() -> list[tuple[str, str, tuple[type, ...]]]:
    """(path, method, parser classes) for every DRF view and method that parses a request body."""
    found = []
    for route, pattern in _walk(get_resolver()):
        view_class = getattr(pattern.callback, "cls", None)
        if not (isinstance(view_class, type) and issubclass(view_class, APIView)):
            continue
        actions = getattr(pattern.callback, "actions", None)  # a ViewSet: method -> action
        for method in BODY_METHODS:
            answers = method in actions if actions is not None else hasattr(view_class, method)
            if answers:
                # as_view(parser_classes=...) overrides the class attribute.
                parsers = pattern.callback.initkwargs.get("parser_classes", view_class.parser_classes)
                found.append((_concrete(route), method, tuple(parsers)))
    return found


ENDPOINTS = body_endpoints()
IDS = [f"{method.upper()} {path}" for path, method, _ in ENDPOINTS]


def test_the_resolver_finds_the_body_endpoints():
    # Guards the walk itself: if it found nothing, every test below would pass vacuously.
    found = {(path, method) for path, method, _ in ENDPOINTS}
    assert {("/api/v1/auth/token/", "post"), ("/api/v1/deployments/", "post"), ("/api/v1/telemetry/", "post")} <= found


@pytest.mark.parametrize(("path", "method", "parsers"), ENDPOINTS, ids=IDS)
def test_every_body_endpoint_parses_with_limits(path, method, parsers):
    limited = (LimitedJSONParser, LimitedFormParser, LimitedMultiPartParser)
    assert parsers and all(issubclass(parser, limited) for parser in parsers), parsers


@pytest.fixture
def admin_api(admin_user) -> APIClient:
    client = APIClient()
    client.force_authenticate(admin_user)
    return client


BAD_JSON_BODIES = {
    "100000 brackets": DEEP,
    "100000 braces": '{"a":' * 100_000 + "1" + "}" * 100_000,
    "deeper than the limit": "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1),
    "NaN": '{"memory_gb": NaN}',
    "a 5000-digit number": '{"memory_gb": ' + "9" * 5000 + "}",
    "not UTF-8": b'{"name": "\xff\xfe"}',
    "truncated": '{"name": ',
}


@pytest.mark.parametrize(("path", "method", "parsers"), ENDPOINTS, ids=IDS)
@pytest.mark.parametrize("body", BAD_JSON_BODIES.values(), ids=BAD_JSON_BODIES.keys())
def test_a_bad_json_body_is_a_400_on_every_endpoint(admin_api, path, method, parsers, body):
    response = getattr(admin_api, method)(path, data=body, content_type="application/json")

    # A placeholder id may name nothing (404) before the body is read; it must never be a 500.
    assert response.status_code in ((400, 404) if "/1/" in path else (400,)), response.content[:300]
    if response.status_code == 400:
        assert "parse error" in response.json()["detail"]


@pytest.mark.parametrize(("path", "method", "parsers"), ENDPOINTS, ids=IDS)
@pytest.mark.parametrize("content_type", ["application/json", "application/x-www-form-urlencoded"])
def test_a_body_over_the_size_limit_is_a_400(admin_api, settings, path, method, parsers, content_type):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    body = '{"name": "' + "x" * 2000 + '"}' if content_type == "application/json" else "name=" + "x" * 2000

    response = getattr(admin_api, method)(path, data=body, content_type=content_type)

    # An endpoint without a parser for this content type answers 415 before reading the body.
    refused = (400,) if any(parser.media_type == content_type for parser in parsers) else (415,)
    assert response.status_code in (refused + (404,) if "/1/" in path else refused), response.content[:300]


def test_the_anonymous_token_endpoint_refuses_deep_nesting_with_400(api, db):
    response = api.post("/api/v1/auth/token/", data=DEEP, content_type="application/json")

    assert response.status_code == 400
    assert "nested deeper than" in response.json()["detail"]


def test_the_token_endpoint_refuses_too_many_form_fields_with_400(api, db, settings):
    settings.DATA_UPLOAD_MAX_NUMBER_FIELDS = 10
    body = "&".join(f"f{i}=1" for i in range(11))

    response = api.post("/api/v1/auth/token/", data=body, content_type="application/x-www-form-urlencoded")

    assert response.status_code == 400


def test_the_token_endpoint_still_takes_a_form_and_json(api, viewer):
    from tests.conftest import PASSWORD

    as_form = api.post("/api/v1/auth/token/", {"username": viewer.username, "password": PASSWORD}, format="multipart")
    as_json = api.post("/api/v1/auth/token/", {"username": viewer.username, "password": PASSWORD}, format="json")
    as_urlencoded = api.post(
        "/api/v1/auth/token/",
        f"username={viewer.username}&password={PASSWORD}",
        content_type="application/x-www-form-urlencoded",
    )

    assert [as_form.status_code, as_json.status_code, as_urlencoded.status_code] == [200, 200, 200]


@pytest.mark.parametrize(
    ("value", "depth"),
    [(1, 0), ([], 1), ({"a": [1, {"b": []}]}, 4), ([[[]], []], 3)],
)
def test_json_depth(value, depth):
    assert json_depth(value) == depth


def test_an_oversize_form_from_a_browser_session_is_a_json_400(admin_user, settings):
    # With a session, DRF's CSRF check reads request.POST first: Django's own limit trips there.
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(admin_user)
    csrf_token = get_random_string(32)
    client.cookies["csrftoken"] = csrf_token

    response = client.post(
        "/api/v1/deployments/",
        data="name=" + "x" * 2000,
        content_type="application/x-www-form-urlencoded",
        HTTP_X_CSRFTOKEN=csrf_token,
    )

    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert "too large" in response.json()["detail"]


def _parse(text: str) -> object:
    from io import BytesIO

    return LimitedJSONParser().parse(BytesIO(text.encode()), "application/json", {"encoding": "utf-8"})


def test_the_parser_takes_json_nested_exactly_as_deep_as_allowed_and_refuses_one_level_more():
    # The parser skips its walk when the text has too few brackets to nest deeper: at the bound
    # itself it must still walk, and refuse one level more (also with brackets inside strings).
    assert json_depth(_parse("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH)) == MAX_JSON_DEPTH
    assert _parse('{"a": "[[[[[[[[[[[[[[[[[[[[[[[["}') == {"a": "[" * 24}
    with pytest.raises(ParseError, match="nested deeper than"):
        _parse("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1))
    with pytest.raises(ParseError, match="nested deeper than"):
        _parse('{"a": ' * MAX_JSON_DEPTH + '{"b": 1}' + "}" * MAX_JSON_DEPTH)


@pytest.mark.parametrize("escape", ["\\ud800", "\\uDFFF", "\\uDbFf"])
def test_the_parser_finds_a_lone_surrogate_escape_in_any_case_and_beside_other_text(escape):
    # The surrogate walk is skipped only for ASCII text without any \u escape.
    with pytest.raises(ValidationError) as refused:
        _parse('{"name": "caf\u00e9", "samples": [{"x": "a' + escape + 'b"}]}')
    assert list(refused.value.detail) == ["samples.0.x"]
    assert _parse('{"name": "caf\u00e9 \\u00e9 \\ud83d\\ude00"}') == {"name": "caf\u00e9 \u00e9 \U0001f600"}
