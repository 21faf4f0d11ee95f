"""The scheduler's services: the transactions of the placement pipeline, one concern per module.

- ``spec``: the deploy request (``DeploySpec``) and its validation;
- ``deciding``: replicas through the placement core on a snapshot (and the default-scheduler rule);
- ``capacity``: the placement lock, claiming and releasing partitions, namespace quotas;
- ``placing``: ``place_replicas``, the one way a replica gets capacity;
- ``releasing``: ``release_replica``, the one way a replica of a live deployment gives it back;
- ``moving``: the mover, the one executor of every move of a replica (rollouts, consolidation), replacement
  first, evictions through the Eviction API only; ``disruption``: the budgets it honours; ``own_pdbs``:
  gpuplane's own PodDisruptionBudgets;
- ``execution``: creating, scaling and deleting workloads on the cluster;
- ``watching``: watching placed deployments until they run, the sweeper, failing and releasing;
- ``deploy``: the pipeline the API and the form call (``deploy``, ``delete_deployment``);
- ``reading``: what pages and the API show of placements.

Views, API and tasks import from here (the package's public names below) and hold no logic.
"""
from scheduler.services.capacity import release_placements
from scheduler.services.deciding import decide, placement_scheduler
from scheduler.services.deploy import delete_deployment, deploy
from scheduler.services.errors import DeployFailed, NoCapacity
from scheduler.services.placing import next_replica_index, place_replicas
from scheduler.services.reading import deployment_events, placement_summary
from scheduler.services.releasing import release_replica
from scheduler.services.spec import (
    DNS_LABEL_PATTERN,
    HOST_DEFAULTS,
    LABEL_VALUE_PATTERN,
    MAX_CPU_MILLI,
    MAX_GPU_COUNT,
    MAX_HOST_MEMORY_MIB,
    MAX_LATENCY_SLO_MS,
    MAX_MEMORY_GB,
    MIN_MEMORY_GB,
    QUANTITY_PATTERN,
    TEXT_PATTERN,
    DeploySpec,
    label_errors,
    validate_spec,
)
from scheduler.services.watching import (
    SWEEP_BATCH,
    WATCH_ERROR,
    WATCH_FAILED,
    WATCH_GONE,
    WATCH_RUNNING,
    WATCH_WAITING,
    sweep_deployments,
    watch_deployment,
)

__all__ = [
    "DNS_LABEL_PATTERN",
    "HOST_DEFAULTS",
    "LABEL_VALUE_PATTERN",
    "MAX_CPU_MILLI",
    "MAX_GPU_COUNT",
    "MAX_HOST_MEMORY_MIB",
    "MAX_LATENCY_SLO_MS",
    "MAX_MEMORY_GB",
    "MIN_MEMORY_GB",
    "QUANTITY_PATTERN",
    "TEXT_PATTERN",
    "SWEEP_BATCH",
    "WATCH_ERROR",
    "WATCH_FAILED",
    "WATCH_GONE",
    "WATCH_RUNNING",
    "WATCH_WAITING",
    "DeployFailed",
    "DeploySpec",
    "NoCapacity",
    "decide",
    "delete_deployment",
    "deploy",
    "deployment_events",
    "label_errors",
    "next_replica_index",
    "place_replicas",
    "placement_scheduler",
    "placement_summary",
    "release_placements",
    "release_replica",
    "sweep_deployments",
    "validate_spec",
    "watch_deployment",
]
