"""nodes.vocabulary: one enum per word, its labels, and the Django choices derived from it."""
from __future__ import annotations

import pickle

import pytest

from nodes.models import Node, Partition
from nodes.vocabulary import LabelledStrEnum, PartitionKind, SharingMode
from scheduler.core import Priority, SharingRequest, WorkloadType
from scheduler.models import Deployment


def test_it_gives_values_and_labels_in_declaration_order():
    assert SharingMode.choices() == [
        ("exclusive", "Exclusive (whole GPU)"),
        ("mig", "MIG"),
        ("mps", "MPS (uniform, device plugin)"),
        ("mps-weighted", "MPS (weighted, gpuplane daemon)"),
        ("timeslice", "Time-slicing"),
    ]
    assert PartitionKind.values() == ["exclusive", "mig", "mps", "mps-weighted", "timeslice"]
    assert PartitionKind.MIG.label == "MIG instance"


def test_a_member_is_its_value():
    assert SharingMode("mps-weighted") is SharingMode.MPS_WEIGHTED
    assert SharingMode.MIG == "mig" and str(SharingMode.MIG) == "mig" and f"{SharingMode.MIG}" == "mig"
    assert {"mig": 1}[SharingMode.MIG] == 1
    assert pickle.loads(pickle.dumps(Priority.HIGH)) is Priority.HIGH


def test_a_member_without_a_label_is_refused():
    with pytest.raises(TypeError, match="needs a label"):
        LabelledStrEnum("Unlabelled", [("X", "x")])


@pytest.mark.parametrize(
    ("model", "field", "vocabulary"),
    [
        (Node, "sharing_mode", SharingMode),
        (Partition, "kind", PartitionKind),
        (Deployment, "priority", Priority),
        (Deployment, "sharing", SharingRequest),
        (Deployment, "workload_type", WorkloadType),
    ],
)
def test_model_fields_take_their_choices_from_the_vocabulary(model, field, vocabulary):
    assert list(model._meta.get_field(field).choices) == vocabulary.choices()


def test_display_names_come_from_the_labels():
    node = Node(name="n", sharing_mode=SharingMode.MPS_WEIGHTED)
    deployment = Deployment(priority="low", sharing="auto", workload_type="batch")
    assert node.get_sharing_mode_display() == "MPS (weighted, gpuplane daemon)"
    shown = (deployment.get_priority_display(), deployment.get_sharing_display(), deployment.get_workload_type_display())
    assert shown == ("Low", "Automatic", "Batch")
