"""The rules a telemetry batch must pass before anything is written, and how refusals are reported.

Validation errors (`TelemetryRejected.errors`) have the shape of DRF's, so the API returns them
as they are::

    {"samples": ["At most 5000 samples per batch; got 5001."]}               # the batch as a whole
    {"samples": {"3": {"ts": ["is 600 s in the future (allowed skew 120 s)"]},  # sample index 3
                 "7": {"gpu_uuid": ["Unknown GPU 'GPU-x'."]}}}

`samples` maps the (string) index of each bad sample to its fields' messages.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from nodes.models import GPUSample, Node
from nodes.telemetry.limits import MetricLimit, gpu_limits
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
    indexes: Sequence[int] | None = None,
) -> dict[str, dict[str, list[str]]]:
    """Per sample index (as a string, as in JSON), per field: what is wrong with it; {} when nothing is.

    A sample's index is its position in `samples`, or `indexes[position]` (its place in the
    batch it came from). Checked: the GPU UUID is one of `gpus` (and, with `node`, a GPU of that
    node); `ts` has a timezone, is at most TELEMETRY_MAX_FUTURE_SKEW_S after `now` and not older
    than the rollup retention (it would be deleted at once); each metric is a finite number
    within METRIC_RANGES and within the physical limits of its GPU's model
    (nodes.telemetry.limits: memory, power, clock), memory used plus reserved is at most memory
    in total. The checks run column by column with each GPU model's limits computed once: the
    API checks a fleet's batches this way (no per-sample serializer work).
    """
    skew_s = settings.TELEMETRY_MAX_FUTURE_SKEW_S
    latest_ok = now + timedelta(seconds=skew_s)
    retention_d = settings.TELEMETRY_ROLLUP_RETENTION_D
    earliest_ok = now - timedelta(days=retention_d)
    names = [str(i) for i in indexes] if indexes is not None else [str(i) for i in range(len(samples))]
    errors: dict[str, dict[str, list[str]]] = {}

    def refuse(position: int, field: str, message: str) -> None:
        errors.setdefault(names[position], {})[field] = [message]

    resolved: list[ResolvedGPU | None] = [gpus.get(sample.gpu_uuid) for sample in samples]
    node_pk = node.pk if node is not None else None
    for position, (sample, gpu) in enumerate(zip(samples, resolved, strict=True)):
        if gpu is None:
            refuse(position, "gpu_uuid", f"{UNKNOWN_GPU} {sample.gpu_uuid!r}.")
        elif node_pk is not None and gpu.node_id != node_pk:
            assert node is not None
            refuse(position, "gpu_uuid", f"GPU {sample.gpu_uuid!r} is not a GPU of node {node.name!r}.")
        ts = sample.ts
        if not isinstance(ts, datetime) or timezone.is_naive(ts):
            refuse(position, "ts", "must have a timezone (an ISO 8601 time with Z or an offset)")
        elif ts > latest_ok:
            refuse(position, "ts", f"is {math.ceil((ts - now).total_seconds())} s in the future (allowed skew {skew_s} s)")
        elif ts < earliest_ok:
            refuse(position, "ts", f"is older than the rollup retention ({retention_d} days)")

    limits_of = _limits_by_gpu(resolved)
    for name, (low, high) in METRIC_RANGES.items():
        for position, sample in enumerate(samples):
            value = getattr(sample, name)
            if value is None:
                continue
            # An int is finite however large; math.isfinite would overflow converting it to a float.
            if type(value) is not int and (type(value) is not float or not math.isfinite(value)):
                refuse(position, name, f"must be a finite number; got {value!r}")
            elif value < low or value > high:
                refuse(position, name, f"must be between {low} and {high}; got {_shown(value)}")
            else:
                limit = limits_of[position].get(name)
                if limit is not None and value > limit.high:
                    refuse(position, name, f"must be at most {limit.high:g}, {limit.reason}; got {_shown(value)}")
    for position, sample in enumerate(samples):
        used, total = sample.memory_used_mib, sample.memory_total_mib
        if used is None or total is None:
            continue
        problems = errors.get(names[position], {})
        if problems.keys() & {"memory_used_mib", "memory_total_mib", "memory_reserved_mib"}:
            continue
        reserved = sample.memory_reserved_mib or 0
        if used + reserved > total:
            what = "memory_total_mib" if not reserved else "memory_total_mib minus memory_reserved_mib"
            refuse(position, "memory_used_mib", f"must not exceed {what} ({total - reserved}); got {used}")
    return errors


UNKNOWN_GPU = "Unknown GPU"


def unknown_gpu_only(problems: Mapping[str, list[str]]) -> bool:
    """True when a sample's only problem is a GPU the inventory does not know (yet): a fresh node's
    GPUs appear once its agent's report or the next inventory sync binds them, so the sample may
    be sent again later (the API lists such samples under `retry`)."""
    return problems.keys() == {"gpu_uuid"} and problems["gpu_uuid"][0].startswith(UNKNOWN_GPU)


def _limits_by_gpu(resolved: Sequence[ResolvedGPU | None]) -> list[dict[str, MetricLimit]]:
    """Each sample's GPU limits (`gpu_limits`); {} for an unknown GPU."""
    return [_NO_LIMITS if gpu is None else _cached_limits(gpu.model, gpu.memory_mib) for gpu in resolved]


_NO_LIMITS: dict[str, MetricLimit] = {}


@functools.lru_cache(maxsize=1024)
def _cached_limits(model: str, memory_mib: int) -> dict[str, MetricLimit]:
    """`gpu_limits`, computed once per (model, memory) in this process: they depend on the catalog
    only, which is code, and a fleet has a few kinds of GPU (read only; never modified)."""
    return gpu_limits(model, memory_mib)


def _shown(value: float) -> str:
    """A number for a message as Python writes it (1.7e+308, 81921), but a huge integer by its size."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"a number of about {round(value.bit_length() * math.log10(2))} digits"
    return str(value)
