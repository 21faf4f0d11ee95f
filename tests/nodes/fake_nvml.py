"""A fake of the pynvml functions NVMLCollector calls, answering from a table of GPUs.

The fake replaces exactly those functions (`FakeNVML.install`), with the same shapes the real
binding returns (ctypes-like structs with the same attribute names, MIG profile names as bytes,
NVMLError subclasses chosen by error code, memory info version 2 or FUNCTION_NOT_FOUND on an
"old driver"). Used by the collector's tests, the agent's, and the zero-touch test that runs
`manage.py gpuplane_agent` against the Kubernetes backend's fake API server.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

MIB = 1024 * 1024


def nvml_error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


@dataclass
class FakeGPUInstance:
    gi_id: int
    profile_id: int
    profile_name: bytes
    profile_memory_mb: int
    start: int
    size: int


@dataclass
class FakeMIGDevice:
    uuid: str
    gpu_instance: FakeGPUInstance
    memory_total_mib: int
    processes: list[tuple[int, int | None]] = field(default_factory=list)


@dataclass
class FakeGPU:
    uuid: str
    index: int
    utilization: int | None = 0
    memory_used_mib: int = 0  # as version 2 reports it: without the reserved memory
    memory_total_mib: int = 81559
    memory_reserved_mib: int = 480
    name: bytes | str = "NVIDIA H100 80GB HBM3"
    power_mw: int | None = 100_000
    power_limit_mw: int | None = 700_000
    temperature_c: int = 40
    sm_clock_mhz: int = 1980
    mig_mode: int = pynvml.NVML_DEVICE_MIG_DISABLE
    mig_devices: list[FakeMIGDevice | None] = field(default_factory=list)
    processes: list[tuple[int, int | None]] | None = field(default_factory=list)  # None: NO_PERMISSION
    lost_after_uuid: bool = False
    handle_lost: bool = False
    calls: list[str] = field(default_factory=list)  # pynvml functions asked about this GPU


class FakeNVML:
    """The pynvml functions NVMLCollector uses, answering from `gpus`; counts calls per function."""

    def __init__(self, gpus: list[FakeGPU], init_error: int | None = None, memory_v2: bool = True) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.memory_v2 = memory_v2  # False: a driver before nvmlDeviceGetMemoryInfo_v2
        self.initialised = 0
        self.calls: dict[str, int] = {}

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FakeNVML:
        for name in dir(self):
            if name.startswith("nvml"):
                monkeypatch.setattr(pynvml, name, getattr(self, name))
        return self

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def _gpu(self, handle: Any, name: str) -> FakeGPU:
        self._count(name)
        assert isinstance(handle, FakeGPU), f"{name} got a MIG handle"
        handle.calls.append(name)
        if handle.lost_after_uuid and name != "nvmlDeviceGetUUID":
            raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
        return handle

    # --- lifecycle
    def nvmlInit(self) -> None:
        self._count("nvmlInit")
        if self.init_error is not None:
            raise nvml_error(self.init_error)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self._count("nvmlShutdown")
        assert self.initialised > 0, "shutdown without init"
        self.initialised -= 1

    def _require_init(self) -> None:
        if self.initialised <= 0:
            raise nvml_error(pynvml.NVML_ERROR_UNINITIALIZED)

    # --- devices
    def nvmlDeviceGetCount(self) -> int:
        self._require_init()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGPU:
        self._require_init()
        gpu = self.gpus[index]
        if gpu.handle_lost:
            raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
        return gpu

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        self._count("nvmlDeviceGetUUID")
        return handle.uuid  # both GPUs and MIG devices

    def nvmlDeviceGetIndex(self, handle: Any) -> int:
        return self._gpu(handle, "nvmlDeviceGetIndex").index

    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        gpu = self._gpu(handle, "nvmlDeviceGetMigMode")
        return [gpu.mig_mode, gpu.mig_mode]

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> SimpleNamespace:
        gpu = self._gpu(handle, "nvmlDeviceGetUtilizationRates")
        if gpu.utilization is None or gpu.mig_mode == pynvml.NVML_DEVICE_MIG_ENABLE:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(gpu=gpu.utilization, memory=gpu.utilization // 2)

    def nvmlDeviceGetName(self, handle: Any) -> bytes | str:
        return self._gpu(handle, "nvmlDeviceGetName").name

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> SimpleNamespace:
        if version is not None:
            # pynvml looks the _v2 function up in the driver: FUNCTION_NOT_FOUND on an old one.
            assert version == pynvml.nvmlMemory_v2
            self._count("nvmlDeviceGetMemoryInfo_v2")
            if not self.memory_v2:
                raise nvml_error(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        if isinstance(handle, FakeMIGDevice):
            self._count("nvmlDeviceGetMemoryInfo")
            total = handle.memory_total_mib * MIB
            return SimpleNamespace(total=total, used=0, free=total, reserved=0)
        gpu = self._gpu(handle, "nvmlDeviceGetMemoryInfo")
        used = gpu.memory_used_mib * MIB + 512 * 1024  # half a MiB more: MiB are rounded down
        total, reserved = gpu.memory_total_mib * MIB, gpu.memory_reserved_mib * MIB
        if version is None:  # version 1: reserved memory counts as used
            return SimpleNamespace(total=total, used=used + reserved, free=total - used - reserved)
        return SimpleNamespace(version=version, total=total, reserved=reserved, used=used, free=total - used - reserved)

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetPowerUsage")
        if gpu.power_mw is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetEnforcedPowerLimit")
        if gpu.power_limit_mw is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.power_limit_mw

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._gpu(handle, "nvmlDeviceGetTemperature").temperature_c

    def nvmlDeviceGetClockInfo(self, handle: Any, clock_type: int) -> int:
        assert clock_type == pynvml.NVML_CLOCK_SM
        return self._gpu(handle, "nvmlDeviceGetClockInfo").sm_clock_mhz

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[SimpleNamespace]:
        if isinstance(handle, FakeMIGDevice):
            self._count("nvmlDeviceGetComputeRunningProcesses")
            found = handle.processes
        else:
            found = self._gpu(handle, "nvmlDeviceGetComputeRunningProcesses").processes
            if found is None:
                raise nvml_error(pynvml.NVML_ERROR_NO_PERMISSION)
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in found]

    # --- MIG
    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:
        self._gpu(handle, "nvmlDeviceGetMaxMigDeviceCount")
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> FakeMIGDevice:
        gpu = self._gpu(handle, "nvmlDeviceGetMigDeviceHandleByIndex")
        if index >= len(gpu.mig_devices) or gpu.mig_devices[index] is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)
        return gpu.mig_devices[index]

    def nvmlDeviceGetGpuInstanceId(self, mig: FakeMIGDevice) -> int:
        self._count("nvmlDeviceGetGpuInstanceId")
        return mig.gpu_instance.gi_id

    def nvmlDeviceGetGpuInstanceById(self, handle: Any, gi_id: int) -> FakeGPUInstance:
        gpu = self._gpu(handle, "nvmlDeviceGetGpuInstanceById")
        return next(m.gpu_instance for m in gpu.mig_devices if m is not None and m.gpu_instance.gi_id == gi_id)

    def nvmlGpuInstanceGetInfo(self, gpu_instance: FakeGPUInstance) -> SimpleNamespace:
        self._count("nvmlGpuInstanceGetInfo")
        return SimpleNamespace(
            id=gpu_instance.gi_id,
            profileId=gpu_instance.profile_id,
            placement=SimpleNamespace(start=gpu_instance.start, size=gpu_instance.size),
        )

    def nvmlDeviceGetGpuInstanceProfileInfoById(self, handle: Any, profile_id: int) -> SimpleNamespace:
        gpu = self._gpu(handle, "nvmlDeviceGetGpuInstanceProfileInfoById")
        instance = next(m.gpu_instance for m in gpu.mig_devices if m is not None and m.gpu_instance.profile_id == profile_id)
        return SimpleNamespace(id=profile_id, name=instance.profile_name, memorySizeMB=instance.profile_memory_mb)


def a100_mig_gpu() -> FakeGPU:
    """An A100-40GB in MIG mode: 3g.20gb at 0 (two compute instances), 1g.5gb at 4, 1g.5gb at 6."""
    gi_3g = FakeGPUInstance(gi_id=1, profile_id=9, profile_name=b"MIG 3g.20gb", profile_memory_mb=19968, start=0, size=4)
    gi_1g_a = FakeGPUInstance(gi_id=7, profile_id=19, profile_name=b"MIG 1g.5gb", profile_memory_mb=4864, start=4, size=1)
    gi_1g_b = FakeGPUInstance(gi_id=8, profile_id=19, profile_name=b"MIG 1g.5gb", profile_memory_mb=4864, start=6, size=1)
    return FakeGPU(
        uuid="GPU-a100-mig",
        index=1,
        utilization=55,  # NVML would refuse; the collector must not even report it
        memory_used_mib=9000,
        memory_total_mib=40960,
        power_mw=180_250,
        power_limit_mw=400_000,
        temperature_c=47,
        sm_clock_mhz=1410,
        mig_mode=pynvml.NVML_DEVICE_MIG_ENABLE,
        mig_devices=[
            # Listed out of placement order, with an empty slot: order and gaps must not matter.
            FakeMIGDevice("MIG-1g-b", gi_1g_b, 4864),
            None,
            FakeMIGDevice("MIG-3g-ci0", gi_3g, 19968, processes=[(300, 6 * 1024 * MIB)]),
            FakeMIGDevice("MIG-3g-ci1", gi_3g, 19968, processes=[(301, None)]),
            FakeMIGDevice("MIG-1g-a", gi_1g_a, 4864),
        ],
        processes=None,  # unprivileged: the parent handle refuses per-process data
    )
