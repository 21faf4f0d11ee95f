"""The control plane's ClusterRole grants exactly what the Kubernetes backend uses, no more, no less.

tests/deploy/cluster_calls.py runs every operation of nodes/cluster/kubernetes.py (the only module
that calls the Kubernetes API) against a recording API server and turns each request into the
(verb, group, resource) the API server authorizes. A new cluster call (a PDB, a ConfigMap, a
PriorityClass, an HPA...) fails the first test until deploy/base/rbac.yaml grants it; a grant
that no call uses fails the second.
"""
from __future__ import annotations

import pytest

from tests.deploy.cluster_calls import Access, access_of, client_methods_in_code, operations, run_every_operation
from tests.deploy.rendering import OVERLAYS, named, of_kind, pod_spec, render
from tests.nodes.kubernetes.fake_api import FakeKubeAPI

CONTROL_PLANE = ("gpuplane-web", "gpuplane-webhook", "gpuplane-worker", "gpuplane-beat")


@pytest.fixture(scope="module")
def calls():
    server = FakeKubeAPI().start()
    try:
        yield run_every_operation(server)
    finally:
        server.stop()


def granted(overlay: str) -> dict[Access, str]:
    """What the control plane's ServiceAccount may do: the rules of every role bound to it."""
    objects = render(overlay)
    accounts = {pod_spec(named(objects, "Deployment", name))["serviceAccountName"] for name in CONTROL_PLANE}
    assert len(accounts) == 1, f"the control plane runs as one ServiceAccount, not {accounts}"
    (account,) = accounts
    grants: dict[Access, str] = {}
    for binding in of_kind(objects, "ClusterRoleBinding") + of_kind(objects, "RoleBinding"):
        if not any(s["kind"] == "ServiceAccount" and s["name"] == account for s in binding["subjects"]):
            continue
        role = named(objects, binding["roleRef"]["kind"], binding["roleRef"]["name"])
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], f"a wildcard in {rule}"
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        grants[Access(verb, group, resource)] = f"{role['kind']}/{role['metadata']['name']}"
    return grants


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_role_grants_every_access_the_code_needs(calls, overlay):
    missing = {str(access): sorted(by) for access, by in calls.accesses.items() if access not in granted(overlay)}

    assert missing == {}, "add these to deploy/base/rbac.yaml (operations that need them)"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_role_grants_nothing_the_code_never_uses(calls, overlay):
    unused = sorted(str(access) for access in granted(overlay) if access not in calls.accesses)

    assert unused == [], "remove these from deploy/base/rbac.yaml: no operation of the backend uses them"


def test_every_client_call_in_the_code_was_exercised(calls):
    # A client method the module names but no operation reached hides requests from the tests
    # above: teach cluster_calls.py the mood or argument that reaches it.
    assert client_methods_in_code() >= {"list_node", "create_namespaced_pod_eviction"}  # the scan finds calls
    assert sorted(client_methods_in_code() - calls.client_methods) == []
    assert calls.operations == set(operations())
    assert calls.answer_errors == []


def test_the_derivation_sees_what_the_role_is_checked_against(calls):
    # The run is real: it found each kind of request the backend makes, watches and subresources included.
    assert {Access("watch", "", "nodes"), Access("create", "", "pods/eviction"),
            Access("patch", "apps", "deployments/scale"), Access("list", "policy", "poddisruptionbudgets"),
            Access("get", "", "configmaps"), Access("update", "", "configmaps"),
            Access("create", "", "configmaps")} <= set(calls.accesses)
    assert calls.accesses[Access("delete", "", "pods")] == {"restart_device_plugin"}


@pytest.mark.parametrize(("method", "path", "query", "expected"), [
    ("GET", "/api/v1/nodes", {}, Access("list", "", "nodes")),
    ("GET", "/api/v1/nodes", {"watch": ["true"]}, Access("watch", "", "nodes")),
    ("GET", "/api/v1/namespaces/gpuplane", {}, Access("get", "", "namespaces")),
    ("PATCH", "/api/v1/nodes/gpu-1", {}, Access("patch", "", "nodes")),
    ("POST", "/api/v1/namespaces/ml/pods/p/eviction", {}, Access("create", "", "pods/eviction")),
    ("GET", "/apis/apps/v1/namespaces/ml/deployments/d", {}, Access("get", "apps", "deployments")),
    ("PATCH", "/apis/apps/v1/namespaces/ml/deployments/d/scale", {}, Access("patch", "apps", "deployments/scale")),
    ("DELETE", "/apis/apps/v1/namespaces/ml/deployments", {}, Access("deletecollection", "apps", "deployments")),
    ("PUT", "/apis/scheduling.k8s.io/v1/priorityclasses/gpuplane-high", {}, Access("update", "scheduling.k8s.io", "priorityclasses")),
])
def test_requests_map_to_rbac_attributes_as_the_api_server_maps_them(method, path, query, expected):
    assert access_of(method, path, query) == expected
