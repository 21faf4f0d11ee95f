"""Page helpers every app's server-rendered views share: the role gate, the list-page context and
the filter bar's drop-downs.

A base module: the apps (nodes, scheduler, lifecycle) may import it, and it imports nothing from
them, so that app pages never depend on the project's own dashboard (gpuplane.views).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib.auth.mixins import LoginRequiredMixin
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from gpuplane.roles import VIEWER, has_role

if TYPE_CHECKING:
    from django_filters import FilterSet


class RoleRequiredMixin(LoginRequiredMixin):
    """Pages for signed-in users who hold at least `required_role`.

    Anonymous users are redirected to settings.LOGIN_URL with `?next=`; a signed-in user without
    the role gets a 403 page that says which role is missing (not a login loop: signing in again
    would not help them).
    """

    required_role: str = VIEWER

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.user.is_authenticated and not has_role(request.user, self.required_role):
            return render(request, "registration/no_role.html", {"required_role": self.required_role}, status=403)
        return super().dispatch(request, *args, **kwargs)


def filter_list_context(request: HttpRequest, filterset: FilterSet) -> dict[str, Any]:
    """The context templates/list_base.html reads on a filterable, paginated list page, beside the
    ListView's own.

    `filter`: the filterset, whose form the filter bar renders. `filtered`: whether any query
    parameter other than `page` has a value (it shows "Clear" and picks the empty state's
    wording). `querystring`: the request's query without `page`, so that page links keep the
    filters. `item_name` and `item_name_plural`: the filtered model's verbose names ("node",
    "nodes"), which word the heading, the count and the empty state, as in Django's admin.
    """
    query = request.GET.copy()
    query.pop("page", None)
    meta = filterset.queryset.model._meta
    return {
        "filter": filterset,
        "filtered": any(value for key, value in request.GET.items() if key != "page"),
        "querystring": query.urlencode(),
        "item_name": str(meta.verbose_name),
        "item_name_plural": str(meta.verbose_name_plural),
    }


class FilteredListMixin:
    """A ListView filtered by its model's one FilterSet (the API's too), for templates/list_base.html:
    ``filterset_class`` over ``base_queryset()``; the filter bar's dropdowns; an invalid filter value
    shows the form error and no rows, never every row; ``filter_list_context`` in the context."""

    filterset_class: type[FilterSet]
    request: HttpRequest

    def base_queryset(self) -> Any:
        raise NotImplementedError

    def filterset_kwargs(self) -> dict[str, Any]:
        return {}

    def get_queryset(self) -> Any:
        queryset = self.base_queryset()
        self.filterset = self.filterset_class(self.request.GET or None, queryset=queryset, **self.filterset_kwargs())
        use_dropdowns(self.filterset.form)  # before validation: the widget reads the values
        if self.filterset.is_bound and not self.filterset.is_valid():
            return queryset.none()
        return self.filterset.qs

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context: dict[str, Any] = super().get_context_data(**kwargs)  # type: ignore[misc]
        context.update(filter_list_context(self.request, self.filterset))
        return context


class ListDropdown(forms.Select):
    """A drop-down for a multi-value filter field: one pick on the page, a list for the form.

    A FilterSet shared with the API has multi-value filters (`?gpu_model=A&gpu_model=B`, "A or
    B"), which would render as tall multi-select boxes; a filter bar reads better with drop-downs
    that start at "Any".
    """

    def value_from_datadict(self, data: Any, files: Any, name: str) -> list[str]:
        values = data.getlist(name) if hasattr(data, "getlist") else [data.get(name)]
        return [value for value in values if value]


def use_dropdowns(form: forms.Form) -> None:
    """Swap multi-select widgets of a filter form for ListDropdown, keeping their choices."""
    for bound_field in form:
        field = bound_field.field
        if isinstance(field, forms.MultipleChoiceField):
            field.widget = ListDropdown(choices=[("", "Any"), *field.choices])
