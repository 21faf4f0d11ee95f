"""The cluster contract: every label, annotation, resource and environment key gpuplane reads or writes.

One module, so a reader (or an operator writing a NetworkPolicy, a Kyverno rule or a dashboard)
finds every name gpuplane puts on Kubernetes objects in one place. Pure constants: importable by
``scheduler.core`` as well as by the Django apps.
"""
from __future__ import annotations

# ---- gpuplane's own keys --------------------------------------------------------------------------
GPUPLANE_PREFIX = "gpuplane.io"
MANAGED_BY_GPUPLANE = "gpuplane"  # value of LABEL_MANAGED_BY on everything gpuplane creates
PRIORITY_CLASS_PREFIX = "gpuplane-"  # pods get the PriorityClass gpuplane-<priority>

LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_APP_NAME = "app.kubernetes.io/name"  # a gpuplane workload's selector: its name
LABEL_DEPLOYMENT = "gpuplane.io/deployment"  # id of the gpuplane Deployment behind a workload
LABEL_SHARING_MODE = "gpuplane.io/sharing-mode"  # set by gpuplane for mps-weighted nodes
SHARING_MODE_LABEL_WEIGHTED = "mps-weighted"

# node: comma list of GPU UUIDs in index order, and JSON {index: [[profile, start, size, uuid], ...]}.
# Read, never written, by gpuplane: the simulated cluster writes them (as a stand-in for a tool that
# would); on a real cluster the node agent reports the same facts to the API instead
# (`POST /api/v1/nodes/<name>/gpu-report/`), which wins where both exist (docs/architecture.md).
ANNOTATION_GPU_UUIDS = "gpuplane.io/gpu-uuids"
ANNOTATION_MIG_LAYOUT = "gpuplane.io/mig-layout"
ANNOTATION_ASSIGNED_GPUS = "gpuplane.io/gpus"  # pod: GPU indexes it was given, "0,1"
ANNOTATION_SHARE_MILLI = "gpuplane.io/share-milli"  # pod: weighted MPS share
ANNOTATION_MIG_START = "gpuplane.io/mig-start"  # pod: placement start of its MIG instance
# pod: GPU memory a shared pod uses (time-slicing and weighted MPS give no isolation, so
# gpuplane accounts memory itself from what the pod declares).
ANNOTATION_MEMORY_MIB = "gpuplane.io/memory-mib"
ANNOTATION_DECISIONS = "gpuplane.io/decisions"  # pod: ids of the Decision rows behind it, "12,13"
ANNOTATION_SHARING = "gpuplane.io/sharing"  # pod: partition kind, or SHARING_DEFAULT_SCHEDULER
SHARING_DEFAULT_SCHEDULER = "default-scheduler"  # a replica handed to Kubernetes' own scheduler
ANNOTATION_DO_NOT_DISRUPT = "gpuplane.io/do-not-disrupt"  # pod: never evicted by gpuplane

# Label keys a user may not set on a workload: gpuplane's selectors and sync depend on them.
RESERVED_LABEL_KEYS = frozenset({LABEL_MANAGED_BY, LABEL_APP_NAME})
RESERVED_LABEL_PREFIX = GPUPLANE_PREFIX

# ---- Kubernetes' own keys -------------------------------------------------------------------------
LABEL_HOSTNAME = "kubernetes.io/hostname"  # node: its name; gpuplane pins workloads by required affinity on it
LABEL_OS = "kubernetes.io/os"
LABEL_POD_TEMPLATE_HASH = "pod-template-hash"  # pod: set by the ReplicaSet controller
TAINT_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"  # node: added by cordon, removed by uncordon

# ---- NVIDIA's keys (GPU feature discovery, device plugin, MIG manager) -------------------------
LABEL_DEVICE_PLUGIN_CONFIG = "nvidia.com/device-plugin.config"
LABEL_MIG_CONFIG = "nvidia.com/mig.config"
LABEL_MIG_CONFIG_STATE = "nvidia.com/mig.config.state"
LABEL_GPU_PRODUCT = "nvidia.com/gpu.product"
# GFD appends this to the product label of a replicated (time-sliced or MPS) GPU when the device
# plugin runs with renameByDefault: false.
GPU_PRODUCT_SHARED_SUFFIX = "-SHARED"
LABEL_GPU_COUNT = "nvidia.com/gpu.count"
LABEL_GPU_MEMORY = "nvidia.com/gpu.memory"  # MiB, as GFD reports it
LABEL_GPU_REPLICAS = "nvidia.com/gpu.replicas"
LABEL_GPU_PRESENT = "nvidia.com/gpu.present"
LABEL_MIG_CAPABLE = "nvidia.com/mig.capable"
LABEL_GPU_COMPUTE_MAJOR = "nvidia.com/gpu.compute.major"
LABEL_GPU_COMPUTE_MINOR = "nvidia.com/gpu.compute.minor"
LABEL_SHARING_STRATEGY = "nvidia.com/gpu.sharing-strategy"  # none | mps | time-slicing
LABEL_MIG_STRATEGY = "nvidia.com/mig.strategy"  # single | mixed
STRATEGY_NONE = "none"
STRATEGY_MPS = "mps"
STRATEGY_TIME_SLICING = "time-slicing"

RESOURCE_PREFIX_NVIDIA = "nvidia.com/"
RESOURCE_GPU = "nvidia.com/gpu"
RESOURCE_MIG_PREFIX = "nvidia.com/mig-"  # mixed MIG strategy: one resource per profile

# ---- environment variables ------------------------------------------------------------------------
ENV_MPS_THREAD_PERCENTAGE = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
ENV_MPS_MEMORY_LIMIT = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
ENV_MODEL_NAME = "MODEL_NAME"  # gpuplane's workloads: the model they serve
ENV_AGENT_TOKEN = "GPUPLANE_AGENT_TOKEN"  # node agent: its bearer key
ENV_AGENT_TOKEN_FILE = "GPUPLANE_AGENT_TOKEN_FILE"  # node agent: its projected ServiceAccount token
ENV_NODE_NAME = "NODE_NAME"  # node agent: the node it reports for (downward API)

# ---- Kubernetes' authentication -------------------------------------------------------------------
# Who a ServiceAccount token belongs to, as the TokenReview API names it.
SERVICE_ACCOUNT_USER = "system:serviceaccount:{namespace}:{name}"
# In a pod-bound token's TokenReview (Kubernetes >= 1.30, ServiceAccountTokenPodNodeInfo): its pod's node.
EXTRA_NODE_NAME = "authentication.kubernetes.io/node-name"
