"""The shape of GET /api/v1/savings/ (savings.services.summary), for the OpenAPI schema."""
from __future__ import annotations

from rest_framework import serializers


class ModelSavingsSerializer(serializers.Serializer):
    gpu_model = serializers.CharField(help_text='Catalog key of the GPU model ("" when the product is unknown).')
    baseline_gpus = serializers.IntegerField(help_text="GPUs of this model the baseline would take.")
    gpus_used = serializers.IntegerField(help_text="GPUs of this model holding anything.")
    gpus_saved = serializers.IntegerField(help_text="baseline_gpus - gpus_used.")
    usd_per_gpu_hour = serializers.FloatField(help_text="Price of one GPU-hour of this model (settings may override).")
    power_w = serializers.FloatField(help_text="Board power of one GPU of this model (the catalog's TDP).")
    usd_per_hour = serializers.FloatField(help_text="gpus_saved * usd_per_gpu_hour.")
    kwh_per_hour = serializers.FloatField(help_text="gpus_saved * power_w / 1000.")


class NotRunningDeploymentSerializer(serializers.Serializer):
    deployment = serializers.IntegerField()
    workload = serializers.CharField(help_text='"namespace/name"')
    missing = serializers.IntegerField(help_text="Replicas of it that do not run")
    gpus = serializers.IntegerField(help_text="Whole GPUs the baseline would give them")


class NotRunningSerializer(serializers.Serializer):
    replicas = serializers.IntegerField(help_text="gpuplane replicas that should run and do not (lost, or starting)")
    baseline_gpus = serializers.IntegerField(help_text="Whole GPUs those replicas would add to the baseline")
    deployments = NotRunningDeploymentSerializer(many=True, help_text="The first 20 deployments concerned")


class SavingsSerializer(serializers.Serializer):
    baseline = serializers.CharField(help_text="The baseline the savings are measured against, in words.")
    baseline_gpus = serializers.IntegerField(
        help_text="GPUs the cluster's running GPU-requesting workloads would take on whole GPUs: each replica or pod "
        "one GPU per GPU it occupies. Replicas that do not run are left out (see not_running)."
    )
    allocated_gpu_equivalents = serializers.FloatField(
        help_text="What the workloads hold, in GPU-equivalents (a 3g MIG instance 3/7, an MPS slot 1/R), as the overview."
    )
    gpus_used = serializers.IntegerField(help_text="GPUs holding a running workload.")
    gpus_saved = serializers.IntegerField(help_text="baseline_gpus - gpus_used.")
    saved_percent = serializers.FloatField(help_text="gpus_saved as a percentage of baseline_gpus (0 when it is 0).")
    usd_per_hour = serializers.FloatField(help_text="Price of the GPUs saved, USD per hour.")
    kwh_per_hour = serializers.FloatField(help_text="Board power of the GPUs saved, kWh per hour.")
    gpu_hours_saved_24h = serializers.FloatField(help_text="GPU-hours saved over the 24 h up to the latest sample.")
    usd_saved_24h = serializers.FloatField(help_text="USD saved over the 24 h up to the latest sample.")
    kwh_saved_24h = serializers.FloatField(help_text="kWh saved over the 24 h up to the latest sample.")
    not_running = NotRunningSerializer(help_text="What the savings leave out: gpuplane replicas that do not run")
    sampled_at = serializers.DateTimeField(allow_null=True, help_text="Time of the latest savings sample; null: none yet.")
    sample_interval_s = serializers.IntegerField(help_text="Seconds between savings samples.")
    by_model = ModelSavingsSerializer(many=True, help_text="The same figures per GPU model; the totals are their sums.")
