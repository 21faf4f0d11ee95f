"""Fixtures for the deployment pages: the demo cluster and a signed-in client per role."""
from __future__ import annotations

import pytest
from django.test import Client

from nodes.demo import load_demo_cluster
from tests.scheduler.pages.deploying import signed_in


@pytest.fixture
def demo() -> None:
    load_demo_cluster()


@pytest.fixture
def operator_client(operator) -> Client:
    return signed_in(operator)


@pytest.fixture
def viewer_client(viewer) -> Client:
    return signed_in(viewer)
