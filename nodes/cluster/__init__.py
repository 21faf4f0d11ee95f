"""Cluster backends: the only way the control plane touches a cluster."""
from nodes.cluster.base import ClusterBackend, get_cluster

__all__ = ["ClusterBackend", "get_cluster"]
