"""Autoscaling on the simulated cluster: PATCH replicas (operator), the monitoring round with the
simulated request stream (issue 22, must-show 3 at the service level), native HPA, feedback."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from lifecycle.models import AuditEvent
from scheduler import services
from scheduler.choices import PlacementStatus
from scheduler.models import Decision, Deployment, LearnedWeights, Move, ScalingEvent
from scheduler.services import autoscaling, feedback, monitoring
from scheduler.services.autoscaling import autoscale_all
from scheduler.services.moving import advance_moves
from scheduler.services.releasing import ACTIVE_PLACEMENT
from tests.scheduler.inventory import FakeClock, check_invariants, demo_cluster

pytestmark = pytest.mark.django_db


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def cluster(clock):
    return demo_cluster(clock)


@pytest.fixture
def operator_api(operator) -> APIClient:
    client = APIClient()
    client.force_authenticate(operator)
    return client


def running(cluster, clock, replicas: int = 1, **spec) -> Deployment:
    deployment = services.deploy(services.DeploySpec(name="chat", model="llama-3-8b", memory_gb=16.0,
                                                     replicas=replicas, sharing="exclusive", **spec), cluster=cluster)
    clock.advance(5)
    services.watch_deployment(deployment.pk, cluster=cluster)
    deployment.refresh_from_db()
    return deployment


def active(deployment: Deployment) -> int:
    return deployment.placements.filter(status__in=ACTIVE_PLACEMENT).count()


# ---- PATCH -----------------------------------------------------------------------------------

def test_patch_replicas_places_each_new_replica_with_a_decision_and_scales_down(cluster, clock, operator_api,
                                                                               viewer_api):
    deployment = running(cluster, clock)
    url = f"/api/v1/deployments/{deployment.pk}/"
    assert viewer_api.patch(url, {"replicas": 3}, format="json").status_code == 403

    response = operator_api.patch(url, {"replicas": 3}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["replicas"] == 3 and body["scaling"]["outcome"] == "applied"
    assert body["scaling"]["replicas_before"] == 1 and body["scaling"]["replicas_after"] == 3
    assert active(deployment) == 3
    assert Decision.objects.filter(deployment=deployment).count() == 3  # each new replica decided
    scaled = AuditEvent.objects.get(verb="deployment.scaled", object_id=str(deployment.pk))
    assert scaled.actor == "otto-operator" and scaled.after == {"replicas": 3}

    response = operator_api.patch(url, {"replicas": 1}, format="json")
    assert response.status_code == 200 and response.json()["replicas"] == 1
    # The target drops at once; the two replicas leave as the mover gets to them (removals).
    removals = Move.objects.filter(deployment=deployment, kind="removal", requested_by="scale-down")
    assert active(deployment) == 3 and removals.count() == 2 and not removals.exclude(status="planned").exists()
    assert AuditEvent.objects.filter(verb="placement.released").count() == 0
    advance_moves(cluster=cluster)
    assert active(deployment) == 1 and set(removals.values_list("status", flat=True)) == {"done"}
    assert all(m.evicted_pod for m in removals)  # each pod went through the Eviction API
    assert AuditEvent.objects.filter(verb="placement.released").count() == 2
    assert [e.action for e in ScalingEvent.objects.filter(deployment=deployment)] == ["up", "down"]
    check_invariants()


@pytest.mark.parametrize("body", [{"replicas": 0}, {"replicas": "many"}, {"replica": 2}, {"autoscale_policy": "magic"},
                                  {"autoscale_settings": {"max_replica": 3}},
                                  {"autoscale_settings": {"min_replicas": 9, "max_replicas": 2}},
                                  {"autoscale_settings": {"min_replicas": 0}}])
def test_bad_patches_are_400_with_field_messages(cluster, clock, operator_api, body):
    deployment = running(cluster, clock)
    response = operator_api.patch(f"/api/v1/deployments/{deployment.pk}/", body, format="json")
    assert response.status_code == 400, response.content
    assert response.json()
    assert active(deployment) == 1


def test_patch_sets_autoscaling_and_the_native_hpa_renders(cluster, clock, operator_api):
    deployment = running(cluster, clock)
    url = f"/api/v1/deployments/{deployment.pk}/"
    response = operator_api.patch(url, {"autoscale_policy": "seed", "autoscale_settings": {"max_replicas": 6}},
                                  format="json")
    assert response.status_code == 200
    assert response.json()["autoscale_policy"] == "seed"
    assert AuditEvent.objects.filter(verb="deployment.autoscale").count() == 1
    hpa = operator_api.get(url + "hpa/").json()
    assert hpa["kind"] == "HorizontalPodAutoscaler" and hpa["spec"]["maxReplicas"] == 6
    assert hpa["spec"]["behavior"]["scaleUp"]["stabilizationWindowSeconds"] == 60


# ---- the monitoring round on the simulated stream --------------------------------------------

def set_load(deployment: Deployment, factor: float) -> None:
    deployment.refresh_from_db()
    Deployment.objects.filter(pk=deployment.pk).update(
        autoscale_state={**deployment.autoscale_state, "sim_load_factor": factor})


def test_a_load_step_scales_1_to_5_each_placed_with_a_decision_and_back_after_the_down_window(
        cluster, clock, settings, monkeypatch):
    settings.AUTOSCALE_METRICS_SOURCE = "simulated"
    monkeypatch.setattr(monitoring, "AZURE_CONV_PER_MINUTE", (300,))  # a flat 5 req/s stream, times the factor
    deployment = running(cluster, clock)
    autoscaling.configure_autoscaling(deployment, user="test", policy="gpuplane",
                                      overrides={"min_replicas": 1, "max_replicas": 5})
    set_load(deployment, 0.1)
    start = timezone.now()
    t = 0
    for _ in range(6):  # quiet: one replica does
        autoscale_all(cluster=cluster, now=start + timedelta(seconds=t))
        t += 10
    deployment.refresh_from_db()
    assert deployment.replicas == 1

    set_load(deployment, 4.4)  # the step: 22 req/s, five A100 replicas' worth (5.05 req/s each)
    step_at = t
    replicas_seen = []
    for _ in range(30):
        autoscale_all(cluster=cluster, now=start + timedelta(seconds=t))
        clock.advance(10)
        services.watch_deployment(deployment.pk, cluster=cluster)
        deployment.refresh_from_db()
        replicas_seen.append(deployment.replicas)
        t += 10
    assert max(replicas_seen) == 5 and deployment.replicas == 5
    ups = ScalingEvent.objects.filter(deployment=deployment, action="up", outcome="applied").order_by("at")
    assert ups and (ups[0].at - start).total_seconds() - step_at <= 15  # reacts within 15 s
    assert Decision.objects.filter(deployment=deployment).count() == 5
    assert deployment.placements.filter(status=PlacementStatus.RUNNING).count() == 5

    set_load(deployment, 0.1)  # load falls
    fallen_at = t
    downs = []
    for _ in range(100):  # down steps at most once per 300 s window
        autoscale_all(cluster=cluster, now=start + timedelta(seconds=t))
        clock.advance(10)
        deployment.refresh_from_db()
        t += 10
        downs = list(ScalingEvent.objects.filter(deployment=deployment, action="down", outcome="applied"))
        if deployment.replicas == 1:
            break
    assert deployment.replicas == 1 and downs
    assert (downs[0].at - start).total_seconds() - fallen_at >= 300 - 10  # the down window held
    timeline = autoscaling.timeline(deployment)
    assert {e.action for e in timeline} >= {"up", "down", "hold"}
    assert all("queue" in e.inputs for e in timeline)
    check_invariants()


def test_missing_series_is_recorded_as_no_decision(cluster, clock, settings):
    settings.AUTOSCALE_METRICS_SOURCE = "none"
    deployment = running(cluster, clock)
    autoscaling.configure_autoscaling(deployment, user="test", policy="gpuplane")
    assert autoscale_all(cluster=cluster) == {"no-decision": 1}
    event = ScalingEvent.objects.get(deployment=deployment)
    assert event.action == "none" and "missing series" in event.message
    assert active(deployment) == 1


# ---- feedback ----------------------------------------------------------------------------------

def test_feedback_learns_from_an_under_delivering_gpu_model_audits_freezes_and_resets(cluster, clock, settings):
    defaults = feedback.defaults()
    for _ in range(10):
        feedback.observe("llama-3-8b", "H100-SXM5-80GB", "exclusive", predicted=16.0, measured=8.0)
    learned = LearnedWeights.objects.get(profile="balanced")
    assert learned.weights["PowerEfficiency"] < defaults["PowerEfficiency"]
    assert abs(sum(learned.weights.values()) - sum(defaults.values())) < 1e-9
    changes = AuditEvent.objects.filter(verb="weights.learned").count()
    assert changes >= 1

    # the decision matrix names the learned weights it used
    deployment = running(cluster, clock)
    decision = Decision.objects.filter(deployment=deployment).latest("created_at")
    assert decision.weights["PowerEfficiency"] == pytest.approx(learned.weights["PowerEfficiency"])

    feedback.freeze(True, user="ada")
    frozen = dict(LearnedWeights.objects.get(profile="balanced").weights)
    feedback.observe("llama-3-8b", "H100-SXM5-80GB", "exclusive", predicted=16.0, measured=4.0)
    assert LearnedWeights.objects.get(profile="balanced").weights == frozen
    assert AuditEvent.objects.filter(verb="weights.learned").count() == changes
    assert AuditEvent.objects.filter(verb="weights.frozen").count() == 1

    feedback.reset(user="ada")
    assert LearnedWeights.objects.get(profile="balanced").weights == defaults
    assert AuditEvent.objects.filter(verb="weights.reset").count() == 1


def test_the_feedback_command_freezes_unfreezes_resets_and_shows():
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("feedback", "--freeze", stdout=out)
    assert "frozen" in out.getvalue() and LearnedWeights.objects.get().frozen
    call_command("feedback", "--unfreeze", stdout=StringIO())
    assert not LearnedWeights.objects.get().frozen
    feedback.observe("m", "H100-SXM5-80GB", "exclusive", predicted=10.0, measured=5.0)
    out = StringIO()
    call_command("feedback", "--reset", stdout=out)
    assert LearnedWeights.objects.get().weights == feedback.defaults()
    assert "PowerEfficiency" in out.getvalue() and "correction" not in out.getvalue()
    assert [e.verb for e in AuditEvent.objects.filter(verb__startswith="weights.").order_by("pk")] == [
        "weights.frozen", "weights.unfrozen", "weights.learned", "weights.reset"]
