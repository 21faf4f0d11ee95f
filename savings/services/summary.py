"""The savings as GET /api/v1/savings/ answers them, and as every page shows them.

One function rounds every figure, once: the API, the savings page and the overview's block all
render this dict, so each number shown equals the API's. The over-time figures run over the
24 hours up to the latest sample (each sample counting until the next), so they change when a
sample is recorded, not from one request to the next.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings

from savings.models import SavingsSample
from savings.services.current import current_savings
from savings.services.history import saved_over
from savings.services.not_running import not_running
from scheduler.core.savings import BASELINE

WINDOW = timedelta(hours=24)


def savings_summary() -> dict[str, Any]:
    """The savings now (scheduler.core.savings over the cluster) and over the last 24 h of samples."""
    savings = current_savings()
    latest: datetime | None = SavingsSample.objects.order_by("-ts").values_list("ts", flat=True).first()
    over_24h = saved_over(WINDOW, now=latest) if latest is not None else None
    return {
        "baseline": BASELINE,
        "baseline_gpus": savings.baseline_gpus,
        "allocated_gpu_equivalents": round(float(savings.allocated_gpu_equivalents), 2),
        "gpus_used": savings.gpus_used,
        "gpus_saved": savings.gpus_saved,
        "saved_percent": round(savings.saved_percent, 1),
        "usd_per_hour": round(savings.usd_per_hour, 2),
        "kwh_per_hour": round(savings.kwh_per_hour, 3),
        "gpu_hours_saved_24h": round(over_24h.gpu_hours, 2) if over_24h else 0.0,
        "usd_saved_24h": round(over_24h.usd, 2) if over_24h else 0.0,
        "kwh_saved_24h": round(over_24h.kwh, 3) if over_24h else 0.0,
        "not_running": not_running().as_dict(),
        "sampled_at": latest,
        "sample_interval_s": settings.SAVINGS_SAMPLE_INTERVAL_S,
        "by_model": [
            {
                "gpu_model": model.gpu_model,
                "baseline_gpus": model.baseline_gpus,
                "gpus_used": model.gpus_used,
                "gpus_saved": model.gpus_saved,
                "usd_per_gpu_hour": model.usd_per_gpu_hour,
                "power_w": model.power_w,
                "usd_per_hour": round(model.usd_per_hour, 2),
                "kwh_per_hour": round(model.kwh_per_hour, 3),
            }
            for model in savings.by_model
        ],
    }


def recent_samples() -> list[dict[str, Any]]:
    """The samples of the 24 h up to the latest one, oldest first, for the page's charts."""
    latest = SavingsSample.objects.order_by("-ts").values_list("ts", flat=True).first()
    if latest is None:
        return []
    rows = SavingsSample.objects.filter(ts__gte=latest - WINDOW).order_by("ts")
    return [
        {"ts": s.ts.isoformat(), "baseline_gpus": s.baseline_gpus, "gpus_used": s.gpus_used, "gpus_saved": s.gpus_saved,
         "usd_per_hour": s.usd_per_hour, "kwh_per_hour": s.kwh_per_hour}
        for s in rows
    ]
