"""Keep freed heap memory in the process instead of handing it back to the kernel after every decision.

A scheduling cycle allocates a few MiB of numpy temporaries (candidate x GPU arrays at thousands of
nodes) and frees them when it returns. glibc's malloc then trims the top of the heap back to the
kernel (its trim threshold is only twice its mmap threshold, at most 64 MiB and usually far less),
so the next cycle page-faults every one of those pages in again, zeroed: about a third of a
decision's time at 5,000 nodes (BENCHMARKS.md, "Placement core"). Raising the trim threshold keeps
those pages; fixing the mmap threshold at glibc's own dynamic ceiling (32 MiB) sends the cycle's
arrays to the heap from the first call instead of after glibc has learned it.

Every process that schedules calls ``tune()`` once at start: Django's app loading
(``gpuplane.apps``) does it for the web, webhook, workers and beat; the core benchmarks
(``bench/placement.py``, ``bench/trace_replay.py``) call it as those processes do. The cost is
memory that stays mapped: at most ``TRIM_THRESHOLD_BYTES`` of freed heap per process.

Not glibc (musl, macOS), or an operator who set glibc's own ``MALLOC_*_`` variables: nothing is
changed. Django-free, so the pure core's benchmarks can use it.
"""
from __future__ import annotations

import ctypes
import os
from collections.abc import Callable

# mallopt parameters (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

TRIM_THRESHOLD_BYTES = 128 * 1024 * 1024
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit
OPERATOR_VARIABLES = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_")

_tuned: bool | None = None


def tune() -> bool:
    """Set the thresholds once per process; True when they are in effect (this call or an earlier one)."""
    global _tuned
    if _tuned is not None:
        return _tuned
    _tuned = False
    if any(name in os.environ for name in OPERATOR_VARIABLES):
        return False  # the operator's own glibc settings win
    mallopt = _mallopt()
    if mallopt is None:
        return False
    # mallopt answers 1 on success; musl's stub answers 0 and changes nothing.
    mmap_set = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
    trim_set = mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1
    _tuned = mmap_set and trim_set
    return _tuned


def is_tuned() -> bool:
    """Whether ``tune()`` has set the thresholds in this process."""
    return bool(_tuned)


def _mallopt() -> Callable[[int, int], int] | None:
    """glibc's ``mallopt``, or None where the C library has none (musl, macOS)."""
    try:
        # The process's own symbols, libc's among them: no library search (find_library runs ldconfig).
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt
