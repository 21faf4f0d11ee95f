"""gpuplane/allocator.py: a scheduling process keeps its freed heap instead of faulting it in again.

Each check runs in a fresh interpreter: malloc's thresholds are per process and cannot be undone.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Twenty cycles that allocate and free what a scheduling cycle at thousands of nodes does
# (16 candidate x GPU arrays of 256 KiB and one of 4 MiB); prints the page faults they cost
# after a warm-up, and whether tune() is in effect.
PROBE = """
import resource, sys
sys.path.insert(0, {root!r})
import numpy as np
from gpuplane import allocator
if sys.argv[1] == "tune":
    allocator.tune()
elif sys.argv[1] == "django":
    import os, django
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuplane.settings")
    django.setup()

def cycle():
    arrays = [np.ones(1 << 15) for _ in range(16)]
    big = np.ones(1 << 19)
    del arrays, big

for _ in range(5):
    cycle()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    cycle()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before, allocator.is_tuned())
"""


def _probe(mode: str, **env: str) -> tuple[int, bool]:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("MALLOC_")}
    environment.update(env)
    out = subprocess.run([sys.executable, "-c", PROBE.format(root=str(ROOT)), mode], env=environment,
                         capture_output=True, text=True, check=True, timeout=120).stdout.split()
    return int(out[0]), out[1] == "True"


pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or os.path.exists("/etc/alpine-release"),
                                reason="glibc's mallopt")


def test_untuned_process_faults_the_freed_arrays_in_again() -> None:
    faults, tuned = _probe("plain")
    assert not tuned
    assert faults > 10_000  # ~1,500 pages per cycle handed back and faulted in again


def test_tuned_process_keeps_the_freed_heap() -> None:
    faults, tuned = _probe("tune")
    assert tuned
    assert faults < 500


def test_every_django_process_is_tuned_at_start() -> None:
    faults, tuned = _probe("django")
    assert tuned
    assert faults < 500


def test_operator_glibc_variables_win() -> None:
    faults, tuned = _probe("tune", MALLOC_TRIM_THRESHOLD_="0", MALLOC_MMAP_THRESHOLD_="65536")
    assert not tuned
    assert faults > 10_000
