"""A pending rollout's start deadline (issue 18: one never started held its nodes forever).

Rollouts already pending get one counted from their creation, so they expire too.
"""
from datetime import timedelta

from django.conf import settings
from django.db import migrations, models


def deadline_for_pending(apps, schema_editor):
    RollingUpdate = apps.get_model("rollouts", "RollingUpdate")
    deadline = timedelta(seconds=settings.ROLLOUT_START_DEADLINE_S)
    for rollout in RollingUpdate.objects.filter(status="pending", start_by__isnull=True).only("pk", "created_at"):
        RollingUpdate.objects.filter(pk=rollout.pk).update(start_by=rollout.created_at + deadline)


class Migration(migrations.Migration):

    dependencies = [
        ("rollouts", "0003_maintenance_window_move_back"),
    ]

    operations = [
        migrations.AddField(
            model_name="rollingupdate",
            name="start_by",
            field=models.DateTimeField(
                blank=True, null=True,
                help_text="A pending rollout not started by then expires and releases its nodes "
                          "(GPUPLANE_ROLLOUT_START_DEADLINE_S)"),
        ),
        migrations.RunPython(deadline_for_pending, migrations.RunPython.noop),
    ]
