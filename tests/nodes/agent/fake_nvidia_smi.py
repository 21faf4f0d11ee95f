"""A stand-in for `nvidia-smi --query-gpu=... --format=csv,noheader,nounits` (and --query-compute-apps),
answering from the same GPU table as the faked NVML (env GPUPLANE_FAKE_NVML, JSON), so that
bench/nvml_check.py can be run end to end without a GPU. Only the queries that script makes."""
from __future__ import annotations

import json
import os
import sys

MIB = 1024 * 1024


def field(gpu: dict, name: str) -> str:
    values = {
        "index": gpu["index"], "uuid": gpu["uuid"], "name": gpu.get("name", "NVIDIA H100 80GB HBM3"),
        "memory.total": gpu.get("memory_total_mib", 81559), "memory.reserved": gpu.get("memory_reserved_mib", 480),
        "memory.used": gpu.get("memory_used_mib", 0), "power.draw": f"{gpu.get('power_mw', 100_000) / 1000:.2f}",
        "enforced.power.limit": f"{gpu.get('power_limit_mw', 700_000) / 1000:.2f}",
        "temperature.gpu": gpu.get("temperature_c", 40), "clocks.sm": gpu.get("sm_clock_mhz", 1980),
        "utilization.gpu": gpu.get("utilization", 0), "mig.mode.current": "Disabled", "driver_version": "580.159.04",
    }
    return str(values[name])


def main(argv: list[str]) -> int:
    table = json.loads(os.environ["GPUPLANE_FAKE_NVML"])
    query = next(arg for arg in argv if arg.startswith("--query-"))
    kind, _, fields = query.partition("=")
    if kind == "--query-compute-apps":
        for gpu in table:
            for pid, used in gpu.get("processes", []):
                print(f"{gpu['uuid']}, {pid}, {'[N/A]' if used is None else used // MIB}")
        return 0
    for gpu in table:
        print(", ".join(field(gpu, name) for name in fields.split(",")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
