"""scheduler.services.replacing: the replacement-first steps pre-warm, move-back and consolidation share."""
from __future__ import annotations

import pytest

from nodes.models import Node
from scheduler import services
from scheduler.choices import PlacementStatus
from scheduler.models import Placement
from scheduler.services.replacing import (
    Finish,
    finish_replacement,
    give_back_half_placed,
    index_spent,
    place_replacement,
    replacement_index,
)
from tests.scheduler.inventory import check_invariants
from tests.scheduler.services.specs import spec

pytestmark = pytest.mark.django_db


def ready_when(cluster, ready: set[str]) -> None:
    """The cluster reports exactly the workloads named in ``ready`` ready."""
    cluster.workload_ready = lambda namespace, name: name in ready


def original_and_replacement(cluster):
    deployment = services.deploy(spec(name="chat"), cluster=cluster)
    original = deployment.placements.get()
    index = services.next_replica_index(deployment)
    replacement = place_replacement(deployment, index, cluster=cluster, user="test")
    return original, replacement


def test_place_replacement_adopts_the_replica_already_at_that_index(cluster):
    original, replacement = original_and_replacement(cluster)

    again = place_replacement(original.deployment, replacement.replica_index, cluster=cluster, user="test")

    assert again.pk == replacement.pk
    assert original.deployment.placements.count() == 2  # a run that died is not followed by a second copy
    check_invariants()


def test_place_replacement_on_a_node_places_it_there_only(cluster):
    deployment = services.deploy(spec(name="chat"), cluster=cluster)
    original = deployment.placements.get()
    # Unpinned, the engine picks an a100 for this request; the last node (an h100) is one it would not.
    elsewhere = Node.objects.exclude(pk=original.node_id).order_by("-name").first()

    placed = place_replacement(deployment, services.next_replica_index(deployment), cluster=cluster, user="test",
                               node=elsewhere.name)

    assert placed.node_id == elsewhere.pk


def test_finish_waits_while_the_replacement_is_not_ready(cluster):
    original, replacement = original_and_replacement(cluster)
    ready_when(cluster, set())

    finish = finish_replacement(original, replacement, cluster=cluster, user="test", timed_out=False,
                                moved_reason="moved", not_ready_reason="gave up")

    assert finish == Finish.WAITING
    statuses = set(Placement.objects.filter(pk__in=[original.pk, replacement.pk]).values_list("status", flat=True))
    assert PlacementStatus.RELEASED not in statuses


def test_finish_gives_up_a_replacement_not_ready_in_time_and_keeps_the_original(cluster):
    original, replacement = original_and_replacement(cluster)
    ready_when(cluster, set())

    finish = finish_replacement(original, replacement, cluster=cluster, user="test", timed_out=True,
                                moved_reason="moved", not_ready_reason="gave up")

    assert finish == Finish.NOT_READY_IN_TIME
    replacement.refresh_from_db()
    original.refresh_from_db()
    assert replacement.status == PlacementStatus.RELEASED
    assert original.status != PlacementStatus.RELEASED
    check_invariants()


def test_finish_releases_the_original_once_the_replacement_is_ready(cluster):
    original, replacement = original_and_replacement(cluster)
    ready_when(cluster, {replacement.workload_name})

    finish = finish_replacement(original, replacement, cluster=cluster, user="test", timed_out=True,
                                moved_reason="moved", not_ready_reason="gave up")

    assert finish == Finish.DONE
    replacement.refresh_from_db()
    original.refresh_from_db()
    assert original.status == PlacementStatus.RELEASED
    assert replacement.status != PlacementStatus.RELEASED
    check_invariants()


def test_finish_keeps_the_original_when_the_replacement_did_not_start(cluster):
    original, replacement = original_and_replacement(cluster)
    services.release_replica(replacement.deployment, replacement.replica_index, cluster=cluster)
    replacement.refresh_from_db()
    ready_when(cluster, {replacement.workload_name})

    finish = finish_replacement(original, replacement, cluster=cluster, user="test", timed_out=False,
                                moved_reason="moved", not_ready_reason="gave up")

    assert finish == Finish.NOT_STARTED
    original.refresh_from_db()
    assert original.status != PlacementStatus.RELEASED


def test_a_half_placed_replica_is_given_back_and_its_index_spent(cluster):
    original, replacement = original_and_replacement(cluster)
    deployment = original.deployment
    Placement.objects.filter(pk=replacement.pk).update(status=PlacementStatus.RESERVED)
    assert not index_spent(deployment, replacement.replica_index)

    assert give_back_half_placed(deployment, replacement.replica_index, cluster=cluster, user="test",
                                 reason="died") is True

    assert index_spent(deployment, replacement.replica_index)
    # Only a RESERVED replica is half-placed: the original (running or binding) is left alone.
    assert give_back_half_placed(deployment, original.replica_index, cluster=cluster, user="test",
                                 reason="died") is False
    check_invariants()


def test_the_replacement_index_is_the_chosen_one_until_it_is_spent(cluster):
    original, replacement = original_and_replacement(cluster)
    deployment = original.deployment
    # Indexes 0 (the original) and 1 (the replacement) are taken: a fresh one is 2.
    assert replacement_index(deployment, None) == 2
    assert replacement_index(deployment, replacement.replica_index) == replacement.replica_index  # adopted
    services.release_replica(deployment, replacement.replica_index, cluster=cluster, reason="gave up")

    assert replacement_index(deployment, replacement.replica_index) == 2  # spent: never reused
