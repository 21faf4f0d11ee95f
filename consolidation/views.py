"""The consolidation page: plans with their moves, freed nodes and savings per hour, and the
admin's Run the analysis / Approve / Reject (with a reason) buttons. Views hold no plan logic:
the analysis is ``consolidation.analysis`` and deciding ``consolidation.approval``, the same
calls as the API."""
from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.views import View
from django.views.generic import ListView

from consolidation.analysis import run_analysis
from consolidation.approval import NotAllowed, approve, reject
from consolidation.filtersets import PlanFilterSet
from consolidation.models import ConsolidationPlan
from gpuplane.roles import ADMIN, has_role
from gpuplane.web import FilteredListMixin, RoleRequiredMixin

PAGE_SIZE = 20


class PlanListView(RoleRequiredMixin, FilteredListMixin, ListView):
    template_name = "consolidation/plan_list.html"
    context_object_name = "plans"
    paginate_by = PAGE_SIZE

    filterset_class = PlanFilterSet

    def base_queryset(self) -> Any:
        return ConsolidationPlan.objects.select_related("created_by", "decided_by").order_by("-created_at", "-id")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["can_decide"] = has_role(self.request.user, ADMIN)
        return context


class PlanAnalyseView(RoleRequiredMixin, View):
    """POST only: run the analysis now (admins), as ``POST /api/v1/consolidations/`` does."""

    required_role = ADMIN
    http_method_names = ["post"]

    def post(self, request: HttpRequest) -> HttpResponse:
        outcome = run_analysis(actor=request.user)
        if outcome.plan is None:
            messages.info(request, outcome.detail)
            return HttpResponseRedirect(reverse("consolidation:plan-list"))
        if outcome.created:
            messages.success(request, f"{outcome.detail} Review it and approve or reject.")
        else:
            messages.info(request, outcome.detail)
        return HttpResponseRedirect(f"{reverse('consolidation:plan-list')}#plan-{outcome.plan.pk}")


class PlanDecisionView(RoleRequiredMixin, View):
    """POST only: approve or reject one plan (admins); back to the list with what happened."""

    required_role = ADMIN
    http_method_names = ["post"]

    def post(self, request: HttpRequest, pk: int, decision: str) -> HttpResponse:
        plan = get_object_or_404(ConsolidationPlan, pk=pk)
        try:
            if decision == "approve":
                approve(plan, actor=request.user)
                messages.success(request, f"Plan {pk} approved: it is re-validated, then executed replacement-first.")
            elif decision == "reject":
                reason = request.POST.get("reason", "").strip()
                if not reason:
                    messages.error(request, "A rejection needs a reason.")
                else:
                    reject(plan, reason, actor=request.user)
                    messages.success(request, f"Plan {pk} rejected.")
            else:
                return HttpResponse(status=404)
        except NotAllowed as error:
            messages.error(request, str(error))
        return HttpResponseRedirect(reverse("consolidation:plan-list"))
