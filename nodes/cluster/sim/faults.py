"""Injected faults: make the next calls of a ClusterBackend method fail, in every process.

Faults live in the state file, so a test or an operator trying the UI can break the cluster that
a worker process talks to. Several injections for one operation queue up in order; each fires
for its number of calls, then the next one takes over. The MIG manager has faults of its own,
per mig-parted config (`mig_fault_key`): the next applications of that config report `failed`.
"""
from __future__ import annotations

from nodes.cluster.sim.store import State

# The ClusterBackend methods a fault can be injected into.
OPERATIONS = frozenset(
    {
        "list_nodes",
        "list_gpu_pods",
        "list_pdbs",
        "apply_pdb",
        "delete_pdb",
        "set_node_labels",
        "cordon",
        "uncordon",
        "evict_pod",
        "create_workload",
        "scale_workload",
        "delete_workload",
        "workload_ready",
        "restart_device_plugin",
        "read_configmap",
        "write_configmap",
        "review_token",
    }
)


# Queue of the faults of the MIG manager applying one mig-parted config: "mig-config:<name>".
MIG_FAULT_PREFIX = "mig-config:"


def mig_fault_key(config_name: str) -> str:
    """The queue of faults for the MIG manager applying the mig-parted config `config_name`."""
    return f"{MIG_FAULT_PREFIX}{config_name}"


def check_fault(operation: str, times: int) -> None:
    """ValueError unless `operation` is one of OPERATIONS and `times` >= 1."""
    if operation not in OPERATIONS:
        raise ValueError(f"unknown operation {operation!r} (valid: {', '.join(sorted(OPERATIONS))})")
    if times < 1:
        raise ValueError(f"times must be >= 1, not {times}")


def queue_fault(state: State, operation: str, message: str, times: int) -> None:
    """Queue a fault: the next `times` calls of `operation` fail with `message` (after earlier faults)."""
    state["faults"].setdefault(operation, []).append({"message": message, "remaining": times})


def take_fault(state: State, operation: str) -> str | None:
    """Consume one call of the first fault queued for `operation` (or a `mig_fault_key`): its message,
    or None when none is queued."""
    queue = state["faults"].get(operation) or []
    if not queue:
        return None
    message: str = queue[0]["message"]
    queue[0]["remaining"] -= 1
    if queue[0]["remaining"] <= 0:
        queue.pop(0)
    if not queue:
        state["faults"].pop(operation)
    return message
