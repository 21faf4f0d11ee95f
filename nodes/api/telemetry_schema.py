"""The OpenAPI description of `POST /api/v1/telemetry/` (`nodes.api.telemetry`): request and answers.

These serializers only document the endpoint: the view types and checks a batch in bulk
(`nodes.telemetry.batch`, `nodes.telemetry.validation`), which a fleet's agents need, and never
runs them. `tests/nodes/test_api_telemetry.py` checks that the fields and bounds documented here
are the ones the bulk parser takes.
"""
from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework import serializers

from gpuplane.strict_input import RejectUnknownFieldsMixin
from nodes.telemetry.batch import GPU_UUID_MAX_CHARS, NODE_MAX_CHARS
from nodes.telemetry.samples import MAX_PROCESSES, METRIC_RANGES


class StrictFloatField(serializers.FloatField):
    """A JSON number (integer or not); unlike DRF's FloatField, no strings and no booleans."""

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool) or not isinstance(data, int | float):
            raise serializers.ValidationError(f"A number is required, not {type(data).__name__}.")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer; no strings, booleans or fractions (12.0 too: a whole count sent as a float is a bug)."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise serializers.ValidationError(f"A whole number is required, not {type(data).__name__}.")
        return super().to_internal_value(data)


def _metric(field_class: type[serializers.Field], name: str, help_text: str) -> serializers.Field:
    """An optional, nullable metric field bounded by nodes.telemetry.samples.METRIC_RANGES."""
    low, high = METRIC_RANGES[name]
    return field_class(
        min_value=low, max_value=high, required=False, allow_null=True, help_text=f"{help_text} Null when not measured."
    )


class TelemetryProcessSerializer(RejectUnknownFieldsMixin, serializers.Serializer):
    """One compute process on the GPU."""

    pid = StrictIntegerField(min_value=0, help_text="Its process id (in the driver's PID namespace).")
    used_memory_mib = StrictIntegerField(
        min_value=0, required=False, allow_null=True, help_text="GPU memory it uses, MiB; null where the driver does not say."
    )


class TelemetrySampleSerializer(RejectUnknownFieldsMixin, serializers.Serializer):
    """One sample; the bounds are those of nodes.telemetry.samples.METRIC_RANGES."""

    gpu_uuid = serializers.CharField(max_length=GPU_UUID_MAX_CHARS, help_text="The GPU's UUID, as NVML reports it.")
    ts = serializers.DateTimeField(help_text="When the sample was taken (ISO 8601 with Z or an offset).")
    utilization_pct = _metric(StrictFloatField, "utilization_pct", "GPU utilization, percent.")
    memory_used_mib = _metric(
        StrictIntegerField, "memory_used_mib",
        "Framebuffer memory used, MiB, without what the driver reserves (NVML memory info v2; version 1 counts it).",
    )
    memory_total_mib = _metric(
        StrictIntegerField, "memory_total_mib", "Framebuffer memory in total, MiB; at most the GPU's memory."
    )
    memory_reserved_mib = _metric(
        StrictIntegerField, "memory_reserved_mib",
        "Memory the driver and firmware reserve, MiB (NVML memory info v2); used + reserved is at most total.",
    )
    power_w = _metric(StrictFloatField, "power_w", "Power draw, watts; at most 1.5 × the TDP of the GPU's model.")
    power_limit_w = _metric(StrictFloatField, "power_limit_w", "Enforced power limit, watts.")
    temperature_c = _metric(StrictFloatField, "temperature_c", "GPU temperature, degrees Celsius.")
    sm_clock_mhz = _metric(
        StrictIntegerField, "sm_clock_mhz", "SM clock, MHz; at most 1.25 × the maximum clock of the GPU's model."
    )
    processes = serializers.ListField(
        child=TelemetryProcessSerializer(), max_length=MAX_PROCESSES, required=False, allow_null=True,
        help_text="Compute processes on the GPU now; null when not read, [] when none runs.",
    )


class TelemetryBatchSerializer(RejectUnknownFieldsMixin, serializers.Serializer):
    """A batch of samples of one node's GPUs."""

    node = serializers.CharField(max_length=NODE_MAX_CHARS, help_text="The node the GPUs belong to (Kubernetes node name).")
    samples = serializers.ListField(child=TelemetrySampleSerializer())  # bounded in get_fields()

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        # Built when the schema is, not at import, so that the setting (and tests overriding it) apply.
        fields["samples"] = serializers.ListField(
            child=TelemetrySampleSerializer(),
            max_length=settings.TELEMETRY_MAX_BATCH,
            help_text="At most TELEMETRY_MAX_BATCH samples, every one of a GPU of `node`.",
        )
        return fields


class IngestResultSerializer(serializers.Serializer):
    """201: every sample was taken."""

    stored = serializers.IntegerField(help_text="Samples stored by this request.")
    duplicates = serializers.IntegerField(help_text="Samples already stored (same GPU and time), ignored.")


class IngestPartialSerializer(IngestResultSerializer):
    """207 (some samples refused, the others stored) or 400 with `stored` 0 (every sample refused)."""

    refused = serializers.IntegerField(help_text="Samples refused; never stored.")
    samples = serializers.DictField(
        child=serializers.DictField(child=serializers.ListField(child=serializers.CharField())),
        help_text='Per index of a refused sample, its messages per field: {"3": {"power_w": ["..."]}}.',
    )
    retry = serializers.ListField(
        child=serializers.IntegerField(),
        help_text=(
            "Indexes of refused samples whose only fault is a GPU the inventory does not know yet "
            "(a fresh node before its GPU report is bound): they may be sent again later."
        ),
    )
