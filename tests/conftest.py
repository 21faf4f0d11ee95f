"""Shared fixtures: one user per role (healthchecks-style), API clients, an isolated cluster state.

Also the session's leak check (tests/leaks.py): the run fails if it left a message in a broker,
or a key in a Redis database, that it did not create (tests/settings.py keeps its own).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.contrib.auth.models import Group, User
from rest_framework.test import APIClient

from gpuplane.roles import ADMIN, OPERATOR, VIEWER
from scheduler.services import placing
from tests import leaks

PASSWORD = "correct-horse-battery"
BASE_DIR = Path(__file__).resolve().parents[1]
SNAPSHOT_KEY = pytest.StashKey[leaks.Snapshot]()


def _developer_var_dirs() -> list[Path]:
    from tests.settings import DEVELOPER_VAR_DIR

    return [BASE_DIR / "var", *([Path(DEVELOPER_VAR_DIR)] if DEVELOPER_VAR_DIR else [])]


def _xdist_worker() -> bool:
    """Under pytest-xdist the controller checks the whole run; a worker would see its siblings' keys."""
    return bool(os.environ.get("PYTEST_XDIST_WORKER"))


def pytest_sessionstart(session: pytest.Session) -> None:
    if _xdist_worker():
        return
    session.config.stash[SNAPSHOT_KEY] = leaks.snapshot(os.environ.get("REDIS_URL", ""), _developer_var_dirs())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.config.stash.get(SNAPSHOT_KEY, None)
    if before is None:
        return
    found = leaks.leaks(before, leaks.snapshot(os.environ.get("REDIS_URL", ""), _developer_var_dirs()))
    if found:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        lines = ["the suite left messages in brokers it did not create:", *found]
        if reporter is not None:
            reporter.write_sep("=", "broker leak check failed", red=True)
            for line in lines:
                reporter.write_line(line)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


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


@pytest.fixture
def no_watch(monkeypatch):
    """Deploys that really commit (transactional tests) keep their watch task off the broker."""
    monkeypatch.setattr(placing, "enqueue_watch", lambda deployment_id: None)


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """Full-strength hashing costs ~0.3 s a user; tests check access rules, not the hash."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def fresh_workload_mix():
    """The observed workload mix lives in the shared cache (scheduler.services.workload_mix)."""
    from django.core.cache import caches

    from scheduler.services.workload_mix import CACHE_KEY

    # The backend of now: a test may point CACHES at something else until its settings unwind.
    cache = caches["default"]
    cache.delete(CACHE_KEY)
    yield
    cache.delete(CACHE_KEY)


@pytest.fixture(autouse=True)
def fresh_learned_weights():
    """The feedback's learned weights are published in the shared cache (scheduler.services.feedback)."""
    from django.core.cache import caches

    from scheduler.services.feedback import CACHE_KEY

    cache = caches["default"]
    cache.delete(CACHE_KEY)
    yield
    cache.delete(CACHE_KEY)


@pytest.fixture(autouse=True)
def fresh_agent_reviews():
    """Node agents' token reviews are cached per process (nodes.agent_identity)."""
    from nodes.agent_identity import REVIEWS

    REVIEWS.clear()
    yield
    REVIEWS.clear()


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
        # The fleet pages' per-poll cache (nodes/fleet.py): each test computes its own figures.
        "fleet": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": f"fleet-{request.node.nodeid}"},
    }
