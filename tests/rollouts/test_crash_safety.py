"""Must-show 3: a worker SIGKILLed at a random step of a rollout; the rollout resumes and finishes, and
the cluster is left consistent (PostgreSQL and Redis, real worker processes).

Each run seeds a three-node simulated cluster (one-GPU H100 nodes at MPS R=2, three running
one-replica deployments), starts a rolling update of two of its nodes to MPS R=4 (max
unavailable 1), and plays beat: a reconcile tick every ``TICK_S`` to a real
``celery -A gpuplane worker`` (two prefork children, so two ticks may run at once). At a point
drawn from the run's seed (a target node, one of its steps, a delay into that step) the test
SIGKILLs the worker's whole process group; a fresh worker process takes over (a standby, booted
beforehand so that no run waits seconds for one, see tests/rollouts/crash.py) and another is
started. While it runs, every deployment keeps a ready replica and no node is cordoned unless
its rollout node is part-way through its steps (the owning update). Then:

- the rollout resumes and ends succeeded, every node proven at the new config;
- no node is cordoned (none may be without an active rollout owning it), in the cluster or the
  inventory;
- every node's config label and applied config are the new config's when its rollout node
  succeeded, the old one's when it was never a target;
- every deployment has exactly its replicas ready, one active placement each, and no pod,
  workload or charged partition that no active placement accounts for (no duplicate left by the
  killed tick); and no deployment was ever without a ready replica while the test watched.

The database is the test database, committed (a transactional test), which the worker processes
open through the same server; the cluster is the simulated cluster's state file, shared by file.
"""
from __future__ import annotations

import os
import random
import time
from collections import Counter
from dataclasses import dataclass

import pytest
from django.conf import settings
from django.db import connection

from lifecycle.models import AuditEvent
from nodes.cluster.sim import SimulatedCluster
from nodes.contract import LABEL_DEPLOYMENT, LABEL_DEVICE_PLUGIN_CONFIG, LABEL_MIG_CONFIG
from nodes.demo import H100_PRODUCT
from nodes.inventory.sync import sync_inventory
from nodes.models import Node
from nodes.node_configs import applied_config
from nodes.sharing.node_config import mig_config_name, render_device_plugin_config
from rollouts.choices import NodeState, RolloutStatus
from rollouts.control import act
from rollouts.creating import create_rollout, validate_request
from rollouts.models import RollingUpdate, RolloutNode
from rollouts.steps import IN_FLIGHT
from scheduler import services
from scheduler.models import Deployment, Placement
from scheduler.services import DeploySpec
from scheduler.services.watching import watch_deployment
from tests.redis_scratch import delete_prefixed_keys, scratch_prefix
from tests.rollouts.crash import Workers
from tests.rollouts.simulated import H100_MIB, MPS_2, MPS_4, ready_replicas
from tests.scheduler.inventory import check_invariants

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.redis,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql",
                       reason="needs PostgreSQL: worker processes share the test database only through a server"),
    pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="REDIS_URL is not set: the workers need a Redis broker"),
]

RUNS = 20
NODES = 3
DEPLOYMENTS = 3
TARGETS = ("gpu-1", "gpu-2")
KILLED_STEPS = (NodeState.PENDING, NodeState.PREWARMING, NodeState.DRAINING, NodeState.RECONFIGURING,
                NodeState.VERIFYING)
ORDER: dict[str, int] = {str(state): number for number, state in enumerate((*KILLED_STEPS, NodeState.SUCCEEDED))}
TICK_S = 0.2
POLL_S = 0.05
RUN_TIMEOUT_S = 90


@dataclass(frozen=True)
class KillPoint:
    """Where a run kills the worker: ``delay_s`` after ``node`` was first seen in ``step``."""

    node: str
    step: str
    delay_s: float

    @classmethod
    def draw(cls, seed: int) -> KillPoint:
        rng = random.Random(seed)
        return cls(rng.choice(TARGETS), rng.choice(KILLED_STEPS), round(rng.uniform(0.0, 0.3), 3))

    def reached(self, states: dict[str, str]) -> bool:
        """``node`` is in ``step`` or past it (a step shorter than a poll is caught just after)."""
        return ORDER.get(states.get(self.node, ""), -1) >= ORDER[self.step]


@pytest.fixture(scope="module")
def workers(tmp_path_factory, django_db_setup):
    folder = tmp_path_factory.mktemp("crash")
    redis_url = os.environ["REDIS_URL"]
    prefix = scratch_prefix()
    pool = Workers(folder, redis_url=redis_url, prefix=prefix, state_path=str(folder / "cluster.json"))
    try:
        yield pool
    finally:
        pool.stop()
        delete_prefixed_keys(redis_url, prefix)


def seeded_cluster(state_path: str) -> SimulatedCluster:
    """Three MPS R=2 nodes with three running deployments, as if up for a minute already.

    The nodes carry the GPU operator's ``mig.config=all-disabled``, which an MPS update keeps:
    the MIG manager has nothing to do (its own tests cover it), so a step waits only on pods."""
    SimulatedCluster(state_path).reset()
    # A clock a minute behind: pods bound then are Ready by now, the MIG manager long settled.
    settled = SimulatedCluster(state_path, clock=lambda: time.time() - 60, mig_reconfigure_s=0, plugin_restart_s=0)
    for config in (MPS_2, MPS_4):
        settled.set_device_plugin_config(*render_device_plugin_config(config))
    labels = {LABEL_DEVICE_PLUGIN_CONFIG: render_device_plugin_config(MPS_2)[0], LABEL_MIG_CONFIG: mig_config_name(MPS_2)}
    for number in range(1, NODES + 1):
        settled.add_gpu_node(f"gpu-{number}", product=H100_PRODUCT, gpu_count=1, gpu_memory_mib=H100_MIB,
                             labels=labels)
    sync_inventory(settled)
    for number in range(1, DEPLOYMENTS + 1):
        services.deploy(DeploySpec(name=f"svc-{number}", model="m", memory_gb=8, sharing="mps", share_percent=25),
                        cluster=settled)
    cluster = SimulatedCluster(state_path)
    sync_inventory(cluster)
    for deployment in Deployment.objects.all():
        assert watch_deployment(deployment.pk, cluster=cluster) == "running"
    return cluster


@pytest.mark.parametrize("seed", range(RUNS))
def test_a_worker_killed_at_a_random_step_leaves_every_update_to_finish_and_the_cluster_consistent(
        seed, workers, settings):
    settings.GPUPLANE_SIMULATED_STATE = workers.env["GPUPLANE_SIMULATED_STATE"]
    cluster = seeded_cluster(settings.GPUPLANE_SIMULATED_STATE)
    request = validate_request(f"crash-{seed}", list(TARGETS), MPS_4.as_dict(), max_unavailable=1)
    rollout = act(create_rollout(request), "start", cluster=cluster)
    kill_point = KillPoint.draw(seed)

    killed_in, served_samples = drive(workers, cluster, rollout, kill_point)

    report = f"{kill_point}, killed with the nodes {killed_in}\n{workers.log_text()}"
    rollout.refresh_from_db()
    steps = dict(RolloutNode.objects.filter(rollout=rollout).values_list("node_name", "state"))
    assert rollout.status == RolloutStatus.SUCCEEDED, f"{rollout.status}: {rollout.message}; {steps}\n{report}\n{story()}"
    assert steps == dict.fromkeys(TARGETS, NodeState.SUCCEEDED), report
    assert served_samples, report
    check_nothing_cordoned(cluster)
    check_configs(cluster, steps)
    check_every_replica_once(cluster)
    # One line a run (pytest -s or -rA shows them): where the kill landed.
    print(f"run {seed}: {kill_point}, killed with the nodes {killed_in}, then {rollout.status}")


def drive(workers: Workers, cluster: SimulatedCluster, rollout: RollingUpdate,
          kill_point: KillPoint) -> tuple[dict[str, str], int]:
    """Play beat until the rollout leaves running, killing the worker at ``kill_point``, and check
    the invariants that hold throughout; the node states it was killed in, and how many samples
    were taken."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    next_tick = 0.0
    due: float | None = None
    killed_in: dict[str, str] = {}
    samples = 0
    while True:
        now = time.monotonic()
        assert now < deadline, f"still {rollout.status} after {RUN_TIMEOUT_S} s\n{workers.log_text()}"
        if now >= next_tick:
            workers.tick(expires_s=1.0)
            next_tick = now + TICK_S
        cordoned_before = cordoned(cluster)
        rollout.refresh_from_db(fields=["status"])
        states = dict(RolloutNode.objects.filter(rollout=rollout).values_list("node_name", "state"))
        # Cordoned on both sides of the read, and not part-way through: no step owns the cordon.
        unowned = (cordoned_before & cordoned(cluster)) - {name for name, state in states.items() if state in IN_FLIGHT}
        assert not unowned, f"cordoned without an owning update: {unowned}, nodes {states}\n{story()}"
        served = ready_replicas(cluster)
        samples += 1
        assert min(served.values()) >= 1, f"a deployment had no ready replica: {served}, nodes {states}\n{story()}"
        if not killed_in:
            if due is None and kill_point.reached(states):
                due = now + kill_point.delay_s
            if due is not None and now >= due:
                assert rollout.status == RolloutStatus.RUNNING, f"ended before the kill at {kill_point}: {states}"
                workers.kill()
                killed_in = states
        elif rollout.status != RolloutStatus.RUNNING:
            return killed_in, samples
        time.sleep(POLL_S)


def cordoned(cluster: SimulatedCluster) -> set[str]:
    return {node.name for node in cluster.list_nodes() if node.unschedulable}


def story() -> str:
    """The audit log of the run and the cluster's pods, for a failure's message."""
    events = [f"{e.at:%H:%M:%S.%f} {e.verb} {e.object_repr}: {e.reason}" for e in AuditEvent.objects.order_by("at", "pk")]
    pods = [f"{p.key} on {p.node_name or '-'} ready={p.ready}" for p in SimulatedCluster(
        settings.GPUPLANE_SIMULATED_STATE).list_gpu_pods()]
    return "\n".join([*events, *pods])


def check_nothing_cordoned(cluster: SimulatedCluster) -> None:
    """No rollout is active any more, so no node may be cordoned or tainted for one."""
    assert not RollingUpdate.objects.filter(status__in=(RolloutStatus.RUNNING, RolloutStatus.PAUSED)).exists()
    left = [n.name for n in cluster.list_nodes() if n.unschedulable or n.taints]
    assert left == [], f"cordoned without an owning rollout: {left}"
    assert list(Node.objects.filter(cordoned=True).values_list("name", flat=True)) == []


def check_configs(cluster: SimulatedCluster, steps: dict[str, str]) -> None:
    """A node's label and proven config are the new config's iff its rollout node succeeded."""
    new_label, old_label = render_device_plugin_config(MPS_4)[0], render_device_plugin_config(MPS_2)[0]
    for node in cluster.list_nodes():
        changed = steps.get(node.name) == NodeState.SUCCEEDED
        assert node.labels[LABEL_DEVICE_PLUGIN_CONFIG] == (new_label if changed else old_label), node.name
        assert applied_config(Node.objects.get(name=node.name)) == (MPS_4 if changed else MPS_2), node.name


def check_every_replica_once(cluster: SimulatedCluster) -> None:
    """Each deployment: its replicas ready, one active placement per replica, and nothing else
    holding capacity or running for it (a copy placed by the killed tick and never noted)."""
    active = Placement.objects.filter(status__in=("reserved", "binding", "running"))
    for deployment in Deployment.objects.all():
        mine = active.filter(deployment=deployment)
        assert mine.count() == deployment.replicas, f"{deployment}: {list(mine.values('node__name', 'status'))}"
    assert ready_replicas(cluster) == {d.pk: d.replicas for d in Deployment.objects.all()}
    pods = Counter(int(p.labels[LABEL_DEPLOYMENT]) for p in cluster.list_gpu_pods() if LABEL_DEPLOYMENT in p.labels)
    assert pods == Counter({d.pk: d.replicas for d in Deployment.objects.all()}), "a pod no placement accounts for"
    workloads = sorted(o["metadata"]["name"] for o in cluster.list_objects("Deployment"))
    assert workloads == sorted(set(active.values_list("workload_name", flat=True))), "a workload left behind"
    check_invariants()
