"""KubernetesCluster.review_token: one TokenReview POST, its status read as the API server answers it."""
from __future__ import annotations

import time

import pytest

from nodes.cluster.base import ClusterError
from nodes.contract import EXTRA_NODE_NAME
from tests.nodes.kubernetes import api_objects as k8s
from tests.nodes.kubernetes.fake_api import Reply

PATH = "/apis/authentication.k8s.io/v1/tokenreviews"


def test_it_posts_a_token_review_for_the_audiences_and_reads_the_bound_node(kube, cluster):
    token = k8s.service_account_jwt(time.time() + 600)
    kube.on("POST", PATH, status=201, body=k8s.token_review(token, node="gpu-node-7"))

    review = cluster.review_token(token, ["gpuplane"])

    request = kube.only_request()
    assert request.body == {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                            "spec": {"token": token, "audiences": ["gpuplane"]}}
    assert request.content_type == "application/json"
    assert request.headers["authorization"] == "Bearer test-token"  # gpuplane's own credential, not the agent's
    assert review.authenticated
    assert review.username == "system:serviceaccount:gpuplane:gpuplane-agent"
    assert review.audiences == ("gpuplane",)
    assert review.extra[EXTRA_NODE_NAME] == ("gpu-node-7",)
    assert "system:serviceaccounts:gpuplane" in review.groups


def test_a_token_the_api_server_does_not_authenticate_is_an_answer_not_an_error(kube, cluster):
    kube.on("POST", PATH, status=201, body=k8s.token_review("x.y.z", authenticated=False,
                                                              error="service account token has expired"))

    review = cluster.review_token("x.y.z", ["gpuplane"])

    assert not review.authenticated
    assert review.error == "service account token has expired"
    assert review.username == "" and review.extra == {}


def test_an_answer_without_a_status_never_reads_as_someone(kube, cluster):
    kube.on("POST", PATH, status=201, body={"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1"})

    assert not cluster.review_token("x.y.z", ["gpuplane"]).authenticated


def test_a_forbidden_review_is_a_cluster_error_naming_the_operation(kube, cluster):
    message = ('tokenreviews.authentication.k8s.io is forbidden: User "system:serviceaccount:gpuplane:gpuplane" '
               'cannot create resource "tokenreviews" in API group "authentication.k8s.io" at the cluster scope')
    kube.on("POST", PATH, handler=lambda request: Reply(403, k8s.status_error(403, "Forbidden", message)))

    with pytest.raises(ClusterError, match="review a token: HTTP 403 Forbidden.*cannot create resource"):
        cluster.review_token("x.y.z", ["gpuplane"])
