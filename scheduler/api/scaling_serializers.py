"""Shapes of the scaling API: PATCH of a deployment (replicas, autoscaling) and its scaling events."""
from __future__ import annotations

import math
from typing import Any

from django.conf import settings
from rest_framework import serializers

from gpuplane.strict_input import StrictBooleanField, StrictFloatField, StrictIntegerField, StrictSerializer
from scheduler.core.autoscale import POLICIES, AutoscaleSettings
from scheduler.models import ScalingEvent


class AutoscaleSettingsSerializer(StrictSerializer):
    """Overrides of the autoscale settings (docs/concepts.md "Autoscaling and feedback" has the
    units); ``min_replicas`` must not exceed ``max_replicas``."""

    def get_fields(self) -> dict[str, serializers.Field]:
        fields: dict[str, serializers.Field] = {}
        for name, default in AutoscaleSettings().to_dict().items():
            if isinstance(default, int):
                lowest = 1 if name in ("min_replicas", "max_replicas") else 0
                fields[name] = StrictIntegerField(required=False, min_value=lowest, max_value=10_000)
            else:
                fields[name] = StrictFloatField(required=False, min_value=0, max_value=1e6)
        return fields

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        values = super().to_internal_value(data)
        if values.get("min_replicas", 0) > values.get("max_replicas", math.inf):
            raise serializers.ValidationError({"min_replicas": ["must not exceed max_replicas"]})
        return dict(values)


class DeploymentPatchSerializer(StrictSerializer):
    """What PATCH may change: the replicas (by hand, through the placement engine) and autoscaling."""

    replicas = StrictIntegerField(required=False, min_value=1, max_value=settings.DEPLOYMENT_MAX_REPLICAS,
                                        help_text="Replicas wanted; new ones are placed one by one")
    autoscale_policy = serializers.ChoiceField(required=False, allow_blank=True,
                                               choices=["", *POLICIES],
                                               help_text="The autoscaling policy; empty turns autoscaling off")
    autoscale_settings = AutoscaleSettingsSerializer(required=False,
                                                     help_text="Overrides of the autoscale settings; "
                                                               "min_replicas must not exceed max_replicas")
    autoscale_native = StrictBooleanField(required=False,
                                                help_text="Write a Kubernetes HPA instead of gpuplane's own loop")



class ScalingEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = ScalingEvent
        fields = ["id", "at", "policy", "action", "replicas_before", "replicas_after", "inputs", "decision",
                  "outcome", "message", "actor"]
        read_only_fields = fields
