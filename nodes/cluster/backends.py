"""Which ClusterBackend the control plane talks to: `get_cluster()`, chosen by settings.

The factory lives beside the backends, not in `nodes.cluster.base`: each backend imports the
protocol and value types from base, so a factory there would make base and its backends import
each other.
"""
from __future__ import annotations

from nodes.cluster.base import ClusterBackend


def get_cluster() -> ClusterBackend:
    """The backend named by settings.GPUPLANE_CLUSTER.

    "kubernetes" -> `KubernetesCluster.from_settings()`; anything else -> the simulated cluster
    on the state file settings.GPUPLANE_SIMULATED_STATE, with settings.GPUPLANE_SIMULATED_DELAYS
    over its default delays (pods ready, MIG manager, device plugin restart). A new backend object
    on every call.
    """
    from django.conf import settings

    # Imported on demand: only the chosen backend's dependencies (the kubernetes client, or the
    # simulator) are loaded.
    if settings.GPUPLANE_CLUSTER == "kubernetes":
        from nodes.cluster.kubernetes import KubernetesCluster

        return KubernetesCluster.from_settings()
    from nodes.cluster.sim import SimulatedCluster

    return SimulatedCluster(settings.GPUPLANE_SIMULATED_STATE, **settings.GPUPLANE_SIMULATED_DELAYS)
