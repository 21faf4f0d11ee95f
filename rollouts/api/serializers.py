"""Shapes of `/api/v1/rollouts/`: the create/preview body, a rollout, a preview.

The body's shape (types, enums, ranges) is checked here; what makes a config valid for a node
(NVIDIA's limits, the MIG geometry) is decided once, by ``nodes.sharing.node_config`` through
``rollouts.creating.validate_request``.
"""
from __future__ import annotations

from typing import Any

from django.core.validators import RegexValidator
from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from gpuplane.strict_input import StrictIntegerField, StrictSerializer, StrictStringField
from nodes.vocabulary import SharingMode
from rollouts.choices import NodeState, OnFailure, RolloutStatus, RolloutStrategy
from rollouts.creating import nodes_selected
from rollouts.models import RollingUpdate, RolloutNode
from rollouts.windows import InvalidWindow, parse_window, waiting_message
from scheduler.core.maintenance_window import MAX_DURATION_MINUTES

NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# NVIDIA: a GPU holds at most 7 MIG instances, whatever the profile.
MAX_MIG_INSTANCES = 7
# The max_unavailable column's range.
MAX_UNAVAILABLE = 32767


@extend_schema_field({"type": "string", "pattern": NAME_PATTERN, "minLength": 1, "maxLength": 63})
class RolloutNameField(StrictStringField):
    pass


class RolloutConfigSerializer(StrictSerializer):
    """A node sharing config, ``{"mode", "replicas", "mig_layout"}`` (as a node's desired_config)."""

    mode = serializers.ChoiceField(choices=SharingMode.choices())
    replicas = StrictIntegerField(
        required=False, allow_null=True, min_value=2,
        help_text="Replicas per GPU for mps, mps-weighted and timeslice (null otherwise); mps at most the GPU's MPS client limit.",
    )
    mig_layout = serializers.DictField(
        child=StrictIntegerField(min_value=1, max_value=MAX_MIG_INSTANCES), required=False, allow_null=True,
        help_text='For mig only: MIG profile to count on every GPU, e.g. {"3g.40gb": 2}; must fit the GPU model.',
    )


class MaintenanceWindowSerializer(StrictSerializer):
    """When a node's change may start: the window opens by ``cron`` in ``timezone`` and stays open
    ``duration_minutes`` (``scheduler.core.maintenance_window``: DST as cron handles it)."""

    cron = StrictStringField(max_length=200, help_text='Five crontab fields in the window\'s time zone, e.g. "0 2 * * SAT".')
    duration_minutes = StrictIntegerField(min_value=1, max_value=MAX_DURATION_MINUTES,
                                          help_text="How long it stays open once opened, in elapsed minutes.")
    timezone = StrictStringField(max_length=64, help_text="IANA time zone, e.g. Europe/Berlin or UTC.")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        try:
            return parse_window(attrs).as_dict()
        except InvalidWindow as error:
            raise serializers.ValidationError(error.errors) from None


class RolloutCreateSerializer(StrictSerializer):
    """The body of `POST /api/v1/rollouts/` and of `.../preview/`."""

    name = RolloutNameField(max_length=63, validators=[RegexValidator(NAME_PATTERN, "Enter a DNS label: a-z, 0-9 and '-'.")])
    nodes = serializers.ListField(child=StrictStringField(max_length=253), min_length=1, max_length=1000,
                                  required=False, help_text="The target nodes by name; or give node_selector.")
    node_selector = serializers.DictField(
        child=StrictStringField(max_length=63, allow_blank=True), required=False, allow_empty=False,
        help_text="The target nodes by label, as a nodeSelector (every label equal); or give nodes.")
    config = RolloutConfigSerializer()
    strategy = serializers.ChoiceField(choices=RolloutStrategy.choices(), default=RolloutStrategy.ROLLING)
    max_unavailable = StrictIntegerField(min_value=1, max_value=MAX_UNAVAILABLE, default=1)
    on_failure = serializers.ChoiceField(choices=OnFailure.choices(), default=OnFailure.PAUSE)
    maintenance_window = MaintenanceWindowSerializer(
        required=False, allow_null=True, default=None,
        help_text="When a node's change may start (nodes part-way finish outside it); null or omitted: any time.")
    move_back = serializers.BooleanField(
        default=False, help_text="Once a node is proven and uncordoned, move the workloads that left it back onto it.")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("nodes" in attrs) == ("node_selector" in attrs):
            raise serializers.ValidationError({"nodes": ["Give the target nodes either by name (nodes) or by label "
                                                         "(node_selector), not both and not neither."]})
        if "node_selector" in attrs:
            names = nodes_selected(attrs["node_selector"])
            if not names:
                raise serializers.ValidationError({"node_selector": ["No node has all of these labels."]})
            attrs["nodes"] = names
        return attrs

    def request_values(self) -> dict[str, Any]:
        """The validated body as ``rollouts.creating.validate_request`` keywords."""
        data = dict(self.validated_data)
        data.pop("node_selector", None)
        data["node_names"] = data.pop("nodes")
        return data


class RolloutNodeSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="node_name", read_only=True)
    state = serializers.ChoiceField(choices=NodeState.choices(), read_only=True)

    class Meta:
        model = RolloutNode
        fields = ["node", "state", "batch_index", "reason", "updated_at"]
        read_only_fields = fields


class RollingUpdateSerializer(serializers.ModelSerializer):
    """A rollout; expects its ``nodes`` prefetched."""

    status = serializers.ChoiceField(choices=RolloutStatus.choices(), read_only=True)
    strategy = serializers.ChoiceField(choices=RolloutStrategy.choices(), read_only=True)
    on_failure = serializers.ChoiceField(choices=OnFailure.choices(), read_only=True)
    config = RolloutConfigSerializer(read_only=True)
    progress_percent = serializers.FloatField(read_only=True)
    nodes = RolloutNodeSerializer(many=True, read_only=True)
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    maintenance_window = MaintenanceWindowSerializer(read_only=True, allow_null=True)
    waiting_for_window = serializers.SerializerMethodField(
        help_text='"waiting for the maintenance window (opens ...)" while the next node waits for it; "" otherwise')

    class Meta:
        model = RollingUpdate
        fields = [
            "id", "name", "status", "progress_percent", "nodes", "config", "strategy", "max_unavailable",
            "on_failure", "maintenance_window", "waiting_for_window", "move_back", "message", "created_by",
            "created_at", "updated_at", "started_at", "finished_at", "start_by",
        ]
        read_only_fields = fields

    def get_waiting_for_window(self, rollout: RollingUpdate) -> str:
        return waiting_message(rollout, timezone.now())


class RolloutMoveSerializer(serializers.Serializer):
    workload = serializers.CharField()
    size_milli = serializers.IntegerField()
    source = serializers.CharField()
    destination = serializers.CharField(allow_blank=True, help_text='The node the placement engine picks; "" when none')
    outcome = serializers.CharField(help_text="The engine's outcome: placed, unschedulable (a blocker) or "
                                              "default-scheduler / skipped (handed to Kubernetes' default scheduler)")
    gpus = serializers.ListField(child=serializers.IntegerField(), help_text="GPU indexes on the destination")
    partition = serializers.CharField(allow_blank=True, help_text='What it is given there: "exclusive", "MIG 1g.10gb", "mps 250 m"')
    reason = serializers.CharField(allow_blank=True, help_text="The engine's reason when it places it nowhere")


class RolloutBatchSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    nodes = serializers.ListField(child=serializers.CharField())
    capacity_dip_milli = serializers.IntegerField(help_text="Capacity of the batch's nodes, out of service together")
    total_capacity_milli = serializers.IntegerField()
    capacity_dip_percent = serializers.FloatField()
    moves = RolloutMoveSerializer(many=True, help_text="Workloads re-placed elsewhere before the batch is drained")


class RolloutSkippedSerializer(serializers.Serializer):
    node = serializers.CharField()
    reason = serializers.CharField()


class RolloutRefusalSerializer(serializers.Serializer):
    workload = serializers.CharField()
    node = serializers.CharField()
    reason = serializers.CharField()


class DrainBlockerPodSerializer(serializers.Serializer):
    pod = serializers.CharField(help_text='"namespace/name"')
    kind = serializers.ChoiceField(choices=["do-not-disrupt", "bare"])


class RolloutDrainBlockerSerializer(serializers.Serializer):
    node = serializers.CharField()
    reason = serializers.CharField(help_text="Why the node will be skipped (the rollout goes on without it)")
    pods = DrainBlockerPodSerializer(many=True)


class WindowPreviewSerializer(serializers.Serializer):
    cron = serializers.CharField()
    duration_minutes = serializers.IntegerField()
    timezone = serializers.CharField()
    open_now = serializers.BooleanField()
    closes_at = serializers.DateTimeField(allow_null=True, help_text="When the window open now closes; null when closed")
    next_opens_at = serializers.DateTimeField(allow_null=True, help_text="The next opening after now")


class RolloutConfigsSerializer(serializers.Serializer):
    present = serializers.ListField(child=serializers.CharField(),
                                    help_text="Named configs already in the GPU operator's ConfigMaps")
    to_write = serializers.ListField(child=serializers.CharField(),
                                     help_text="Named configs gpuplane writes there before the first cordon")
    problems = serializers.ListField(child=serializers.CharField(),
                                     help_text="Why a config cannot be written (each a blocker)")


class RolloutPreviewSerializer(serializers.Serializer):
    config = RolloutConfigSerializer()
    strategy = serializers.ChoiceField(choices=RolloutStrategy.choices())
    max_unavailable = serializers.IntegerField()
    maintenance_window = WindowPreviewSerializer(allow_null=True, help_text="null: a node's change may start any time")
    move_back = serializers.BooleanField()
    placer = serializers.CharField(help_text="How the preview chose where moved workloads go")
    feasible = serializers.BooleanField(help_text="False when it cannot be done safely now; see blockers")
    blockers = serializers.ListField(child=serializers.CharField())
    batches = RolloutBatchSerializer(many=True)
    skipped = RolloutSkippedSerializer(many=True)
    refusals = RolloutRefusalSerializer(many=True)
    drain_blockers = RolloutDrainBlockerSerializer(
        many=True, help_text="Target nodes whose pods will block the drain: skipped at their turn, with the reason")
    pods_unread = serializers.CharField(allow_blank=True, help_text='Why the pods could not be read; "" when they were')
    configs = RolloutConfigsSerializer(help_text="The device-plugin and mig-parted configs the change needs")
    explanation = serializers.ListField(child=serializers.CharField())


class RolloutRefusedSerializer(serializers.Serializer):
    detail = serializers.CharField()
    reasons = serializers.ListField(child=serializers.CharField())
    preview = RolloutPreviewSerializer()
