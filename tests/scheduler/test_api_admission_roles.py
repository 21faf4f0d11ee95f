"""Sharing policies, priority levels, quotas and admission settings: admins edit them; viewers and
operators read them and get 403 on every write (must-show 6), in the API and in the admin."""
from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from lifecycle.models import AuditEvent
from scheduler.models import NamespaceQuota, PriorityLevel, SharingPolicy

pytestmark = pytest.mark.django_db

POLICY = {"name": "team-a-mps", "strategy": "mps", "precedence": 10, "namespaces": ["team-a"], "mps_max_clients": 8}


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def writes(client: APIClient) -> list[int]:
    """One of each write; the status of each."""
    policy = SharingPolicy.objects.create(name="existing", strategy="exclusive")
    quota = NamespaceQuota.objects.create(namespace="ml", max_gpu_milli=4000)
    level = PriorityLevel.objects.get(priority="high")
    return [
        client.post("/api/v1/sharing-policies/", POLICY, format="json").status_code,
        client.patch(f"/api/v1/sharing-policies/{policy.pk}/", {"precedence": 3}, format="json").status_code,
        client.delete(f"/api/v1/sharing-policies/{policy.pk}/").status_code,
        client.patch(f"/api/v1/priority-levels/{level.pk}/", {"value": 2000}, format="json").status_code,
        client.post("/api/v1/namespace-quotas/", {"namespace": "team-b", "gpus": 2, "memory_gb": 80},
                    format="json").status_code,
        client.patch(f"/api/v1/namespace-quotas/{quota.pk}/", {"gpus": 1.5}, format="json").status_code,
        client.patch("/api/v1/admission-settings/", {"exempt_namespaces": ["legacy"]}, format="json").status_code,
    ]


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_viewers_and_operators_read_but_every_write_is_403(request, role):
    client = client_for(request.getfixturevalue(role))
    assert writes(client) == [403] * 7
    assert not SharingPolicy.objects.filter(name="team-a-mps").exists()
    assert PriorityLevel.objects.get(priority="high").value == 1000
    for url in ("/api/v1/sharing-policies/", "/api/v1/priority-levels/", "/api/v1/namespace-quotas/",
                "/api/v1/admission-settings/"):
        assert client.get(url).status_code == 200, url


def test_admins_edit_everything_and_each_change_is_audited(admin_user):
    client = client_for(admin_user)
    assert writes(client) == [201, 200, 204, 200, 201, 200, 200]
    assert PriorityLevel.objects.get(priority="high").value == 2000
    quota = NamespaceQuota.objects.get(namespace="team-b")
    # GPUs and GB in, thousandths and MiB stored
    assert (quota.max_gpu_milli, quota.max_memory_mib) == (2000, 80 * 1024)
    assert client.get(f"/api/v1/namespace-quotas/{quota.pk}/").json()["gpus"] == 2.0
    verbs = set(AuditEvent.objects.values_list("verb", flat=True))
    assert {"sharing_policy.created", "sharing_policy.updated", "sharing_policy.deleted", "priority_level.updated",
            "namespace_quota.created", "admission_settings.updated"} <= verbs


@pytest.mark.parametrize(("body", "field"), [
    ({**POLICY, "mps_max_clients": 60}, "mps_max_clients"),  # 60 clients on one GPU: CUDA MPS serves 48
    ({**POLICY, "strategy": "mig", "mig_profile": "5g.50gb"}, "mig_profile"),
    ({**POLICY, "strategy": "timeslice", "timeslice_replicas": 1}, "timeslice_replicas"),
    ({**POLICY, "strategy": "auto"}, "strategy"),
    ({**POLICY, "namespaces": ["Not A Namespace"]}, "namespaces"),
])
def test_what_nvidia_cannot_do_is_a_400_with_the_field(admin_user, body, field):
    response = client_for(admin_user).post("/api/v1/sharing-policies/", body, format="json")
    assert response.status_code == 400 and field in response.json()


def test_the_django_admin_lets_only_admins_change_policies(viewer, operator, admin_user):
    policy = SharingPolicy.objects.create(name="existing", strategy="exclusive")
    for user, allowed in ((viewer, False), (operator, False), (admin_user, True)):
        user.is_staff = True
        user.save()
        browser = Client()
        browser.force_login(user)
        response = browser.post(f"/admin/scheduler/sharingpolicy/{policy.pk}/change/",
                                {"name": "existing", "strategy": "exclusive", "precedence": 7, "namespaces": "[]",
                                 "match_labels": "{}", "fairness": "default", "enabled": "on"})
        policy.refresh_from_db()
        assert (policy.precedence == 7) == allowed, user.username
        if not allowed:
            assert response.status_code == 403
