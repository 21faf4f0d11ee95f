"""The beat task records one savings sample per interval and expires old ones."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from savings.models import SavingsSample
from savings.services.history import record_sample
from savings.tasks import record_savings_task
from tests.savings.cluster import EXPECTED, build_cluster

pytestmark = pytest.mark.django_db


def test_it_records_the_savings_now(settings):
    build_cluster()
    result = record_savings_task()
    sample = SavingsSample.objects.get()
    assert result["sample_id"] == sample.pk
    assert (sample.baseline_gpus, sample.gpus_used, sample.gpus_saved) == (9, 5, 4)
    assert (round(sample.usd_per_hour, 2), round(sample.kwh_per_hour, 3)) == (EXPECTED["usd_per_hour"], EXPECTED["kwh_per_hour"])


def test_a_second_run_in_the_same_interval_records_nothing(monkeypatch):
    # Both runs in one slot, whatever the clock does between them.
    monkeypatch.setattr("savings.tasks.interval_slot", lambda interval_s: 7)
    record_savings_task()
    assert record_savings_task()["skipped"] is True
    assert SavingsSample.objects.count() == 1


def test_samples_older_than_the_retention_are_deleted(settings):
    settings.SAVINGS_RETENTION_D = 2
    now = timezone.now()
    old = SavingsSample.objects.create(ts=now - timedelta(days=3), baseline_gpus=1, gpus_used=1, gpus_saved=0,
                                       usd_per_hour=0, kwh_per_hour=0)
    kept = SavingsSample.objects.create(ts=now - timedelta(days=1), baseline_gpus=1, gpus_used=1, gpus_saved=0,
                                        usd_per_hour=0, kwh_per_hour=0)
    report = record_sample(now)
    assert report.expired == 1
    assert set(SavingsSample.objects.values_list("pk", flat=True)) == {kept.pk, report.sample_id}
    assert not SavingsSample.objects.filter(pk=old.pk).exists()


def test_beat_sends_it_every_interval():
    from gpuplane import settings as project_settings

    entry = project_settings.CELERY_BEAT_SCHEDULE["record-savings"]
    assert entry["task"] == record_savings_task.name
    assert entry["schedule"] == float(project_settings.SAVINGS_SAMPLE_INTERVAL_S) == 300.0


def test_the_admin_lists_samples_read_only(admin_user, client):
    SavingsSample.objects.create(ts=timezone.now(), baseline_gpus=9, gpus_used=5, gpus_saved=4, usd_per_hour=23.5, kwh_per_hour=2.5)
    admin_user.is_staff = admin_user.is_superuser = True
    admin_user.save()
    client.force_login(admin_user)
    response = client.get("/admin/savings/savingssample/")
    assert response.status_code == 200
    assert "23.5" in response.content.decode()
    assert client.get("/admin/savings/savingssample/add/").status_code == 403
