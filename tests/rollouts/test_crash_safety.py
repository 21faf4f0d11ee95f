"""Must-show 3 (issue 18): real ``celery worker`` and ``celery beat`` processes SIGKILLed at random
points while two rollouts (one that succeeds, one that must roll back) and an approved
consolidation plan move replicas; every operation finishes or rolls back, nothing is lost or leaked.

Each trial seeds a small simulated cluster of one-GPU H100 nodes in three groups, so that the
three operations run at once without taking each other's room (each group's sharing mode is its
own, and a replica is placed only on a node of its deployment's mode):

- MPS R=2 ``roll-1``, ``roll-2`` (a one-replica deployment each, and one replica each of ``pair``,
  whose PodDisruptionBudget, its owner's, asks for minAvailable 2) and ``roll-3`` (empty): a
  rolling update of ``roll-1`` and ``roll-2`` to MPS R=4, max unavailable 1, which succeeds;
- exclusive ``back-1`` (empty), ``back-2`` (one exclusive replica) and ``spare`` (empty): a
  rolling update of ``back-1`` and ``back-2`` to MIG 2 x 3g.40gb with
  on_failure=rollback; once ``back-1`` succeeded, the MIG manager is made to fail on the next
  node (``inject_mig_failure``, in the cluster's state file, which the worker reads): ``back-2``
  fails and is restored, and the rollout rolls ``back-1`` back to exclusive (the rollback path);
- time-slicing R=4 ``cons-1``, ``cons-2`` (a one-replica deployment each): a consolidation plan,
  analysed and approved by the test, moves one of them to empty a node.

The processes (tests/rollouts/crash.py): a worker (prefork, two children) and a beat sending the
mover's, the reconciler's and the executor's ticks every few tenths of a second; a standby pair is booted
ahead. At ``KILLS`` points per trial (1 unless GPUPLANE_CRASH_KILLS says more), drawn from the
trial's seed (an audit event to wait for, ``TRIGGERS``, then a delay), the test SIGKILLs the
current worker's and beat's process groups at once, and the standby pair takes over (a later
kill point waits for the next standby to boot; one not reached before the operations end is
dropped, and said). While the trial runs (sampled every ``POLL_S``):

- every deployment has at least its replicas ready;
- no node is cordoned unless one of its rollout's nodes is part-way through its steps;
- every PodDisruptionBudget has its desired healthy pods;
- no more nodes are being evicted from at once than the disruption budget allows (2 here).

At the end: the first rollout succeeded (both nodes at MPS R=4), the second rolled back (both
nodes' labels back to exclusive), the plan executed its move; every move ended done, none lost;
nothing cordoned or tainted; every deployment has exactly its replicas as active placements,
ready pods and workloads, and the capacity accounting charges nothing else
(``check_invariants``). A failure message names the trial's seed and kill points; the base seed
is ``GPUPLANE_CRASH_SEED`` (default 0). ``pytest -s`` prints one line per trial.

The database is the test database, committed (a transactional test), which the processes open
through the same server; the cluster is the simulated cluster's state file, shared by file.
"""
from __future__ import annotations

import os
import random
import time
from collections import Counter
from dataclasses import dataclass, field

import pytest
from django.db import connection

from consolidation.analysis import analyse
from consolidation.approval import approve
from consolidation.choices import PlanStatus
from consolidation.models import ConsolidationPlan
from lifecycle.models import AuditEvent
from nodes.cluster.base import ClusterPDB
from nodes.cluster.sim import SimulatedCluster
from nodes.contract import LABEL_DEPLOYMENT, LABEL_DEVICE_PLUGIN_CONFIG, LABEL_MIG_CONFIG
from nodes.demo import H100_PRODUCT
from nodes.inventory.sync import sync_inventory
from nodes.models import Node
from nodes.node_configs import applied_config
from nodes.sharing.node_config import (
    NodeConfig,
    mig_config_name,
    render_device_plugin_config,
    render_mig_parted_entries,
)
from rollouts.choices import IN_FLIGHT, NodeState, OnFailure, RolloutStatus
from rollouts.control import act
from rollouts.creating import create_rollout, validate_request
from rollouts.models import RollingUpdate, RolloutNode
from scheduler import services
from scheduler.choices import MOVE_IN_FLIGHT, MoveStatus
from scheduler.models import Deployment, Move, Placement
from scheduler.services import DeploySpec
from scheduler.services.disruption import concurrent_budget
from tests.redis_scratch import delete_prefixed_keys, scratch_prefix
from tests.rollouts.crash import Plane, flush_retried_on_deadlock
from tests.rollouts.simulated import EXCLUSIVE, H100_MIB, MIG_2X3G, MPS_2, MPS_4, TIMESLICE_4, ready_replicas
from tests.scheduler.inventory import check_invariants

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.redis,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql",
                       reason="needs PostgreSQL: worker processes share the test database only through a server"),
    pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="REDIS_URL is not set: the workers need a Redis broker"),
]

TRIALS = 21
# Kill points per trial: each kill boots a standby worker and beat (seconds of CPU on a small machine).
KILLS = int(os.environ.get("GPUPLANE_CRASH_KILLS", "1"))
BASE_SEED = int(os.environ.get("GPUPLANE_CRASH_SEED", "0"))
DISRUPTION_BUDGET = "2"
LAYOUT: dict[str, NodeConfig] = {
    "roll-1": MPS_2, "roll-2": MPS_2, "roll-3": MPS_2,
    "back-1": EXCLUSIVE, "back-2": EXCLUSIVE, "spare": EXCLUSIVE,
    "cons-1": TIMESLICE_4, "cons-2": TIMESLICE_4,
}
SUCCEEDS, ROLLS_BACK = ("roll-1", "roll-2"), ("back-1", "back-2")
PAIR_PDB = "pair-min-2"
POLL_S = 0.1
TRIAL_TIMEOUT_S = 90
STEPS = ("prewarming", "draining", "reconfiguring", "verifying")


@dataclass(frozen=True)
class Trigger:
    """The ``nth`` audit event ``verb`` whose object reads ``subject`` (a node's name, a rollout's,
    or, for a move, its requester: ``ok``, ``back`` or ``plan``)."""

    verb: str
    subject: str
    nth: int = 1

    def __str__(self) -> str:
        return f"{self.verb} #{self.nth} of {self.subject}"


TRIGGERS: tuple[Trigger, ...] = (
    *(Trigger(f"rolloutnode.{step}", node) for node in SUCCEEDS for step in STEPS),
    *(Trigger(f"rolloutnode.{step}", node) for node in ROLLS_BACK for step in STEPS),
    Trigger("rolloutnode.failed", "back-2"),
    Trigger("rollingupdate.rolling_back", "back"),
    # back-1's second pass: the rollback towards exclusive (its last step, verifying, ends the
    # trial too soon after for a kill to be sure to land before the end).
    *(Trigger(f"rolloutnode.{step}", "back-1", 2) for step in STEPS[:-1]),
    *(Trigger(f"move.{status}", who) for who in ("ok", "back", "plan")
      for status in ("replacement_placed", "replacement_ready", "original_evicting")),
    Trigger("consolidationplan.executing", "plan"),
    Trigger("move.planned", "plan"),
)


@dataclass(frozen=True)
class KillPoint:
    trigger: Trigger
    delay_s: float

    def __str__(self) -> str:
        return f"{self.delay_s:.3f} s after {self.trigger}"


def kill_points(seed: int) -> list[KillPoint]:
    rng = random.Random(seed)
    return [KillPoint(rng.choice(TRIGGERS), round(rng.uniform(0.0, 0.4), 3)) for _ in range(KILLS)]


@pytest.fixture(scope="module", autouse=True)
def flush_retried():
    with flush_retried_on_deadlock():
        yield


@pytest.fixture(scope="module")
def plane(tmp_path_factory, django_db_setup):
    folder = tmp_path_factory.mktemp("crash")
    redis_url = os.environ["REDIS_URL"]
    prefix = scratch_prefix()
    processes = Plane(folder, redis_url=redis_url, prefix=prefix, state_path=str(folder / "cluster.json"),
                      extra_env={"GPUPLANE_DISRUPTION_BUDGET": DISRUPTION_BUDGET})
    try:
        processes.wait_ready()
        yield processes
    finally:
        processes.stop()
        delete_prefixed_keys(redis_url, prefix)


@dataclass
class Trial:
    """One trial's operations, what the test saw of them, and the kills so far."""

    seed: int
    cluster: SimulatedCluster
    ok: RollingUpdate
    back: RollingUpdate
    plan: ConsolidationPlan
    points: list[KillPoint]
    seen: Counter = field(default_factory=Counter)
    last_event: int = 0
    kills: list[str] = field(default_factory=list)
    samples: int = 0
    injected: bool = False
    dropped: list[KillPoint] = field(default_factory=list)

    def header(self) -> str:
        return (f"seed {self.seed} (GPUPLANE_CRASH_SEED={BASE_SEED}, trial {self.seed - BASE_SEED}); "
                f"kill points: {'; '.join(map(str, self.points))}; killed: {self.kills or 'not yet'}")


@pytest.mark.parametrize("trial_number", range(TRIALS))
def test_worker_and_beat_killed_at_random_points_leave_every_operation_finished_and_nothing_leaked(
        trial_number, plane, settings):
    settings.GPUPLANE_SIMULATED_STATE = plane.env["GPUPLANE_SIMULATED_STATE"]
    settings.DISRUPTION_BUDGET = DISRUPTION_BUDGET
    seed = BASE_SEED + trial_number
    plane.wait_ready()  # the standby started by the last trial's kill has booted: this trial's first kill is not held
    started = time.monotonic()
    cluster = seeded_cluster(settings.GPUPLANE_SIMULATED_STATE)
    ok = create_rollout(validate_request(f"ok-{seed}", list(SUCCEEDS), MPS_4.as_dict(), max_unavailable=1))
    back = create_rollout(validate_request(f"back-{seed}", list(ROLLS_BACK), MIG_2X3G.as_dict(), max_unavailable=1,
                                           on_failure=OnFailure.ROLLBACK))
    # Analysed while both rollouts own their nodes: the plan can only be the time-slicing group's.
    plan = analyse(cluster=cluster)
    assert plan is not None and len(plan.moves) == 1, plan and plan.moves
    approve(plan, actor="crash-test")
    trial = Trial(seed, cluster, act(ok, "start", cluster=cluster), act(back, "start", cluster=cluster), plan,
                  kill_points(seed))

    driven = time.monotonic()
    drive(plane, trial)
    took = f"{time.monotonic() - started:.1f} s, {time.monotonic() - driven:.1f} s of it running"

    report = f"{trial.header()}\n{story(trial)}\n{plane.log_text()[-6000:]}"
    for rollout in (trial.ok, trial.back, trial.plan):
        rollout.refresh_from_db()
    ok_steps = dict(trial.ok.nodes.values_list("node_name", "state"))
    back_steps = dict(trial.back.nodes.values_list("node_name", "state"))
    assert trial.ok.status == RolloutStatus.SUCCEEDED, f"{trial.ok.message}; {ok_steps}\n{report}"
    assert ok_steps == dict.fromkeys(SUCCEEDS, NodeState.SUCCEEDED), report
    assert trial.back.status == RolloutStatus.ROLLED_BACK, f"{trial.back.message}; {back_steps}\n{report}"
    assert back_steps == {"back-1": NodeState.ROLLED_BACK, "back-2": NodeState.FAILED}, report
    assert trial.plan.status == PlanStatus.EXECUTED and "1 of 1 move(s) done" in trial.plan.reason, (
        f"{trial.plan.status}: {trial.plan.reason}\n{report}")
    moves = list(Move.objects.values_list("requester", "status", "lost"))
    assert moves and all(status == MoveStatus.DONE and not lost for _, status, lost in moves), f"{moves}\n{report}"
    assert trial.kills, f"never killed\n{report}"
    check_nothing_cordoned(cluster)
    check_configs(cluster)
    check_every_replica_once(cluster, report)
    # One line a trial (pytest -s or -rA shows them): where the kills landed, and the outcome.
    print(f"trial {trial_number} (seed {seed}, {took}): killed {trial.kills}, not reached {list(map(str, trial.dropped))}; "
          f"{trial.samples} samples; ok {trial.ok.status}, "
          f"back {trial.back.status}, plan {trial.plan.status}, moves {Counter(s for _, s, _ in moves)}")


def seeded_cluster(state_path: str) -> SimulatedCluster:
    """``LAYOUT``'s nodes, with their deployments placed where the docstring says, as if up for a
    minute already (every pod Ready, every MIG manager and device plugin settled)."""
    SimulatedCluster(state_path).reset()
    settled = SimulatedCluster(state_path, clock=lambda: time.time() - 60, mig_reconfigure_s=0, plugin_restart_s=0)
    for config in (MPS_2, MPS_4, TIMESLICE_4, EXCLUSIVE, MIG_2X3G):
        settled.set_device_plugin_config(*render_device_plugin_config(config))
    for config in (MIG_2X3G, EXCLUSIVE):
        settled.set_mig_config(*render_mig_parted_entries(config))
    for name, config in LAYOUT.items():
        settled.add_gpu_node(name, product=H100_PRODUCT, gpu_count=1, gpu_memory_mib=H100_MIB, labels={
            LABEL_DEVICE_PLUGIN_CONFIG: render_device_plugin_config(config)[0], LABEL_MIG_CONFIG: mig_config_name(config)})
    sync_inventory(settled)
    for name, sharing, nodes, replicas in (("svc-a", "mps", ["roll-1"], 1), ("svc-b", "mps", ["roll-2"], 1),
                                           ("svc-y", "exclusive", ["back-2"], 1),
                                           ("pair", "mps", ["roll-1", "roll-2"], 2),
                                           ("svc-p", "timeslice", ["cons-1"], 1), ("svc-q", "timeslice", ["cons-2"], 1)):
        services.deploy(DeploySpec(name=name, model="m", memory_gb=8, sharing=sharing, replicas=replicas,
                                   share_percent=None if sharing == "exclusive" else 25),
                        cluster=settled, nodes=nodes)
    pair = Deployment.objects.get(name="pair")
    settled.apply_pdb(ClusterPDB(namespace=pair.namespace, name=PAIR_PDB, match_labels={LABEL_DEPLOYMENT: str(pair.pk)},
                                 min_available=2))
    cluster = SimulatedCluster(state_path)
    sync_inventory(cluster)
    assert min(ready_replicas(cluster).values()) >= 1
    return cluster


def drive(plane: Plane, trial: Trial) -> None:
    """Watch until every operation has ended and no move is in flight, killing the worker and the
    beat at the trial's kill points and checking what must hold throughout."""
    deadline = time.monotonic() + TRIAL_TIMEOUT_S
    pending = list(trial.points)
    due: float | None = None
    while True:
        now = time.monotonic()
        assert now < deadline, f"not over after {TRIAL_TIMEOUT_S} s: {trial.header()}\n{story(trial)}\n{plane.log_text()}"
        check_throughout(trial)
        note_events(trial)
        if not trial.injected and trial.seen[("rolloutnode.succeeded", "back-1")]:
            # back-1 proven at MIG: the MIG manager fails on the next node (back-2), whose switch
            # cannot have come yet (it pre-warms and drains first).
            trial.cluster.inject_mig_failure(render_mig_parted_entries(MIG_2X3G)[0], "cannot reset GPU 0: in use")
            trial.injected = True
        ended = over(trial)
        if pending and not ended:
            point = pending[0]
            if due is None and trial.seen[(point.trigger.verb, point.trigger.subject)] >= point.trigger.nth:
                due = now + point.delay_s
            # After a kill, the next one waits for the new standby worker to boot (under load, seconds).
            if due is not None and now >= due and plane.ready():
                plane.kill()
                trial.kills.append(f"{point} (at {now - deadline + TRIAL_TIMEOUT_S:.1f} s)")
                pending.pop(0)
                due = None
        if ended:  # a kill point not reached by then is dropped: a kill after the end tests nothing
            trial.dropped = pending
            return
        time.sleep(POLL_S)


def over(trial: Trial) -> bool:
    statuses = set(RollingUpdate.objects.filter(pk__in=(trial.ok.pk, trial.back.pk)).values_list("status", flat=True))
    plan = ConsolidationPlan.objects.get(pk=trial.plan.pk)
    return (not statuses & {RolloutStatus.PENDING, RolloutStatus.RUNNING, RolloutStatus.PAUSED}
            and plan.status not in (PlanStatus.APPROVED, PlanStatus.EXECUTING)
            and not Move.objects.filter(status__in=MOVE_IN_FLIGHT).exists())


def note_events(trial: Trial) -> None:
    """Count the audit events the triggers wait for, by (verb, subject)."""
    requesters = {f"rollout:{trial.ok.pk}": "ok", f"rollout:{trial.back.pk}": "back",
                  f"consolidationplan:{trial.plan.pk}": "plan"}
    events = list(AuditEvent.objects.filter(pk__gt=trial.last_event).order_by("pk")
                  .values_list("pk", "verb", "object_type", "object_id", "object_repr"))
    moves = dict(Move.objects.values_list("pk", "requester"))
    for pk, verb, object_type, object_id, text in events:
        trial.last_event = pk
        if object_type == "rollouts.rolloutnode":
            subject = text.split(" ", 1)[0]
        elif object_type == "rollouts.rollingupdate":
            subject = "ok" if object_id == str(trial.ok.pk) else "back"
        elif object_type == "scheduler.move":
            subject = requesters.get(moves.get(int(object_id), ""), "")
        elif object_type == "consolidation.consolidationplan":
            subject = "plan"
        else:
            continue
        trial.seen[(verb, subject)] += 1


def check_throughout(trial: Trial) -> None:
    cluster = trial.cluster
    cordoned_before = cordoned(cluster)
    states = dict(RolloutNode.objects.filter(rollout__in=(trial.ok, trial.back)).values_list("node_name", "state"))
    # Cordoned on both sides of the read, and not part-way through: no step owns the cordon.
    unowned = (cordoned_before & cordoned(cluster)) - {name for name, state in states.items() if state in IN_FLIGHT}
    assert not unowned, f"cordoned without an owning step: {unowned}, nodes {states}\n{trial.header()}\n{story(trial)}"
    served = ready_replicas(cluster)
    replicas = dict(Deployment.objects.values_list("pk", "replicas"))
    short = {pk: (served.get(pk, 0), want) for pk, want in replicas.items() if served.get(pk, 0) < want}
    assert not short, f"a deployment had fewer ready replicas than it asks for: {short}\n{trial.header()}\n{story(trial)}"
    for pdb in cluster.list_pdbs():
        status = cluster.pdb_status(pdb.namespace, pdb.name)
        assert status["currentHealthy"] >= status["desiredHealthy"], (
            f"PodDisruptionBudget {pdb.key} broken: {status}\n{trial.header()}\n{story(trial)}")
    evicting = set(Move.objects.filter(status=MoveStatus.ORIGINAL_EVICTING).values_list("from_node", flat=True))
    assert len(evicting) <= concurrent_budget(), f"over the disruption budget: {evicting}\n{trial.header()}"
    trial.samples += 1


def cordoned(cluster: SimulatedCluster) -> set[str]:
    return {node.name for node in cluster.list_nodes() if node.unschedulable}


def story(trial: Trial) -> str:
    """The audit log of the trial and the cluster's pods, for a failure's message."""
    events = [f"{e.at:%H:%M:%S.%f} {e.verb} {e.object_repr}: {e.reason}" for e in AuditEvent.objects.order_by("at", "pk")]
    pods = [f"{p.key} on {p.node_name or '-'} ready={p.ready}" for p in trial.cluster.list_gpu_pods()]
    return "\n".join([*events[-150:], *pods])


def check_nothing_cordoned(cluster: SimulatedCluster) -> None:
    """No rollout is active any more, so no node may be cordoned or tainted for one."""
    left = [n.name for n in cluster.list_nodes() if n.unschedulable or n.taints]
    assert left == [], f"cordoned without an owning rollout: {left}"
    assert list(Node.objects.filter(cordoned=True).values_list("name", flat=True)) == []


def check_configs(cluster: SimulatedCluster) -> None:
    """The first rollout's nodes at MPS R=4, proven; every other node at its first config (the
    second rollout's rolled back), proven."""
    for node in cluster.list_nodes():
        want = MPS_4 if node.name in SUCCEEDS else LAYOUT[node.name]
        assert node.labels[LABEL_DEVICE_PLUGIN_CONFIG] == render_device_plugin_config(want)[0], node.name
        assert applied_config(Node.objects.get(name=node.name)) == want, node.name


def check_every_replica_once(cluster: SimulatedCluster, report: str) -> None:
    """Each deployment: its replicas ready, one active placement per replica, and nothing else
    holding capacity or running for it (a copy placed by a killed tick and never noted)."""
    active = Placement.objects.filter(status__in=("reserved", "binding", "running"))
    for deployment in Deployment.objects.all():
        mine = active.filter(deployment=deployment)
        assert mine.count() == deployment.replicas, f"{deployment}: {list(mine.values('node__name', 'status'))}\n{report}"
    want = {d.pk: d.replicas for d in Deployment.objects.all()}
    assert ready_replicas(cluster) == want, report
    pods = Counter(int(p.labels[LABEL_DEPLOYMENT]) for p in cluster.list_gpu_pods() if LABEL_DEPLOYMENT in p.labels)
    assert pods == Counter(want), f"a pod no placement accounts for: {pods}\n{report}"
    workloads = sorted(o["metadata"]["name"] for o in cluster.list_objects("Deployment"))
    assert workloads == sorted(set(active.values_list("workload_name", flat=True))), f"a workload left behind\n{report}"
    check_invariants()
