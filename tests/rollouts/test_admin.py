"""The rollouts admin: listed, and a rollout's page shows its nodes (read-only states)."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from rollouts.models import RollingUpdate, RolloutNode

pytestmark = pytest.mark.django_db


def test_the_admin_lists_a_rollout_and_shows_its_nodes():
    rollout = RollingUpdate.objects.create(name="mps4", config={"mode": "mps", "replicas": 4, "mig_layout": None})
    RolloutNode.objects.create(rollout=rollout, node_name="gpu-a", batch_index=1)
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw-not-used"))

    listing = client.get("/admin/rollouts/rollingupdate/")
    page = client.get(f"/admin/rollouts/rollingupdate/{rollout.pk}/change/")

    assert listing.status_code == 200 and b"mps4" in listing.content
    assert page.status_code == 200 and b"gpu-a" in page.content
