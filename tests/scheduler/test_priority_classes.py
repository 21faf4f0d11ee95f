"""gpuplane creates its PriorityClasses in the cluster, with the values admins set (seed 002's by default)."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from scheduler.models import PriorityLevel
from scheduler.services.priorities import sync_priority_classes
from tests.scheduler.inventory import empty_cluster

pytestmark = pytest.mark.django_db


def test_it_creates_seed_002s_classes_and_replaces_one_an_admin_changed(admin_user, settings):
    cluster = empty_cluster()
    assert sorted(sync_priority_classes(cluster=cluster)) == ["gpuplane-high", "gpuplane-low", "gpuplane-medium"]
    classes = cluster.priority_classes()
    assert {name: (pc["value"], pc["preemptionPolicy"]) for name, pc in classes.items()} == {
        "gpuplane-high": (1000, "PreemptLowerPriority"), "gpuplane-medium": (500, "PreemptLowerPriority"),
        "gpuplane-low": (100, "Never")}
    assert sync_priority_classes(cluster=cluster) == []  # idempotent

    client = APIClient()
    client.force_authenticate(admin_user)
    level = PriorityLevel.objects.get(priority="medium")
    assert client.patch(f"/api/v1/priority-levels/{level.pk}/", {"value": 700}, format="json").status_code == 200
    assert empty_cluster().priority_classes()["gpuplane-medium"]["value"] == 700


@pytest.mark.django_db(transaction=True)
def test_a_flush_leaves_the_default_levels_and_an_admins_change_is_kept():
    from django.core.management import call_command

    from scheduler.models import PriorityLevel

    call_command("flush", interactive=False, verbosity=0)  # post_migrate: the defaults again
    assert dict(PriorityLevel.objects.values_list("priority", "value")) == {"high": 1000, "medium": 500, "low": 100}
    PriorityLevel.objects.filter(priority="high").update(value=900)
    PriorityLevel.objects.filter(priority="low").delete()
    from scheduler.services.priorities import ensure_default_levels

    assert ensure_default_levels() == 1
    assert dict(PriorityLevel.objects.values_list("priority", "value")) == {"high": 900, "medium": 500, "low": 100}
