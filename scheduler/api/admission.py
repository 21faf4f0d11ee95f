"""`/api/v1/sharing-policies/`, `/api/v1/priority-levels/`, `/api/v1/namespace-quotas/`,
`/api/v1/admission-settings/` and `/api/v1/admission/dry-run/`.

What admins edit (viewers and operators read, and get 403 on writes): validation lives in the
models' ``clean`` (``scheduler.policies``), which the serializers call, so the admin form and the
API refuse the same things. Quotas speak GPUs and GB, the units of the rest of the UI; the rows
keep thousandths of a GPU and MiB. The dry run takes a pod (or an InferenceService) and answers
the decision, its matrix and the patch without storing or reserving anything.
"""
from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, transaction
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework.viewsets import GenericViewSet, ModelViewSet

from gpuplane.parsers import LimitedJSONParser
from gpuplane.roles import ADMIN, OPERATOR, RolePermission
from gpuplane.strict_input import (
    RejectUnknownFieldsMixin,
    StrictFloatField,
    StrictIntegerField,
    StrictQueryParametersMixin,
    StrictSerializer,
)
from lifecycle.audit import record
from lifecycle.errors import Conflict
from nodes.cluster.base import ClusterError
from nodes.vocabulary import MIB_PER_GB, SHARE_MILLI_FULL
from scheduler.core.admission import MPS_MAX_CLIENTS, TIMESLICE_MAX_REPLICAS
from scheduler.models import AdmissionSettings, NamespaceQuota, PriorityLevel, SharingPolicy
from scheduler.policies import MIG_PROFILES, POLICY_STRATEGY_CHOICES

logger = logging.getLogger(__name__)


class CleanedModelMixin:
    """For a ModelSerializer: runs the model's ``clean`` (its field messages become the 400's)."""

    instance: Any
    Meta: Any

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        instance = self.instance or self.Meta.model()
        for name, value in attrs.items():
            setattr(instance, name, value)
        try:
            instance.clean()
        except DjangoValidationError as error:
            raise serializers.ValidationError(error.message_dict) from error
        return attrs


DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
NO_NUL = r"^[^\x00]*$"  # Django's text fields refuse NUL: the schema says so


class SharingPolicySerializer(CleanedModelMixin, RejectUnknownFieldsMixin, serializers.ModelSerializer):
    """Every limit ``policy_errors`` enforces is stated here too, so the schema says what is accepted."""

    name = serializers.RegexField(DNS_LABEL, max_length=63)
    namespaces = serializers.ListField(child=serializers.RegexField(DNS_LABEL, max_length=63), required=False,
                                       help_text="Namespaces it selects; [] = every namespace")
    match_labels = serializers.DictField(child=serializers.RegexField(NO_NUL, max_length=63, allow_blank=True),
                                         required=False, help_text="Pod labels it selects; all must match")
    description = serializers.RegexField(NO_NUL, max_length=2000, allow_blank=True, required=False)
    strategy = serializers.ChoiceField(choices=POLICY_STRATEGY_CHOICES)
    mig_profile = serializers.ChoiceField(choices=[("", "the smallest free instance that fits"),
                                                   *[(p, p) for p in sorted(MIG_PROFILES)]],
                                          required=False, allow_blank=True)
    mps_max_clients = StrictIntegerField(min_value=2, max_value=MPS_MAX_CLIENTS, allow_null=True, required=False)
    mps_memory_limit_mib = StrictIntegerField(min_value=1, max_value=4 * 1024 * 1024, allow_null=True, required=False)
    timeslice_replicas = StrictIntegerField(min_value=2, max_value=TIMESLICE_MAX_REPLICAS, allow_null=True,
                                            required=False)
    precedence = StrictIntegerField(min_value=-1_000_000, max_value=1_000_000, required=False)

    class Meta:
        model = SharingPolicy
        fields = ["id", "name", "description", "enabled", "precedence", "namespaces", "match_labels", "strategy",
                  "mig_profile", "mps_max_clients", "mps_memory_limit_mib", "timeslice_replicas", "fairness",
                  "updated_at"]
        read_only_fields = ["updated_at"]


class PriorityLevelSerializer(RejectUnknownFieldsMixin, serializers.ModelSerializer):
    description = serializers.RegexField(NO_NUL, max_length=200, allow_blank=True, required=False)
    value = StrictIntegerField(min_value=0, max_value=1_000_000_000,
                               help_text="The PriorityClass value (higher preempts lower)")
    class Meta:
        model = PriorityLevel
        fields = ["id", "priority", "value", "description", "preempts"]
        read_only_fields = ["priority"]


class AdmissionSettingsSerializer(RejectUnknownFieldsMixin, serializers.ModelSerializer):
    exempt_namespaces = serializers.ListField(child=serializers.RegexField(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
                                                                           max_length=63), allow_empty=True)
    preemption_delay_s = StrictIntegerField(min_value=0, max_value=86_400, required=False)

    class Meta:
        model = AdmissionSettings
        fields = ["exempt_namespaces", "preemption_enabled", "preemption_delay_s", "updated_at"]
        read_only_fields = ["updated_at"]


class NamespaceQuotaSerializer(RejectUnknownFieldsMixin, serializers.ModelSerializer):
    """GPUs (0.5 = half a GPU's compute) and GB of GPU memory; null = unlimited."""

    namespace = serializers.RegexField(DNS_LABEL, max_length=63)

    gpus = StrictFloatField(min_value=0, max_value=1_000_000, allow_null=True, required=False,
                                  help_text="Compute share in GPUs (thousandths are kept); null = unlimited")
    memory_gb = StrictFloatField(min_value=0, max_value=1_000_000, allow_null=True, required=False,
                                       help_text="GPU memory in GB (MiB are kept); null = unlimited")

    class Meta:
        model = NamespaceQuota
        fields = ["id", "namespace", "gpus", "memory_gb"]

    def to_representation(self, instance: NamespaceQuota) -> dict[str, Any]:
        return {"id": instance.pk, "namespace": instance.namespace,
                "gpus": None if instance.max_gpu_milli is None else instance.max_gpu_milli / SHARE_MILLI_FULL,
                "memory_gb": None if instance.max_memory_mib is None else instance.max_memory_mib / MIB_PER_GB}

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "gpus" in attrs:
            gpus = attrs.pop("gpus")
            attrs["max_gpu_milli"] = None if gpus is None else round(gpus * SHARE_MILLI_FULL)
        if "memory_gb" in attrs:
            memory = attrs.pop("memory_gb")
            attrs["max_memory_mib"] = None if memory is None else round(memory * MIB_PER_GB)
        return attrs


def _save(serializer: serializers.BaseSerializer) -> Any:
    """Save; a name or namespace taken meanwhile (unique in the database) is a 409, not a 400."""
    try:
        with transaction.atomic():
            return serializer.save()
    except IntegrityError as error:
        raise Conflict(f"already exists: {error}") from error


class AdminEdited:
    """Admins write, everyone with a role reads; every change is an audit event. JSON bodies only
    (lists and objects have no form encoding). Unique names are checked by the database: 409."""

    permission_classes = [RolePermission]
    parser_classes = [LimitedJSONParser]
    write_role = ADMIN
    audit_noun = ""
    request: Request

    def perform_create(self, serializer: serializers.BaseSerializer) -> None:
        instance = _save(serializer)
        record(f"{self.audit_noun}.created", instance, actor=self.request.user, after=serializer.data)

    def perform_update(self, serializer: serializers.BaseSerializer) -> None:
        before = type(serializer)(serializer.instance).data
        instance = _save(serializer)
        record(f"{self.audit_noun}.updated", instance, actor=self.request.user, before=before, after=serializer.data)

    def perform_destroy(self, instance: Any) -> None:
        record(f"{self.audit_noun}.deleted", instance, actor=self.request.user)
        instance.delete()


CONFLICT = OpenApiResponse(OpenApiTypes.OBJECT, description="The name (or namespace) is taken: `detail` says which")


class SharingPolicyRequestSerializer(SharingPolicySerializer):
    """The body of a write: a component of its own, closed to unknown fields (the answer's is not)."""


class NamespaceQuotaRequestSerializer(NamespaceQuotaSerializer):
    """The body of a write: a component of its own, closed to unknown fields (the answer's is not)."""


class PriorityLevelRequestSerializer(PriorityLevelSerializer):
    """The body of a write: a component of its own, closed to unknown fields (the answer's is not)."""


def writes(request: type[serializers.Serializer], response: type[serializers.Serializer]) -> Any:
    return extend_schema_view(
        create=extend_schema(request=request, responses={201: response, 409: CONFLICT}),
        update=extend_schema(request=request, responses={200: response, 409: CONFLICT}),
        partial_update=extend_schema(request=request, responses={200: response, 409: CONFLICT}),
    )


@writes(SharingPolicyRequestSerializer, SharingPolicySerializer)
class SharingPolicyViewSet(AdminEdited, StrictQueryParametersMixin, ModelViewSet):
    queryset = SharingPolicy.objects.all()
    serializer_class = SharingPolicySerializer
    audit_noun = "sharing_policy"
    ordering_fields = ["precedence", "name", "updated_at"]
    ordering = ["-precedence", "name"]
    filterset_class = None


@extend_schema_view(
    update=extend_schema(request=PriorityLevelRequestSerializer, responses={200: PriorityLevelSerializer}),
    partial_update=extend_schema(request=PriorityLevelRequestSerializer, responses={200: PriorityLevelSerializer}),
)
class PriorityLevelViewSet(AdminEdited, StrictQueryParametersMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.UpdateModelMixin,
                           GenericViewSet):
    queryset = PriorityLevel.objects.all()
    serializer_class = PriorityLevelSerializer
    audit_noun = "priority_level"
    ordering_fields = ["value", "priority"]
    ordering = ["-value"]

    def perform_update(self, serializer: serializers.BaseSerializer) -> None:
        from scheduler.services.priorities import sync_priority_classes

        super().perform_update(serializer)
        try:  # the row is the truth; a cluster that cannot be reached now is synced next time
            sync_priority_classes(actor=self.request.user)
        except ClusterError:
            logger.warning("could not sync the PriorityClasses to the cluster", exc_info=True)
    filterset_class = None


@writes(NamespaceQuotaRequestSerializer, NamespaceQuotaSerializer)
class NamespaceQuotaViewSet(AdminEdited, StrictQueryParametersMixin, ModelViewSet):
    queryset = NamespaceQuota.objects.all()
    serializer_class = NamespaceQuotaSerializer
    audit_noun = "namespace_quota"
    ordering_fields = ["namespace"]
    ordering = ["namespace"]
    filterset_class = None


class AdmissionSettingsView(AdminEdited, StrictQueryParametersMixin, APIView):
    """The webhook's exempt namespaces and preemption (one object)."""

    @extend_schema(responses=AdmissionSettingsSerializer)
    def get(self, request: Request) -> Response:
        return Response(AdmissionSettingsSerializer(AdmissionSettings.current()).data)

    @extend_schema(request=AdmissionSettingsSerializer, responses=AdmissionSettingsSerializer)
    def patch(self, request: Request) -> Response:
        serializer = AdmissionSettingsSerializer(AdmissionSettings.current(), data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        before = AdmissionSettingsSerializer(AdmissionSettings.current()).data
        row = serializer.save()
        record("admission_settings.updated", row, actor=request.user, before=before, after=serializer.data)
        from scheduler.admission import forget_exempt_namespaces

        forget_exempt_namespaces()
        return Response(serializer.data)


class DryRunSerializer(StrictSerializer):
    object = serializers.DictField(help_text="A Pod, or an ome.io InferenceService")


class AdmissionDryRunView(StrictQueryParametersMixin, APIView):
    """Paste a pod: the decision, its matrix and the patch; nothing is stored or reserved."""

    permission_classes = [RolePermission]
    parser_classes = [LimitedJSONParser]
    write_role = OPERATOR  # a POST that changes nothing, open to whoever may deploy
    serializer_class = DryRunSerializer

    @extend_schema(request=DryRunSerializer, responses={200: OpenApiResponse(
        description="allowed, result (placed / unplaced / left-alone / refused), message, choice, patch, matrix")})
    def post(self, request: Request) -> Response:
        from scheduler.admission import dry_run

        serializer = DryRunSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        return Response(dry_run(serializer.validated_data["object"]))
