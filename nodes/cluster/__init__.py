"""Cluster backends: the only way the control plane touches a cluster.

Only the protocol is imported here; `nodes.cluster.backends.get_cluster()` picks the configured
backend (`nodes.cluster.kubernetes` or the simulated `nodes.cluster.sim`).
"""
from nodes.cluster.base import ClusterBackend

__all__ = ["ClusterBackend"]
