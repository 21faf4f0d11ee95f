"""`GET /api/v1/`: every endpoint of the API, so a client (or a person) can find them all.

A flat map of name to absolute URL. Routes that take a parameter are listed as URL templates
with the parameter in braces (`.../nodes/{name}/`), as in the OpenAPI schema. The list is
written out here rather than taken from a router, because the endpoints live in four apps and
outside the routers (token, schema, docs, metrics); tests/gpuplane/test_api_root.py fails when
a route is registered and not listed.
"""
from __future__ import annotations

from django.urls import reverse
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

# (name in the answer, URL name to reverse, suffix appended to it: a parameter template or "")
ENDPOINTS: tuple[tuple[str, str, str], ...] = (
    ("nodes", "nodes-api:node-list", ""),
    ("node", "nodes-api:node-list", "{name}/"),
    ("node-series", "nodes-api:node-list", "{name}/series/"),
    ("node-gpu-report", "nodes-api:node-list", "{name}/gpu-report/"),
    ("gpus", "nodes-api:gpu-list", ""),
    ("gpu", "nodes-api:gpu-list", "{uuid}/"),
    ("gpu-series", "nodes-api:gpu-list", "{uuid}/series/"),
    ("partitions", "nodes-api:partition-list", ""),
    ("partition", "nodes-api:partition-list", "{pk}/"),
    ("heatmap", "nodes-api:heatmap", ""),
    ("telemetry", "nodes-api:telemetry", ""),
    ("deployments", "scheduler-api:deployment-list", ""),
    ("deployment", "scheduler-api:deployment-list", "{pk}/"),
    ("deployment-decision", "scheduler-api:deployment-list", "{pk}/decision/"),
    ("deployment-scaling", "scheduler-api:deployment-list", "{pk}/scaling/"),
    ("deployment-hpa", "scheduler-api:deployment-list", "{pk}/hpa/"),
    ("deployment-inference-services", "scheduler-api:deployment-list", "{pk}/inference-services/"),
    ("sharing-policies", "scheduler-api:sharing-policy-list", ""),
    ("sharing-policy", "scheduler-api:sharing-policy-list", "{pk}/"),
    ("priority-levels", "scheduler-api:priority-level-list", ""),
    ("priority-level", "scheduler-api:priority-level-list", "{pk}/"),
    ("namespace-quotas", "scheduler-api:namespace-quota-list", ""),
    ("namespace-quota", "scheduler-api:namespace-quota-list", "{pk}/"),
    ("admission-settings", "scheduler-api:admission-settings", ""),
    ("admission-dry-run", "scheduler-api:admission-dry-run", ""),
    ("moves", "scheduler-api:move-list", ""),
    ("move", "scheduler-api:move-list", "{pk}/"),
    ("rollouts", "rollouts-api:rollout-list", ""),
    ("rollout", "rollouts-api:rollout-list", "{pk}/"),
    ("rollout-events", "rollouts-api:rollout-list", "{pk}/events/"),
    ("rollout-preview", "rollouts-api:rollout-list", "preview/"),
    ("rollout-start", "rollouts-api:rollout-list", "{pk}/start/"),
    ("rollout-pause", "rollouts-api:rollout-list", "{pk}/pause/"),
    ("rollout-resume", "rollouts-api:rollout-list", "{pk}/resume/"),
    ("rollout-abort", "rollouts-api:rollout-list", "{pk}/abort/"),
    ("savings", "savings-api:savings", ""),
    ("consolidations", "consolidation-api:consolidation-list", ""),
    ("consolidation", "consolidation-api:consolidation-list", "{pk}/"),
    ("consolidation-approve", "consolidation-api:consolidation-list", "{pk}/approve/"),
    ("consolidation-reject", "consolidation-api:consolidation-list", "{pk}/reject/"),
    ("audit-events", "lifecycle-api:auditevent-list", ""),
    ("audit-event", "lifecycle-api:auditevent-list", "{pk}/"),
    ("auth-token", "api-token", ""),
    ("schema", "schema", ""),
    ("docs", "api-docs", ""),
    ("metrics", "metrics", ""),
)


class APIRootView(APIView):
    """The endpoint map; readable by every role (the default permission), like the lists it names."""

    schema = None  # not an operation of the API, as DRF's own root view

    def get(self, request: Request) -> Response:
        return Response(
            {name: request.build_absolute_uri(reverse(url_name)) + suffix for name, url_name, suffix in ENDPOINTS}
        )
