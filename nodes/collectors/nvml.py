"""NVMLCollector: reads the GPUs of this node through NVML (the only module importing `pynvml`).

`pynvml` is the module of NVIDIA's `nvidia-ml-py` package, a ctypes binding of libnvidia-ml.so.1
that the driver installs. Every NVML call that reads a metric goes through one guard: an
NVMLError (NOT_SUPPORTED on a board without a sensor, NO_PERMISSION, GPU_IS_LOST, ...) marks
that field missing in the reading and the collection goes on. What is read, per GPU:

| reading field      | NVML call                                                   |
|--------------------|-------------------------------------------------------------|
| gpu_uuid, index    | nvmlDeviceGetUUID, nvmlDeviceGetIndex                       |
| mig_enabled        | nvmlDeviceGetMigMode (current mode)                         |
| utilization_pct    | nvmlDeviceGetUtilizationRates().gpu (not asked when MIG is on: NVML does not support it there) |
| product            | nvmlDeviceGetName ("NVIDIA H100 80GB HBM3")                 |
| memory_*_mib       | nvmlDeviceGetMemoryInfo, version 2 (nvmlMemory_v2: total, reserved, used, free; bytes -> MiB, rounded down); version 1 on a driver without it (its `used` counts the reserved memory, which is then missing) |
| power_w            | nvmlDeviceGetPowerUsage (mW)                                |
| power_limit_w      | nvmlDeviceGetEnforcedPowerLimit (mW)                        |
| temperature_c      | nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)              |
| sm_clock_mhz       | nvmlDeviceGetClockInfo(NVML_CLOCK_SM)                       |
| mig_instances      | nvmlDeviceGetMaxMigDeviceCount + nvmlDeviceGetMigDeviceHandleByIndex, then per MIG device nvmlDeviceGetGpuInstanceId -> nvmlDeviceGetGpuInstanceById -> nvmlGpuInstanceGetInfo (profile id, placement start/size) -> nvmlDeviceGetGpuInstanceProfileInfoById (name "MIG 3g.40gb"), nvmlDeviceGetUUID / nvmlDeviceGetMemoryInfo of the MIG device |
| processes          | nvmlDeviceGetComputeRunningProcesses (usedGpuMemory may be None); on a MIG GPU whose parent handle refuses (unprivileged), the union over its MIG devices |

A GPU whose handle or UUID cannot be read is skipped (logged): without its UUID a reading cannot
be matched to a GPU row. A GPU that answers its UUID and then reports GPU_IS_LOST yields a
reading with every metric missing (no further calls are made to it), so the server sees that
the GPU reported nothing instead of a stale value.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, TypeVar

import pynvml

from nodes.collectors.base import (
    BYTES_PER_MIB,
    METRIC_FIELDS,
    CollectorUnavailable,
    GPUReading,
    MIGInstanceReading,
    ProcessReading,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

# What a driver without nvmlDeviceGetMemoryInfo_v2 answers (before R510), or one that does not
# know the struct version asked for: then version 1, whose `used` includes reserved memory.
_NO_MEMORY_V2 = {
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
    pynvml.NVML_ERROR_NOT_SUPPORTED,
    getattr(pynvml, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", 25),
}

# Errors that a single NVML call may raise. NVMLLibraryMismatchError comes from pynvml's version
# check on functions such as nvmlDeviceGetComputeRunningProcesses when the driver is older.
_CALL_ERRORS: tuple[type[Exception], ...] = (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError)

_MILLIWATTS_PER_WATT = 1000.0
_MIG_PROFILE_PREFIX = "MIG "


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _error_code(exc: Exception) -> int | None:
    return getattr(exc, "value", None)


class _DeviceReader:
    """Calls NVML for one device, turning each failed call into a missing field.

    Once the device reports GPU_IS_LOST, later calls are not made at all: every one would fail
    the same way, and a lost GPU can make each call block for the driver's timeout.
    """

    def __init__(self, index: int) -> None:
        self.index = index
        self.missing: set[str] = set()
        self.lost = False

    def read(self, field: str, call: Callable[..., T], *args: Any) -> T | None:
        """Return call(*args), or None with `field` marked missing when NVML refuses."""
        if self.lost:
            self.missing.add(field)
            return None
        try:
            return call(*args)
        except _CALL_ERRORS as exc:
            self.missing.add(field)
            if _error_code(exc) == pynvml.NVML_ERROR_GPU_IS_LOST:
                self.lost = True
                logger.warning("NVML: GPU %d is lost (fell off the bus?); its metrics are missing", self.index)
            elif _error_code(exc) != pynvml.NVML_ERROR_NOT_SUPPORTED:
                logger.info("NVML: GPU %d: %s failed: %s", self.index, getattr(call, "__name__", call), exc)
            return None


class NVMLCollector:
    """Reads every GPU of this node through NVML.

    Use it as a context manager (`with NVMLCollector() as collector:`) to keep NVML initialised
    across collections, as the node agent does; `collect()` outside one initialises and shuts
    NVML down around that single collection. `clock` returns aware UTC datetimes (for tests).
    Raises CollectorUnavailable when NVML cannot be initialised or cannot count the devices.
    """

    name = "nvml"

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        self._clock = clock or _utc_now
        self._initialised = False
        self._memory_v2 = True  # until the driver says it lacks version 2

    # --- lifecycle ---------------------------------------------------------------------------
    def open(self) -> None:
        """Initialise NVML; CollectorUnavailable (with what to check) when the driver is not usable."""
        if self._initialised:
            return
        try:
            pynvml.nvmlInit()
        except _CALL_ERRORS as exc:
            raise CollectorUnavailable(
                f"NVML could not be initialised ({exc}): this collector needs the NVIDIA driver's "
                "libnvidia-ml.so.1 and GPU devices, i.e. a GPU node, and in a container the NVIDIA "
                "container runtime (runtimeClassName: nvidia or the GPU operator's toolkit)"
            ) from exc
        self._initialised = True

    def close(self) -> None:
        """Shut NVML down (idempotent; a failing shutdown is logged, not raised)."""
        if not self._initialised:
            return
        self._initialised = False
        try:
            pynvml.nvmlShutdown()
        except _CALL_ERRORS as exc:
            logger.warning("NVML shutdown failed: %s", exc)

    def __enter__(self) -> NVMLCollector:
        self.open()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # --- collection --------------------------------------------------------------------------
    def collect(self) -> list[GPUReading]:
        """One reading per GPU whose UUID NVML gives, in index order; see the module docstring."""
        opened_here = not self._initialised
        self.open()
        try:
            ts = self._clock().replace(microsecond=0)
            try:
                count = pynvml.nvmlDeviceGetCount()
            except _CALL_ERRORS as exc:
                raise CollectorUnavailable(f"NVML could not count the GPUs: {exc}") from exc
            readings = []
            for index in range(count):
                reading = self._read_device(index, ts)
                if reading is not None:
                    readings.append(reading)
            return readings
        finally:
            if opened_here:
                self.close()

    def _read_device(self, index: int, ts: datetime) -> GPUReading | None:
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            gpu_uuid = pynvml.nvmlDeviceGetUUID(handle)
        except _CALL_ERRORS as exc:
            logger.warning("NVML: GPU %d skipped, its handle or UUID cannot be read: %s", index, exc)
            return None

        device = _DeviceReader(index)
        nvml_index = device.read("index", pynvml.nvmlDeviceGetIndex, handle)
        device.missing.discard("index")  # the enumeration index stands in; not a metric

        mig_mode = device.read("mig_enabled", pynvml.nvmlDeviceGetMigMode, handle)
        mig_enabled = None if mig_mode is None else mig_mode[0] == pynvml.NVML_DEVICE_MIG_ENABLE

        utilization_pct: float | None = None
        if mig_enabled:
            # NVML answers NOT_SUPPORTED for GPU utilization on a MIG-enabled GPU: per-instance
            # activity is only available through DCGM profiling metrics.
            device.missing.add("utilization_pct")
        else:
            rates = device.read("utilization_pct", pynvml.nvmlDeviceGetUtilizationRates, handle)
            utilization_pct = None if rates is None else float(rates.gpu)

        product = device.read("product", pynvml.nvmlDeviceGetName, handle)
        device.missing.discard("product")  # not a metric: "" stands for unknown
        memory, reserved_mib = self._read_memory(device, handle)
        power_mw = device.read("power_w", pynvml.nvmlDeviceGetPowerUsage, handle)
        limit_mw = device.read("power_limit_w", pynvml.nvmlDeviceGetEnforcedPowerLimit, handle)
        temperature = device.read(
            "temperature_c", pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU
        )
        sm_clock = device.read("sm_clock_mhz", pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM)

        mig_instances: tuple[MIGInstanceReading, ...] = ()
        mig_handles: list[Any] = []
        if mig_enabled:
            mig_instances, mig_handles = self._read_mig_instances(device, handle)
        processes = self._read_processes(device, handle, mig_handles)

        if device.lost:
            # Whatever was read before the loss may predate it; report the GPU as silent.
            device.missing.update(METRIC_FIELDS)
            return GPUReading(
                gpu_uuid=gpu_uuid, index=index if nvml_index is None else int(nvml_index), ts=ts,
                utilization_pct=None, memory_used_mib=None, memory_total_mib=None, power_w=None,
                power_limit_w=None, temperature_c=None, sm_clock_mhz=None, mig_enabled=None,
                missing=frozenset(device.missing | {"mig_instances", "processes"}), product=_text(product),
            )
        return GPUReading(
            gpu_uuid=gpu_uuid,
            index=index if nvml_index is None else int(nvml_index),
            ts=ts,
            utilization_pct=utilization_pct,
            memory_used_mib=None if memory is None else int(memory.used) // BYTES_PER_MIB,
            memory_total_mib=None if memory is None else int(memory.total) // BYTES_PER_MIB,
            memory_reserved_mib=reserved_mib,
            power_w=None if power_mw is None else power_mw / _MILLIWATTS_PER_WATT,
            power_limit_w=None if limit_mw is None else limit_mw / _MILLIWATTS_PER_WATT,
            temperature_c=None if temperature is None else float(temperature),
            sm_clock_mhz=None if sm_clock is None else int(sm_clock),
            mig_enabled=mig_enabled,
            mig_instances=mig_instances,
            processes=processes,
            missing=frozenset(device.missing),
            product=_text(product),
        )

    def _read_memory(self, device: _DeviceReader, handle: Any) -> tuple[Any, int | None]:
        """(NVML's memory struct or None, reserved MiB or None), missing fields marked.

        Version 2 reports the memory the driver and firmware reserve apart from `used` (480 MiB
        on an idle H100, which version 1 counts as used, and nvidia-smi does not). A driver
        without it is asked for version 1 from then on; reserved is then missing.
        """
        if self._memory_v2 and not device.lost:
            try:
                memory = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
            except _CALL_ERRORS as exc:
                if _error_code(exc) not in _NO_MEMORY_V2:
                    device.read("memory_used_mib", _raise, exc)  # marks the field, notes a lost GPU
                    device.missing.update({"memory_total_mib", "memory_reserved_mib"})
                    return None, None
                self._memory_v2 = False
                logger.info("NVML: no memory info version 2 (%s); version 1 counts reserved memory as used", exc)
            else:
                return memory, int(memory.reserved) // BYTES_PER_MIB
        memory = device.read("memory_used_mib", pynvml.nvmlDeviceGetMemoryInfo, handle)
        device.missing.add("memory_reserved_mib")
        if memory is None:
            device.missing.add("memory_total_mib")
        return memory, None

    def _read_mig_instances(
        self, device: _DeviceReader, handle: Any
    ) -> tuple[tuple[MIGInstanceReading, ...], list[Any]]:
        """The GPU instances of a MIG-enabled GPU, by placement start, and the MIG device handles."""
        slots = device.read("mig_instances", pynvml.nvmlDeviceGetMaxMigDeviceCount, handle)
        if slots is None:
            return (), []
        instances: dict[int, MIGInstanceReading] = {}
        handles: list[Any] = []
        for slot in range(int(slots)):
            try:
                mig_handle = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except _CALL_ERRORS as exc:
                # NOT_FOUND: nothing in this slot (the maximum is rarely all used).
                if _error_code(exc) != pynvml.NVML_ERROR_NOT_FOUND:
                    device.missing.add("mig_instances")
                    if _error_code(exc) == pynvml.NVML_ERROR_GPU_IS_LOST:
                        device.lost = True
                        break
                continue
            handles.append(mig_handle)
            instance = self._read_mig_instance(device, handle, mig_handle)
            # Several compute instances of one GPU instance are several MIG devices: keep one.
            if instance is not None:
                gpu_instance_id, reading = instance
                instances.setdefault(gpu_instance_id, reading)
        return tuple(sorted(instances.values(), key=lambda i: (i.start, i.uuid))), handles

    def _read_mig_instance(
        self, device: _DeviceReader, handle: Any, mig_handle: Any
    ) -> tuple[int, MIGInstanceReading] | None:
        gpu_instance_id = device.read("mig_instances", pynvml.nvmlDeviceGetGpuInstanceId, mig_handle)
        if gpu_instance_id is None:
            return None
        gpu_instance = device.read("mig_instances", pynvml.nvmlDeviceGetGpuInstanceById, handle, gpu_instance_id)
        info = None if gpu_instance is None else device.read("mig_instances", pynvml.nvmlGpuInstanceGetInfo, gpu_instance)
        profile = ""
        profile_memory_mib: int | None = None
        if info is not None:
            profile_info = device.read(
                "mig_instances", pynvml.nvmlDeviceGetGpuInstanceProfileInfoById, handle, info.profileId
            )
            if profile_info is not None:
                profile = _profile_name(profile_info.name)
                profile_memory_mib = int(profile_info.memorySizeMB)
        mig_uuid = device.read("mig_instances", pynvml.nvmlDeviceGetUUID, mig_handle) or ""
        mig_memory = device.read("mig_instances", pynvml.nvmlDeviceGetMemoryInfo, mig_handle)
        return int(gpu_instance_id), MIGInstanceReading(
            profile=profile,
            start=-1 if info is None else int(info.placement.start),
            size=-1 if info is None else int(info.placement.size),
            memory_mib=profile_memory_mib if mig_memory is None else int(mig_memory.total) // BYTES_PER_MIB,
            uuid=mig_uuid,
        )

    def _read_processes(self, device: _DeviceReader, handle: Any, mig_handles: list[Any]) -> tuple[ProcessReading, ...]:
        found = device.read("processes", pynvml.nvmlDeviceGetComputeRunningProcesses, handle)
        if found is None and mig_handles and not device.lost:
            # An unprivileged caller gets per-process data on a MIG GPU only per MIG device.
            per_instance = [device.read("processes", pynvml.nvmlDeviceGetComputeRunningProcesses, h) for h in mig_handles]
            if all(part is not None for part in per_instance):
                device.missing.discard("processes")
                found = [process for part in per_instance for process in part or ()]
        if found is None:
            return ()
        by_pid: dict[int, ProcessReading] = {}
        for process in found:
            used = getattr(process, "usedGpuMemory", None)
            by_pid.setdefault(
                int(process.pid),
                ProcessReading(pid=int(process.pid), used_memory_mib=None if used is None else int(used) // BYTES_PER_MIB),
            )
        return tuple(sorted(by_pid.values(), key=lambda p: p.pid))


def _raise(exc: Exception) -> None:
    raise exc


def _text(raw: bytes | str | None) -> str:
    """NVML's strings come as bytes from older bindings, str from newer ones."""
    if raw is None:
        return ""
    return (raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)).strip()


def _profile_name(raw: bytes | str) -> str:
    """"MIG 3g.40gb" (NVML's profile name, bytes from ctypes) -> "3g.40gb", gpuplane's profile key."""
    name = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    name = name.strip()
    return name[len(_MIG_PROFILE_PREFIX):] if name.startswith(_MIG_PROFILE_PREFIX) else name
