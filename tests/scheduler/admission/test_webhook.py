"""`POST /webhooks/mutate-pods` on the demo cluster: what it patches, what it reserves, what it leaves."""
from __future__ import annotations

import pytest
from django.test import Client

from gpuplane.observability import WEBHOOK_REVIEWS
from scheduler.choices import DeploymentStatus, PlacementStatus
from scheduler.models import AdmissionSettings, Decision, Deployment, NamespaceQuota, SharingPolicy
from scheduler.pod_patch import apply_patch
from tests.scheduler.admission.reviews import admission_review, gpu_pod, patch_of, post
from tests.scheduler.inventory import capacity_state, check_invariants, demo_cluster

pytestmark = pytest.mark.django_db

AFFINITY = ("affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")


@pytest.fixture
def cluster():
    return demo_cluster()


def dig(document, *keys):
    for key in keys:
        document = document[key]
    return document


def test_it_places_a_training_pod_on_a_whole_gpu_and_pins_it(cluster):
    pod = gpu_pod(labels={"gpuplane.io/workload-type": "training"}, annotations={"gpuplane.io/gpu-memory": "40Gi"})
    status, answer = post(Client(), admission_review(pod))
    assert status == 200
    response = answer["response"]
    assert (response["uid"], response["allowed"], response["patchType"]) == (
        "705ab4f5-6393-11e8-b7cc-42010a800002", True, "JSONPatch")
    patched = apply_patch(pod, patch_of(answer))
    deployment = Deployment.objects.get(origin="webhook")
    placement = deployment.placements.select_related("node").get()
    (term,) = dig(patched["spec"], *AFFINITY)
    assert term["matchExpressions"] == [{"key": "kubernetes.io/hostname", "operator": "In",
                                         "values": [placement.node.name]}]
    annotations = patched["metadata"]["annotations"]
    assert annotations["gpuplane.io/sharing"] == "exclusive"
    assert annotations["gpuplane.io/decisions"] == str(Decision.objects.get(deployment=deployment).pk)
    assert "training takes whole GPUs" in annotations["gpuplane.io/admission"]
    assert patched["metadata"]["labels"]["gpuplane.io/deployment"] == str(deployment.pk)
    assert (deployment.status, placement.status) == (DeploymentStatus.PLACED, PlacementStatus.BINDING)
    assert placement.holds.count() == 1
    check_invariants()


def test_a_small_inference_pod_gets_a_mig_slice_and_its_resource_name(cluster):
    pod = gpu_pod(annotations={"gpuplane.io/gpu-memory": "4Gi"}, memory="64Gi")
    _, answer = post(Client(), admission_review(pod))
    patched = apply_patch(pod, patch_of(answer))
    limits = patched["spec"]["containers"][0]["resources"]["limits"]
    mig = [key for key in limits if key.startswith("nvidia.com/mig-")]
    assert mig and "nvidia.com/gpu" not in limits, limits
    assert patched["metadata"]["annotations"]["gpuplane.io/sharing"] == "mig"
    assert limits["memory"] == "64Gi"  # the host RAM request is untouched


def test_a_second_pass_over_its_own_output_patches_nothing(cluster):
    pod = gpu_pod()
    _, first = post(Client(), admission_review(pod))
    patched = apply_patch(pod, patch_of(first))
    before = capacity_state()
    _, second = post(Client(), admission_review(patched))
    assert second["response"]["allowed"] is True and "patch" not in second["response"]
    assert capacity_state() == before and Deployment.objects.count() == 1


def test_dry_run_decides_and_reserves_nothing(cluster):
    before = capacity_state()
    _, answer = post(Client(), admission_review(gpu_pod(), dry_run=True))
    assert answer["response"]["allowed"] is True and patch_of(answer)
    assert capacity_state() == before and not Deployment.objects.exists()


@pytest.mark.parametrize("pod", [
    gpu_pod(labels={"gpuplane.io/optimize": "false"}),
    gpu_pod(namespace="legacy"),
    gpu_pod(resource="example.com/fpga"),
])
def test_pods_it_leaves_alone_get_no_patch_and_hold_nothing(cluster, pod):
    AdmissionSettings.objects.update_or_create(pk=1, defaults={"exempt_namespaces": ["legacy"]})
    _, answer = post(Client(), admission_review(pod))
    assert answer["response"]["allowed"] is True and "patch" not in answer["response"]
    assert not Deployment.objects.exists()


def test_a_policy_decides_through_the_webhook(cluster):
    SharingPolicy.objects.create(name="ml-exclusive", strategy="exclusive", precedence=5, namespaces=["ml"])
    _, answer = post(Client(), admission_review(gpu_pod(annotations={"gpuplane.io/gpu-memory": "4Gi"})))
    annotations = apply_patch(gpu_pod(), patch_of(answer))["metadata"]["annotations"]
    assert annotations["gpuplane.io/sharing"] == "exclusive"
    assert "policy ml-exclusive" in annotations["gpuplane.io/admission"]


def test_a_namespace_over_its_quota_is_refused_with_409_and_the_reason(cluster):
    NamespaceQuota.objects.create(namespace="ml", max_gpu_milli=500)
    pod = gpu_pod(labels={"gpuplane.io/workload-type": "training"})
    _, answer = post(Client(), admission_review(pod))
    response = answer["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 409 and "quota" in response["status"]["message"]
    assert not Deployment.objects.exists()


@pytest.mark.parametrize("body", [b"", b"{", b"[]", b'{"request": 5}', b'{"request": {"uid": 7, "object": []}}',
                                  b'{"request": {"uid": "u", "object": {"spec": {"containers": "x"}}}}'])
def test_malformed_bodies_are_answered_200_and_admitted(cluster, body):
    status, answer = post(Client(), body)
    assert status == 200 and answer["response"]["allowed"] is True and "patch" not in answer["response"]


def test_an_internal_error_admits_unchanged_and_is_counted(cluster, monkeypatch):
    import scheduler.admission as admission

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(admission, "choose_sharing", broken)
    before = WEBHOOK_REVIEWS.labels(result="error")._value.get()
    status, answer = post(Client(), admission_review(gpu_pod()))
    assert status == 200 and answer["response"] == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True,
                                                    "warnings": ["gpuplane could not decide; admitted unchanged"]}
    assert WEBHOOK_REVIEWS.labels(result="error")._value.get() == before + 1
    exposition = Client().get("/metrics").content.decode()
    assert 'gpuplane_webhook_reviews_total{result="error"}' in exposition


def test_the_dry_run_page_shows_the_decision_matrix_and_patch_and_stores_nothing(cluster, operator, viewer):
    page = Client()
    page.force_login(viewer)
    assert page.get("/deployments/admission-dry-run/").status_code == 403
    page.force_login(operator)
    before = capacity_state()
    manifest = ("apiVersion: v1\nkind: Pod\nmetadata: {name: nb, namespace: ml, labels: "
                "{gpuplane.io/workload-type: development}}\n"
                "spec: {containers: [{name: c, resources: {limits: {nvidia.com/gpu: 1}}}]}\n")
    response = page.post("/deployments/admission-dry-run/", {"manifest": manifest})
    html = response.content.decode()
    assert response.status_code == 200 and 'data-dry-run-result="placed"' in html
    assert "time-slicing" in html and "kubernetes.io/hostname" in html and "Decision matrix" in html
    assert capacity_state() == before and not Deployment.objects.exists()
    assert "Paste one object" in page.post("/deployments/admission-dry-run/", {"manifest": "- a\n- b"}).content.decode()
