"""What runs where: deploy requests, their placements and the decisions behind them.

A Deployment is one deploy request and its life (pending -> placed -> running, or failed /
deleted). Each replica gets one Placement (the node, GPUs and share it was given, kept after
release so the history stays readable) and one Decision (the stored decision matrix). The
partitions a placement holds are its ``PartitionHold`` rows (``placement.holds``); the services in
``scheduler.services`` are the only writers. A NamespaceQuota caps what one namespace's active
deployments may hold (edited in the admin, enforced by the services).
"""
from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q

from lifecycle.transitions import StateMachine
from scheduler.choices import (
    MOVE_FINAL,
    MOVE_FROM,
    DecisionOutcome,
    DeploymentStatus,
    MoveKind,
    MoveRequester,
    MoveStatus,
    PlacementStatus,
)
from scheduler.core import Priority, SharingRequest, WorkloadType
from scheduler.policies import POLICY_STRATEGY_CHOICES, policy_errors


class Deployment(models.Model):
    name = models.CharField(max_length=63)
    model = models.CharField(max_length=200, help_text="Model name, e.g. llama-3-8b")
    memory_mib = models.PositiveIntegerField(help_text="GPU memory the model needs per replica")
    gpu_count = models.PositiveSmallIntegerField(default=1, help_text="GPUs per replica (tensor-parallel size)")
    replicas = models.PositiveSmallIntegerField(default=1)
    workload_type = models.CharField(max_length=16, choices=WorkloadType.choices, default=WorkloadType.INFERENCE)
    priority = models.CharField(max_length=8, choices=Priority.choices, default=Priority.MEDIUM)
    latency_slo_ms = models.PositiveIntegerField(null=True, blank=True)
    namespace = models.CharField(max_length=63, default="default")
    labels = models.JSONField(default=dict, blank=True)
    sharing = models.CharField(max_length=16, choices=SharingRequest.choices, default=SharingRequest.AUTO)
    share_percent = models.PositiveSmallIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="Compute share per GPU the request stated, 1-100; empty: the sharing mode's own sizing rule",
    )
    enable_gpu_selection = models.BooleanField(default=True)
    # The pod's CPU and host memory requests (= limits), per replica; the API takes Kubernetes
    # quantities ("8", "500m", "64Gi") and fills in the workload type's defaults (services.spec).
    cpu_milli = models.PositiveIntegerField(default=0, help_text="CPU each replica's pod requests, in millicores")
    host_memory_mib = models.PositiveIntegerField(default=0, help_text="Host memory each replica's pod requests, MiB")
    # The workload's container; empty: GPUPLANE_WORKLOAD_IMAGE, the image's entrypoint, no extra env.
    image = models.CharField(max_length=512, blank=True, help_text="Container image; empty: GPUPLANE_WORKLOAD_IMAGE")
    command = models.JSONField(default=list, blank=True, help_text="Container command (entrypoint); []: the image's")
    args = models.JSONField(default=list, blank=True, help_text="Container arguments; []: the image's")
    env = models.JSONField(default=dict, blank=True, help_text="Extra environment variables: {name: value}")
    status = models.CharField(max_length=16, choices=DeploymentStatus.choices, default=DeploymentStatus.PENDING)
    # "api": made by a deploy request; "webhook": a pod someone else created, placed at admission
    # (its one placement is released when the pod goes away or never binds, scheduler.admission).
    origin = models.CharField(max_length=8, default="api", choices=[("api", "API"), ("webhook", "Webhook")])
    message = models.TextField(blank=True, help_text="Why the deployment failed, or the latest status change")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    placed_at = models.DateTimeField(null=True, blank=True, help_text="When its workloads were created on the cluster")
    watched_at = models.DateTimeField(
        null=True, blank=True, help_text="When the watcher last looked at it while pending or placed",
    )
    # Autoscaling (docs/concepts.md "Autoscaling"): the policy ("" = off), its per-deployment
    # overrides of GPUPLANE_AUTOSCALE, the policy's memory between evaluations (scheduler.core.autoscale
    # ScalingState), and native mode (an autoscaling/v2 HPA instead of gpuplane's loop).
    autoscale_policy = models.CharField(max_length=16, blank=True, default="",
                                        help_text="gpuplane, hpa, seed or static; empty: no autoscaling")
    autoscale_settings = models.JSONField(default=dict, blank=True,
                                          help_text="Overrides of the autoscale settings for this deployment")
    autoscale_state = models.JSONField(default=dict, blank=True, help_text="The policy's state between evaluations")
    autoscale_native = models.BooleanField(default=False, help_text="Write a Kubernetes HPA instead of scaling itself")

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=Q(gpu_count__gte=1), name="deployment_gpu_count_positive"),
            models.CheckConstraint(condition=Q(replicas__gte=1), name="deployment_replicas_positive"),
            models.CheckConstraint(
                condition=Q(share_percent__isnull=True) | Q(share_percent__gte=1, share_percent__lte=100),
                name="deployment_share_percent_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class Placement(models.Model):
    """One replica of a Deployment bound to a node; its partitions say which GPUs and slices.

    ``node`` is None for a replica handed to the default Kubernetes scheduler (no node affinity,
    nothing reserved by gpuplane). The fields from ``sharing`` on record what the replica was
    given, and stay after its partitions are released.
    """

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="placements")
    node = models.ForeignKey("nodes.Node", null=True, blank=True, on_delete=models.PROTECT, related_name="placements")
    replica_index = models.PositiveSmallIntegerField(default=0)
    status = models.CharField(max_length=16, choices=PlacementStatus.choices, default=PlacementStatus.RESERVED)
    workload_name = models.CharField(max_length=253, blank=True, help_text="Kubernetes workload created for it")
    sharing = models.CharField(max_length=16, blank=True, help_text="Partition kind given; empty when not placed by gpuplane")
    gpu_indexes = models.JSONField(default=list, blank=True, help_text="Indexes of the GPUs on the node")
    share_milli = models.PositiveIntegerField(default=0, help_text="Compute share per GPU, in thousandths")
    memory_mib = models.PositiveIntegerField(default=0, help_text="GPU memory charged per GPU")
    mig_profile = models.CharField(max_length=32, blank=True)
    resources = models.JSONField(default=dict, blank=True, help_text="Extended-resource limits of its pod")
    env = models.JSONField(default=dict, blank=True, help_text="Environment of its pod (MPS limits)")
    # What its pod holds of the node's CPU and host memory (the snapshot counts it while the
    # placement holds partitions there).
    cpu_milli = models.PositiveIntegerField(default=0, help_text="CPU its pod requests, in millicores")
    host_memory_mib = models.PositiveIntegerField(default=0, help_text="Host memory its pod requests, MiB")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["deployment_id", "replica_index"]
        constraints = [
            models.UniqueConstraint(fields=["deployment", "replica_index"], name="placement_unique_replica"),
        ]

    def __str__(self) -> str:
        return f"{self.deployment} #{self.replica_index} on {self.node}"


class PartitionHold(models.Model):
    """A partition held by a placement: the scheduler's side of ``nodes.Partition``.

    Inventory (the nodes app) knows nothing of deployments; it asks who holds what through the
    hook in ``nodes.holds``, which ``scheduler.holds`` answers from these rows. The partition is
    the primary key, so the database itself refuses a second holder of one partition.
    """

    partition = models.OneToOneField(
        "nodes.Partition", on_delete=models.CASCADE, primary_key=True, related_name="hold",
    )
    placement = models.ForeignKey(Placement, on_delete=models.CASCADE, related_name="holds")

    class Meta:
        ordering = ["partition_id"]

    def __str__(self) -> str:
        return f"partition {self.partition_id} held by placement {self.placement_id}"


class Decision(models.Model):
    """The decision matrix of one replica: ``matrix`` is the core's ``ScheduleResult.to_dict()``.

    Bounded on large clusters (the profile's top_k scored nodes, a few rejected examples and a
    count per rejection reason). ``node`` is the chosen node, None when nothing was chosen.
    """

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="decisions")
    replica_index = models.PositiveSmallIntegerField(default=0)
    outcome = models.CharField(max_length=20, choices=DecisionOutcome.choices)
    node = models.ForeignKey("nodes.Node", null=True, blank=True, on_delete=models.SET_NULL, related_name="decisions")
    profile = models.CharField(max_length=64)
    weights = models.JSONField(default=dict, blank=True)
    matrix = models.JSONField(default=dict, blank=True)
    message = models.TextField(blank=True)
    duration_ms = models.FloatField(default=0.0, help_text="Time the placement engine took for this replica")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["deployment_id", "replica_index", "created_at"]
        indexes = [models.Index(fields=["deployment", "replica_index"], name="decision_deployment_replica")]

    def __str__(self) -> str:
        return f"{self.deployment} #{self.replica_index}: {self.outcome}"


class NamespaceQuota(models.Model):
    """The most one namespace's active deployments may hold; an empty limit is unlimited.

    ``max_gpu_milli`` caps the compute share held, in thousandths of a GPU, counted as the
    partitions are charged (a whole GPU 1000, an MPS slot of R=4 250, a 3g MIG instance 428).
    ``max_memory_mib`` caps the GPU memory the placed replicas asked for (like a Kubernetes
    ResourceQuota counts requests). A namespace without a row is unlimited. Replicas handed to
    the default Kubernetes scheduler hold nothing in gpuplane and are not counted.
    """

    namespace = models.CharField(max_length=63, unique=True, validators=[
        RegexValidator(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "Enter a Kubernetes namespace (a DNS-1123 label).")
    ])
    max_gpu_milli = models.PositiveIntegerField(
        null=True, blank=True, help_text="Compute share in thousandths of a GPU (1000 = a whole GPU); empty = unlimited",
    )
    max_memory_mib = models.PositiveIntegerField(
        null=True, blank=True, help_text="GPU memory the placed replicas ask for, in MiB; empty = unlimited"
    )

    class Meta:
        ordering = ["namespace"]

    def __str__(self) -> str:
        gpus = "unlimited" if self.max_gpu_milli is None else f"{self.max_gpu_milli / 1000:g} GPUs"
        memory = "unlimited" if self.max_memory_mib is None else f"{self.max_memory_mib} MiB"
        return f"{self.namespace}: {gpus}, {memory}"


class SnapshotChange(models.Model):
    """One node whose capacity picture changed: the change log the placement snapshot follows.

    Written only by database triggers (``scheduler.snapshot_triggers``), in the transaction of
    the write itself, whenever a node, GPU, partition or partition hold changes in a column the
    snapshot reads; ``scheduler.services.snapshots`` rebuilds just those nodes. ``id`` is the
    generation; ``txid`` is the writing transaction's id on PostgreSQL (ids are taken before
    commit, so a reader also re-reads rows of transactions that were still open when it last
    looked). Rows older than the retention are trimmed by the sweeper.
    """

    id = models.BigAutoField(primary_key=True)
    node_id = models.BigIntegerField(help_text="The node (no foreign key: the row outlives a deleted node)")
    txid = models.BigIntegerField(null=True, blank=True, db_index=True)
    created_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"change {self.id}: node {self.node_id}"


class Move(models.Model):
    """One replica moved off its node: replacement first, the original evicted only once it is ready.

    Rollouts, consolidation (and preemption, scale-down) create moves and read their outcomes;
    ``scheduler.services.moving`` alone advances them (``MOVE_STATES``: planned -> replacement_placed
    -> replacement_ready -> original_evicting -> done, or failed / rolled_back; a removal, ``kind``
    removal, goes planned -> original_evicting -> done: scale-down, preemption). ``to_node`` empty:
    anywhere the placement engine chooses. ``requester`` names the operation that asked
    ("consolidationplan:4", "rolloutnode:7"), so it finds its moves again.
    """

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="moves")
    kind = models.CharField(max_length=8, choices=MoveKind.choices, default=MoveKind.MOVE,
                            help_text="move: replacement first; removal: evicted with no replacement")
    original = models.ForeignKey(Placement, on_delete=models.CASCADE, related_name="moves_away")
    replacement = models.ForeignKey(Placement, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    replacement_index = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="Replica index chosen (and persisted) before the replacement is placed")
    from_node = models.CharField(max_length=253)
    from_partition = models.CharField(max_length=200, blank=True, help_text="What the original held there")
    to_node = models.CharField(max_length=253, blank=True, help_text="Empty: wherever the placement engine chooses")
    to_partition = models.CharField(max_length=200, blank=True, help_text="What the replacement was given")
    why = models.TextField(help_text="Why the replica moves")
    requested_by = models.CharField(max_length=16, choices=MoveRequester.choices)
    requester = models.CharField(max_length=64, db_index=True, help_text="The operation that asked, e.g. consolidationplan:4")
    status = models.CharField(max_length=24, choices=MoveStatus.choices, default=MoveStatus.PLANNED)
    reason = models.TextField(blank=True, help_text="The latest status change, or why it failed")
    blocked_reason = models.TextField(blank=True, help_text="The PDB or budget holding it back now, if any")
    evicted_pod = models.CharField(max_length=253, blank=True)
    lost = models.BooleanField(default=False, help_text="The original was evicted and the replica did not come back")
    hold = models.BooleanField(default=False, help_text="The requester lets the original go later (a rollout's drain)")
    timeout_s = models.PositiveIntegerField(help_text="Seconds it may take before it is given up")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    started_at = models.DateTimeField(null=True, blank=True, help_text="When the mover first took it up")
    placed_at = models.DateTimeField(null=True, blank=True)
    ready_at = models.DateTimeField(null=True, blank=True)
    evicted_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["status"], name="move_status")]

    def __str__(self) -> str:
        return f"move {self.pk}: {self.deployment} #{self.original.replica_index} off {self.from_node}"


MOVE_STATES = StateMachine(Move, MOVE_FROM, final=MOVE_FINAL, finished_field="finished_at")


class SharingPolicy(models.Model):
    """How the pods a policy selects share their GPUs (admins edit it; ``scheduler.core.admission``
    applies it). Selects by namespaces (empty: every namespace) and labels (all must match); of
    the policies that select a pod the highest ``precedence`` wins (ties: by name). The settings
    of other strategies than ``strategy`` are ignored. ``clean`` refuses what NVIDIA's components
    cannot do, so the form and the API agree."""

    name = models.CharField(max_length=63, unique=True, validators=[
        RegexValidator(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "Enter a DNS-1123 label.")])
    description = models.TextField(blank=True)
    enabled = models.BooleanField(default=True)
    precedence = models.IntegerField(default=0, help_text="Higher wins when several policies select a pod")
    namespaces = models.JSONField(default=list, blank=True, help_text="Namespaces it selects; [] = every namespace")
    match_labels = models.JSONField(default=dict, blank=True, help_text="Pod labels it selects, all must match")
    strategy = models.CharField(max_length=16, choices=POLICY_STRATEGY_CHOICES)
    mig_profile = models.CharField(max_length=32, blank=True, help_text="MIG: a profile such as 1g.10gb; empty = "
                                   "the smallest free instance that fits")
    mps_max_clients = models.PositiveSmallIntegerField(null=True, blank=True, help_text="MPS: clients per GPU, "
                                                       "2-48 (16 before compute capability 7.5)")
    mps_memory_limit_mib = models.PositiveIntegerField(null=True, blank=True, help_text="MPS: pinned device "
                                                       "memory per client, MiB")
    timeslice_replicas = models.PositiveSmallIntegerField(null=True, blank=True, help_text="Time-slicing: "
                                                          "replicas per GPU, 2-16; empty = from observed utilization")
    fairness = models.CharField(max_length=16, default="default", choices=[("default", "Default (round robin)"),
                                                                           ("equal", "Equal slices")])
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-precedence", "name"]
        verbose_name_plural = "sharing policies"

    def __str__(self) -> str:
        return f"{self.name} ({self.strategy}, precedence {self.precedence})"

    def clean(self) -> None:
        errors = policy_errors(self)
        if errors:
            raise ValidationError(errors)


class AdmissionSettings(models.Model):
    """The admission webhook's settings, one row (pk 1): exempt namespaces, preemption."""

    exempt_namespaces = models.JSONField(default=list, blank=True,
                                         help_text="Namespaces whose pods the webhook leaves alone")
    preemption_enabled = models.BooleanField(default=False, help_text="Evict lower-priority placements to make "
                                             "room for a higher-priority request (through the mover)")
    preemption_delay_s = models.PositiveIntegerField(default=0, help_text="Wait before preempting (an autoscaler "
                                                     "may add room meanwhile)")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "admission settings"

    def __str__(self) -> str:
        return "admission settings"

    @classmethod
    def current(cls) -> AdmissionSettings:
        row, _ = cls.objects.get_or_create(pk=1)
        return row


class PriorityLevel(models.Model):
    """The Kubernetes PriorityClass behind one priority: ``gpuplane-<priority>`` with ``value``.

    Seed 002's classes by default: high = production inference (1000), medium = training (500),
    low = research (100). gpuplane creates them in the cluster (``scheduler.services.priorities``)."""

    priority = models.CharField(max_length=8, choices=Priority.choices, unique=True)
    value = models.IntegerField(validators=[MinValueValidator(0), MaxValueValidator(1_000_000_000)])
    description = models.CharField(max_length=200, blank=True)
    preempts = models.BooleanField(default=True, help_text="May preempt lower priorities (PriorityClass "
                                   "preemptionPolicy PreemptLowerPriority, else Never)")

    class Meta:
        ordering = ["-value"]

    def __str__(self) -> str:
        return f"{self.priority}: {self.value}"


# The autoscaler's rows, in their own module (scheduler/autoscaling_models.py): imported here so
# Django finds them with the app's models.
from scheduler.autoscaling_models import CorrectionFactor as CorrectionFactor  # noqa: E402
from scheduler.autoscaling_models import LearnedWeights as LearnedWeights  # noqa: E402
from scheduler.autoscaling_models import ScalingEvent as ScalingEvent  # noqa: E402
