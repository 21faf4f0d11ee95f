"""`/api/v1/consolidations/`: list and read plans (viewer), analyse now, approve, reject (admin).

Thin: HTTP to ``consolidation.analysis`` and ``consolidation.approval``. Every write needs the
admin role (operators and viewers get 403). Approving or rejecting a plan that is not proposed,
or that has expired, is a 409 with the reason (``approval.NotAllowed``, a domain error the API's
exception handler answers).
"""
from __future__ import annotations

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.viewsets import GenericViewSet

from consolidation.analysis import run_analysis
from consolidation.api.serializers import AnalysisOutcomeSerializer, ConsolidationPlanSerializer, RejectSerializer
from consolidation.approval import approve, reject
from consolidation.filtersets import PlanFilterSet
from consolidation.models import ConsolidationPlan
from gpuplane.parsers import LimitedJSONParser
from gpuplane.roles import ADMIN
from gpuplane.strict_input import NoFieldsSerializer, StrictQueryParametersMixin

_CONFLICT = OpenApiResponse(description="Not proposed any more, or expired (detail says why)")


class ConsolidationPlanViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, StrictQueryParametersMixin,
                               GenericViewSet):
    serializer_class = ConsolidationPlanSerializer
    filterset_class = PlanFilterSet
    parser_classes = [LimitedJSONParser]
    write_role = ADMIN
    lookup_value_regex = r"[0-9]+"
    ordering_fields = ["created_at", "status"]
    ordering = ["-created_at", "-id"]

    def get_queryset(self) -> QuerySet[ConsolidationPlan]:
        return ConsolidationPlan.objects.select_related("created_by", "decided_by").order_by("-created_at", "-id")

    @extend_schema(request=None, responses={
        201: ConsolidationPlanSerializer,
        200: OpenApiResponse(AnalysisOutcomeSerializer,
                             description="No new plan: the moves of a proposed plan (refreshed), or nothing to move"),
    })
    def create(self, request: Request) -> Response:
        """Run the consolidation analysis now: 201 with the new proposed plan (older proposed plans it
        collides with are superseded); 200 when it found exactly a proposed plan's moves (that plan,
        refreshed) or nothing to move (no plan is stored then)."""
        NoFieldsSerializer(data=request.data).is_valid(raise_exception=True)
        outcome = run_analysis(actor=request.user)
        plan = self.get_queryset().get(pk=outcome.plan.pk) if outcome.plan is not None else None
        if outcome.created and plan is not None:
            return Response(self.get_serializer(plan).data, status=status.HTTP_201_CREATED)
        body = {"detail": outcome.detail, "plan": plan,
                "method": outcome.method, "skipped": list(outcome.skipped), "budgets": list(outcome.budgets)}
        return Response(AnalysisOutcomeSerializer(body).data)

    def _answer(self, plan: ConsolidationPlan) -> Response:
        return Response(self.get_serializer(self.get_queryset().get(pk=plan.pk)).data)

    @extend_schema(request=None, responses={200: ConsolidationPlanSerializer, 409: _CONFLICT}, filters=False)
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str | None = None) -> Response:
        """Approve a proposed plan: the executor re-validates it, then moves each workload replacement-first."""
        plan = self.get_object()
        NoFieldsSerializer(data=request.data).is_valid(raise_exception=True)
        return self._answer(approve(plan, actor=request.user))

    @extend_schema(request=RejectSerializer, responses={200: ConsolidationPlanSerializer, 409: _CONFLICT},
                   filters=False)
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str | None = None) -> Response:
        """Reject a proposed plan, with a reason; nothing moves."""
        plan = self.get_object()
        body = RejectSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return self._answer(reject(plan, body.validated_data["reason"], actor=request.user))
