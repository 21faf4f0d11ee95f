"""The simulated cluster: an embedded stand-in for Kubernetes and NVIDIA's device plugin, GFD and MIG manager.

It stores Kubernetes-shaped JSON objects (Node, Pod, apps/v1 Deployment, policy/v1
PodDisruptionBudget, the GPU operator's ConfigMaps) and answers `list_nodes` / `list_gpu_pods`
through `nodes.cluster.parsing`, so the control plane reads it exactly as it reads a real cluster
(docs/design.md sections 4, 5, 9). One module per concern:

- `backend`: `SimulatedCluster`, the ClusterBackend facade, and the lazy clock that drives the rest;
- `store`: the state file, one SQLite row per object, shared by web, worker and beat processes;
- `state`: the collections the modules work on, which remember what a call touched;
- `indexes`: the few objects each catch-up with the clock looks for, without scanning the fleet;
- `objects`: lookups, pod bookkeeping, conditions, events (every pod removal, by how) and generated names;
- `scheduling`: the default scheduler, kubelet admission and readiness, cordon / uncordon;
- `workloads`: Deployments and the ReplicaSet controller (deleted or evicted pods come back);
- `replica_sets`: the ReplicaSets of other teams' pods, which come back after an eviction too;
- `eviction`: the Eviction API with PodDisruptionBudgets;
- `configmaps`: ConfigMaps read and written through the API (the GPU operator's two among them);
- `service_accounts`: ServiceAccount tokens, issued signed and checked by the TokenReview API;
- `device_plugin`: the device plugin's ConfigMap (applies on plugin restart only, a delay after it) and GFD labels;
- `mig_manager`: mig-parted configs, `nvidia.com/mig.config.state` pending -> success / failed;
- `gpus`: deterministic GPU and MIG UUIDs, the MIG layout annotation;
- `faults`: injected faults, consumed by the next calls in any process;
- `fixtures`: GPU nodes and other teams' pods for the demo and tests.
"""
from nodes.cluster.sim.backend import SimulatedCluster
from nodes.cluster.sim.gpus import gpu_uuid, mig_uuid

__all__ = ["SimulatedCluster", "gpu_uuid", "mig_uuid"]
