"""Removals: a replica evicted with no replacement (the autoscaler's scale-down, preemption's
victims), through the one mover: planned -> original_evicting -> done, the Eviction API only,
PodDisruptionBudgets (429 -> waits, says why), do-not-disrupt, the concurrent budget; a
scale-down waits on no minimum interval (its owner asked), a preemption does. Scaling never
leaks nor removes twice: active placements = replicas once the moves end."""
from __future__ import annotations

import pytest
from django.test import Client

from lifecycle.errors import Conflict
from lifecycle.models import AuditEvent
from nodes.contract import LABEL_DEPLOYMENT
from scheduler import services
from scheduler.models import Deployment, Move, Placement
from scheduler.services import DeploySpec
from scheduler.services.autoscaling import scale_deployment, serving_count
from scheduler.services.moving import request_move, request_removal
from tests.moving.helpers import ACTIVE, assert_no_leak, ready_quarter_gpu_deployment, run_until_settled, tick
from tests.rollouts.simulated import mps_cluster, ready_replicas
from tests.scheduler.inventory import FakeClock

pytestmark = pytest.mark.django_db


@pytest.fixture
def three(db):
    """Five one-GPU nodes; ``trio`` with three ready replicas (MPS, a quarter of a GPU each)."""
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=5, deployments=0)
    return clock, cluster, ready_quarter_gpu_deployment(cluster, clock, "trio")


def active(deployment: Deployment) -> int:
    return Placement.objects.filter(deployment=deployment, status__in=ACTIVE).count()


def removals(deployment: Deployment):
    return Move.objects.filter(deployment=deployment, kind="removal").order_by("pk")


def test_a_scale_down_drops_the_target_at_once_and_the_mover_evicts_each_replica(three):
    clock, cluster, deployment = three
    event = scale_deployment(deployment, 1, user="otto")
    deployment.refresh_from_db()
    assert deployment.replicas == 1 and event.replicas_after == 1 and event.outcome == "applied"
    assert active(deployment) == 3 and serving_count(deployment) == 1  # the replicas are still there
    assert [(m.status, m.requested_by, m.to_node) for m in removals(deployment)] == [("planned", "scale-down", "")] * 2
    [done_a, done_b] = run_until_settled(cluster, clock)
    assert {done_a.status, done_b.status} == {"done"} and done_a.evicted_pod and done_b.evicted_pod
    assert done_a.replacement_id is None and done_a.placed_at is None  # nothing placed for a removal
    assert active(deployment) == 1 == ready_replicas(cluster)[deployment.pk]
    verbs = list(AuditEvent.objects.filter(object_id=str(done_a.pk), verb__startswith="move.")
                 .order_by("pk").values_list("verb", flat=True))
    assert verbs == ["move.planned", "move.original_evicting", "move.done"]
    evicted = [e for e in cluster.events() if e.get("reason") == "Evicted"]
    assert {e["name"] for e in evicted} >= {f"{deployment.namespace}/{done_a.evicted_pod.split('/', 1)[1]}"}
    assert_no_leak()


def test_a_second_scale_down_to_the_same_count_removes_nothing_more(three):
    clock, cluster, deployment = three
    scale_deployment(deployment, 2, user="otto")
    again = scale_deployment(deployment, 2, user="otto")  # the first removal not done yet
    assert again.outcome == "held" and again.replicas_before == 2
    assert removals(deployment).count() == 1
    run_until_settled(cluster, clock)
    deployment.refresh_from_db()
    assert active(deployment) == deployment.replicas == 2
    assert_no_leak()


def test_scaling_up_again_takes_back_removals_not_started_yet(three):
    clock, cluster, deployment = three
    scale_deployment(deployment, 1, user="otto")
    event = scale_deployment(deployment, 3, user="otto")
    deployment.refresh_from_db()
    assert event.outcome == "applied" and deployment.replicas == 3
    assert set(removals(deployment).values_list("status", flat=True)) == {"rolled_back"}
    assert active(deployment) == 3  # no replica placed: the two that were to leave stay
    run_until_settled(cluster, clock)
    assert_no_leak()


def test_a_pdb_holds_a_removal_with_its_reason_and_the_next_tick_retries(three):
    clock, cluster, deployment = three
    cluster.add_pdb(deployment.namespace, "keep-all", {LABEL_DEPLOYMENT: str(deployment.pk)}, min_available="100%")
    scale_deployment(deployment, 2, user="otto")
    for _ in range(3):
        tick(cluster, clock)
    [removal] = removals(deployment)
    assert removal.status == "planned" and not removal.evicted_pod
    assert "429" in removal.blocked_reason and f"PDB {deployment.namespace}/keep-all" in removal.blocked_reason
    assert active(deployment) == 3 and ready_replicas(cluster)[deployment.pk] == 3
    cluster.add_pdb(deployment.namespace, "keep-all", {LABEL_DEPLOYMENT: str(deployment.pk)}, max_unavailable=1)
    [removal] = run_until_settled(cluster, clock)
    assert removal.status == "done" and removal.blocked_reason == ""
    deployment.refresh_from_db()
    assert active(deployment) == deployment.replicas == 2
    assert_no_leak()


def test_a_scale_down_given_up_gives_its_replica_back_to_the_target(three):
    clock, cluster, deployment = three
    cluster.set_node_labels(Placement.objects.filter(deployment=deployment, status__in=ACTIVE)
                            .order_by("-pk").first().node.name, {"gpuplane.io/do-not-disrupt": "true"})
    # The victim is the newest replica (all ready, same price): on the marked node.
    scale_deployment(deployment, 2, user="otto")
    [removal] = removals(deployment)
    Move.objects.filter(pk=removal.pk).update(timeout_s=10)
    tick(cluster, clock)
    removal.refresh_from_db()
    assert removal.status == "planned" and "marked gpuplane.io/do-not-disrupt" in removal.blocked_reason
    [removal] = run_until_settled(cluster, clock, ticks=20)
    assert removal.status == "rolled_back"
    deployment.refresh_from_db()
    assert deployment.replicas == 3 == active(deployment)  # the replica serves on and counts again
    assert AuditEvent.objects.filter(verb="deployment.scaled", object_id=str(deployment.pk),
                                     after={"replicas": 3}).exists()
    assert_no_leak()


def test_a_scale_down_waits_on_no_interval_but_a_preemption_does(three, settings):
    clock, cluster, deployment = three
    first, second, third = Placement.objects.filter(deployment=deployment, status__in=ACTIVE).order_by("pk")
    request_move(first, why="t", requested_by="consolidation", requester="consolidationplan:1")
    run_until_settled(cluster, clock)
    # Just disrupted by consolidation: a preemption's removal waits the minimum interval ...
    preempting = request_removal(second, why="t", requested_by="preemption", requester="preemption:ml/x")
    tick(cluster, clock)
    preempting.refresh_from_db()
    assert preempting.status == "planned" and "minimum interval is 300 s" in preempting.blocked_reason
    # ... a scale-down's does not (its owner asked for it), and a later move does not wait on it
    scaling = request_removal(third, why="t", requested_by="scale-down", requester=f"scale-down:{deployment.pk}")
    Deployment.objects.filter(pk=deployment.pk).update(replicas=2)
    tick(cluster, clock)
    scaling.refresh_from_db()
    assert scaling.status == "done" and scaling.evicted_pod


def test_a_removal_waits_for_the_concurrent_budget(three, settings):
    settings.DISRUPTION_BUDGET = "1"
    clock, cluster, deployment = three
    other = services.deploy(DeploySpec(name="solo", model="m", memory_gb=8, sharing="mps", share_percent=25),
                            cluster=cluster)
    clock.advance(3)
    tick(cluster, clock)
    trio = Placement.objects.filter(deployment=deployment, status__in=ACTIVE).order_by("pk")
    solo = other.placements.get(status__in=ACTIVE)
    busy = next(p for p in trio if p.node_id != solo.node_id)
    cluster.add_pdb(deployment.namespace, "slow", {LABEL_DEPLOYMENT: str(deployment.pk)}, min_available="100%")
    move = request_move(busy, why="t", requested_by="user", requester="user:1")
    for _ in range(4):
        tick(cluster, clock)
    move.refresh_from_db()
    assert move.status == "replacement_ready"  # its node is being disrupted (held by the PDB)
    removal = request_removal(solo, why="t", requested_by="preemption", requester="preemption:ml/y")
    tick(cluster, clock)
    removal.refresh_from_db()
    assert removal.status == "planned" and "allows 1 node(s) disrupted at once" in removal.blocked_reason


def test_a_replica_being_moved_is_never_a_scale_down_victim_and_is_not_removed_twice(three):
    clock, cluster, deployment = three
    replicas = list(Placement.objects.filter(deployment=deployment, status__in=ACTIVE).order_by("pk"))
    moving = request_move(replicas[0], why="t", requested_by="user", requester="user:1")
    with pytest.raises(Conflict):
        request_removal(replicas[0], why="t", requested_by="scale-down", requester=f"scale-down:{deployment.pk}")
    tick(cluster, clock)  # its replacement placed: four active placements, three replicas
    assert active(deployment) == 4 and serving_count(deployment) == 3
    scale_deployment(deployment, 1, user="otto")
    victims = set(removals(deployment).values_list("original_id", flat=True))
    moving.refresh_from_db()
    assert len(victims) == 2 and not victims & {replicas[0].pk, moving.replacement_id}
    asked_again = request_removal(Placement.objects.get(pk=min(victims)), why="again", requested_by="scale-down",
                                  requester=f"scale-down:{deployment.pk}")
    assert removals(deployment).count() == 2 and asked_again.original_id == min(victims)  # the same one
    run_until_settled(cluster, clock)
    deployment.refresh_from_db()
    assert active(deployment) == deployment.replicas == 1
    assert_no_leak()


def test_removals_are_listed_beside_moves_on_the_api_and_the_disruptions_page(three, viewer_api, viewer):
    clock, cluster, deployment = three
    first = Placement.objects.filter(deployment=deployment, status__in=ACTIVE).order_by("pk").first()
    move = request_move(first, why="frees a node", requested_by="user", requester="user:1")
    scale_deployment(deployment, 2, user="otto")
    [removal] = removals(deployment)
    body = viewer_api.get("/api/v1/moves/?kind=removal").json()
    assert [(row["id"], row["kind"], row["requested_by"], row["to_node"]) for row in body["results"]] == [
        (removal.pk, "removal", "scale-down", "")]
    assert [row["kind"] for row in viewer_api.get("/api/v1/moves/?kind=move").json()["results"]] == ["move"]
    assert viewer_api.get("/api/v1/moves/?kind=teleport").status_code == 400
    client = Client()
    client.force_login(viewer)
    html = client.get("/disruptions/").content.decode()
    row = html.split(f'id="move-{removal.pk}"', 1)[1].split("</tr>", 1)[0]
    assert 'data-move="kind">Removal<' in row and "none (removed)" in row and "Scale-down" in row
    other = html.split(f'id="move-{move.pk}"', 1)[1].split("</tr>", 1)[0]
    assert 'data-move="kind">Move<' in other
