"""Savings over time: record a sample of the savings now, expire old ones, and sum a window.

GPU-hours, dollars and kWh saved are integrated from the samples as a step function
(scheduler.core.savings.integrate_samples); a sample holds for at most two sampling intervals,
so time the sampler was down claims nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from savings.models import SavingsSample
from savings.services.current import current_savings
from scheduler.core.savings import Integrated, Sample, integrate_samples


@dataclass(frozen=True)
class RecordReport:
    """What one recording did: the sample stored (None when one with that time existed) and
    how many expired samples were deleted."""

    sample_id: int | None
    expired: int

    def as_dict(self) -> dict[str, int | None]:
        return {"sample_id": self.sample_id, "expired": self.expired}


def record_sample(now: datetime | None = None) -> RecordReport:
    """Store the savings now as a SavingsSample at `now` (default: the current time) and delete
    samples older than settings.SAVINGS_RETENTION_D days."""
    now = now or timezone.now()
    savings = current_savings()
    sample_id: int | None
    try:
        with transaction.atomic():
            sample_id = SavingsSample.objects.create(
                ts=now, baseline_gpus=savings.baseline_gpus, gpus_used=savings.gpus_used,
                gpus_saved=savings.gpus_saved, usd_per_hour=savings.usd_per_hour, kwh_per_hour=savings.kwh_per_hour,
            ).pk
    except IntegrityError:  # a re-delivered message for the same instant: stored once
        sample_id = None
    expired, _ = SavingsSample.objects.filter(ts__lt=now - timedelta(days=settings.SAVINGS_RETENTION_D)).delete()
    return RecordReport(sample_id, expired)


def max_hold_s() -> float:
    """How long one sample's rates count at most: two sampling intervals."""
    return 2.0 * settings.SAVINGS_SAMPLE_INTERVAL_S


def samples_since(start: datetime) -> list[SavingsSample]:
    """The samples from `start` on, and the one before it whose hold may reach into the window."""
    earlier = SavingsSample.objects.filter(ts__lt=start, ts__gte=start - timedelta(seconds=max_hold_s())).order_by("-ts")[:1]
    return [*reversed(earlier), *SavingsSample.objects.filter(ts__gte=start).order_by("ts")]


def saved_over(window: timedelta, now: datetime | None = None) -> Integrated:
    """GPU-hours, $ and kWh saved over the `window` that ends at `now` (default: the current time)."""
    end = now or timezone.now()
    start = end - window
    samples = [Sample(s.ts, s.gpus_saved, s.usd_per_hour, s.kwh_per_hour) for s in samples_since(start)]
    return integrate_samples(samples, start, end, max_hold_s())
