"""A deploy request (``DeploySpec``) and its validation, shared by the REST API and the deploy form."""
from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError

from nodes import quantities
from nodes.vocabulary import MIB_PER_GB
from scheduler.core import Priority, SharingRequest, WorkloadType
from scheduler.inference_services import tp_size
from scheduler.label_rules import label_errors
from scheduler.models import Deployment
from scheduler.services.container import arguments_errors, env_errors, image_errors

MAX_MEMORY_GB = 4096
# Capacity is counted in whole MiB: anything smaller than one would be rounded up to it unseen.
MIN_MEMORY_GB = 1 / 1024
MAX_GPU_COUNT = 16  # the largest GPU nodes have 16; a gang must fit on one node
MAX_LATENCY_SLO_MS = 86_400_000
# A pod's CPU and host memory: Kubernetes quantities within one large node's allocatable.
MAX_CPU_MILLI = 1024 * 1000  # 1,024 cores
MAX_HOST_MEMORY_MIB = 16 * 1024 * 1024  # 16 TiB
# What a replica's pod requests when the request states no ``cpu`` / ``memory`` (README.md,
# "CPU and host memory"): a serving engine's tokenizer, scheduler and KV swap live on the host.
HOST_DEFAULTS: dict[str, tuple[int, int]] = {  # workload type -> (CPU milli, memory MiB)
    WorkloadType.INFERENCE: (4000, 16 * 1024),
    WorkloadType.SERVING: (8000, 32 * 1024),
    WorkloadType.TRAINING: (16000, 128 * 1024),
    WorkloadType.DEVELOPMENT: (2000, 8 * 1024),
    WorkloadType.BATCH: (4000, 16 * 1024),
}

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")
# The same rules as regular expressions, for the API schema: a DNS-1123 label, and a text that
# has no control character and is not blank (one character that str.strip() keeps).
DNS_LABEL_PATTERN = _DNS_LABEL.pattern
LABEL_VALUE_PATTERN = r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$"  # empty, or a label name
# A Kubernetes quantity (nodes.quantities): a decimal number, an optional exponent, a suffix.
QUANTITY_PATTERN = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$"
_QUANTITY_TEXT = re.compile(QUANTITY_PATTERN)
TEXT_PATTERN = (
    r"^[^\x00-\x1f\x7f]*"
    r"[^\x00-\x20\x7f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
    r"[^\x00-\x1f\x7f]*$"
)


@dataclass(frozen=True)
class DeploySpec:
    """A deploy request, as the REST API and the deploy form take it (``validate_spec`` checks it)."""

    name: str
    model: str
    memory_gb: float
    gpu_count: int = 1
    replicas: int = 1
    workload_type: str = WorkloadType.INFERENCE
    priority: str = Priority.MEDIUM
    latency_slo_ms: int | None = None
    namespace: str = "default"
    labels: Mapping[str, str] = field(default_factory=dict)
    sharing: str = SharingRequest.AUTO
    share_percent: int | None = None
    enable_gpu_selection: bool = True
    allow_default_scheduler: bool = True
    # Kubernetes quantities ("8", "500m"; "64Gi"); None: the workload type's default (HOST_DEFAULTS).
    cpu: str | int | float | None = None
    memory: str | int | None = None
    # The workload's container (scheduler.services.container): "" / empty = gpuplane's defaults.
    image: str = ""
    command: Sequence[str] = ()
    args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def memory_mib(self) -> int:
        """The memory need in MiB, rounded up (a model never gets less than it asked for)."""
        return math.ceil(float(self.memory_gb) * MIB_PER_GB)

    @property
    def cpu_milli(self) -> int:
        """CPU each replica's pod requests, in millicores (rounded up; the default when unstated)."""
        if self.cpu is None:
            return HOST_DEFAULTS.get(self.workload_type, HOST_DEFAULTS[WorkloadType.INFERENCE])[0]
        return quantities.cpu_milli(self.cpu)

    @property
    def host_memory_mib(self) -> int:
        """Host memory each replica's pod requests, in MiB (rounded up; the default when unstated)."""
        if self.memory is None:
            return HOST_DEFAULTS.get(self.workload_type, HOST_DEFAULTS[WorkloadType.INFERENCE])[1]
        return quantities.memory_mib(self.memory)


def _is_text(value: Any) -> bool:
    return isinstance(value, str)


def _check_text(errors: dict[str, list[str]], name: str, value: Any, *, max_length: int) -> None:
    if not _is_text(value):
        errors[name].append("Enter text.")
    elif "\x00" in value:
        errors[name].append("Null characters are not allowed.")
    elif not value.strip():
        errors[name].append("This field may not be blank.")
    elif len(value) > max_length:
        errors[name].append(f"Ensure this field has no more than {max_length} characters.")
    elif _CONTROL_CHARS.search(value):
        errors[name].append("Control characters are not allowed.")


def _check_dns_label(errors: dict[str, list[str]], name: str, value: Any) -> None:
    _check_text(errors, name, value, max_length=63)
    if not errors[name] and not _DNS_LABEL.match(value):
        errors[name].append(
            "Enter a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a letter or digit."
        )


def _check_int(errors: dict[str, list[str]], name: str, value: Any, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        errors[name].append("Enter a whole number.")
    elif not low <= value <= high:
        errors[name].append(f"Enter a whole number from {low} to {high}.")


def host_quantity_errors(cpu: Any, memory: Any) -> dict[str, list[str]]:
    """Why ``cpu`` / ``memory`` are not valid quantities for a replica's pod ({} when they are).

    Each is None (the workload type's default applies), a Kubernetes quantity string
    (``QUANTITY_PATTERN``, no surrounding space) or a number (cores, bytes), greater than 0 and at
    most ``MAX_CPU_MILLI`` / ``MAX_HOST_MEMORY_MIB`` once converted (rounded up)."""
    errors: dict[str, list[str]] = {}
    for name, value, convert, most, show in (
            ("cpu", cpu, quantities.cpu_milli, MAX_CPU_MILLI, quantities.format_cpu),
            ("memory", memory, quantities.memory_mib, MAX_HOST_MEMORY_MIB, quantities.format_memory)):
        message = _quantity_error(value, convert, most, show)
        if message:
            errors[name] = [message]
    return errors


def _quantity_error(value: Any, convert: Callable[[Any], int], most: int, show: Callable[[int], str]) -> str:
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return 'Enter a Kubernetes quantity, e.g. "8", "500m", "64Gi".'
    try:
        if isinstance(value, str) and not _QUANTITY_TEXT.match(value):
            raise quantities.QuantityError(value)
        amount = convert(value)
    except (quantities.QuantityError, ArithmeticError):
        return f'{value!r} is not a Kubernetes quantity: enter e.g. "8", "500m", "64Gi".'
    if amount <= 0:
        return "Enter a quantity greater than 0."
    if amount > most:
        return f"Enter at most {show(most)}."
    return ""


def validate_spec(spec: DeploySpec) -> DeploySpec:
    """Check a request; return it with normalised values (``memory_gb`` a float, labels a dict).

    Raises ``ValidationError`` with messages per ``DeploySpec`` field name (the API answers 400
    with them, the deploy form shows them under its fields). Rules: ``name`` and ``namespace``
    are DNS-1123 labels; ``model`` is 1-200 characters without control characters; ``memory_gb``
    a finite number in (0, 4096]; ``gpu_count`` 1-16; ``replicas`` 1-``DEPLOYMENT_MAX_REPLICAS``;
    ``latency_slo_ms`` empty or 1-86,400,000; ``share_percent`` empty (the sharing mode sizes the
    replica by its own rule) or 1-100, and below 100 only for a single-GPU replica that may share
    (not ``exclusive``); the choice fields one of their values; ``labels``
    valid Kubernetes labels (``label_errors``); ``image``, ``command``, ``args`` and ``env`` what
    a container may be given (``scheduler.services.container``). A multi-GPU replica takes whole GPUs, so only
    ``auto`` and ``exclusive`` sharing go with ``gpu_count`` > 1 (time-slicing especially: its
    replicas may land on one physical GPU). ``cpu`` and ``memory`` are Kubernetes quantities (a
    number: cores, bytes), greater than 0 and at most 1,024 cores / 16 Ti; None takes the workload
    type's default (``HOST_DEFAULTS``); the result holds them in canonical form ("4", "16Gi").
    """
    errors: dict[str, list[str]] = defaultdict(list)
    spec = _gpus_from_tensor_parallel(spec, errors)
    _check_dns_label(errors, "name", spec.name)
    _check_dns_label(errors, "namespace", spec.namespace)
    _check_text(errors, "model", spec.model, max_length=Deployment._meta.get_field("model").max_length)
    memory = spec.memory_gb
    if isinstance(memory, bool) or not isinstance(memory, int | float) or not math.isfinite(memory):
        errors["memory_gb"].append("Enter a number.")
    elif not MIN_MEMORY_GB <= memory <= MAX_MEMORY_GB:
        errors["memory_gb"].append(f"Enter a number of GB from 1/1024 (1 MiB) to {MAX_MEMORY_GB}.")
    _check_int(errors, "gpu_count", spec.gpu_count, 1, MAX_GPU_COUNT)
    _check_int(errors, "replicas", spec.replicas, 1, settings.DEPLOYMENT_MAX_REPLICAS)
    if spec.latency_slo_ms is not None:
        _check_int(errors, "latency_slo_ms", spec.latency_slo_ms, 1, MAX_LATENCY_SLO_MS)
    if spec.share_percent is not None:
        _check_int(errors, "share_percent", spec.share_percent, 1, 100)
    for name, choices in (("workload_type", WorkloadType), ("priority", Priority), ("sharing", SharingRequest)):
        value = getattr(spec, name)
        if value not in choices.values():
            errors[name].append(f"Choose one of: {', '.join(choices.values())}.")
    for name in ("enable_gpu_selection", "allow_default_scheduler"):
        if not isinstance(getattr(spec, name), bool):
            errors[name].append("Enter true or false.")
    errors["labels"].extend(label_errors(spec.labels))
    for name, messages in host_quantity_errors(spec.cpu, spec.memory).items():
        errors[name].extend(messages)
    errors["image"].extend(image_errors(spec.image))
    errors["command"].extend(arguments_errors(spec.command))
    errors["args"].extend(arguments_errors(spec.args))
    errors["env"].extend(env_errors(spec.env))
    if not errors["gpu_count"] and not errors["sharing"]:
        share_percent = None if errors["share_percent"] else spec.share_percent
        for name, message in cross_field_errors(spec.gpu_count, spec.sharing, share_percent).items():
            errors[name].append(message)
    found = {name: messages for name, messages in errors.items() if messages}
    if found:
        raise ValidationError(found)
    # Canonical quantities, the defaults filled in: what the deployment stores and shows.
    return replace(
        spec, memory_gb=float(memory), labels=dict(spec.labels), command=list(spec.command), args=list(spec.args),
        env=dict(spec.env), cpu=quantities.format_cpu(spec.cpu_milli), memory=quantities.format_memory(spec.host_memory_mib),
    )


def _gpus_from_tensor_parallel(spec: DeploySpec, errors: dict[str, list[str]]) -> DeploySpec:
    """Seed 004: the GPU count follows ``--tp-size`` / ``--tp_size`` / ``--tpsize`` in the command or
    arguments (or TP_SIZE in env) when the request states none (1); a different count is an error."""
    try:
        env = [{"name": k, "value": v} for k, v in dict(spec.env).items()]
        tp = tp_size([*spec.command, *spec.args], env)
    except (TypeError, ValueError):
        return spec  # malformed command / args / env: their own checks say so
    if tp is None or tp == spec.gpu_count:
        return spec
    if spec.gpu_count == 1:
        return replace(spec, gpu_count=tp)
    errors["gpu_count"].append(f"{spec.gpu_count} GPUs disagree with the tensor-parallel size {tp} of the arguments.")
    return spec


def cross_field_errors(gpu_count: int, sharing: str, share_percent: int | None) -> dict[str, str]:
    """Rules between fields that OpenAPI 3.0 cannot state (each is in its field's description)."""
    errors = {}
    if gpu_count > 1 and sharing not in (SharingRequest.AUTO, SharingRequest.EXCLUSIVE):
        errors["sharing"] = (
            f"A replica of {gpu_count} GPUs takes whole GPUs: {sharing} gives one GPU per replica "
            "(time-sliced replicas could even share one physical GPU). Use auto or exclusive."
        )
    if share_percent is not None and share_percent < 100:
        if sharing == SharingRequest.EXCLUSIVE:
            errors["share_percent"] = "Exclusive sharing gives whole GPUs (100 %): leave the share empty."
        elif gpu_count > 1:
            errors["share_percent"] = (
                f"A replica of {gpu_count} GPUs takes whole GPUs (100 %): leave the share empty."
            )
    return errors


def spec_of(deployment: Deployment) -> DeploySpec:
    """The request a stored deployment was made from (to place more replicas of it)."""
    return DeploySpec(
        name=deployment.name, model=deployment.model, memory_gb=deployment.memory_mib / MIB_PER_GB,
        gpu_count=deployment.gpu_count, replicas=deployment.replicas, workload_type=deployment.workload_type,
        priority=deployment.priority, latency_slo_ms=deployment.latency_slo_ms, namespace=deployment.namespace,
        labels=dict(deployment.labels or {}), sharing=deployment.sharing, share_percent=deployment.share_percent,
        enable_gpu_selection=deployment.enable_gpu_selection, image=deployment.image,
        command=list(deployment.command or []), args=list(deployment.args or []), env=dict(deployment.env or {}),
        cpu=quantities.format_cpu(deployment.cpu_milli), memory=quantities.format_memory(deployment.host_memory_mib),
    )
