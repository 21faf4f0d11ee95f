"""The hold of a partition moves to the scheduler side: one PartitionHold row per held partition.

Until now ``nodes.Partition.placement`` pointed at ``scheduler.Placement``, so the nodes app named
a scheduler model. This migration creates ``PartitionHold`` and copies every existing hold into
it; ``nodes.0005_partition_drop_placement`` then drops the old column. Reversible: going back
copies the holds into the re-added column.
"""
import django.db.models.deletion
from django.db import migrations, models

BATCH = 1000


def copy_holds_forward(apps, schema_editor):
    Partition = apps.get_model("nodes", "Partition")
    PartitionHold = apps.get_model("scheduler", "PartitionHold")
    held = Partition.objects.filter(placement__isnull=False).order_by("pk").values_list("pk", "placement_id")
    rows = [PartitionHold(partition_id=pk, placement_id=placement_id) for pk, placement_id in held.iterator()]
    PartitionHold.objects.bulk_create(rows, batch_size=BATCH)


def copy_holds_back(apps, schema_editor):
    Partition = apps.get_model("nodes", "Partition")
    PartitionHold = apps.get_model("scheduler", "PartitionHold")
    for partition_id, placement_id in PartitionHold.objects.values_list("partition_id", "placement_id").iterator():
        Partition.objects.filter(pk=partition_id).update(placement_id=placement_id)


class Migration(migrations.Migration):

    dependencies = [
        ("nodes", "0004_vocabulary_choices"),
        ("scheduler", "0004_vocabulary_choices"),
    ]

    operations = [
        migrations.CreateModel(
            name="PartitionHold",
            fields=[
                ("partition", models.OneToOneField(
                    on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name="hold",
                    serialize=False, to="nodes.partition")),
                ("placement", models.ForeignKey(
                    on_delete=django.db.models.deletion.CASCADE, related_name="holds", to="scheduler.placement")),
            ],
            options={"ordering": ["partition_id"]},
        ),
        migrations.RunPython(copy_holds_forward, copy_holds_back),
    ]
