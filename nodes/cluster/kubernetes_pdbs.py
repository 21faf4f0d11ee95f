"""KubernetesCluster's PodDisruptionBudget calls (list, create or patch, delete), as a mixin.

Kept apart from `nodes.cluster.kubernetes` by concern; like `kubernetes_configmaps` it does not
import the kubernetes client (only that module may): it calls the `PolicyV1Api` object the
cluster holds and goes through the cluster's `_call` / `_paginate`, which turn every failure into
a ClusterError.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from nodes.cluster.base import ClusterPDB, Conflict, NotFound
from nodes.cluster.kubernetes_http import FIELD_MANAGER, MERGE_PATCH, json_content
from nodes.cluster.manifests import pdb_manifest
from nodes.cluster.parsing import parse_pdb


class PDBCalls:
    """`list_pdbs`, `apply_pdb` and `delete_pdb` of the ClusterBackend protocol, for KubernetesCluster."""

    policy: Any
    request_timeout_s: tuple[float, float]

    if TYPE_CHECKING:
        def _call(self, action: str, call: Callable[[], Any], *,
                  too_many_requests_is_eviction_block: bool = False) -> None: ...

        def _paginate(self, action: str, list_call: Callable[..., Any], versions: list[str] | None = None,
                      **params: Any) -> Iterator[dict[str, Any]]: ...

    def list_pdbs(self) -> list[ClusterPDB]:
        """PodDisruptionBudgets (policy/v1) of all namespaces."""
        items = self._paginate("list poddisruptionbudgets", self.policy.list_pod_disruption_budget_for_all_namespaces)
        return [parse_pdb(obj) for obj in items]

    def apply_pdb(self, pdb: ClusterPDB) -> None:
        """Create the PDB; one of that name there already gets its selector and budget (merge patch:
        the client drops nulls, so a stored budget of the other kind stays and the API server refuses
        the patch; gpuplane's own budgets only ever state maxUnavailable)."""
        body = pdb_manifest(pdb)
        options: dict[str, Any] = {"field_manager": FIELD_MANAGER, "_preload_content": False,
                                   "_request_timeout": self.request_timeout_s}
        try:
            self._call(f"create poddisruptionbudget {pdb.key}", lambda: self.policy.create_namespaced_pod_disruption_budget(
                pdb.namespace, body, _headers=json_content(), **options))
        except Conflict:
            self._call(f"patch poddisruptionbudget {pdb.key}", lambda: self.policy.patch_namespaced_pod_disruption_budget(
                pdb.name, pdb.namespace, body, _content_type=MERGE_PATCH, **options))

    def delete_pdb(self, namespace: str, name: str) -> None:
        """Delete the PDB; one already gone is no error."""
        try:
            self._call(f"delete poddisruptionbudget {namespace}/{name}",
                       lambda: self.policy.delete_namespaced_pod_disruption_budget(
                           name, namespace, _preload_content=False, _request_timeout=self.request_timeout_s))
        except NotFound:
            pass
