"""The cluster side of placements: create the workloads that run them, delete and scale them."""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from nodes.cluster.base import ClusterBackend, ClusterError, NotFound
from nodes.vocabulary import PartitionKind
from scheduler.choices import PlacementStatus
from scheduler.models import Deployment, PartitionHold, Placement
from scheduler.workloads import WorkloadSpec, workload_specs

ACTIVE_PLACEMENT_STATUSES = (PlacementStatus.RESERVED, PlacementStatus.BINDING, PlacementStatus.RUNNING)


def workload_names(deployment: Deployment, *, active_only: bool = False) -> list[str]:
    """Every workload name the deployment's placements carry, in replica order, once each.

    ``active_only``: only those of placements still holding capacity (a replica moved off a node
    by a rolling update was released and its workload deleted: it is not missing)."""
    placements = deployment.placements.exclude(workload_name="")
    if active_only:
        placements = placements.filter(status__in=ACTIVE_PLACEMENT_STATUSES)
    names = placements.order_by("replica_index").values_list("workload_name", flat=True)
    return list(dict.fromkeys(names))


def delete_workloads(cluster: ClusterBackend, namespace: str, names: Iterable[str]) -> list[str]:
    """Delete workloads, ignoring ones already gone; return "name: error" for those that failed."""
    failures = []
    for name in names:
        try:
            cluster.delete_workload(namespace, name)
        except NotFound:
            continue
        except ClusterError as error:
            failures.append(f"{name}: {error}")
    return failures


def specs_for(deployment: Deployment, placements: Sequence[Placement],
              decision_ids: Mapping[int, int] | None = None) -> list[WorkloadSpec]:
    """The workload specs of ``placements``: their decisions' ids (by replica index; read from the
    database when not given) and MIG starts (read only for MIG placements)."""
    if decision_ids is None:
        decision_ids = dict(deployment.decisions.values_list("replica_index", "pk"))
    mig_starts: dict[int, int | None] = {}
    if any(p.sharing == PartitionKind.MIG for p in placements):
        mig_starts = dict(
            PartitionHold.objects.filter(placement__in=[p.pk for p in placements], partition__kind=PartitionKind.MIG)
            .values_list("placement_id", "partition__mig_start")
        )
    return workload_specs(deployment, placements, decision_ids, mig_starts)


def create_workloads(cluster: ClusterBackend, specs: Sequence[WorkloadSpec]) -> None:
    """Create each workload; on a refusal delete every one of ``specs`` and re-raise.

    A create that failed may still have stored its workload (a read timeout after the API server
    accepted it), so cleaning up deletes every name, not only the ones known to exist; deleting
    one that is not there is a NotFound, ignored. The error raised carries ``workload`` (the
    refused spec's name) and ``leftovers`` (names that could not be deleted).
    """
    current = None
    try:
        for current in specs:
            cluster.create_workload(current)
    except BaseException as error:
        leftovers = delete_workloads(cluster, specs[0].namespace, [spec.name for spec in specs]) if specs else []
        error.workload = current.name if current is not None else ""  # type: ignore[attr-defined]
        error.leftovers = leftovers  # type: ignore[attr-defined]
        raise
