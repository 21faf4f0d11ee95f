"""Node.desired_config becomes the sharing config value {mode, replicas, mig_layout} (issue 9).

Nothing could set the old text column (a config name), so no value is carried over: the column is
replaced rather than converted, which also avoids casting '' to JSON on PostgreSQL.
"""
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("nodes", "0005_partition_drop_placement"),
    ]

    operations = [
        migrations.RemoveField(model_name="node", name="desired_config"),
        migrations.AddField(
            model_name="node",
            name="desired_config",
            field=models.JSONField(
                blank=True,
                null=True,
                help_text="Sharing config gpuplane wants on the node: {mode, replicas, mig_layout}; null: none",
            ),
        ),
        migrations.AlterField(
            model_name="node",
            name="applied_config",
            field=models.CharField(
                blank=True,
                max_length=128,
                help_text="Name of the device-plugin (or, on MIG nodes, mig-parted) config now on the node",
            ),
        ),
    ]
