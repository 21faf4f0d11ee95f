"""The simulator's ServiceAccount tokens: it answers TokenReviews for the tokens it issued, and
refuses any other, an expired one, or one for other audiences, as the API server does."""
import pytest

from nodes.cluster.sim import SimulatedCluster
from nodes.contract import EXTRA_NODE_NAME


def test_a_token_it_issued_for_a_pod_on_a_node_is_reviewed_as_that_service_account_on_that_node(cluster, clock):
    token = cluster.issue_service_account_token("gpuplane", "gpuplane-agent", node="gpu-1", audiences=["gpuplane"])

    review = cluster.review_token(token, ["gpuplane"])

    assert review.authenticated
    assert review.username == "system:serviceaccount:gpuplane:gpuplane-agent"
    assert review.audiences == ("gpuplane",)
    assert review.extra == {EXTRA_NODE_NAME: ("gpu-1",)}
    # Another process on the same state file answers alike: the signing key is part of the cluster.
    assert cluster.review_token(token, ["gpuplane"]) == SimulatedCluster(cluster.state_file.path, clock=clock).review_token(
        token, ["gpuplane"])


def test_it_refuses_what_it_did_not_sign(cluster, tmp_path, clock):
    token = cluster.issue_service_account_token("gpuplane", "gpuplane-agent", node="gpu-1", audiences=["gpuplane"])
    header, claims, signature = token.split(".")
    other = SimulatedCluster(tmp_path / "other-cluster.json", clock=clock)
    forged_for_gpu_2 = other.issue_service_account_token("gpuplane", "gpuplane-agent", node="gpu-2",
                                                         audiences=["gpuplane"]).split(".")[1]

    for bad in (f"{header}.{forged_for_gpu_2}.{signature}", f"{header}.{claims}.{signature[:-2]}AA",
                other.issue_service_account_token("gpuplane", "gpuplane-agent", audiences=["gpuplane"]), "not-a-jwt"):
        review = cluster.review_token(bad, ["gpuplane"])
        assert (review.authenticated, review.error) == (False, "invalid bearer token")


def test_an_expired_token_or_one_for_other_audiences_is_not_authenticated(cluster, clock):
    token = cluster.issue_service_account_token("gpuplane", "gpuplane-agent", node="gpu-1", audiences=["gpuplane"],
                                                expiration_s=600)

    assert not cluster.review_token(token, ["vault"]).authenticated
    assert not cluster.review_token(token, []).authenticated  # the API server's own audience
    clock.advance(599)
    assert cluster.review_token(token, ["gpuplane"]).authenticated
    clock.advance(1)
    review = cluster.review_token(token, ["gpuplane"])
    assert not review.authenticated and "expired" in review.error


def test_a_token_of_no_pod_names_no_node_and_the_token_request_api_minimum_holds(cluster):
    token = cluster.issue_service_account_token("default", "default")

    review = cluster.review_token(token, [])

    assert review.authenticated and review.username == "system:serviceaccount:default:default"
    assert review.audiences == ("https://kubernetes.default.svc.cluster.local",) and review.extra == {}
    with pytest.raises(ValueError, match="at least 600"):
        cluster.issue_service_account_token("gpuplane", "gpuplane-agent", expiration_s=60)
