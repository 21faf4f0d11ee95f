"""`GET /api/v1/` lists every endpoint of the API (gpuplane/api_root.py).

The routes are read from Django's URL resolver, so registering a viewset or view under `api/`
(or moving `/metrics`) without listing it at the root fails here.
"""
from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

pytestmark = pytest.mark.django_db

_REGEX_GROUP = re.compile(r"\(\?P<(\w+)>[^)]*\)")  # router routes: (?P<pk>[0-9]+)
_CONVERTER = re.compile(r"<(?:\w+:)?(\w+)>")  # path() routes: <str:uuid>


def _routes(patterns: list[URLPattern | URLResolver], prefix: str = "") -> Iterator[str]:
    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            yield from _routes(pattern.url_patterns, route)
        else:
            yield route


def _template(route: str) -> str:
    """"api/v1/^nodes/(?P<name>[^/]+)/$" -> "/api/v1/nodes/{name}/"."""
    route = _CONVERTER.sub(r"{\1}", _REGEX_GROUP.sub(r"{\1}", route))
    return "/" + route.replace("^", "").replace("$", "")


def api_routes() -> list[str]:
    """Every machine-facing route: all of `/api/`, and `/metrics`."""
    templates = {_template(route) for route in _routes(get_resolver().url_patterns)}
    return sorted(t for t in templates if t.startswith("/api/") or t == "/metrics")


def test_the_route_walk_sees_every_app():
    # Guards the test below against a walk that finds nothing (it would then pass vacuously).
    routes = api_routes()

    for expected in ("/api/v1/nodes/{name}/", "/api/v1/partitions/{pk}/", "/api/v1/deployments/{pk}/decision/",
                     "/api/v1/audit-events/", "/api/v1/gpus/{uuid}/series/", "/api/v1/auth/token/", "/metrics"):
        assert expected in routes


@pytest.mark.parametrize("route", [r for r in api_routes() if r != "/api/v1/"])
def test_the_root_lists_every_registered_route(viewer_api, route):
    body = viewer_api.get("/api/v1/").json()

    listed = {url.removeprefix("http://testserver") for url in body.values()}
    assert route in listed, f"{route} is registered but GET /api/v1/ does not list it (gpuplane/api_root.py)"


def test_the_root_lists_the_main_collections_by_name(viewer_api, api):
    assert api.get("/api/v1/").status_code == 401

    body = viewer_api.get("/api/v1/").json()

    assert body["nodes"] == "http://testserver/api/v1/nodes/"
    assert body["deployments"] == "http://testserver/api/v1/deployments/"
    assert body["audit-events"] == "http://testserver/api/v1/audit-events/"
    assert body["telemetry"] == "http://testserver/api/v1/telemetry/"
    assert body["gpu-series"] == "http://testserver/api/v1/gpus/{uuid}/series/"
    assert body["auth-token"] == "http://testserver/api/v1/auth/token/"
    assert body["schema"] == "http://testserver/api/schema/"
    assert body["docs"] == "http://testserver/api/docs/"


def test_every_listed_collection_answers(viewer_api):
    # Each URL without a parameter leads somewhere: never a 404 (telemetry is for node agents,
    # so a viewer gets 403 there; the token endpoint takes only POST: 405).
    body = viewer_api.get("/api/v1/").json()

    for name, url in body.items():
        if "{" not in url:
            assert viewer_api.get(url).status_code in (200, 403, 405), name
