from __future__ import annotations

from rest_framework import serializers

from lifecycle.models import AuditEvent


class AuditEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditEvent
        fields = ["id", "at", "actor", "verb", "object_type", "object_id", "object_repr", "reason", "before", "after"]
        read_only_fields = fields
