"""`manage.py load_fleet`: N simulated nodes in the simulated cluster and the inventory, consistent with each other."""
from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from nodes.cluster.backends import get_cluster
from nodes.fleet_loader import model_sequence, parse_models
from nodes.inventory.sync import sync_inventory
from nodes.models import GPU, Node, Partition

pytestmark = pytest.mark.django_db


def load(*args: str) -> str:
    out = StringIO()
    call_command("load_fleet", *args, stdout=out)
    return out.getvalue()


def test_it_loads_n_nodes_of_the_mix_into_both_and_a_later_sync_changes_nothing():
    out = load("6", "--gpus-per-node", "4", "--models", "H100-SXM5-80GB=2,A100-SXM4-40GB=1")

    assert "nodes: 6 (A100-SXM4-40GB 2, H100-SXM5-80GB 4)" in out
    assert GPU.objects.count() == 24
    assert Partition.objects.filter(kind="exclusive", pod="").count() == 24
    cluster_nodes = get_cluster().list_nodes()
    assert sorted(n.name for n in cluster_nodes) == sorted(Node.objects.values_list("name", flat=True))
    assert {d.uuid for n in cluster_nodes for d in n.gpus} == set(GPU.objects.values_list("uuid", flat=True))
    assert set(GPU.objects.filter(model="A100-SXM4-40GB").values_list("memory_mib", flat=True)) == {40960}

    report = sync_inventory()
    assert report.created == report.updated == report.deleted == {"nodes": 0, "gpus": 0, "partitions": 0}
    assert report.mode == "watch" and report.events == 0  # the loader's sync left the watch at the cluster's version


def test_it_refuses_a_loaded_cluster_unless_replace():
    load("2")
    with pytest.raises(CommandError, match="--replace"):
        load("3")
    load("3", "--replace", "--gpus-per-node", "2")
    assert Node.objects.count() == 3 and GPU.objects.count() == 6
    assert len(get_cluster().list_nodes()) == 3


def test_it_refuses_a_real_cluster(settings):
    settings.GPUPLANE_CLUSTER = "kubernetes"
    with pytest.raises(CommandError, match="kubernetes"):
        load("2")
    assert not Node.objects.exists()


@pytest.mark.parametrize("models", ["B300=1", "H100-SXM5-80GB=0", "H100-SXM5-80GB=x", ","])
def test_a_bad_model_mix_is_refused_with_nothing_loaded(models):
    with pytest.raises(CommandError):
        load("2", "--models", models)
    assert not Node.objects.exists()
    assert get_cluster().is_empty()


def test_weights_are_spread_evenly_over_the_fleet():
    sequence = model_sequence(parse_models("H100-SXM5-80GB=3,L4=1"), 8)
    assert sequence.count("H100-SXM5-80GB") == 6 and sequence.count("L4") == 2
    # Any prefix of four has the 3:1 mix, not the first six nodes all H100.
    assert sequence[:4].count("L4") == 1 and sequence[4:].count("L4") == 1
