"""gpuplane replicas that should run and do not: what the savings leave out, said out loud.

The savings count only workloads that run (``savings.services.current``), so a replica that was
lost (evicted and never running again elsewhere), or is still starting, leaves the baseline. That
drop must not be silent (issue 18): this names, per deployment that is not deleted, how many of
its replicas do not run (its ``replicas`` minus its running placements) and the whole GPUs the
baseline would give them. A deployment that never ran (failed to deploy) counts here too.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from nodes.fleet import cached_per_poll
from scheduler.choices import DeploymentStatus, PlacementStatus
from scheduler.models import Deployment, Placement

SHOWN = 20  # deployments listed by name; the totals count them all


@dataclass(frozen=True)
class NotRunning:
    replicas: int = 0
    baseline_gpus: int = 0
    deployments: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"replicas": self.replicas, "baseline_gpus": self.baseline_gpus, "deployments": self.deployments}


def _compute() -> NotRunning:
    running = Counter(Placement.objects.filter(status=PlacementStatus.RUNNING).values_list("deployment_id", flat=True))
    rows = []
    for pk, namespace, name, replicas, gpu_count in (Deployment.objects.exclude(status=DeploymentStatus.DELETED)
                                                     .order_by("namespace", "name", "pk")
                                                     .values_list("pk", "namespace", "name", "replicas", "gpu_count")):
        missing = max(0, replicas - running.get(pk, 0))
        if missing:
            rows.append({"deployment": pk, "workload": f"{namespace}/{name}", "missing": missing,
                         "gpus": missing * max(1, gpu_count)})
    return NotRunning(sum(r["missing"] for r in rows), sum(r["gpus"] for r in rows), rows[:SHOWN])


def not_running(*, refresh: bool = False) -> NotRunning:
    """The replicas gpuplane placed that do not run now, kept as long as the savings are (``nodes.fleet.cached_per_poll``)."""
    return cached_per_poll("savings-not-running", _compute, refresh=refresh)
