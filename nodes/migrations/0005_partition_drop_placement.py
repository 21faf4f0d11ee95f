"""Drop ``Partition.placement``: holds now live in ``scheduler.PartitionHold`` (copied there first).

This is the last nodes migration that depends on a scheduler one: it must run after the copy.
"""
from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("nodes", "0004_vocabulary_choices"),
        ("scheduler", "0005_partition_hold"),
    ]

    operations = [
        migrations.RemoveField(model_name="partition", name="placement"),
    ]
