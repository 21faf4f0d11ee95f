"""`/api/v1/deployments/`: deploy, list, read, read the decision matrix, scale (PATCH), delete.

The viewset only translates HTTP to ``scheduler.services`` calls and their outcomes to status
codes: 201 placed; 400 invalid input (field messages); 409 nothing fits (``NoCapacity``: the
dominant reason, a suggestion checked to work, the diagnosis and the decision matrix; nothing
stored); 502 the cluster refused the workload
(``DeployFailed``; the deployment is kept as failed, its GPUs released). Reading needs the
viewer role, deploying and deleting the operator role.
"""
from __future__ import annotations

from typing import Any

from django.db.models import Prefetch, QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.viewsets import GenericViewSet

from gpuplane.parsers import LimitedJSONParser
from gpuplane.roles import OPERATOR
from gpuplane.strict_input import StrictQueryParametersMixin
from scheduler import services
from scheduler.api.scaling_serializers import DeploymentPatchSerializer, ScalingEventSerializer
from scheduler.api.serializers import (
    DeployFailedSerializer,
    DeploymentCreateSerializer,
    DeploymentDecisionsSerializer,
    DeploymentSerializer,
    ErrorSerializer,
    NoCapacitySerializer,
)
from scheduler.filtersets import DeploymentFilterSet
from scheduler.models import Deployment, Placement, ScalingEvent
from scheduler.services import autoscaling


class DeploymentViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, StrictQueryParametersMixin, GenericViewSet):
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]
    serializer_class = DeploymentSerializer
    filterset_class = DeploymentFilterSet
    write_role = OPERATOR
    lookup_value_regex = r"[0-9]+"
    ordering_fields = ["created_at", "name", "namespace", "status"]
    ordering = ["-created_at", "-id"]

    def get_parsers(self) -> list[Any]:
        # A PATCH nests its autoscale settings in an object: JSON only (a deploy also takes forms).
        if getattr(getattr(self, "request", None), "method", "") == "PATCH":
            return [LimitedJSONParser()]
        return list(super().get_parsers())

    def get_queryset(self) -> QuerySet[Deployment]:
        placements = Placement.objects.select_related("node").order_by("replica_index")
        return Deployment.objects.select_related("created_by").prefetch_related(
            Prefetch("placements", queryset=placements)
        ).order_by("-created_at", "-id")

    @extend_schema(
        request=DeploymentCreateSerializer,
        responses={
            201: DeploymentSerializer,
            400: OpenApiResponse(description="Invalid input: messages per field"),
            409: OpenApiResponse(NoCapacitySerializer, description="Nothing fits; nothing was stored"),
            502: OpenApiResponse(DeployFailedSerializer, description="The cluster refused the workload"),
        },
    )
    def create(self, request: Request) -> Response:
        """Place a deployment: decide every replica, reserve its GPUs, create its workloads."""
        serializer = DeploymentCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        # NoCapacity (409) and DeployFailed (502) are answered by the API's exception handler.
        deployment = services.deploy(serializer.to_spec(), user=request.user)
        if "placements" not in getattr(deployment, "_prefetched_objects_cache", {}):
            deployment = self.get_queryset().get(pk=deployment.pk)  # moved on already (an eager watch)
        return Response(self.get_serializer(deployment).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        responses={
            204: OpenApiResponse(description="Workloads deleted, GPUs released (also for an already deleted one)"),
            502: OpenApiResponse(ErrorSerializer, description="The cluster refused to delete a workload"),
        },
    )
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        """Delete the workloads and release every GPU share; the record stays, status deleted."""
        deployment = self.get_object()
        services.delete_deployment(deployment, user=request.user)  # a ClusterError is a 502
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        request=DeploymentPatchSerializer,
        responses={
            200: DeploymentSerializer,
            400: OpenApiResponse(description="Invalid input: messages per field"),
            409: OpenApiResponse(ErrorSerializer, description="Not active, or no new replica could be placed"),
        },
    )
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        """Change replicas by hand (new ones through the placement engine, each with its decision;
        removed ones through the scale-down path) and/or the deployment's autoscaling."""
        deployment = self.get_object()
        serializer = DeploymentPatchSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        if {"autoscale_policy", "autoscale_settings", "autoscale_native"} & set(data):
            autoscaling.configure_autoscaling(deployment, user=request.user, policy=data.get("autoscale_policy"),
                                              overrides=data.get("autoscale_settings"),
                                              native=data.get("autoscale_native"))
        event = None
        if "replicas" in data:
            event = autoscaling.scale_deployment(deployment, data["replicas"], user=request.user)
        body = self.get_serializer(self.get_queryset().get(pk=deployment.pk)).data
        if event is not None:
            body = {**body, "scaling": ScalingEventSerializer(event).data}
            if event.outcome == ScalingEvent.Outcome.FAILED:
                return Response({"detail": event.message or "no replica could be changed", **body},
                                status=status.HTTP_409_CONFLICT)
        return Response(body)

    @extend_schema(responses={200: ScalingEventSerializer(many=True)}, filters=False)
    @action(detail=True, methods=["get"], pagination_class=None, filterset_class=None)
    def scaling(self, request: Request, pk: str | None = None) -> Response:
        """The deployment's scaling events (the timeline), oldest first."""
        deployment = self.get_object()
        return Response(ScalingEventSerializer(autoscaling.timeline(deployment), many=True).data)

    @extend_schema(responses={200: OpenApiResponse(description="An autoscaling/v2 HorizontalPodAutoscaler"),
                              409: OpenApiResponse(ErrorSerializer, description="No autoscaling policy or no running workload")},
                   filters=False)
    @action(detail=True, methods=["get"], pagination_class=None, filterset_class=None)
    def hpa(self, request: Request, pk: str | None = None) -> Response:
        """The native mode's HorizontalPodAutoscaler for this deployment's policy."""
        return Response(autoscaling.native_hpa(self.get_object()))

    @extend_schema(responses={200: DeploymentDecisionsSerializer}, filters=False)
    @action(detail=True, methods=["get"], pagination_class=None, filterset_class=None)
    def decision(self, request: Request, pk: str | None = None) -> Response:
        """The stored decision matrix of every replica (bounded to the best-scored nodes)."""
        deployment = self.get_object()
        decisions = deployment.decisions.select_related("node").order_by("replica_index", "created_at")
        data = {"deployment": deployment.pk, "status": deployment.status, "decisions": decisions}
        return Response(DeploymentDecisionsSerializer(data).data)

    @extend_schema(responses={200: OpenApiResponse(description="ome.io/v1beta1 InferenceService manifests")},
                   filters=False)
    @action(detail=True, methods=["get"], url_path="inference-services", pagination_class=None,
            filterset_class=None)
    def inference_services(self, request: Request, pk: str | None = None) -> Response:
        """The deployment as OME InferenceServices (rendered, not created): one per workload."""
        from scheduler.services.rendering import inference_services

        return Response(inference_services(self.get_object()))
