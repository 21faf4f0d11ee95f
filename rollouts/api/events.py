"""The shape of `/api/v1/rollouts/<id>/events/`: one audit event of the rollout or of one of its nodes."""
from __future__ import annotations

from rest_framework import serializers


class RolloutEventSerializer(serializers.Serializer):
    id = serializers.IntegerField(read_only=True)
    at = serializers.DateTimeField(read_only=True)
    actor = serializers.CharField(read_only=True)
    verb = serializers.CharField(read_only=True, help_text='e.g. "rollingupdate.running", "rolloutnode.pod_evicted"')
    node = serializers.CharField(read_only=True, help_text='The node\'s name; "" for the rollout\'s own events')
    reason = serializers.CharField(read_only=True)
