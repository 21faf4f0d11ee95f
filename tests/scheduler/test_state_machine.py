"""Property test (Hypothesis state machine): deploy, delete, adding and removing one replica, bind
failure and cordon in any order keep the capacity accounting sound after every step (runs on
SQLite and PostgreSQL).

The cluster has one node of each sharing mode; after every step, ``check_invariants`` demands
0 <= allocated <= capacity on every GPU, counters equal to the sum over occupied partitions, and
no partition held twice. A failed step (nothing fits, the cluster refuses) must leave capacity
exactly as it was, and no replica may land on a cordoned node. A deleted (or failed) deployment
holds nothing.
"""
from __future__ import annotations

import pytest
from django.conf import settings as django_settings
from django.core.exceptions import ValidationError
from django.db import transaction
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from nodes.cluster.base import ClusterError, WorkloadSpec
from nodes.cluster.sim import SimulatedCluster
from nodes.models import Node
from nodes.vocabulary import PartitionKind
from scheduler import services
from scheduler.choices import DeploymentStatus
from scheduler.models import Deployment, PartitionHold
from scheduler.services import DeployFailed, DeploySpec, NoCapacity
from tests.nodes.factories import make_node, make_partition
from tests.scheduler.inventory import capacity_state, check_invariants

pytestmark = pytest.mark.django_db

A100 = "A100-SXM4-40GB"
A100_MIB = 40960
NODES = ("whole", "mps", "weighted", "slices", "mig")


def build_cluster() -> None:
    """One node per sharing mode, small enough that deploys run out of room within a run."""
    make_node("whole", gpu_count=3, labels={"kubernetes.io/hostname": "whole"})
    mps = make_node("mps", A100, 2, "mps", gpu_memory_mib=A100_MIB, partitions=False, sharing_replicas=2)
    for gpu in mps.gpus.all():
        for slot in range(2):
            make_partition(gpu, PartitionKind.MPS, slot, 500, A100_MIB // 2)
    make_node("weighted", A100, 2, "mps-weighted", gpu_memory_mib=A100_MIB, partitions=False, sharing_replicas=4)
    slices = make_node("slices", A100, 1, "timeslice", gpu_memory_mib=A100_MIB, partitions=False, sharing_replicas=2)
    for slot in range(2):
        make_partition(slices.gpus.get(), PartitionKind.TIMESLICE, slot, 500, A100_MIB)
    mig = make_node("mig", A100, 1, "mig", gpu_memory_mib=A100_MIB, partitions=False)
    gpu = mig.gpus.get()
    gpu.mig_enabled = True
    gpu.save(update_fields=["mig_enabled"])
    for slot, (profile, share, memory, start, size) in enumerate([
        ("3g.20gb", 428, 20480, 0, 4), ("2g.10gb", 285, 10240, 4, 2), ("1g.5gb", 142, 5120, 6, 1),
    ]):
        make_partition(gpu, PartitionKind.MIG, slot, share, memory, mig_profile=profile, mig_start=start,
                       mig_size=size)


class PlacementMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # Each example runs in its own savepoint, rolled back in teardown: a fresh cluster each time.
        self.atomic = transaction.atomic()
        self.atomic.__enter__()
        build_cluster()
        self.cluster = SimulatedCluster(django_settings.GPUPLANE_SIMULATED_STATE)
        self.cluster.reset()
        self.active: list[int] = []
        self.cordoned: set[str] = set()
        self.count = 0

    def teardown(self) -> None:
        transaction.set_rollback(True)
        self.atomic.__exit__(None, None, None)

    def _spec(self, memory_gb: float, gpu_count: int, sharing: str, replicas: int) -> DeploySpec:
        self.count += 1
        return DeploySpec(name=f"d{self.count}", model="m", memory_gb=memory_gb, gpu_count=gpu_count,
                          sharing=sharing, replicas=replicas, allow_default_scheduler=False)

    @rule(
        memory_gb=st.sampled_from([1, 3, 6, 12, 24, 40, 70]),
        gpu_count=st.sampled_from([1, 1, 1, 2]),
        sharing=st.sampled_from(["auto", "exclusive", "mps", "mps-weighted", "timeslice", "mig"]),
        replicas=st.integers(min_value=1, max_value=2),
    )
    def deploy(self, memory_gb: float, gpu_count: int, sharing: str, replicas: int) -> None:
        before = capacity_state()
        try:
            deployment = services.deploy(self._spec(memory_gb, gpu_count, sharing, replicas), cluster=self.cluster)
        except (NoCapacity, ValidationError) as error:
            event(f"deploy refused: {type(error).__name__}")
            assert capacity_state() == before
            return
        event(f"deploy placed: {deployment.placements.first().sharing or 'default'}")
        assert deployment.status == DeploymentStatus.PLACED
        nodes = set(deployment.placements.values_list("node__name", flat=True))
        assert not nodes & self.cordoned, f"placed on cordoned {nodes & self.cordoned}"
        self.active.append(deployment.pk)

    @precondition(lambda self: self.active)
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        pk = data.draw(st.sampled_from(self.active))
        self.active.remove(pk)
        services.delete_deployment(Deployment.objects.get(pk=pk), cluster=self.cluster)
        assert Deployment.objects.get(pk=pk).status == DeploymentStatus.DELETED

    @precondition(lambda self: self.active)
    @rule(data=st.data())
    def add_replica(self, data: st.DataObject) -> None:
        deployment = Deployment.objects.get(pk=data.draw(st.sampled_from(self.active)))
        before = capacity_state()
        index = services.next_replica_index(deployment)
        try:
            (placement,) = services.place_replicas(deployment, [index], cluster=self.cluster)
        except NoCapacity:
            event("add replica refused")
            assert capacity_state() == before
            return
        event(f"replica added: {placement.sharing or 'default'}")
        assert placement.replica_index == index
        assert placement.node is None or placement.node.name not in self.cordoned
        assert Deployment.objects.get(pk=deployment.pk).status == DeploymentStatus.PLACED

    @precondition(lambda self: self.active)
    @rule(data=st.data())
    def remove_replica(self, data: st.DataObject) -> None:
        deployment = Deployment.objects.get(pk=data.draw(st.sampled_from(self.active)))
        active = list(deployment.placements.filter(status__in=("reserved", "binding", "running"))
                      .values_list("replica_index", flat=True))
        if len(active) < 2:  # keep one: a deployment without replicas is a delete
            return
        index = data.draw(st.sampled_from(active))
        assert services.release_replica(deployment, index, cluster=self.cluster)
        assert not PartitionHold.objects.filter(placement__deployment=deployment,
                                                placement__replica_index=index).exists()
        assert not services.release_replica(deployment, index, cluster=self.cluster)  # idempotent

    @rule(memory_gb=st.sampled_from([3, 12, 40]), replicas=st.integers(min_value=1, max_value=2))
    def bind_failure(self, memory_gb: float, replicas: int) -> None:
        before = capacity_state()
        self.cluster.inject_fault("create_workload", "injected bind failure")
        try:
            services.deploy(self._spec(memory_gb, 1, "auto", replicas), cluster=self.cluster)
        except DeployFailed:
            event("bind failure after a reservation")
        except NoCapacity:
            # Nothing was placed, so the fault is still queued: use it up.
            with pytest.raises(ClusterError):
                self.cluster.create_workload(WorkloadSpec(namespace="default", name="probe", node_name=None,
                                                          image="busybox"))
        else:  # pragma: no cover - the fault must fire
            raise AssertionError("the injected bind failure did not fail the deploy")
        assert capacity_state() == before

    @rule(node=st.sampled_from(NODES))
    def cordon(self, node: str) -> None:
        Node.objects.filter(name=node).update(cordoned=True)
        self.cordoned.add(node)

    @invariant()
    def capacity_is_sound(self) -> None:
        check_invariants()

    @invariant()
    def a_deleted_deployment_holds_nothing(self) -> None:
        ended = PartitionHold.objects.filter(placement__deployment__status__in=(DeploymentStatus.DELETED,
                                                                                 DeploymentStatus.FAILED))
        assert not ended.exists(), f"ended deployments still hold {list(ended.values_list('partition_id', flat=True))}"


def test_placement_keeps_capacity_sound_under_any_sequence(tmp_path):
    run_state_machine_as_test(
        PlacementMachine,
        settings=settings(max_examples=30, stateful_step_count=20, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]),
    )
