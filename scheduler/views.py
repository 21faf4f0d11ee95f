"""Server-rendered deployment pages: the list, the deploy form, a deployment with its decision
matrix, and the delete confirmation.

Views call `scheduler.services` for every change (deploy, delete) and hold no placement logic;
how a stored decision matrix is shown (verdicts, per-plugin columns, what the truncated matrix
left out) is computed in the small pure functions below so that templates stay free of
arithmetic.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db.models import Prefetch, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.views import View
from django.views.generic import DetailView, FormView, ListView

from gpuplane.roles import OPERATOR, has_role
from gpuplane.web import FilteredListMixin, RoleRequiredMixin
from nodes.cluster.base import ClusterError
from nodes.models import Node
from nodes.vocabulary import MIB_PER_GB
from scheduler import services
from scheduler.choices import DeploymentStatus
from scheduler.filtersets import DeploymentFilterSet
from scheduler.forms import DeployForm
from scheduler.matrix_view import (
    CHART_TOP_NODES,
    MatrixTable,
    matrix_table,
    rejection_rows,
)
from scheduler.models import Decision, Deployment, Placement
from scheduler.services.autoscaling import timeline
from scheduler.workloads import host_requests

# Badge modifier per deployment status; every badge also carries the status in words.
_STATUS_BADGES: dict[str, str] = {
    DeploymentStatus.PENDING: "warn",
    DeploymentStatus.PLACED: "ok",
    DeploymentStatus.RUNNING: "ok",
    DeploymentStatus.FAILED: "bad",
    DeploymentStatus.DELETED: "muted",
}


def status_badge(status: str) -> str:
    """The `.badge--*` modifier for a deployment status ("muted" for one this page does not know)."""
    return _STATUS_BADGES.get(status, "muted")


def format_gb(memory_mib: int) -> str:
    """Memory in the deploy form's unit: 8192 -> "8 GB", 40960 -> "40 GB", 1536 -> "1.5 GB"."""
    return f"{memory_mib / MIB_PER_GB:.2f}".rstrip("0").removesuffix(".") + " GB"


def suggested_fields(form: DeployForm, suggestion: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """The form's posted fields with a suggestion's changes applied, as (name, value) pairs for the
    "deploy with this change" button; empty without a suggestion."""
    if not suggestion:
        return []
    changes = {name: str(value) for name, value in (suggestion.get("changes") or {}).items()}
    pairs = [(name, value) for name in form.data if name != "csrfmiddlewaretoken" and name not in changes
             for value in form.data.getlist(name)]
    return pairs + sorted(changes.items())


def node_urls(names: set[str]) -> dict[str, str]:
    """Node page URLs of those `names` that still exist in the inventory (one query)."""
    existing = Node.objects.filter(name__in=names).values_list("name", flat=True)
    return {name: reverse("nodes:node-detail", args=[name]) for name in existing}


# ---- views -------------------------------------------------------------------------------------


class DeploymentListView(RoleRequiredMixin, FilteredListMixin, ListView):
    """`/deployments/`: every deployment with its request, status and the nodes it runs on;
    filterable by status and namespace."""

    template_name = "scheduler/deployment_list.html"
    context_object_name = "deployments"
    paginate_by = 50

    filterset_class = DeploymentFilterSet

    def base_queryset(self) -> QuerySet[Deployment]:
        placements = Placement.objects.select_related("node").order_by("replica_index")
        return Deployment.objects.prefetch_related(Prefetch("placements", placements)).order_by("-created_at", "-id")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        for deployment in context["deployments"]:
            deployment.memory = format_gb(deployment.memory_mib)
            deployment.badge = status_badge(deployment.status)
            placements = list(deployment.placements.all())
            # A node holding two replicas is listed once.
            deployment.node_names = list(dict.fromkeys(p.node.name for p in placements if p.node_id is not None))
            deployment.handed_over = sum(1 for p in placements if p.node_id is None)
            # Placements are kept as history; once released they no longer hold those nodes.
            deployment.released = deployment.status in (DeploymentStatus.DELETED, DeploymentStatus.FAILED)
        context["can_deploy"] = has_role(self.request.user, OPERATOR)
        return context


class DeployView(RoleRequiredMixin, FormView):
    """`/deployments/new/` (operators): the deploy form.

    Success redirects to the new deployment's page. Invalid input re-renders the form with the
    services' field messages. When no node fits (services.NoCapacity) the form comes back with
    the explanation (dominant reason first, and a suggestion checked to work when there is one)
    and the rejection reasons; nothing is stored in that case.
    """

    required_role = OPERATOR
    template_name = "scheduler/deploy_form.html"
    form_class = DeployForm

    def form_valid(self, form: DeployForm) -> HttpResponse:
        try:
            deployment = services.deploy(form.spec(), user=self.request.user)
        except ValidationError as error:  # the form ran the same validation; kept for races and safety
            form.add_service_errors(error)
            return self.form_invalid(form)
        except services.NoCapacity as error:
            return self.render_to_response(self.get_context_data(
                form=form, no_capacity=error.message, rejections=rejection_rows(error.decision),
                suggestion=error.explanation.get("suggestion"), explained=bool(error.explanation),
                suggested_fields=suggested_fields(form, error.explanation.get("suggestion")),
            ))
        except services.DeployFailed as error:
            # Stored as FAILED with its decision and released: its page says what happened.
            messages.error(self.request, f"{error.deployment} failed: {error.message}")
            return HttpResponseRedirect(reverse("scheduler:deployment-detail", args=[error.deployment.pk]))
        messages.success(self.request, f"Deployed {deployment}: {deployment.message or deployment.get_status_display()}.")
        return HttpResponseRedirect(reverse("scheduler:deployment-detail", args=[deployment.pk]))


@dataclass(frozen=True)
class ReplicaDecision:
    """One replica's stored decision with its table and the ids the chart script looks up."""

    decision: Decision
    table: MatrixTable
    chart_data_id: str


MOVES_SHOWN = 10


class DeploymentDetailView(RoleRequiredMixin, DetailView):
    """`/deployments/<id>/`: status and request, the placements, and per replica the decision
    matrix as a table and a chart of weighted scores."""

    template_name = "scheduler/deployment_detail.html"
    context_object_name = "deployment"

    def get_queryset(self) -> QuerySet[Deployment]:
        return Deployment.objects.select_related("created_by")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        deployment: Deployment = self.object
        placements = list(deployment.placements.select_related("node").order_by("replica_index"))
        decisions = list(deployment.decisions.select_related("node").order_by("replica_index", "created_at"))
        names = {row["node"] for d in decisions for row in (d.matrix or {}).get("rows") or []}
        names |= {p.node.name for p in placements if p.node_id is not None}
        urls = node_urls(names)
        context.update(
            badge=status_badge(deployment.status),
            memory=format_gb(deployment.memory_mib),
            host_requests=host_requests(deployment),
            placements=[(p, services.placement_summary(p)) for p in placements],
            replica_decisions=[
                ReplicaDecision(d, matrix_table(d.matrix or {}, urls), f"decision-matrix-{d.replica_index}-{d.pk}")
                for d in decisions
            ],
            node_urls=urls,
            can_delete=has_role(self.request.user, OPERATOR) and deployment.status != DeploymentStatus.DELETED,
            chart_top_nodes=CHART_TOP_NODES,
            events=services.deployment_events(deployment),
            **_scaling_context(deployment),
            audit_api_query=f"object_type=scheduler.deployment&object_id={deployment.pk}",
        )
        # Its moves (the mover's): the latest few, and every one that lost a replica, said loudly.
        moves = deployment.moves.select_related("original").order_by("-created_at", "-id")
        context.update(moves=list(moves[:MOVES_SHOWN]), lost_moves=list(moves.filter(lost=True)))
        return context


def _scaling_context(deployment: Deployment) -> dict[str, Any]:
    """The scaling timeline's chart data (oldest first) and the changes table (newest first)."""
    events = timeline(deployment)
    data = [{"at": e.at.isoformat(), "replicas": e.replicas_after, "action": e.action, "outcome": e.outcome,
             "policy": e.policy, "reason": (e.decision or {}).get("reason", e.message),
             "queue": (e.inputs or {}).get("queue"), "arrival_rps": (e.inputs or {}).get("arrival_rps"),
             "ttft_p95_s": (e.inputs or {}).get("ttft_p95_s")} for e in events]
    changes = [e for e in reversed(events) if e.action in ("up", "down")][:20]
    return {"scaling_timeline": data, "scaling_changes": changes}


class DeploymentDeleteView(RoleRequiredMixin, View):
    """`/deployments/<id>/delete/` (operators): GET asks for confirmation, POST deletes the
    workloads and releases every GPU share (services.delete_deployment)."""

    required_role = OPERATOR
    template_name = "scheduler/deployment_confirm_delete.html"

    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        deployment = get_object_or_404(Deployment, pk=pk)
        placements = deployment.placements.select_related("node").order_by("replica_index")
        return render(request, self.template_name, {"deployment": deployment, "placements": placements})

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        deployment = get_object_or_404(Deployment, pk=pk)
        if deployment.status == DeploymentStatus.DELETED:
            messages.info(request, f"{deployment} was already deleted.")
        else:
            try:
                services.delete_deployment(deployment, user=request.user)
            except ClusterError as error:
                messages.error(request, f"Could not delete {deployment}: {error}")
            else:
                messages.success(request, f"Deleted {deployment}; its GPUs are released.")
        return HttpResponseRedirect(reverse("scheduler:deployment-detail", args=[deployment.pk]))


class AdmissionDryRunView(RoleRequiredMixin, View):
    """`/deployments/admission-dry-run/` (operators): paste a Pod or an OME InferenceService (YAML
    or JSON) and see what the admission webhook would decide (the choice and why, the decision
    matrix, the JSON Patch); nothing is stored or reserved (``scheduler.admission.dry_run``)."""

    required_role = OPERATOR
    template_name = "scheduler/admission_dry_run.html"

    def get(self, request: HttpRequest) -> HttpResponse:
        return render(request, self.template_name, {"text": ""})

    def post(self, request: HttpRequest) -> HttpResponse:
        from scheduler.admission import dry_run

        text = request.POST.get("manifest", "")
        context: dict[str, Any] = {"text": text}
        try:
            obj = yaml.safe_load(text)
        except yaml.YAMLError as error:
            obj, context["error"] = None, f"Not YAML or JSON: {error}"
        if obj is not None and not isinstance(obj, dict):
            context["error"] = "Paste one object: a Pod or an InferenceService."
        elif isinstance(obj, dict):
            result = dry_run(obj)
            names = {row.get("node") for row in (result.get("matrix") or {}).get("rows") or []}
            context.update(result=result, patch=json.dumps(result["patch"], indent=2),
                           table=matrix_table(result.get("matrix") or {}, node_urls({n for n in names if n}))
                           if result.get("matrix") else None)
        return render(request, self.template_name, context)
