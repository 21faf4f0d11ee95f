"""Shared fixtures: one user per role (healthchecks-style), API clients, an isolated cluster state."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from rest_framework.test import APIClient

from gpuplane.roles import ADMIN, OPERATOR, VIEWER

PASSWORD = "correct-horse-battery"


def _user(username: str, role: str | None) -> User:
    user = User.objects.create_user(username=username, password=PASSWORD)
    if role:
        group, _ = Group.objects.get_or_create(name=role)
        user.groups.add(group)
    return user


@pytest.fixture
def viewer(db) -> User:
    return _user("vera-viewer", VIEWER)


@pytest.fixture
def operator(db) -> User:
    return _user("otto-operator", OPERATOR)


@pytest.fixture
def admin_user(db) -> User:
    return _user("ada-admin", ADMIN)


@pytest.fixture
def outsider(db) -> User:
    """Authenticated but holding no role."""
    return _user("oscar-outsider", None)


@pytest.fixture
def api() -> APIClient:
    return APIClient()


@pytest.fixture
def viewer_api(viewer) -> APIClient:
    client = APIClient()
    client.force_authenticate(viewer)
    return client


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """Full-strength hashing costs ~0.3 s a user; tests check access rules, not the hash."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def isolated_cluster_state(tmp_path, settings):
    """Every test gets its own simulated-cluster state file."""
    settings.GPUPLANE_SIMULATED_STATE = str(tmp_path / "simulated-cluster.json")
    settings.GPUPLANE_CLUSTER = "simulated"
    return settings.GPUPLANE_SIMULATED_STATE


@pytest.fixture(autouse=True)
def isolated_rate_limits(settings, request):
    """Every test starts with fresh sign-in and token-request counters (gpuplane/ratelimits.py)."""
    settings.CACHES = {
        **settings.CACHES,
        "ratelimit": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": f"ratelimit-{request.node.nodeid}"},
    }
