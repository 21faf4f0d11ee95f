"""scheduler.services: a reservation that loses a race is retried on a fresh snapshot (on the demo cluster)."""
from __future__ import annotations

import pytest

from nodes.models import Partition
from scheduler import services
from scheduler.models import Deployment, Placement
from scheduler.services import NoCapacity, placing
from tests.scheduler.services.specs import spec

pytestmark = pytest.mark.django_db


# ---- conflicts ---------------------------------------------------------------------------------


def steal_on_decide(monkeypatch, times: int) -> list[int]:
    """Make another writer take what each of the next ``times`` decisions chose (a pod grabs it).

    The decision and its reservation share one transaction, which the conflict rolls back,
    thief's write included; the thief is another writer, whose write stays: it is written again
    as soon as the next attempt holds the placement lock, before that attempt reads its snapshot.
    """
    stolen: list[int] = []
    real_decide = placing.decide
    real_lock = placing.placement_lock

    def take(pks):
        Partition.objects.filter(pk__in=pks).update(pod="other/thief")

    def decide(spec, inventory, scheduler, **options):
        plans = real_decide(spec, inventory, scheduler, **options)
        if len(stolen) < times:
            for plan in plans:
                for claim in plan.claims:
                    for row in claim.candidates:
                        stolen.append(row.pk)
            take(stolen)
        return plans

    def placement_lock(**options):
        real_lock(**options)
        take(stolen)

    monkeypatch.setattr(placing, "decide", decide)
    monkeypatch.setattr(placing, "placement_lock", placement_lock)
    return stolen


def test_a_conflict_is_retried_on_a_fresh_snapshot(cluster, monkeypatch):
    stolen = steal_on_decide(monkeypatch, times=1)

    deployment = services.deploy(spec(name="big", memory_gb=40, priority="high", latency_slo_ms=80), cluster=cluster)

    (placement,) = deployment.placements.all()
    held = Partition.objects.get(hold__placement=placement)
    assert stolen and held.pk not in stolen
    assert Deployment.objects.count() == 1  # the conflicting attempt left nothing behind


def test_endless_conflicts_end_in_a_clean_409(cluster, monkeypatch):
    steal_on_decide(monkeypatch, times=10_000)
    before_placements = Placement.objects.count()

    with pytest.raises(NoCapacity) as raised:
        services.deploy(spec(name="big", memory_gb=40, priority="high", latency_slo_ms=80), cluster=cluster)

    assert "capacity kept changing" in raised.value.message or raised.value.message.startswith("0/")
    assert Placement.objects.count() == before_placements == 0
