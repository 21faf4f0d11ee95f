"""`POST /api/v1/telemetry/`: node agents (and operators) push batches of GPU samples.

Body (JSON only)::

    {"node": "gpu-node-1",
     "samples": [{"gpu_uuid": "GPU-...", "ts": "2026-01-01T12:00:00Z", "utilization_pct": 37.5,
                  "memory_used_mib": 20480, "memory_total_mib": 81559, "memory_reserved_mib": 480,
                  "power_w": 312.0, "power_limit_w": 700.0, "temperature_c": 61.0, "sm_clock_mhz": 1980,
                  "processes": [{"pid": 4242, "used_memory_mib": 20000}]}]}

`gpu_uuid` and `ts` (ISO 8601 with Z or an offset) are required; a metric that was not measured
is null or left out; any other key is refused. Numbers must be finite JSON numbers (not strings,
booleans, NaN or Infinity) within physical bounds: those of any GPU (the schema's minimum and
maximum), then those of the sample's GPU (nodes.telemetry.limits): memory at most the GPU's
memory (used plus reserved at most total), power and power limit at most 1.5 × its model's TDP,
SM clock at most 1.25 × its maximum clock. The batch is typed and checked in bulk
(`nodes.telemetry.batch`, `nodes.telemetry.validation`): the serializers below only document it.
Answers:

- 201 `{"stored": n, "duplicates": m}`: every sample was taken. Duplicates are samples already
  stored (same GPU and ts), so an agent re-sending a batch after a lost answer stores nothing
  twice. With Prometheus as the time-series store (GPUPLANE_PROMETHEUS_URL) only each GPU's
  newest sample is kept (its latest values, exposed at /metrics/dcgm): `stored` counts those.
- 207 `{"stored": n, "duplicates": m, "refused": k, "samples": {"3": {"power_w": [...]}}, "retry": [5]}`:
  the good samples were stored; `samples` holds, per index of each refused sample, its messages
  per field; `retry` lists the refused samples whose only fault is a GPU the inventory does not
  know yet (a fresh node before its GPU report is bound): they may be sent again later, the
  others never will be taken.
- 400: the batch as a whole is malformed (not an object, `node` missing or unknown, `samples`
  not a list or longer than TELEMETRY_MAX_BATCH), or every sample was refused (the body is then
  the 207's, with `stored` 0): nothing was stored.
- 401 without credentials, with an unknown or revoked agent key, or with a ServiceAccount token
  the cluster does not vouch for as the node agent's; 403 for an agent of another node, or a user
  below the operator role; 503 when the cluster cannot be asked about a token now.

Who may post: a node agent for its own node, with its projected ServiceAccount token or a node
agent key (`Authorization: Bearer <token or key>`, nodes.authentication); a user with the
operator role (token or session) for any node.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import exceptions, status
from rest_framework.authentication import SessionAuthentication
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from gpuplane.parsers import LimitedJSONParser
from gpuplane.roles import OPERATOR, has_role
from gpuplane.strict_input import StrictQueryParametersMixin
from gpuplane.tokens import APITokenAuthentication
from nodes.api.telemetry_schema import IngestPartialSerializer, IngestResultSerializer, TelemetryBatchSerializer
from nodes.authentication import NodeAgent, NodeAgentTokenAuthentication, ServiceAccountTokenAuthentication
from nodes.models import Node
from nodes.telemetry.batch import BatchRefused, parse_envelope, parse_samples
from nodes.telemetry.ingest import IngestResult, ingest_samples
from nodes.telemetry.validation import TelemetryRejected


def agent_refusal(node_name: str) -> str:
    return f"This agent token may only post telemetry for node {node_name!r}."


def answer(result: IngestResult) -> Response:
    """201 when every sample was taken; 207 with the refused ones when some were; 400 when none was."""
    body: dict[str, Any] = {"stored": result.stored, "duplicates": result.duplicates}
    if not result.errors:
        return Response(body, status=status.HTTP_201_CREATED)
    body.update(refused=result.refused, samples=result.errors, retry=list(result.retry))
    taken = result.stored + result.duplicates
    return Response(body, status=status.HTTP_207_MULTI_STATUS if taken else status.HTTP_400_BAD_REQUEST)


class CanPostTelemetry(BasePermission):
    """A node agent (token or key), or a user with the operator role (or above)."""

    message = "Posting telemetry needs a node agent token or the operator role."

    def has_permission(self, request: Request, view: APIView) -> bool:
        if isinstance(request.user, NodeAgent):
            return True
        return bool(request.user and request.user.is_authenticated and has_role(request.user, OPERATOR))


class TelemetryView(StrictQueryParametersMixin, APIView):
    """Receive a batch of GPU samples of one node."""

    authentication_classes = [
        ServiceAccountTokenAuthentication, NodeAgentTokenAuthentication, APITokenAuthentication, SessionAuthentication,
    ]
    permission_classes = [CanPostTelemetry]
    parser_classes = [LimitedJSONParser]  # JSON only, with the size and nesting limits of every endpoint
    # Read by nodes.authentication.NodeAgentTokenScheme: list agent tokens for this operation.
    accepts_agent_tokens = True

    @extend_schema(
        operation_id="telemetry_create",
        tags=["telemetry"],
        request=TelemetryBatchSerializer,
        responses={
            201: IngestResultSerializer,
            207: OpenApiResponse(
                IngestPartialSerializer,
                description=(
                    "Some samples refused, the others stored. `samples` holds, per index of each refused sample, "
                    'its messages per field ({"samples": {"3": {"power_w": [...]}}}): an unknown GPU UUID or a GPU '
                    "of another node, a metric past its GPU's physical limits (memory, 1.5 × the TDP, 1.25 × the "
                    "maximum clock), a bad type or time. `retry` lists the refused samples worth sending again later "
                    "(their GPU is not in the inventory yet); an agent drops the others."
                ),
            ),
            400: OpenApiResponse(
                description=(
                    "Refused; nothing stored. Either the batch as a whole (messages per field: an unknown "
                    "`node`, `samples` not a list or longer than TELEMETRY_MAX_BATCH, an unknown key), or every "
                    "sample, with the 207's body (`stored` 0)."
                )
            ),
            401: OpenApiResponse(description="No credentials, an unknown or revoked agent key, or a token the "
                                             "cluster does not vouch for as the node agent's."),
            403: OpenApiResponse(description="An agent of another node, or a user below the operator role."),
            503: OpenApiResponse(description="The agent's ServiceAccount token cannot be checked with the cluster now."),
        },
        examples=[
            OpenApiExample(
                "One sample",
                request_only=True,
                value={
                    "node": "gpu-node-1",
                    "samples": [
                        {
                            "gpu_uuid": "GPU-5f1b2c3d-0000-1111-2222-333344445555",
                            "ts": "2026-01-01T12:00:00Z",
                            "utilization_pct": 37.5,
                            "memory_used_mib": 20480,
                            "memory_total_mib": 81559,
                            "memory_reserved_mib": 480,
                            "power_w": 312.0,
                            "power_limit_w": 700.0,
                            "temperature_c": 61.0,
                            "sm_clock_mhz": 1980,
                            "processes": [{"pid": 4242, "used_memory_mib": 20000}],
                        }
                    ],
                },
            )
        ],
    )
    def post(self, request: Request) -> Response:
        agent = request.user if isinstance(request.user, NodeAgent) else None
        data = request.data
        # Authorization before validation: an agent learns nothing about another node's batch.
        claimed = data.get("node") if isinstance(data, Mapping) else None
        if agent is not None and isinstance(claimed, str) and claimed != agent.node_name:
            raise exceptions.PermissionDenied(agent_refusal(agent.node_name))
        try:
            node_name, items = parse_envelope(data, settings.TELEMETRY_MAX_BATCH)
        except BatchRefused as exc:
            raise exceptions.ValidationError(exc.errors) from None
        node = agent.node if agent is not None else Node.objects.filter(name=node_name).first()
        if node is None:
            raise exceptions.ValidationError({"node": [f"Unknown node {node_name!r}."]})
        parsed = parse_samples(items)
        try:
            result = ingest_samples(
                parsed.samples, node=node, source="agent" if agent else "api", indexes=parsed.indexes,
                refused=parsed.errors,
            )
        except TelemetryRejected as exc:
            raise exceptions.ValidationError(exc.errors) from exc
        return answer(result)
