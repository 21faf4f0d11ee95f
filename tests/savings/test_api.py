"""GET /api/v1/savings/: the savings now against whole GPUs, per model, and over 24 h of samples."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from savings.models import SavingsSample
from scheduler.core.savings import BASELINE
from tests.savings.cluster import A100, EXPECTED, H100, build_cluster

pytestmark = pytest.mark.django_db
URL = "/api/v1/savings/"


def test_it_answers_the_savings_of_the_cluster(viewer_api):
    build_cluster()
    body = viewer_api.get(URL).json()
    assert {key: body[key] for key in EXPECTED} == EXPECTED
    assert body["baseline"] == BASELINE
    by_model = {row["gpu_model"]: row for row in body["by_model"]}
    assert {m: (r["baseline_gpus"], r["gpus_used"], r["gpus_saved"]) for m, r in by_model.items()} == {
        H100: (7, 4, 3), A100: (2, 1, 1),
    }
    # The totals are the models' sums.
    assert sum(r["usd_per_hour"] for r in body["by_model"]) == body["usd_per_hour"]
    assert (by_model[H100]["usd_per_gpu_hour"], by_model[H100]["power_w"]) == (6.5, 700.0)
    # No sample recorded yet: nothing saved over time.
    assert (body["gpu_hours_saved_24h"], body["usd_saved_24h"], body["sampled_at"]) == (0.0, 0.0, None)


def test_a_price_setting_overrides_the_default(viewer_api, settings):
    build_cluster()
    settings.GPU_PRICE_USD_PER_HOUR = {H100: 2.0}
    # 3 H100s x 2.0 + 1 A100 x 4.0 (default) = 10.0 $/h.
    assert viewer_api.get(URL).json()["usd_per_hour"] == 10.0


def test_an_empty_cluster_saves_nothing(viewer_api):
    body = viewer_api.get(URL).json()
    assert (body["baseline_gpus"], body["gpus_saved"], body["saved_percent"], body["by_model"]) == (0, 0, 0.0, [])


def test_gpu_hours_are_integrated_over_the_24_hours_up_to_the_latest_sample(viewer_api):
    latest = timezone.now().replace(microsecond=0)
    # Every 5 minutes for the last hour: 4 GPUs saved at 23.5 $/h, then 2 at 10 $/h for the last 30 minutes.
    for minutes in range(60, -1, -5):
        gpus, usd = (4, 23.5) if minutes > 30 else (2, 10.0)
        SavingsSample.objects.create(ts=latest - timedelta(minutes=minutes), baseline_gpus=9, gpus_used=9 - gpus,
                                     gpus_saved=gpus, usd_per_hour=usd, kwh_per_hour=0.5 * gpus)
    # A sample older than the window and its hold: it adds nothing.
    SavingsSample.objects.create(ts=latest - timedelta(hours=30), baseline_gpus=9, gpus_used=0, gpus_saved=9,
                                 usd_per_hour=100.0, kwh_per_hour=9.0)
    body = viewer_api.get(URL).json()
    # Samples at -60..-35 hold 5 min each (6 x 4 GPUs x 1/12 h = 2.0), -30..-5 (6 x 2 x 1/12 = 1.0);
    # the latest holds nothing yet: 3.0 GPU-hours; $: 6 x 23.5/12 + 6 x 10/12 = 16.75.
    assert body["gpu_hours_saved_24h"] == 3.0
    assert body["usd_saved_24h"] == 16.75
    assert body["kwh_saved_24h"] == 1.5


def test_it_refuses_unknown_query_parameters(viewer_api):
    assert viewer_api.get(URL, {"range": "1h"}).status_code == 400


def test_it_needs_a_signed_in_user(api):
    assert api.get(URL).status_code in (401, 403)


def test_it_is_listed_in_the_api_root(viewer_api):
    assert viewer_api.get("/api/v1/").json()["savings"].endswith(URL)
