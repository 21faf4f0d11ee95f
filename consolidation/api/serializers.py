"""Shapes of `/api/v1/consolidations/`: a plan, an analysis that made none, and the body of a rejection."""
from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from consolidation.choices import PlanStatus
from consolidation.models import ConsolidationPlan
from gpuplane.strict_input import StrictSerializer, StrictStringField


class MoveSerializer(serializers.Serializer):
    workload = serializers.CharField(help_text='"namespace/deployment replica N"')
    placement = serializers.IntegerField()
    deployment = serializers.IntegerField()
    from_node = serializers.CharField()
    from_gpus = serializers.ListField(child=serializers.IntegerField())
    to_node = serializers.CharField()
    to_gpus = serializers.ListField(child=serializers.IntegerField(), help_text="Planned; the placement engine picks on the node")
    mig_profile = serializers.CharField(allow_blank=True)
    why = serializers.CharField()


class PlanSavingsSerializer(serializers.Serializer):
    usd = serializers.FloatField(help_text="Per hour: the freed nodes' GPUs at their price")
    kwh = serializers.FloatField(help_text="Per hour: the freed nodes' GPUs at their TDP")


class PlanBudgetSerializer(serializers.Serializer):
    deployment = serializers.IntegerField()
    workload = serializers.CharField(help_text='"namespace/deployment"')
    allowed = serializers.IntegerField(help_text="Replicas this plan may move")
    moved = serializers.IntegerField(help_text="Replicas this plan moves")
    source = serializers.CharField(help_text="The PodDisruptionBudget it comes from, or the setting when none selects it")


class DisruptionSerializer(serializers.Serializer):
    workloads_moved = serializers.IntegerField()
    pdb_budget_used = serializers.DictField(child=serializers.IntegerField(), help_text="deployment id -> replicas moved")
    budgets = PlanBudgetSerializer(many=True, required=False,
                                   help_text="Per deployment moved or covered by a PDB: its budget and where it comes from")


class SkippedSerializer(serializers.Serializer):
    node = serializers.CharField()
    gpu = serializers.IntegerField(allow_null=True)
    reason = serializers.CharField()


class ConsolidationPlanSerializer(serializers.ModelSerializer):
    status = serializers.ChoiceField(choices=PlanStatus.choices(), read_only=True)
    moves = MoveSerializer(many=True, read_only=True)
    nodes_freed = serializers.ListField(child=serializers.CharField(), read_only=True)
    savings_per_hour = serializers.SerializerMethodField()
    disruption = DisruptionSerializer(read_only=True)
    skipped = SkippedSerializer(many=True, read_only=True)
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    decided_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True,
                                              help_text="The admin who approved or rejected it")

    class Meta:
        model = ConsolidationPlan
        fields = ["id", "status", "moves", "nodes_freed", "gpus_freed", "savings_per_hour", "disruption", "method",
                  "skipped", "reason", "created_by", "decided_by", "created_at", "expires_at", "finished_at"]
        read_only_fields = fields

    @extend_schema_field(PlanSavingsSerializer)
    def get_savings_per_hour(self, plan: ConsolidationPlan) -> dict[str, Any]:
        return {"usd": plan.savings_usd_per_hour, "kwh": plan.savings_kwh_per_hour}


# A reason of spaces only is refused: the schema says "at least one character that is not a space".
@extend_schema_field({"type": "string", "maxLength": 1000, "pattern": "\\S"})
class ReasonField(StrictStringField):
    pass


class AnalysisOutcomeSerializer(serializers.Serializer):
    """An analysis that made no new plan."""

    detail = serializers.CharField()
    plan = ConsolidationPlanSerializer(allow_null=True, help_text="The proposed plan with the same moves, refreshed; "
                                                                  "null when nothing would move")
    method = serializers.CharField(help_text="How the analysis looked")
    skipped = SkippedSerializer(many=True, help_text="Nodes left as they are, and why")
    budgets = PlanBudgetSerializer(many=True, help_text="The disruption budgets the analysis applied")


class RejectSerializer(StrictSerializer):
    reason = ReasonField(max_length=1000, help_text="Why the plan is rejected (kept in the audit log)")

    def validate_reason(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError("A rejection needs a reason.")
        return value.strip()
