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
