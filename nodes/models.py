"""What the cluster is: nodes, their GPUs and the partitions workloads can be given.

Capacity is guarded twice: services claim partitions with conditional updates, and the check
constraints below make an over-allocated row impossible to store even if a service is wrong.
"""
from __future__ import annotations

from django.db import models
from django.db.models import F, Q
from django.urls import reverse

from nodes.vocabulary import SHARE_MILLI_FULL, PartitionKind, SharingMode


class Node(models.Model):
    name = models.CharField(max_length=253, unique=True)
    labels = models.JSONField(default=dict, blank=True)
    taints = models.JSONField(default=list, blank=True, help_text="Kubernetes taints: [{key, value, effect}]")
    ready = models.BooleanField(default=True)
    cordoned = models.BooleanField(default=False)
    cpu_allocatable_milli = models.PositiveIntegerField(default=0)
    memory_allocatable_mib = models.PositiveBigIntegerField(default=0)
    # What the node's pods request that gpuplane did not place (inventory sync sums every bound,
    # unfinished pod's requests, as kube-scheduler's NodeResourcesFit counts them).
    cpu_requested_milli = models.PositiveIntegerField(default=0, help_text="CPU requested by pods gpuplane did not place")
    memory_requested_mib = models.PositiveBigIntegerField(
        default=0, help_text="Memory requested by pods gpuplane did not place, MiB")
    gpu_product = models.CharField(max_length=128, blank=True, help_text="GFD product label, e.g. NVIDIA-H100-80GB-HBM3")
    gpu_model = models.CharField(max_length=64, blank=True, help_text="Catalog key; empty when the product is unknown")
    gpu_count = models.PositiveSmallIntegerField(default=0)
    sharing_mode = models.CharField(max_length=16, choices=SharingMode.choices, default=SharingMode.EXCLUSIVE)
    sharing_replicas = models.PositiveSmallIntegerField(
        default=1, help_text="R: replicas per GPU for mps / timeslice / mps-weighted (1 otherwise)"
    )
    applied_config = models.CharField(
        max_length=128, blank=True, help_text="Name of the device-plugin (or, on MIG nodes, mig-parted) config now on the node"
    )
    # The API shape of nodes.sharing.node_config.NodeConfig; written only through
    # nodes.node_configs.set_desired_config, which validates it for the node's GPU model.
    desired_config = models.JSONField(
        null=True, blank=True, help_text="Sharing config gpuplane wants on the node: {mode, replicas, mig_layout}; null: none"
    )
    last_seen = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(sharing_replicas__gte=1), name="node_sharing_replicas_positive"),
        ]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("nodes:node-detail", args=[self.name])

    @property
    def schedulable(self) -> bool:
        return self.ready and not self.cordoned


class GPU(models.Model):
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=96, unique=True)
    model = models.CharField(max_length=64, blank=True, help_text="Catalog key; empty when the product is unknown")
    memory_mib = models.PositiveIntegerField()
    mig_enabled = models.BooleanField(default=False)
    # What is handed out on this GPU, summed over its partitions (kept by services, checked here).
    allocated_milli = models.PositiveIntegerField(default=0)
    allocated_memory_mib = models.PositiveIntegerField(default=0)
    # Latest telemetry; null until a collector reports.
    utilization_pct = models.FloatField(null=True, blank=True)
    memory_used_mib = models.PositiveIntegerField(null=True, blank=True)
    memory_reserved_mib = models.PositiveIntegerField(
        null=True, blank=True, help_text="Memory the driver and firmware reserve (NVML memory info v2), apart from used"
    )
    power_w = models.FloatField(null=True, blank=True)
    power_limit_w = models.FloatField(null=True, blank=True, help_text="Enforced power limit, watts")
    temperature_c = models.FloatField(null=True, blank=True)
    processes = models.JSONField(
        null=True, blank=True, help_text="Compute processes of the latest sample: [[pid, used MiB or null], ...]"
    )
    sampled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["node__name", "index"]
        verbose_name = "GPU"
        constraints = [
            models.UniqueConstraint(fields=["node", "index"], name="gpu_unique_index_per_node"),
            models.CheckConstraint(condition=Q(allocated_milli__lte=SHARE_MILLI_FULL), name="gpu_allocated_milli_le_full"),
            models.CheckConstraint(
                condition=Q(allocated_memory_mib__lte=F("memory_mib")), name="gpu_allocated_memory_le_memory"
            ),
            models.CheckConstraint(
                condition=Q(utilization_pct__isnull=True) | Q(utilization_pct__gte=0, utilization_pct__lte=100),
                name="gpu_utilization_pct_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.node.name}/gpu{self.index}"

    @property
    def free_milli(self) -> int:
        return SHARE_MILLI_FULL - self.allocated_milli

    @property
    def free_memory_mib(self) -> int:
        return self.memory_mib - self.allocated_memory_mib


class Partition(models.Model):
    """A unit one workload can be given: a whole GPU, a MIG instance, an MPS slot or share, a replica.

    A partition has at most one occupant: either a holder (a workload gpuplane placed there; ask
    `nodes.holds`, never this row) or a pod that inventory sync found on the cluster (`pod`,
    "namespace/name"). It is free when it has neither (`nodes.holds.free_partition_filter`).
    """

    gpu = models.ForeignKey(GPU, on_delete=models.CASCADE, related_name="partitions")
    kind = models.CharField(max_length=16, choices=PartitionKind.choices)
    slot = models.PositiveSmallIntegerField(help_text="Position among this GPU's partitions")
    share_milli = models.PositiveIntegerField(help_text="Compute share in thousandths of the GPU")
    memory_mib = models.PositiveIntegerField(help_text="Memory this partition may use")
    mig_profile = models.CharField(max_length=32, blank=True)
    mig_start = models.PositiveSmallIntegerField(null=True, blank=True)
    mig_size = models.PositiveSmallIntegerField(null=True, blank=True)
    mig_device_uuid = models.CharField(max_length=96, blank=True)
    pod = models.CharField(max_length=317, blank=True, help_text="namespace/name of the pod found using it")

    class Meta:
        ordering = ["gpu__node__name", "gpu__index", "slot"]
        constraints = [
            models.UniqueConstraint(fields=["gpu", "slot"], name="partition_unique_slot_per_gpu"),
            models.CheckConstraint(
                condition=Q(share_milli__gte=1, share_milli__lte=SHARE_MILLI_FULL), name="partition_share_milli_range"
            ),
            # MIG geometry is present exactly for MIG partitions, inside the 8 memory slices.
            models.CheckConstraint(
                condition=(
                    Q(kind="mig", mig_start__isnull=False, mig_size__isnull=False, mig_start__lte=7, mig_size__gte=1)
                    & ~Q(mig_profile="")
                )
                | (~Q(kind="mig") & Q(mig_start__isnull=True, mig_size__isnull=True, mig_profile="")),
                name="partition_mig_geometry_iff_mig",
            ),
        ]

    def __str__(self) -> str:
        label = self.mig_profile or f"{self.kind} {self.share_milli / 10:g}%"
        return f"{self.gpu} [{self.slot}] {label}"


class GPUSample(models.Model):
    """One telemetry reading of one GPU. (gpu, ts) is unique so a re-sent batch stores nothing twice."""

    gpu = models.ForeignKey(GPU, on_delete=models.CASCADE, related_name="samples")
    ts = models.DateTimeField()
    utilization_pct = models.FloatField(null=True, blank=True)
    memory_used_mib = models.PositiveIntegerField(null=True, blank=True)
    memory_total_mib = models.PositiveIntegerField(null=True, blank=True)
    memory_reserved_mib = models.PositiveIntegerField(null=True, blank=True)
    power_w = models.FloatField(null=True, blank=True)
    power_limit_w = models.FloatField(null=True, blank=True)
    temperature_c = models.FloatField(null=True, blank=True)
    sm_clock_mhz = models.PositiveIntegerField(null=True, blank=True)
    source = models.CharField(max_length=16, blank=True, help_text="nvml | dcgm | simulated | agent")

    class Meta:
        ordering = ["gpu_id", "ts"]
        verbose_name = "GPU sample"
        constraints = [
            models.UniqueConstraint(fields=["gpu", "ts"], name="gpusample_unique_gpu_ts"),
            models.CheckConstraint(
                condition=Q(utilization_pct__isnull=True) | Q(utilization_pct__gte=0, utilization_pct__lte=100),
                name="gpusample_utilization_pct_range",
            ),
        ]
        indexes = [models.Index(fields=["ts"], name="gpusample_ts_idx")]

    def __str__(self) -> str:
        return f"{self.gpu_id}@{self.ts:%Y-%m-%dT%H:%M:%S}"


class GPUSampleRollup(models.Model):
    """Raw samples of one GPU over a fixed bucket (5 minutes by default), kept after the raw ones expire."""

    gpu = models.ForeignKey(GPU, on_delete=models.CASCADE, related_name="rollups")
    bucket_start = models.DateTimeField()
    bucket_s = models.PositiveIntegerField(default=300)
    samples = models.PositiveIntegerField()
    utilization_pct_avg = models.FloatField(null=True, blank=True)
    utilization_pct_max = models.FloatField(null=True, blank=True)
    memory_used_mib_avg = models.FloatField(null=True, blank=True)
    memory_used_mib_max = models.PositiveIntegerField(null=True, blank=True)
    power_w_avg = models.FloatField(null=True, blank=True)
    power_w_max = models.FloatField(null=True, blank=True)
    temperature_c_avg = models.FloatField(null=True, blank=True)
    temperature_c_max = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["gpu_id", "bucket_start"]
        verbose_name = "GPU sample rollup"
        constraints = [
            models.UniqueConstraint(fields=["gpu", "bucket_start"], name="gpusamplerollup_unique_gpu_bucket"),
        ]
        indexes = [models.Index(fields=["bucket_start"], name="gpusamplerollup_bucket_idx")]


class NodeAgentToken(models.Model):
    """A credential for one node's telemetry agent: it may post samples for that node only.

    Only a SHA-256 digest of the key is stored; the key itself is shown once, when created.
    """

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="agent_tokens")
    key_digest = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=8, help_text="First characters of the key, to tell tokens apart")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked = models.BooleanField(default=False)

    class Meta:
        ordering = ["node__name", "-created_at"]

    def __str__(self) -> str:
        return f"agent token {self.prefix}… for {self.node.name}"


class InventoryWatch(models.Model):
    """Where inventory sync's watch of one cluster stands: the resourceVersions its rows are in
    sync with. Written only when they move, so a sync of an unchanged cluster writes nothing.
    `generation` orders the moves (see nodes.inventory.watching): a process whose mirror is at a
    lower one catches up by watching; resourceVersions themselves are compared only for equality."""

    cluster_key = models.CharField(max_length=512, unique=True, help_text="Which cluster, e.g. kubernetes:<API URL>")
    nodes_version = models.CharField(max_length=64, blank=True)
    pods_version = models.CharField(max_length=64, blank=True)
    generation = models.PositiveBigIntegerField(default=0, help_text="Raised by one each time the versions move")
    synced_at = models.DateTimeField(help_text="The sync that last moved the versions")

    def __str__(self) -> str:
        return f"inventory watch of {self.cluster_key} at nodes {self.nodes_version}, pods {self.pods_version}"


class NodeGPUReport(models.Model):
    """What a node's agent last reported of its GPUs, read from NVML on the node itself.

    `gpus` is a list of `{"index", "uuid", "product", "memory_total_mib", "mig_enabled",
    "mig_instances": [{"profile", "start", "size", "uuid", "memory_mib"}]}` in index order
    (`nodes.inventory.agent_reports`). The agent's identity binding is applied to the GPU rows
    when the report arrives; inventory sync applies the whole report (UUIDs, MIG mode and
    instances) over what the cluster says each time it syncs the node, and marks the revision it
    applied, so a report it has not applied yet brings the node into its next sync.
    """

    node = models.OneToOneField(Node, on_delete=models.CASCADE, related_name="gpu_report")
    gpus = models.JSONField(default=list)
    reported_at = models.DateTimeField(help_text="When the agent last sent it (changed or not)")
    changed_at = models.DateTimeField(help_text="When its content last changed")
    revision = models.PositiveBigIntegerField(default=1, help_text="Raised by one each time the content changes")
    applied_revision = models.PositiveBigIntegerField(default=0, help_text="The revision inventory sync last applied")

    class Meta:
        ordering = ["node__name"]
        verbose_name = "node GPU report"

    def __str__(self) -> str:
        return f"GPU report of {self.node.name} (revision {self.revision})"
