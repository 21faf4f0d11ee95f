"""Read serializers for the inventory: nodes, GPUs and partitions.

Fields are listed explicitly so that a new model column never leaks into the API unnoticed.
Relations are written as natural keys (node name, GPU UUID) because that is how operators and
Kubernetes name them.
"""
from __future__ import annotations

from typing import Any

from django.db.models import Avg, Count, Q, QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from nodes.models import GPU, Node, Partition
from nodes.node_configs import applied_config, desired_config, desired_label_value
from nodes.telemetry.samples import plausible
from nodes.vocabulary import TAINT_EFFECTS, SharingMode


def with_usage(nodes: QuerySet[Node]) -> QuerySet[Node]:
    """Annotate `gpus_allocated` and `utilization_pct`, which NodeSerializer reads.

    `gpus_allocated`: number of the node's GPUs with any compute allocated (allocated_milli > 0).
    `utilization_pct`: mean of its GPUs' latest utilization, ignoring GPUs without telemetry;
    None when no GPU has reported. One aggregate query for the whole page, no N+1.
    Keeps an explicit order_by; otherwise orders by Node.Meta.ordering.
    """
    annotated = nodes.annotate(
        gpus_allocated=Count("gpus", filter=Q(gpus__allocated_milli__gt=0)),
        utilization_pct=Avg("gpus__utilization_pct"),
    )
    # Django drops Meta.ordering from GROUP BY queries; paging needs a stable order.
    return annotated if annotated.ordered else annotated.order_by(*Node._meta.ordering)


class TaintSerializer(serializers.Serializer):
    """Shape of one Kubernetes taint; used to document Node.taints in the schema."""

    key = serializers.CharField()
    value = serializers.CharField(required=False)
    effect = serializers.ChoiceField(choices=TAINT_EFFECTS)


@extend_schema_field({"type": "object", "additionalProperties": {"type": "string"}})
class LabelsField(serializers.JSONField):
    """Kubernetes labels: a string-to-string mapping."""


@extend_schema_field(TaintSerializer(many=True))
class TaintsField(serializers.JSONField):
    """Kubernetes taints: a list of {key, value, effect}."""


class NodeConfigSerializer(serializers.Serializer):
    """A node's sharing config: the mode, R (replicas per GPU) and the MIG layout of every GPU."""

    mode = serializers.ChoiceField(choices=SharingMode.choices())
    # No minimum here: an applied R is what GFD's label says (>= 2 once the device plugin shares);
    # a desired R is checked by nodes.sharing.node_config (>= 2, the MPS client limit).
    replicas = serializers.IntegerField(
        allow_null=True,
        help_text="R, replicas per GPU, for mps, mps-weighted and timeslice (at least 2 in a desired config); "
        "null for exclusive and mig.",
    )
    mig_layout = serializers.DictField(
        child=serializers.IntegerField(min_value=1), allow_null=True,
        help_text='MIG profile to instance count on every GPU of the node, e.g. {"3g.40gb": 1, "2g.20gb": 2}; '
        "null outside mig (and, applied, when the node's GPUs have different layouts).",
    )


class NodeSerializer(serializers.ModelSerializer):
    """A node; expects a queryset passed through `with_usage()` and `with_mig_layouts()`."""

    url = serializers.HyperlinkedIdentityField(view_name="nodes-api:node-detail", lookup_field="name")
    labels = LabelsField(read_only=True)
    taints = TaintsField(read_only=True)
    schedulable = serializers.BooleanField(read_only=True, help_text="Ready and not cordoned.")
    gpus_allocated = serializers.IntegerField(
        read_only=True, help_text="Number of this node's GPUs with any compute allocated."
    )
    utilization_pct = serializers.FloatField(
        read_only=True,
        allow_null=True,
        help_text="Mean of the node's GPUs' latest utilization; null when no GPU has reported.",
    )

    applied_config = serializers.SerializerMethodField(
        help_text="The sharing config the cluster proves on the node (GFD labels, MIG devices)."
    )
    applied_config_name = serializers.CharField(
        source="applied_config", read_only=True,
        help_text="Name of the device-plugin (on MIG nodes, mig-parted) config the node's label selects.",
    )
    desired_config = serializers.SerializerMethodField(
        help_text="The sharing config gpuplane wants on the node; null when it wants none in particular."
    )
    desired_config_name = serializers.SerializerMethodField(
        help_text="The config name the desired config selects; empty when none is desired."
    )

    class Meta:
        model = Node
        fields = [
            "id",
            "url",
            "name",
            "labels",
            "taints",
            "ready",
            "cordoned",
            "schedulable",
            "cpu_allocatable_milli",
            "memory_allocatable_mib",
            "gpu_product",
            "gpu_model",
            "gpu_count",
            "sharing_mode",
            "sharing_replicas",
            "applied_config",
            "applied_config_name",
            "desired_config",
            "desired_config_name",
            "last_seen",
            "gpus_allocated",
            "utilization_pct",
        ]
        read_only_fields = fields

    @extend_schema_field(NodeConfigSerializer)
    def get_applied_config(self, node: Node) -> dict[str, Any]:
        return applied_config(node).as_dict()

    @extend_schema_field(NodeConfigSerializer(allow_null=True))
    def get_desired_config(self, node: Node) -> dict[str, Any] | None:
        config = desired_config(node)
        return config.as_dict() if config is not None else None

    @extend_schema_field(OpenApiTypes.STR)
    def get_desired_config_name(self, node: Node) -> str:
        return desired_label_value(node)


class LatestMetricField(serializers.FloatField):
    """A GPU row's latest value of a telemetry metric; null when not measured or when no GPU could report it.

    Ingest refuses such values; one written before the telemetry bounds, or by SQL (inf, NaN),
    must still not make the listing's JSON fail.
    """

    def __init__(self, metric: str, **kwargs: Any) -> None:
        self.metric = metric
        super().__init__(read_only=True, allow_null=True, **kwargs)

    def to_representation(self, value: Any) -> float | None:
        return float(value) if plausible(self.metric, value) else None


class GPUSerializer(serializers.ModelSerializer):
    """A GPU with its allocation and latest telemetry (telemetry fields are null until sampled)."""

    url = serializers.HyperlinkedIdentityField(view_name="nodes-api:gpu-detail", lookup_field="uuid")
    node = serializers.SlugRelatedField(slug_field="name", read_only=True)
    free_milli = serializers.IntegerField(read_only=True, help_text="Compute not yet allocated, in thousandths.")
    free_memory_mib = serializers.IntegerField(read_only=True, help_text="Memory not yet allocated, in MiB.")
    utilization_pct = LatestMetricField("utilization_pct", help_text="Latest utilization, percent.")
    power_w = LatestMetricField("power_w", help_text="Latest power draw, watts.")
    power_limit_w = LatestMetricField("power_limit_w", help_text="Latest enforced power limit, watts.")
    temperature_c = LatestMetricField("temperature_c", help_text="Latest GPU temperature, degrees Celsius.")

    class Meta:
        model = GPU
        fields = [
            "url",
            "uuid",
            "node",
            "index",
            "model",
            "memory_mib",
            "mig_enabled",
            "allocated_milli",
            "allocated_memory_mib",
            "free_milli",
            "free_memory_mib",
            "utilization_pct",
            "memory_used_mib",
            "memory_reserved_mib",
            "power_w",
            "power_limit_w",
            "temperature_c",
            "processes",
            "sampled_at",
        ]
        read_only_fields = fields


class PartitionSerializer(serializers.ModelSerializer):
    """A unit a workload can be given; `free` when held by no placement and no pod."""

    # `free` and `placement` read `holder_id`: pass the queryset through nodes.holds.with_holder_id().
    url = serializers.HyperlinkedIdentityField(view_name="nodes-api:partition-detail")
    gpu = serializers.SlugRelatedField(slug_field="uuid", read_only=True)
    node = serializers.CharField(source="gpu.node.name", read_only=True, help_text="Name of the GPU's node.")
    free = serializers.SerializerMethodField()
    placement = serializers.IntegerField(source="holder_id", read_only=True, allow_null=True)

    class Meta:
        model = Partition
        fields = [
            "id",
            "url",
            "gpu",
            "node",
            "kind",
            "slot",
            "share_milli",
            "memory_mib",
            "mig_profile",
            "mig_start",
            "mig_size",
            "mig_device_uuid",
            "free",
            "pod",
            "placement",
        ]
        read_only_fields = fields

    @extend_schema_field(OpenApiTypes.BOOL)
    def get_free(self, partition: Partition) -> bool:
        """Held by no placement and used by no pod."""
        return partition.holder_id is None and not partition.pod
