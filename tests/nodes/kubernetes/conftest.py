"""Fixtures for KubernetesCluster's HTTP-level tests: one fake API server per test module, reset
before each test, and a cluster client pointed at it with a bearer token.
"""
from __future__ import annotations

import pytest

from nodes.cluster.kubernetes import KubernetesCluster
from tests.nodes.kubernetes.fake_api import FakeKubeAPI


@pytest.fixture(scope="module")
def server():
    api = FakeKubeAPI().start()
    yield api
    api.stop()


@pytest.fixture
def kube(server) -> FakeKubeAPI:
    server.reset()
    return server


@pytest.fixture
def cluster(kube) -> KubernetesCluster:
    return KubernetesCluster.for_host(kube.url, token="test-token")
