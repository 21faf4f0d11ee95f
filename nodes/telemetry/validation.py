"""The rules a telemetry batch must pass before anything is written, and how refusals are reported.

Validation errors (`TelemetryRejected.errors`) have the shape of DRF's, so the API returns them
as they are::

    {"samples": ["At most 5000 samples per batch; got 5001."]}               # the batch as a whole
    {"samples": {"3": {"ts": ["is 600 s in the future (allowed skew 120 s)"]},  # sample index 3
                 "7": {"gpu_uuid": ["Unknown GPU 'GPU-x'."]}}}

`samples` maps the (string) index of each bad sample to its fields' messages.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from nodes.models import GPUSample, Node
from nodes.telemetry.limits import gpu_limits
from nodes.telemetry.samples import METRIC_RANGES, SampleIn
from nodes.telemetry.storage import ResolvedGPU

SOURCE_MAX_CHARS = GPUSample._meta.get_field("source").max_length


class TelemetryRejected(Exception):
    """A batch that cannot be stored, with every reason found (see the module docstring for `errors`)."""

    def __init__(self, errors: dict[str, Any]) -> None:
        super().__init__(errors)
        self.errors = errors


def check_source(source: str) -> None:
    """Raise ValueError when `source` does not fit GPUSample.source: a caller's bug, not bad telemetry."""
    if len(source) > SOURCE_MAX_CHARS:
        raise ValueError(f"source {source!r} is longer than {SOURCE_MAX_CHARS} characters")


def check_batch_size(samples: Sequence[SampleIn]) -> None:
    """Raise TelemetryRejected (a batch-wide message) when there are more than TELEMETRY_MAX_BATCH samples."""
    max_batch = settings.TELEMETRY_MAX_BATCH
    if len(samples) > max_batch:
        raise TelemetryRejected(
            {"samples": [f"At most {max_batch} samples per batch (TELEMETRY_MAX_BATCH); got {len(samples)}."]}
        )


def validate_samples(
    samples: Sequence[SampleIn],
    gpus: Mapping[str, ResolvedGPU],
    node: Node | None,
    now: datetime,
) -> dict[str, dict[str, list[str]]]:
    """Per sample index (as a string, as in JSON), per field: what is wrong with it; {} when nothing is.

    Checked: the GPU UUID is one of `gpus` (and, with `node`, a GPU of that node); `ts` has a
    timezone, is at most TELEMETRY_MAX_FUTURE_SKEW_S after `now` and not older than the rollup
    retention (it would be deleted at once); each metric is a finite number within METRIC_RANGES
    and within the physical limits of its GPU's model (nodes.telemetry.limits: memory, power,
    clock), and memory used is at most memory in total.
    """
    skew_s = settings.TELEMETRY_MAX_FUTURE_SKEW_S
    latest_ok = now + timedelta(seconds=skew_s)
    retention_d = settings.TELEMETRY_ROLLUP_RETENTION_D
    earliest_ok = now - timedelta(days=retention_d)
    errors: dict[str, dict[str, list[str]]] = {}
    for index, sample in enumerate(samples):
        problems: dict[str, list[str]] = {}
        resolved = gpus.get(sample.gpu_uuid)
        if resolved is None:
            problems["gpu_uuid"] = [f"Unknown GPU {sample.gpu_uuid!r}."]
        elif node is not None and resolved.node_id != node.pk:
            problems["gpu_uuid"] = [f"GPU {sample.gpu_uuid!r} is not a GPU of node {node.name!r}."]
        if not isinstance(sample.ts, datetime) or timezone.is_naive(sample.ts):
            problems["ts"] = ["must have a timezone (an ISO 8601 time with Z or an offset)"]
        elif sample.ts > latest_ok:
            ahead_s = math.ceil((sample.ts - now).total_seconds())
            problems["ts"] = [f"is {ahead_s} s in the future (allowed skew {skew_s} s)"]
        elif sample.ts < earliest_ok:
            problems["ts"] = [f"is older than the rollup retention ({retention_d} days)"]
        problems.update(_metric_problems(sample, resolved))
        if problems:
            errors[str(index)] = problems
    return errors


def _metric_problems(sample: SampleIn, gpu: ResolvedGPU | None) -> dict[str, list[str]]:
    """What is wrong with the metrics of one sample: not a finite number, outside METRIC_RANGES,
    past the limits of its GPU (`gpu_limits`, when the GPU is known), or more memory used than in total."""
    limits = gpu_limits(gpu.model, gpu.memory_mib) if gpu is not None else {}
    problems: dict[str, list[str]] = {}
    for name, (low, high) in METRIC_RANGES.items():
        value = getattr(sample, name)
        if value is None:
            continue
        limit = limits.get(name)
        # An int is finite however large; math.isfinite would overflow converting it to a float.
        if isinstance(value, bool) or not isinstance(value, int | float) or not _finite(value):
            problems[name] = [f"must be a finite number; got {value!r}"]
        elif value < low or value > high:
            problems[name] = [f"must be between {low} and {high}; got {_shown(value)}"]
        elif limit is not None and value > limit.high:
            problems[name] = [f"must be at most {limit.high:g}, {limit.reason}; got {_shown(value)}"]
    used, total = sample.memory_used_mib, sample.memory_total_mib
    if used is not None and total is not None and not problems.keys() & {"memory_used_mib", "memory_total_mib"}:
        if used > total:
            problems["memory_used_mib"] = [f"must not exceed memory_total_mib ({total}); got {used}"]
    return problems


def _finite(value: float) -> bool:
    return isinstance(value, int) or math.isfinite(value)


def _shown(value: float) -> str:
    """A number for a message as Python writes it (1.7e+308, 81921), but a huge integer by its size."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"a number of about {round(value.bit_length() * math.log10(2))} digits"
    return str(value)
