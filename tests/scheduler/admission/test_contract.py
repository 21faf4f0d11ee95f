"""The webhook's contract over generated AdmissionReviews (must-show 2): always HTTP 200 with the uid
echoed; every patch decodes to a JSON Patch that applies cleanly to its pod; a second pass over
the patched pod patches nothing and reserves nothing; ``dryRun`` reserves nothing; malformed
bodies never give a 5xx.

The default run is small (100 reviews, ~20 s); ``GPUPLANE_TEST_EXAMPLES_SCALE=100`` runs the
10,000 the issue asks for (tests/examples.py).
"""
from __future__ import annotations

import json

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.pod_patch import apply_patch
from tests.examples import examples
from tests.scheduler.admission.reviews import admission_review, patch_of, post
from tests.scheduler.inventory import capacity_state, check_invariants, demo_cluster

pytestmark = pytest.mark.django_db

NAMES = st.from_regex(r"[a-z][a-z0-9-]{0,20}[a-z0-9]", fullmatch=True)
GPU_RESOURCES = st.sampled_from(["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb",
                                 "nvidia.com/mig-1g.5gb", "example.com/fpga"])
LABELS = st.dictionaries(
    st.sampled_from(["gpuplane.io/workload-type", "gpuplane.io/optimize", "gpuplane.io/sharing", "tier", "app"]),
    st.sampled_from(["training", "inference", "serving", "development", "batch", "false", "true", "disabled",
                     "gold", "x"]),
    max_size=3,
)
ANNOTATIONS = st.dictionaries(
    st.sampled_from(["gpuplane.io/gpu-memory", "gpuplane.io/utilization-pct", "gpuplane.io/burstiness-pct",
                     "note/with~tilde", "a/b"]),
    st.sampled_from(["4Gi", "12Gi", "40Gi", "90Gi", "1Ti", "not-a-quantity", "15", "85", ""]),
    max_size=3,
)
AFFINITIES = st.sampled_from([
    None,
    {},
    {"nodeAffinity": {}},
    {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}, {"matchFields": []}]}}},
    {"podAntiAffinity": {}},
])


@st.composite
def containers(draw):
    resource = draw(GPU_RESOURCES)
    limits = {resource: str(draw(st.integers(1, 4)))}
    if draw(st.booleans()):
        limits["memory"] = draw(st.sampled_from(["1Gi", "64Gi", "500Mi"]))
    resources = {"limits": limits}
    if draw(st.booleans()):
        resources["requests"] = dict(limits)
    container = {"name": draw(NAMES), "image": "img:1", "resources": resources}
    env = draw(st.sampled_from([None, [], [{"name": "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "value": "100"}],
                                [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}]]))
    if env is not None:
        container["env"] = env
    return container


@st.composite
def pods(draw):
    metadata = {"namespace": draw(st.sampled_from(["ml", "team-a", "kube-system", "legacy"]))}
    if draw(st.booleans()):
        metadata["name"] = draw(NAMES)
    else:
        metadata["generateName"] = draw(NAMES) + "-"
    labels, annotations = draw(LABELS), draw(ANNOTATIONS)
    if labels or draw(st.booleans()):
        metadata["labels"] = labels
    if annotations or draw(st.booleans()):
        metadata["annotations"] = annotations
    spec = {"containers": [draw(containers())]}
    if draw(st.booleans()):
        spec["containers"].insert(0, {"name": "sidecar", "image": "envoy"})
    affinity = draw(AFFINITIES)
    if affinity is not None:
        spec["affinity"] = affinity
    if draw(st.integers(0, 5)) == 0:
        spec["priorityClassName"] = draw(st.sampled_from(["gpuplane-high", "gpuplane-low", "system-node-critical"]))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


MALFORMED = st.one_of(
    st.binary(max_size=64),
    st.builds(lambda value: json.dumps({"request": value}).encode(),
              st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                        max_size=3), max_leaves=8)),
    st.builds(lambda uid, obj: json.dumps({"request": {"uid": uid, "operation": "CREATE", "object": obj}}).encode(),
              st.text(max_size=8), st.dictionaries(st.sampled_from(["metadata", "spec", "kind"]),
                                                   st.one_of(st.none(), st.integers(), st.text(max_size=3),
                                                             st.just({"containers": [{"resources": 1}]})),
                                                   max_size=3)),
)


@pytest.fixture
def cluster():
    return demo_cluster()


@settings(max_examples=examples(100), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(pod=pods(), dry_run=st.booleans(), uid=st.uuids().map(str))
def test_every_review_is_answered_and_every_patch_applies_once(cluster, pod, dry_run, uid):
    client = Client()
    before = capacity_state() if dry_run else None
    status, answer = post(client, admission_review(pod, uid=uid, dry_run=dry_run))
    assert status == 200
    response = answer["response"]
    assert response["uid"] == uid
    if not response["allowed"]:
        assert response["status"]["code"] == 409  # a quota: the one refusal
        return
    patch = patch_of(answer)
    assert response.get("patchType") == ("JSONPatch" if patch else None)
    patched = apply_patch(pod, patch)  # raises if an operation does not apply
    if dry_run:
        assert capacity_state() == before
        return
    held = capacity_state()
    status, again = post(client, admission_review(patched, uid=uid))
    assert status == 200 and again["response"]["allowed"] is True and patch_of(again) == []
    assert capacity_state() == held


@settings(max_examples=examples(100), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(body=MALFORMED)
def test_malformed_bodies_never_give_a_5xx(cluster, body):
    status, answer = post(Client(), body)
    assert status == 200 and answer["response"]["allowed"] is True


def test_the_accounting_holds_after_a_burst_of_reviews(cluster):
    client = Client()
    for number in range(30):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{number}", "namespace": "ml"},
               "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
        assert post(client, admission_review(pod))[0] == 200
    check_invariants()
