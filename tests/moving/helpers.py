"""Shared pieces of the mover's tests: a small MPS cluster, ticks at the fake clock, the invariants."""
from __future__ import annotations

from datetime import UTC, datetime

from nodes.inventory.sync import sync_inventory
from scheduler import services
from scheduler.choices import PlacementStatus
from scheduler.models import Deployment, Move, Placement
from scheduler.services import DeploySpec
from scheduler.services.moving import advance_moves
from tests.rollouts.simulated import ready_replicas
from tests.scheduler.inventory import FakeClock, check_invariants

ACTIVE = (PlacementStatus.RESERVED, PlacementStatus.BINDING, PlacementStatus.RUNNING)


def tick(cluster, clock: FakeClock, seconds: float = 1.0) -> dict[str, int]:
    done = advance_moves(cluster=cluster, now=datetime.fromtimestamp(clock.now, UTC))
    clock.advance(seconds)
    sync_inventory(cluster)
    return done


def ready_quarter_gpu_deployment(cluster, clock: FakeClock, name: str, replicas: int = 3) -> Deployment:
    """Deploy ``replicas`` MPS replicas of a quarter GPU each and let them start (one tick)."""
    deployment = services.deploy(DeploySpec(name=name, model="m", memory_gb=8, sharing="mps", share_percent=25,
                                            replicas=replicas), cluster=cluster)
    clock.advance(3)
    tick(cluster, clock)
    deployment.refresh_from_db()
    return deployment


def run_until_settled(cluster, clock: FakeClock, ticks: int = 40, *, served_check: bool = True) -> list[Move]:
    """Tick until no move is in flight, checking on every tick that no replica was dropped."""
    desired = {d.pk: d.replicas for d in Deployment.objects.all()}
    for _ in range(ticks):
        tick(cluster, clock)
        served = ready_replicas(cluster)
        assert not served_check or all(served[pk] >= want for pk, want in desired.items() if not lost(pk)), f"dropped: {served}"
        if not Move.objects.exclude(status__in=("done", "failed", "rolled_back")).exists():
            break
    return list(Move.objects.order_by("pk"))


def lost(deployment_pk: int) -> bool:
    return Move.objects.filter(deployment_id=deployment_pk, lost=True).exists()


def assert_no_leak() -> None:
    """Active placements = replicas and every active placement holds its partitions, per deployment."""
    for deployment in Deployment.objects.all():
        active = Placement.objects.filter(deployment=deployment, status__in=ACTIVE).count()
        assert active == deployment.replicas or lost(deployment.pk), (str(deployment), active, deployment.replicas)
    check_invariants()
