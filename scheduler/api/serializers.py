"""Shapes of the deployments API (`/api/v1/deployments/`).

Input is parsed here into typed values (``DeploymentCreateSerializer.to_spec``); what makes a
deployment valid is decided once, by ``scheduler.services.validate_spec``, which the deploy form
uses too, so both refuse the same requests with the same messages.
"""
from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.reverse import reverse
from rest_framework.utils import html

from gpuplane.strict_input import (
    StrictBooleanField,
    StrictFloatField,
    StrictIntegerField,
    StrictSerializer,
    StrictStringField,
)
from nodes.quantities import format_cpu, format_memory
from nodes.vocabulary import MIB_PER_GB
from scheduler import services
from scheduler.choices import DecisionOutcome
from scheduler.core import Priority, SharingRequest, WorkloadType
from scheduler.label_lines import parse_arguments, parse_env, parse_labels
from scheduler.models import Decision, Deployment, Placement
from scheduler.services import container


class _LabelLines(str):
    """The `labels` value of a form-encoded post: text, one `key=value` a line."""


@extend_schema_field({
    "type": "object",
    "additionalProperties": {"type": "string", "maxLength": 63, "pattern": services.LABEL_VALUE_PATTERN},
    "description": "Kubernetes labels: keys are label keys (an optional DNS-subdomain prefix and '/', then a "
                   "name of at most 63 characters); gpuplane.io/ keys are gpuplane's own.",
})
class LabelsField(serializers.DictField):
    """Kubernetes labels: a JSON object of string keys to string values.

    A form-encoded post (`-d labels=...`) gives them as the deploy form does, one `key=value` a
    line; DRF's own form notation (`labels.team=search`) works too. DRF alone would read neither
    `labels=` text as labels nor say so: the labels were dropped.
    """

    child = StrictStringField(allow_blank=True, max_length=63)
    default_error_messages = {"not_a_dict": "Enter an object of label names to string values."}

    def get_value(self, dictionary: Any) -> Any:
        if html.is_html_input(dictionary) and self.field_name in dictionary:
            return _LabelLines(dictionary[self.field_name])
        return super().get_value(dictionary)

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if isinstance(data, _LabelLines):
            try:
                data = parse_labels(data)
            except ValidationError as error:
                raise serializers.ValidationError(error.messages) from None
        return super().to_internal_value(data)


# What services.validate_spec accepts, in the schema (validation itself stays there, in one place).
@extend_schema_field({"type": "string", "pattern": services.DNS_LABEL_PATTERN, "maxLength": 63})
class DnsLabelField(StrictStringField):
    pass


@extend_schema_field({"type": "string", "pattern": services.TEXT_PATTERN, "minLength": 1, "maxLength": 200})
class ModelNameField(StrictStringField):
    pass


@extend_schema_field({"type": "number", "minimum": services.MIN_MEMORY_GB, "maximum": services.MAX_MEMORY_GB})
class MemoryGBField(StrictFloatField):
    pass


# allow_blank makes drf-spectacular add its own `""` branch (oneOf): the pattern must not match "" too.
@extend_schema_field({"type": "string", "maxLength": container.IMAGE_MAX_CHARS, "pattern": container.IMAGE_PATTERN})
class ImageField(StrictStringField):
    pass


NO_NULL_PATTERN = "^[^\\u0000]*$"


@extend_schema_field({"type": "string", "maxLength": container.MAX_ARG_CHARS, "pattern": "^[^\\u0000]+$"})
class ArgumentField(StrictStringField):
    pass


class ArgumentsField(serializers.ListField):
    """A container's command or arguments: a JSON list of strings (form posts: the field repeated,
    or once with one argument a line)."""

    child = ArgumentField(allow_blank=True, trim_whitespace=False, max_length=container.MAX_ARG_CHARS)

    def get_value(self, dictionary: Any) -> Any:
        if html.is_html_input(dictionary) and self.field_name in dictionary:
            values = dictionary.getlist(self.field_name)
            # The field repeated (`-d args=--model -d args=m`), or once as the form's box gives it.
            return values if len(values) > 1 else parse_arguments(values[0])
        return super().get_value(dictionary)


@extend_schema_field({
    "type": "object", "maxProperties": container.MAX_ENV,
    "additionalProperties": {"type": "string", "maxLength": container.ENV_VALUE_MAX_CHARS, "pattern": NO_NULL_PATTERN},
    "description": "Extra environment variables of the container: names are C identifiers; gpuplane's own "
                   f"({', '.join(sorted(container.RESERVED_ENV))}) are refused.",
})
class EnvField(serializers.DictField):
    """Environment variables: a JSON object of names to string values (form posts: NAME=value lines)."""

    child = StrictStringField(allow_blank=True, trim_whitespace=False, max_length=container.ENV_VALUE_MAX_CHARS)
    default_error_messages = {"not_a_dict": "Enter an object of variable names to string values."}

    def get_value(self, dictionary: Any) -> Any:
        if html.is_html_input(dictionary) and self.field_name in dictionary:
            try:
                return parse_env(dictionary[self.field_name])
            except ValidationError as error:
                return _BadLines(error.messages)
        return super().get_value(dictionary)

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if isinstance(data, _BadLines):
            raise serializers.ValidationError(list(data))
        return super().to_internal_value(data)


class _BadLines(list):
    """The messages of form-encoded `env` lines that could not be read."""
@extend_schema_field({
    "oneOf": [{"type": "string", "pattern": services.QUANTITY_PATTERN},
              {"type": "number", "minimum": 0, "exclusiveMinimum": True}],
    "description": 'A Kubernetes quantity: "8", "500m" (CPU), "64Gi", "512Mi" (memory); a number is cores (CPU) '
                   "or bytes (memory), as in Kubernetes.",
})
class QuantityField(serializers.Field):
    """A Kubernetes quantity as given (text or a number); ``services.validate_spec`` parses and
    bounds it (400 under the field's name), as it does for the deploy form."""

    default_error_messages = {"invalid": 'Enter a Kubernetes quantity, e.g. "8", "500m", "64Gi".'}

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, bool) or not isinstance(data, str | int | float):
            self.fail("invalid")
        return data

    def to_representation(self, value: Any) -> Any:
        return value


class DeploymentCreateSerializer(StrictSerializer):
    """The body of `POST /api/v1/deployments/`."""

    name = DnsLabelField(max_length=63, help_text="DNS-1123 label; names the Kubernetes workloads")
    model = ModelNameField(max_length=200, help_text="Model name, e.g. llama-3-8b")
    memory_gb = MemoryGBField(help_text="GPU memory one replica needs, in GB (1 GB = 1024 MiB)")
    gpu_count = StrictIntegerField(default=1, min_value=1, max_value=services.MAX_GPU_COUNT,
                                   help_text="GPUs per replica (tensor-parallel size), on one node; "
                                             "more than 1 needs `sharing` auto or exclusive")
    replicas = StrictIntegerField(default=1, min_value=1, max_value=settings.DEPLOYMENT_MAX_REPLICAS)
    workload_type = serializers.ChoiceField(choices=WorkloadType.choices(), default=WorkloadType.INFERENCE)
    priority = serializers.ChoiceField(choices=Priority.choices(), default=Priority.MEDIUM)
    latency_slo_ms = StrictIntegerField(required=False, allow_null=True, default=None, min_value=1,
                                        max_value=services.MAX_LATENCY_SLO_MS)
    namespace = DnsLabelField(max_length=63, default="default")
    labels = LabelsField(required=False, default=dict)
    sharing = serializers.ChoiceField(choices=SharingRequest.choices(), default=SharingRequest.AUTO)
    share_percent = StrictIntegerField(
        required=False, allow_null=True, default=None, min_value=1, max_value=100,
        # The bounds document the schema; the message is the services' (the deploy form's).
        error_messages={"min_value": "Enter a whole number from 1 to 100.",
                        "max_value": "Enter a whole number from 1 to 100."},
        help_text="Compute share per GPU, in percent. Omitted: each sharing mode sizes by its own unit (MIG: the "
                  "smallest free instance with enough memory; time-slicing: a replica with enough memory left; "
                  "MPS: 25 % for models under 4 GB, 50 % up to 16 GB). Stated: every mode must give at least this "
                  "share (an MPS slot, a MIG instance's compute, a time-slice replica's nominal 100/R %).",
    )
    cpu = QuantityField(
        required=False, allow_null=True, default=None,
        help_text="CPU each replica's pod requests (and is limited to), e.g. \"8\" or \"500m\"; at most "
                  f"{services.MAX_CPU_MILLI // 1000} cores. Omitted: the workload type's default "
                  "(docs/concepts.md, \"CPU and host memory\").",
    )
    memory = QuantityField(
        required=False, allow_null=True, default=None,
        help_text="Host memory each replica's pod requests (and is limited to), e.g. \"64Gi\"; at most "
                  f"{services.MAX_HOST_MEMORY_MIB // (1024 * 1024)} Ti. Omitted: the workload type's default. "
                  "GPU memory is memory_gb.",
    )
    enable_gpu_selection = StrictBooleanField(
        default=True, help_text="false: hand every replica to the default Kubernetes scheduler"
    )
    allow_default_scheduler = StrictBooleanField(
        default=True,
        help_text="When no node qualifies only because of telemetry (busy GPUs), hand over to the default scheduler",
    )
    image = ImageField(
        required=False, default="", allow_blank=True, trim_whitespace=False, max_length=container.IMAGE_MAX_CHARS,
        help_text="Container image of the workload; empty or omitted: the default (GPUPLANE_WORKLOAD_IMAGE)",
    )
    command = ArgumentsField(
        required=False, default=list, max_length=container.MAX_ARGS,
        help_text="The container's entrypoint, one list item per argument; empty or omitted: the image's own",
    )
    args = ArgumentsField(
        required=False, default=list, max_length=container.MAX_ARGS,
        help_text="The container's arguments; empty or omitted: the image's own",
    )
    env = EnvField(required=False, default=dict)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        # The domain rules, once, in the services (ValidationError keyed by these field names).
        try:
            services.validate_spec(services.DeploySpec(**attrs))
        except ValidationError as error:
            raise serializers.ValidationError(error.message_dict) from None
        return attrs

    def to_spec(self) -> services.DeploySpec:
        return services.DeploySpec(**self.validated_data)


class PlacementSerializer(serializers.Serializer):
    """One replica: where it runs and what it was given (``services.placement_summary``)."""

    replica_index = serializers.IntegerField()
    status = serializers.CharField()
    node = serializers.CharField(allow_null=True, help_text="null: handed to the default Kubernetes scheduler")
    gpu_model = serializers.CharField(allow_null=True)
    gpus = serializers.ListField(child=serializers.IntegerField(), help_text="GPU indexes on the node")
    sharing = serializers.CharField(help_text="exclusive | mig | mps | mps-weighted | timeslice | default-scheduler")
    share_percent = serializers.FloatField(allow_null=True, help_text="Compute share per GPU")
    memory_gb = serializers.FloatField(
        allow_null=True, help_text="GPU memory given per GPU, in GB (1 GB = 1024 MiB); null for the default scheduler",
    )
    mig_profile = serializers.CharField(allow_blank=True, help_text="The MIG instance profile given; empty if none")
    workload_name = serializers.CharField(allow_blank=True, help_text="The Kubernetes Deployment running it")

    def to_representation(self, instance: Placement) -> dict[str, Any]:
        return {
            "replica_index": instance.replica_index,
            "status": instance.status,
            **services.placement_summary(instance),
            "workload_name": instance.workload_name,
        }


class DeploymentSerializer(serializers.ModelSerializer):
    """A deployment with its placements and the URL of its decision matrix."""

    memory_gb = serializers.SerializerMethodField()
    cpu = serializers.SerializerMethodField(help_text="CPU each replica's pod requests, a Kubernetes quantity")
    memory = serializers.SerializerMethodField(help_text="Host memory each replica's pod requests, a Kubernetes quantity")
    labels = serializers.DictField(child=serializers.CharField(allow_blank=True))
    created_by = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True,
        help_text="The user who deployed it; null when gpuplane made it itself (the demo) or the user was deleted",
    )
    placements = PlacementSerializer(many=True, read_only=True)
    decision = serializers.SerializerMethodField()

    class Meta:
        model = Deployment
        fields = [
            "id", "name", "model", "memory_gb", "memory_mib", "gpu_count", "replicas", "workload_type", "priority",
            "latency_slo_ms", "namespace", "labels", "sharing", "share_percent", "cpu", "memory",
            "enable_gpu_selection", "image", "command", "args", "env", "status", "origin", "message",
            "created_by", "created_at", "updated_at", "placed_at", "placements", "decision",
            "autoscale_policy", "autoscale_settings", "autoscale_native",
        ]
        read_only_fields = fields

    def get_memory_gb(self, obj: Deployment) -> float:
        return obj.memory_mib / MIB_PER_GB

    def get_cpu(self, obj: Deployment) -> str:
        return format_cpu(obj.cpu_milli)

    def get_memory(self, obj: Deployment) -> str:
        return format_memory(obj.host_memory_mib)

    @extend_schema_field(OpenApiTypes.URI)
    def get_decision(self, obj: Deployment) -> str:
        return reverse("scheduler-api:deployment-decision", args=[obj.pk], request=self.context.get("request"))


class DecisionSerializer(serializers.ModelSerializer):
    """One replica's stored decision; ``matrix`` is the placement core's ``ScheduleResult.to_dict()``."""

    node = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    outcome = serializers.ChoiceField(choices=DecisionOutcome.choices())
    weights = serializers.DictField(child=serializers.FloatField())
    matrix = serializers.DictField(
        help_text="request, classification, need (with sizing: the share, its basis and the least share per unit "
                  "kind), sizing (the rule that sized the placement, e.g. \"MIG: smallest free instance with at least "
                  "8 GB -> 1g.10gb\"), profile, weights, plugins (score plugins in profile order), "
                  "outcome, node, assignment, message, "
                  "diagnosis (rejected nodes per reason), feasible_nodes, idle_gpus, rows (per node: verdict, "
                  "reason, each plugin's raw / normalized / weighted score, total, rank)"
    )

    class Meta:
        model = Decision
        fields = ["id", "replica_index", "outcome", "node", "profile", "weights", "message", "duration_ms",
                  "created_at", "matrix"]
        read_only_fields = fields


class DeploymentDecisionsSerializer(serializers.Serializer):
    """`GET /api/v1/deployments/{id}/decision/`: every replica's decision matrix."""

    deployment = serializers.IntegerField()
    status = serializers.CharField()
    decisions = DecisionSerializer(many=True)


class SuggestionSerializer(serializers.Serializer):
    """A change to the request that was checked to place every replica on the cluster now."""

    text = serializers.CharField(help_text='e.g. "the largest GPU has 79.6 GB: ask for 2 GPUs per replica (60 GB on each)"')
    changes = serializers.DictField(help_text='Request fields and their new values, e.g. {"gpu_count": 2}')


class NoCapacitySerializer(serializers.Serializer):
    """409: why nothing fits; nothing was stored."""

    detail = serializers.CharField(
        help_text="The failing replica (of a multi-replica request), the dominant reason, the suggestion if any, "
                  'then every reason counted: "0/N nodes are available: ..."'
    )
    replica = serializers.IntegerField(help_text="Index of the replica that could not be placed")
    reason = serializers.CharField(help_text="The dominant reason: the one that rules out the most nodes "
                                             "(empty when the cause is not capacity)")
    suggestion = SuggestionSerializer(allow_null=True, help_text="null when no change was found that would work")
    released_replicas = serializers.IntegerField(
        help_text="Earlier replicas of this request whose tentative reservations were released"
    )
    decision = serializers.DictField(help_text="The decision matrix of that replica (see DecisionSerializer.matrix)")


class DeployFailedSerializer(serializers.Serializer):
    """502: the cluster refused a workload; the deployment is stored as failed, its GPUs released."""

    detail = serializers.CharField()
    deployment = serializers.IntegerField(help_text="Id of the failed deployment, kept for the record")
    status = serializers.CharField()


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField()

