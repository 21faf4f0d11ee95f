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
from rest_framework.validators import UniqueValidator
from rest_framework.views import APIView
from rest_framework.viewsets import GenericViewSet, ModelViewSet

from gpuplane.parsers import LimitedJSONParser
from gpuplane.roles import ADMIN, OPERATOR, RolePermission
from gpuplane.strict_input import (
    RejectUnknownFieldsMixin,
    StrictFloatField,
    StrictIntegerField,
    StrictModelFieldsMixin,
    StrictQueryParametersMixin,
    StrictSerializer,
)
from lifecycle.audit import record
from lifecycle.errors import Conflict
from nodes.vocabulary import MIB_PER_GB, SHARE_MILLI_FULL
from scheduler.core.admission import MPS_MAX_CLIENTS, TIMESLICE_MAX_REPLICAS
from scheduler.models import AdmissionSettings, NamespaceQuota, PriorityLevel, SharingPolicy
from scheduler.policies import MIG_PROFILES

NAMESPACE_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"

logger = logging.getLogger(__name__)


class UniqueAs409:
    """A name or namespace already taken is not a 400 but a 409 (``save_unique``): the request is
    valid, the state refuses it."""

    def get_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = super().get_fields()  # type: ignore[misc]
        for field in fields.values():
            field.validators = [v for v in field.validators if not isinstance(v, UniqueValidator)]
        return fields


class CleanedByModel:
    """Runs the model's ``clean`` (its field messages become the 400's)."""

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


class SharingPolicySerializer(RejectUnknownFieldsMixin, StrictModelFieldsMixin, CleanedByModel, UniqueAs409,
                              serializers.ModelSerializer):
    # The shapes and bounds the model's clean checks, stated as fields so the schema says them too.
    namespaces = serializers.ListField(child=serializers.RegexField(NAMESPACE_PATTERN, max_length=63), required=False,
                                       help_text="Namespaces it selects; [] = every namespace")
    match_labels = serializers.DictField(
        child=serializers.RegexField(LABEL_VALUE_PATTERN, max_length=63, allow_blank=True), required=False,
        help_text="Pod labels it selects, all must match; keys are Kubernetes label keys")
    mig_profile = serializers.ChoiceField(choices=["", *sorted(MIG_PROFILES)], required=False, allow_blank=True,
                                          help_text="MIG: a profile such as 1g.10gb; empty = the smallest that fits")
    mps_max_clients = StrictIntegerField(min_value=2, max_value=MPS_MAX_CLIENTS, allow_null=True, required=False,
                                         help_text="MPS: clients per GPU")
    timeslice_replicas = StrictIntegerField(min_value=2, max_value=TIMESLICE_MAX_REPLICAS, allow_null=True,
                                            required=False, help_text="Time-slicing: replicas per GPU")
    class Meta:
        model = SharingPolicy
        fields = ["id", "name", "description", "enabled", "precedence", "namespaces", "match_labels", "strategy",
                  "mig_profile", "mps_max_clients", "mps_memory_limit_mib", "timeslice_replicas", "fairness",
                  "updated_at"]
        read_only_fields = ["updated_at"]


class PriorityLevelSerializer(RejectUnknownFieldsMixin, StrictModelFieldsMixin, serializers.ModelSerializer):
    class Meta:
        model = PriorityLevel
        fields = ["id", "priority", "value", "description", "preempts"]
        read_only_fields = ["priority"]


class AdmissionSettingsSerializer(RejectUnknownFieldsMixin, StrictModelFieldsMixin, serializers.ModelSerializer):
    exempt_namespaces = serializers.ListField(child=serializers.RegexField(NAMESPACE_PATTERN,
                                                                           max_length=63), allow_empty=True)

    class Meta:
        model = AdmissionSettings
        fields = ["exempt_namespaces", "preemption_enabled", "preemption_delay_s", "updated_at"]
        read_only_fields = ["updated_at"]


class NamespaceQuotaSerializer(RejectUnknownFieldsMixin, StrictModelFieldsMixin, UniqueAs409,
                               serializers.ModelSerializer):
    """GPUs (0.5 = half a GPU's compute) and GB of GPU memory; null = unlimited."""

    gpus = StrictFloatField(min_value=0, max_value=1e6, allow_null=True, required=False,
                            help_text="Compute share in GPUs; null = unlimited")
    memory_gb = StrictFloatField(min_value=0, max_value=1e6, allow_null=True, required=False,
                                 help_text="GPU memory in GB; null = unlimited")

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


class AdminEdited:
    """Admins write, everyone with a role reads; every change is an audit event."""

    permission_classes = [RolePermission]
    write_role = ADMIN
    audit_noun = ""
    parser_classes = [LimitedJSONParser]  # lists and label maps: JSON bodies, as the rollouts API takes
    request: Request

    def perform_create(self, serializer: serializers.BaseSerializer) -> None:
        instance = save_unique(serializer)
        record(f"{self.audit_noun}.created", instance, actor=self.request.user, after=serializer.data)

    def perform_update(self, serializer: serializers.BaseSerializer) -> None:
        before = type(serializer)(serializer.instance).data
        instance = save_unique(serializer)
        record(f"{self.audit_noun}.updated", instance, actor=self.request.user, before=before, after=serializer.data)

    def perform_destroy(self, instance: Any) -> None:
        record(f"{self.audit_noun}.deleted", instance, actor=self.request.user)
        instance.delete()


# Request bodies as components of their own: the schema says they refuse unknown fields
# (additionalProperties: false), which the shared request/response component cannot.
class SharingPolicyRequestSerializer(SharingPolicySerializer):
    pass


class PriorityLevelRequestSerializer(PriorityLevelSerializer):
    pass


class AdmissionSettingsRequestSerializer(AdmissionSettingsSerializer):
    pass


class NamespaceQuotaRequestSerializer(NamespaceQuotaSerializer):
    pass


def save_unique(serializer: serializers.BaseSerializer) -> Any:
    """Save; a unique name or namespace already taken (by another request, maybe at the same moment)
    is a 409 naming it, and nothing is stored."""
    try:
        with transaction.atomic():
            return serializer.save()
    except IntegrityError as error:
        model = serializer.Meta.model
        taken = {name: serializer.validated_data[name] for name in UNIQUE_FIELDS.get(model.__name__, ())
                 if name in serializer.validated_data}
        described = ", ".join(f"{name} {value!r}" for name, value in taken.items()) or "these values"
        raise Conflict(f"A {model._meta.verbose_name} with {described} already exists.", **taken) from error


UNIQUE_FIELDS = {"SharingPolicy": ("name",), "NamespaceQuota": ("namespace",)}
CONFLICT = OpenApiResponse(description="A row with this name or namespace already exists")
EDIT_RESPONSES = {"create": 201, "update": 200, "partial_update": 200}


def admin_edited_schema(serializer: type[serializers.Serializer], request: type[serializers.Serializer],
                        *actions: str, conflict: bool = True) -> Any:
    """The request component and, where a name or namespace may be taken, the 409 of the actions that write."""
    responses: dict[int, Any] = {409: CONFLICT} if conflict else {}
    return extend_schema_view(**{
        action: extend_schema(request=request, responses={EDIT_RESPONSES[action]: serializer, **responses})
        for action in actions})


@admin_edited_schema(SharingPolicySerializer, SharingPolicyRequestSerializer, "create", "update", "partial_update")
class SharingPolicyViewSet(AdminEdited, StrictQueryParametersMixin, ModelViewSet):
    queryset = SharingPolicy.objects.all()
    serializer_class = SharingPolicySerializer
    audit_noun = "sharing_policy"
    filterset_class = None
    ordering_fields = ["precedence", "name", "strategy", "updated_at"]
    ordering = ["-precedence", "name"]


@admin_edited_schema(PriorityLevelSerializer, PriorityLevelRequestSerializer, "update", "partial_update",
                     conflict=False)
class PriorityLevelViewSet(AdminEdited, mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.UpdateModelMixin,
                           GenericViewSet):
    queryset = PriorityLevel.objects.all()
    serializer_class = PriorityLevelSerializer
    audit_noun = "priority_level"
    filterset_class = None
    ordering_fields = ["value", "priority"]
    ordering = ["-value"]

    def perform_update(self, serializer: serializers.BaseSerializer) -> None:
        from scheduler.services.priorities import sync_priority_classes_if_reachable

        super().perform_update(serializer)
        sync_priority_classes_if_reachable(actor=self.request.user)


@admin_edited_schema(NamespaceQuotaSerializer, NamespaceQuotaRequestSerializer, "create", "update", "partial_update")
class NamespaceQuotaViewSet(AdminEdited, StrictQueryParametersMixin, ModelViewSet):
    queryset = NamespaceQuota.objects.all()
    serializer_class = NamespaceQuotaSerializer
    audit_noun = "namespace_quota"
    filterset_class = None
    # The API's gpus and memory_gb are the rows' max_gpu_milli and max_memory_mib.
    ordering_fields = ["namespace", "max_gpu_milli", "max_memory_mib"]
    ordering = ["namespace"]


class AdmissionSettingsView(AdminEdited, StrictQueryParametersMixin, APIView):
    @extend_schema(responses=AdmissionSettingsSerializer)
    def get(self, request: Request) -> Response:
        return Response(AdmissionSettingsSerializer(AdmissionSettings.current()).data)

    @extend_schema(request=AdmissionSettingsRequestSerializer, responses=AdmissionSettingsSerializer)
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
    write_role = OPERATOR  # a POST that changes nothing, open to whoever may deploy
    parser_classes = [LimitedJSONParser]  # a pod is a JSON object: no form encoding of it
    serializer_class = DryRunSerializer

    @extend_schema(request=DryRunSerializer, responses={
        200: OpenApiResponse(OpenApiTypes.OBJECT, description="allowed, result (placed / unplaced / left-alone / "
                                                              "refused), message, choice, patch, matrix"),
        400: OpenApiResponse(description="Invalid input: messages per field")})
    def post(self, request: Request) -> Response:
        from scheduler.admission import dry_run

        serializer = DryRunSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        return Response(dry_run(serializer.validated_data["object"]))
