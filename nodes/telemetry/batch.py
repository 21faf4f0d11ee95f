"""A telemetry batch as JSON (`POST /api/v1/telemetry/`) -> typed samples, in bulk, sample by sample.

Pure Python, no serializer: an agent's batch is checked with plain loops, because at fleet
scale (10,000 GPUs every 30 s) per-field serializer objects cost more CPU than storing the
samples. Errors have the shape of DRF's (`nodes.telemetry.validation` describes it): a bad
envelope refuses the whole batch (`BatchRefused`), a bad sample refuses only itself, so that
the samples beside it can still be stored.

What a sample may hold: `gpu_uuid` and `ts` (ISO 8601 with Z or an offset) are required; each
metric of METRIC_RANGES is a JSON number (integers only where INTEGER_FIELDS says so; not a
string, not a boolean) or null; `processes` is null or a list of `{"pid": n, "used_memory_mib":
n or null}`; any other key is refused. Ranges, physical limits and the GPU's node are checked
afterwards, against the inventory (`nodes.telemetry.validation.validate_samples`).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from nodes.telemetry.samples import INTEGER_FIELDS, MAX_INT32, MAX_PROCESSES, METRIC_FIELDS, Process, SampleIn

GPU_UUID_MAX_CHARS = 96  # GPU.uuid's max_length
NODE_MAX_CHARS = 253  # a Kubernetes node name
SAMPLE_KEYS = frozenset({"gpu_uuid", "ts", *METRIC_FIELDS, "processes"})
BATCH_KEYS = frozenset({"node", "samples"})
PROCESS_KEYS = frozenset({"pid", "used_memory_mib"})

REQUIRED = "This field is required."
NOT_NULL = "This field may not be null."
NULL_CHARACTERS = "Null characters are not allowed."
TS_FORMAT = "Datetime has wrong format. Use one of these formats instead: YYYY-MM-DDThh:mm[:ss[.uuuuuu]][+HH:MM|-HH:MM|Z]."
TS_NAIVE = "must have a timezone (an ISO 8601 time with Z or an offset)"
TS_RANGE = "Datetime value out of the supported range."

Errors = dict[str, list[str]]


class BatchRefused(Exception):
    """The batch as a whole is malformed; `errors` in DRF's shape (field -> messages)."""

    def __init__(self, errors: dict[str, Any]) -> None:
        super().__init__(errors)
        self.errors = errors


@dataclass(frozen=True)
class ParsedSamples:
    """The well-formed samples with their indexes in the batch, and the messages of the others."""

    indexes: list[int]
    samples: list[SampleIn]
    errors: dict[str, Errors]  # str(index) -> field -> messages


def parse_envelope(data: Any, max_batch: int) -> tuple[str, list[Any]]:
    """`{"node": ..., "samples": [...]}` -> (node name, raw samples); BatchRefused naming every problem."""
    if not isinstance(data, Mapping):
        raise BatchRefused({"non_field_errors": [f'Expected a dictionary of items but got type "{_kind(data)}".']})
    errors: dict[str, Any] = {str(key): [_unknown(key, BATCH_KEYS)] for key in data.keys() - BATCH_KEYS}
    node = data.get("node")
    if "node" not in data:
        errors["node"] = [REQUIRED]
    elif node is None:
        errors["node"] = [NOT_NULL]
    elif not isinstance(node, str):
        errors["node"] = [f"Not a valid string, got {_kind(node)}."]
    elif not node:
        errors["node"] = ["This field may not be blank."]
    elif "\x00" in node:
        errors["node"] = [NULL_CHARACTERS]
    elif len(node) > NODE_MAX_CHARS:
        errors["node"] = [f"Ensure this field has no more than {NODE_MAX_CHARS} characters."]
    samples = data.get("samples")
    if "samples" not in data:
        errors["samples"] = [REQUIRED]
    elif not isinstance(samples, list):
        errors["samples"] = [f'Expected a list of items but got type "{_kind(samples)}".']
    elif len(samples) > max_batch:
        errors["samples"] = [f"At most {max_batch} samples per batch (TELEMETRY_MAX_BATCH); got {len(samples)}."]
    if errors:
        raise BatchRefused(errors)
    assert isinstance(node, str) and isinstance(samples, list)
    return node, samples


def parse_samples(items: list[Any]) -> ParsedSamples:
    """Type every raw sample; a malformed one is left out with its messages, the others are kept."""
    indexes: list[int] = []
    samples: list[SampleIn] = []
    errors: dict[str, Errors] = {}
    times: dict[str, datetime | str] = {}  # ts text -> parsed, or its message (an agent stamps a batch alike)
    for index, raw in enumerate(items):
        if type(raw) is not dict:
            errors[str(index)] = {"non_field_errors": [f'Expected a dictionary of items but got type "{_kind(raw)}".']}
            continue
        problems: Errors = {key: [_unknown(key, SAMPLE_KEYS)] for key in raw.keys() - SAMPLE_KEYS}
        uuid = _gpu_uuid(raw, problems)
        ts = _timestamp(raw, problems, times)
        values: dict[str, Any] = {}
        for name in METRIC_FIELDS:
            value = raw.get(name)
            if value is None:
                continue
            kind = type(value)
            if name in INTEGER_FIELDS:
                if kind is not int:
                    problems[name] = [f"A whole number is required, not {_kind(value)}."]
                    continue
            elif kind is not float and kind is not int:
                problems[name] = [f"A number is required, not {_kind(value)}."]
                continue
            values[name] = value
        processes = _processes(raw.get("processes"), problems)
        if problems:
            errors[str(index)] = problems
            continue
        assert uuid is not None and ts is not None  # no problem means both were read
        indexes.append(index)
        samples.append(SampleIn(gpu_uuid=uuid, ts=ts, processes=processes, **values))
    return ParsedSamples(indexes, samples, errors)


def _gpu_uuid(raw: dict[str, Any], problems: Errors) -> str | None:
    uuid = raw.get("gpu_uuid")
    if type(uuid) is str and uuid and len(uuid) <= GPU_UUID_MAX_CHARS and "\x00" not in uuid:
        return uuid
    if "gpu_uuid" not in raw:
        problems["gpu_uuid"] = [REQUIRED]
    elif uuid is None:
        problems["gpu_uuid"] = [NOT_NULL]
    elif not isinstance(uuid, str):
        problems["gpu_uuid"] = [f"Not a valid string, got {_kind(uuid)}."]
    elif not uuid:
        problems["gpu_uuid"] = ["This field may not be blank."]
    elif "\x00" in uuid:
        problems["gpu_uuid"] = [NULL_CHARACTERS]
    else:
        problems["gpu_uuid"] = [f"Ensure this field has no more than {GPU_UUID_MAX_CHARS} characters."]
    return None


def _timestamp(raw: dict[str, Any], problems: Errors, times: dict[str, datetime | str]) -> datetime | None:
    text = raw.get("ts")
    if type(text) is not str:
        problems["ts"] = [REQUIRED if "ts" not in raw else NOT_NULL if text is None else TS_FORMAT]
        return None
    parsed = times.get(text)
    if parsed is None:
        parsed = times[text] = _parse_time(text)
    if isinstance(parsed, str):
        problems["ts"] = [parsed]
        return None
    return parsed


def _parse_time(text: str) -> datetime | str:
    """An aware UTC datetime, or the message saying why `text` is not one."""
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return TS_FORMAT
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        return TS_NAIVE
    try:
        return parsed.astimezone(UTC)
    except OverflowError:  # year 1 east of UTC, year 9999 west of it
        return TS_RANGE


def _processes(value: Any, problems: Errors) -> tuple[Process, ...] | None:
    """`[{"pid": n, "used_memory_mib": n or null}, ...]` -> ((pid, MiB or None), ...); None when null or absent."""
    if value is None:
        return None
    if type(value) is not list:
        problems["processes"] = [f'Expected a list of items but got type "{_kind(value)}".']
        return None
    if len(value) > MAX_PROCESSES:
        problems["processes"] = [f"At most {MAX_PROCESSES} processes per sample; got {len(value)}."]
        return None
    parsed: list[Process] = []
    for position, process in enumerate(value):
        if type(process) is not dict or process.keys() - PROCESS_KEYS or "pid" not in process:
            problems["processes"] = [f'Process {position}: expected {{"pid": n, "used_memory_mib": n or null}}.']
            return None
        pid, used = process["pid"], process.get("used_memory_mib")
        if type(pid) is not int or not 0 <= pid <= MAX_INT32:
            problems["processes"] = [f"Process {position}: pid must be a whole number from 0 to {MAX_INT32}."]
            return None
        if used is not None and (type(used) is not int or not 0 <= used <= MAX_INT32):
            problems["processes"] = [f"Process {position}: used_memory_mib must be null or a whole number from 0 to {MAX_INT32}."]
            return None
        parsed.append((pid, used))
    return tuple(parsed)


def _unknown(key: Any, accepted: frozenset[str]) -> str:
    """The message of an unknown key, worded as every endpoint words it (gpuplane.strict_input)."""
    return f"Unknown field: {key!s} is not a field of this request; accepted fields: {', '.join(sorted(accepted))}."


def _kind(value: Any) -> str:
    return type(value).__name__
