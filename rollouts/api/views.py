"""`/api/v1/rollouts/`: create (with its preview checked), dry-run preview, list, read, the event log.

Thin: HTTP to ``rollouts.creating`` calls and their outcomes to status codes. 201 stored
(pending); 400 invalid input (field messages; a config's reason per GPU model); 409 the preview
shows it cannot be done safely now (the reasons and the preview; nothing stored). Reading needs
the viewer role, creating, previewing and start/pause/resume/abort the operator role; an action
the rollout's status does not allow is a 409 with the reason (``rollouts.control``). The 400s and
409s are domain errors the services raise (``lifecycle.errors``), answered by the API's
exception handler: no try/except here.
"""
from __future__ import annotations

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.viewsets import GenericViewSet

from gpuplane.parsers import LimitedJSONParser
from gpuplane.roles import OPERATOR
from gpuplane.strict_input import NoFieldsSerializer, StrictQueryParametersMixin
from rollouts.api.events import RolloutEventSerializer
from rollouts.api.serializers import (
    RollingUpdateSerializer,
    RolloutCreateSerializer,
    RolloutPreviewSerializer,
    RolloutRefusedSerializer,
)
from rollouts.control import act
from rollouts.creating import RolloutRequest, create_rollout, validate_request
from rollouts.events import EVENT_LIMIT, rollout_events
from rollouts.filtersets import RolloutFilterSet
from rollouts.models import RollingUpdate


class RollingUpdateViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, StrictQueryParametersMixin, GenericViewSet):
    serializer_class = RollingUpdateSerializer
    filterset_class = RolloutFilterSet
    # The config is a nested object, which form posts cannot carry.
    parser_classes = [LimitedJSONParser]
    write_role = OPERATOR
    lookup_value_regex = r"[0-9]+"
    ordering_fields = ["created_at", "name", "status"]
    ordering = ["-created_at", "-id"]

    def get_queryset(self) -> QuerySet[RollingUpdate]:
        return RollingUpdate.objects.select_related("created_by").prefetch_related("nodes").order_by("-created_at", "-id")

    def _request(self, request: Request) -> RolloutRequest:
        body = RolloutCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return validate_request(**body.request_values())

    @extend_schema(
        request=RolloutCreateSerializer,
        responses={
            201: RollingUpdateSerializer,
            400: OpenApiResponse(description="Invalid input: messages per field (a config's per GPU model)"),
            409: OpenApiResponse(RolloutRefusedSerializer, description="Not safe now (see reasons); nothing stored"),
        },
    )
    def create(self, request: Request) -> Response:
        """Create a pending rollout after checking its preview: every workload to move has somewhere to go."""
        rollout = create_rollout(self._request(request), actor=request.user)
        rollout = self.get_queryset().get(pk=rollout.pk)
        return Response(self.get_serializer(rollout).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        request=RolloutCreateSerializer,
        responses={200: RolloutPreviewSerializer, 400: OpenApiResponse(description="Invalid input: messages per field")},
        filters=False,
    )
    @action(detail=False, methods=["post"], pagination_class=None, filterset_class=None)
    def preview(self, request: Request) -> Response:
        """Dry run: the batches, the workloads that will move and where, the capacity dip, what blocks it. Nothing is stored."""
        shown = self._request(request).preview()
        return Response(RolloutPreviewSerializer(shown.as_dict()).data)

    @extend_schema(responses={200: RolloutEventSerializer(many=True)}, filters=False)
    @action(detail=True, methods=["get"], pagination_class=None, filterset_class=None)
    def events(self, request: Request, pk: str | None = None) -> Response:
        """The rollout's events and its nodes' (evictions, labels switched, restores, state moves), newest first; the latest 100."""
        rollout = self.get_object()
        return Response(RolloutEventSerializer(rollout_events(rollout, EVENT_LIMIT), many=True).data)

    def _act(self, request: Request, action_name: str) -> Response:
        rollout = self.get_object()
        NoFieldsSerializer(data=request.data).is_valid(raise_exception=True)
        act(rollout, action_name, actor=request.user)
        return Response(self.get_serializer(self.get_queryset().get(pk=rollout.pk)).data)

    _ACTION_SCHEMA = extend_schema(
        request=None,
        responses={200: RollingUpdateSerializer,
                   409: OpenApiResponse(description="Not allowed from the rollout's current status (detail says why)")},
        filters=False,
    )

    @_ACTION_SCHEMA
    @action(detail=True, methods=["post"])
    def start(self, request: Request, pk: str | None = None) -> Response:
        """Start a pending rollout: the reconciler then works through its batches."""
        return self._act(request, "start")

    @_ACTION_SCHEMA
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, pk: str | None = None) -> Response:
        """Pause a running rollout between steps (a node part-way changed stays owned by it)."""
        return self._act(request, "pause")

    @_ACTION_SCHEMA
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str | None = None) -> Response:
        """Resume a paused rollout (a failed node stays failed; the others go on)."""
        return self._act(request, "resume")

    @_ACTION_SCHEMA
    @action(detail=True, methods=["post"])
    def abort(self, request: Request, pk: str | None = None) -> Response:
        """End the rollout as failed, restoring every node part-way changed (previous labels, uncordoned)."""
        return self._act(request, "abort")
