"""bench/nvml_check.py end to end without a GPU: a faked NVML in every process it starts (the agent's
included) and a fake nvidia-smi answering from the same table.

The processes cannot import the kubernetes client, psycopg, gunicorn or redis: the script needs only
the runtime requirements without them (what the device machine is given).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MIB = 1024 * 1024
TABLE = [
    {"uuid": "GPU-f6068136-aaaa-4a2b-8c3d-5e6f7a8b9c0d", "index": 0, "utilization": 37, "memory_used_mib": 9421,
     "memory_reserved_mib": 480, "power_mw": 312_500, "temperature_c": 54, "sm_clock_mhz": 1980,
     "processes": [[4242, 9400 * MIB]]},
    {"uuid": "GPU-f6068136-bbbb-4a2b-8c3d-5e6f7a8b9c0d", "index": 1, "utilization": 0, "memory_used_mib": 0,
     "memory_reserved_mib": 480, "power_mw": 70_000, "temperature_c": 31, "sm_clock_mhz": 345, "processes": []},
]

SITECUSTOMIZE = """
    import importlib.abc, json, os, sys

    class _Blocked(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {"kubernetes", "psycopg", "gunicorn", "redis"}:
                raise ImportError(f"{name} is not installed on the device machine")
            return None

    sys.meta_path.insert(0, _Blocked())
    if os.environ.get("GPUPLANE_FAKE_NVML"):
        import pytest
        from tests.nodes.fake_nvml import FakeGPU, FakeNVML

        gpus = [FakeGPU(**{**gpu, "processes": [tuple(p) for p in gpu["processes"]]})
                for gpu in json.loads(os.environ["GPUPLANE_FAKE_NVML"])]
        FakeNVML(gpus).install(pytest.MonkeyPatch())
"""


def test_it_runs_the_agent_with_zero_manual_steps_and_compares_with_nvidia_smi(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(textwrap.dedent(SITECUSTOMIZE))
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!{sys.executable}\nimport runpy, sys\nsys.argv[0] = 'nvidia-smi'\n"
                   f"runpy.run_path({str(ROOT / 'tests/nodes/agent/fake_nvidia_smi.py')!r}, run_name='__main__')\n")
    smi.chmod(0o755)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("DJANGO_", "GPUPLANE_", "DATABASE_"))}
    env.update(PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}", GPUPLANE_FAKE_NVML=json.dumps(TABLE))

    done = subprocess.run(
        [sys.executable, "bench/nvml_check.py", "--out", str(tmp_path / "out"), "--nvidia-smi", str(smi), "--node", "h100-box"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "out" / "nvml_check.json").read_text())
    zero = result["zero_touch"]
    assert zero["uuids_before_agent"] == ["GPU-h100-box-0", "GPU-h100-box-1"]  # placeholders, as on a fresh node
    assert zero["uuids_after_agent"] == [gpu["uuid"] for gpu in TABLE] == zero["nvidia_smi_uuids"]
    assert zero["first_batch_stored"] and zero["sync_kept_them_and_applied_the_report"]
    gpu0 = result["gpus"][0]["metrics"]
    # Memory used apart from the reserved (NVML memory info v2), as nvidia-smi shows it.
    assert (gpu0["memory.used"]["agent"], gpu0["memory.reserved"]["agent"]) == (9421, 480)
    assert gpu0["power.draw"]["agent"] == 312.5 and gpu0["enforced.power.limit"]["agent"] == 700.0
    assert gpu0["processes"]["agent"] == {"4242": 9400}  # pid -> MiB (JSON keys are text)
    assert all(metric["match"] for gpu in result["gpus"] for metric in gpu["metrics"].values())
    table = (tmp_path / "out" / "nvml_check.md").read_text()
    assert "| 0 NVIDIA H100 80GB HBM3 | memory.reserved | 480 | 480 | 480 | ±0 | yes |" in table
    assert "HOLDS" in done.stdout
