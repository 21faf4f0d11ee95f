"""Server-rendered rollout pages: the list, the create form with its dry-run preview, and a
rollout's live page.

Views hold no rollout logic: the form checks input through the API's serializer and
``rollouts.creating``; the preview and the creation are ``rollouts.creating`` calls. The live
page renders the API's own serialization of the rollout, so the numbers it first shows are the
ones static/js/rollout_live.js later reads from ``/api/v1/rollouts/<id>/``.
"""
from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.db.models import QuerySet
from django.http import HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.views.generic import DetailView, FormView, ListView

from gpuplane.roles import OPERATOR, has_role
from gpuplane.web import FilteredListMixin, RoleRequiredMixin
from lifecycle.audit import object_type_of
from rollouts.api.serializers import RollingUpdateSerializer
from rollouts.choices import NodeState, RolloutStatus
from rollouts.creating import RolloutRefused, create_rollout
from rollouts.events import EVENT_LIMIT, rollout_events
from rollouts.filtersets import RolloutFilterSet
from rollouts.forms import RolloutForm
from rollouts.models import RollingUpdate

_STATUS_BADGES: dict[str, str] = {
    RolloutStatus.PENDING: "warn", RolloutStatus.RUNNING: "ok", RolloutStatus.PAUSED: "warn",
    RolloutStatus.SUCCEEDED: "ok", RolloutStatus.FAILED: "bad", RolloutStatus.ROLLED_BACK: "bad",
    RolloutStatus.EXPIRED: "muted", RolloutStatus.ABORTED: "muted",
}
# Which buttons a rollout in each status offers (the API decides whether the action is allowed).
ACTIONS_BY_STATUS: dict[str, tuple[str, ...]] = {
    RolloutStatus.PENDING: ("start", "abort"),
    RolloutStatus.RUNNING: ("pause", "abort"),
    RolloutStatus.PAUSED: ("resume", "abort"),
}
ACTIONS = ("start", "pause", "resume", "abort")
# How far along its steps a node on its way to the new config is, for the bar per node (the live
# script uses it too). A node that left that way (skipped, failed, rolled back) has no percentage:
# its cell says how it ended (STEP_WORDS).
STEP_PERCENT: dict[str, int] = {
    NodeState.PENDING: 0, NodeState.PREWARMING: 20, NodeState.DRAINING: 40, NodeState.RECONFIGURING: 60,
    NodeState.VERIFYING: 80, NodeState.MOVING_BACK: 90, NodeState.SUCCEEDED: 100,
}
STEP_WORDS: dict[str, str] = {
    NodeState.SKIPPED: "left as it was", NodeState.FAILED: "stopped: restored and uncordoned",
    NodeState.ROLLED_BACK: "back at its previous config",
}
# The counts under the progress bar, in this order.
COUNTED_STATES = (NodeState.SUCCEEDED, NodeState.SKIPPED, NodeState.ROLLED_BACK, NodeState.FAILED)


def node_counts(nodes: list[dict[str, Any]]) -> list[tuple[str, int]]:
    """(state, how many) for the states COUNTED_STATES names, then "in progress or waiting"."""
    counts = [(str(state), sum(node["state"] == state for node in nodes)) for state in COUNTED_STATES]
    return [*counts, ("other", len(nodes) - sum(n for _, n in counts))]
# Seconds between two reads of the API on the live page.
POLL_SECONDS = 3


def status_badge(status: str) -> str:
    return _STATUS_BADGES.get(status, "muted")


_NODE_BADGES: dict[str, str] = {
    NodeState.SUCCEEDED: "ok", NodeState.SKIPPED: "muted", NodeState.PENDING: "muted",
    NodeState.FAILED: "bad", NodeState.ROLLED_BACK: "bad",
}


def node_badge(state: str) -> str:
    """Done, skipped or waiting: calm; failed: bad; any step in progress: warn."""
    return _NODE_BADGES.get(state, "warn")


class RolloutListView(RoleRequiredMixin, FilteredListMixin, ListView):
    """`/rollouts/`: every rollout with its status and progress; operators get the create button."""

    template_name = "rollouts/rollout_list.html"
    context_object_name = "rollouts"
    paginate_by = 50

    filterset_class = RolloutFilterSet

    def base_queryset(self) -> QuerySet[RollingUpdate]:
        return RollingUpdate.objects.select_related("created_by").prefetch_related("nodes").order_by("-created_at", "-id")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        for rollout in context["rollouts"]:
            rollout.badge = status_badge(rollout.status)
            rollout.node_count = len(rollout.nodes.all())
        # The model is a RollingUpdate; the pages and the API call it a rollout.
        context.update(item_name="rollout", item_name_plural="rollouts")
        context["can_create"] = has_role(self.request.user, OPERATOR)
        return context


class RolloutCreateView(RoleRequiredMixin, FormView):
    """`/rollouts/new/` (operators): the form. "Preview" shows the dry run and stores nothing;
    "Create" stores a pending rollout and opens its page, or shows why it cannot be done safely
    now (the API's 409) with the preview."""

    required_role = OPERATOR
    template_name = "rollouts/rollout_form.html"
    form_class = RolloutForm

    def form_valid(self, form: RolloutForm) -> HttpResponse:
        request_values = form.request_values
        assert request_values is not None  # set by a clean() without errors
        if "preview" in self.request.POST:
            return self.render_to_response(self.get_context_data(form=form, preview=request_values.preview().as_dict()))
        try:
            rollout = create_rollout(request_values, actor=self.request.user)
        except RolloutRefused as error:
            return self.render_to_response(self.get_context_data(
                form=form, refused=list(error.preview.blockers), preview=error.preview.as_dict()))
        # The status badge says pending (and follows the rollout live); a flash saying so would go stale.
        messages.success(self.request, f"Created rollout {rollout.name}.")
        return HttpResponseRedirect(reverse("rollouts:rollout-detail", args=[rollout.pk]))


class RolloutDetailView(RoleRequiredMixin, DetailView):
    """`/rollouts/<id>/`: overall progress, a bar per node, the event log (the rollout's and its
    nodes' audit events); refreshed live."""

    template_name = "rollouts/rollout_detail.html"
    context_object_name = "rollout"

    def get_queryset(self) -> QuerySet[RollingUpdate]:
        return RollingUpdate.objects.select_related("created_by").prefetch_related("nodes")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        rollout: RollingUpdate = self.object
        data = RollingUpdateSerializer(rollout).data
        for node in data["nodes"]:
            node["badge"] = node_badge(node["state"])
            node["step_percent"] = STEP_PERCENT.get(node["state"])
            node["step_words"] = STEP_WORDS.get(node["state"], "")
        offered = ACTIONS_BY_STATUS.get(rollout.status, ())
        object_type = object_type_of(rollout)
        context.update(
            data=data,
            counts=node_counts(data["nodes"]),
            badge=status_badge(rollout.status),
            events=rollout_events(rollout),
            events_url=reverse("rollouts-api:rollout-events", args=[rollout.pk]),
            event_limit=EVENT_LIMIT,
            can_operate=has_role(self.request.user, OPERATOR),
            actions=[(action, action in offered) for action in ACTIONS],
            poll_seconds=POLL_SECONDS,
            api_url=reverse("rollouts-api:rollout-detail", args=[rollout.pk]),
            audit_api_query=f"object_type={object_type}&object_id={rollout.pk}",
            live_words={
                "step_percent": {str(state): p for state, p in STEP_PERCENT.items()},
                "step_words": {str(state): words for state, words in STEP_WORDS.items()},
                "counted_states": [str(state) for state in COUNTED_STATES],
                "actions": {str(status): list(a) for status, a in ACTIONS_BY_STATUS.items()},
                "node_badges": {state.value: node_badge(state) for state in NodeState},
                "status_badges": {status.value: status_badge(status) for status in RolloutStatus},
                "status_labels": {status.value: status.label for status in RolloutStatus},
            },
        )
        return context
