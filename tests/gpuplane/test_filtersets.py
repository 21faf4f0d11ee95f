"""One FilterSet per model, shared by the HTML list and the REST API (NetBox-style)."""
from __future__ import annotations

import django_filters
import pytest
from django.urls import resolve

pytestmark = pytest.mark.django_db

# page URL, API URL: the two lists of one model.
LISTS = [
    ("/nodes/", "/api/v1/nodes/"),
    ("/deployments/", "/api/v1/deployments/"),
    ("/rollouts/", "/api/v1/rollouts/"),
    ("/consolidation/", "/api/v1/consolidations/"),
]


def _all_filtersets() -> list[type[django_filters.FilterSet]]:
    found, pending = [], list(django_filters.FilterSet.__subclasses__())
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


def test_no_model_has_two_filtersets():
    for page, api in LISTS:  # importing the URLconf's views loads every FilterSet
        resolve(page), resolve(api)
    by_model: dict[str, list[str]] = {}
    for cls in _all_filtersets():
        model = getattr(getattr(cls, "Meta", None), "model", None)
        if model is not None and cls.__module__.split(".")[0] != "tests":
            by_model.setdefault(model._meta.label, []).append(f"{cls.__module__}.{cls.__qualname__}")
    assert {label: names for label, names in by_model.items() if len(names) > 1} == {}


@pytest.mark.parametrize(("page", "api"), LISTS)
def test_the_page_and_the_api_filter_with_the_same_filterset(admin_client, page, api):
    response = admin_client.get(page)
    assert response.status_code == 200
    viewset = resolve(api).func.cls
    assert type(response.context["filter"]) is viewset.filterset_class
