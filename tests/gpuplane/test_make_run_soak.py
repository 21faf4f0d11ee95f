"""`make run` stays up with beat ticking every second while another job loads a core.

The short version (15 s, longer until 8 ticks ran) of bench/make_run_soak.py (30 minutes at beat's 5-second ticks with both cores
loaded: BENCHMARKS.md, "make run under load"): the real supervisor, web, worker and beat on the
embedded defaults (SQLite, the embedded broker), in a scratch var/ folder.
"""
from __future__ import annotations

import socket
from pathlib import Path

from bench.make_run_soak import soak


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_make_run_stays_up_with_one_second_ticks_under_load(tmp_path: Path):
    log = tmp_path / "supervisor.log"
    result = soak(minutes=0.25, tick_s=1, port=free_port(), load=1, log=log, until_ticks=8)
    tail = "\n".join(log.read_text().splitlines()[-40:])

    assert result.supervisor_alive and result.crash_lines == [], (result, tail)
    assert result.web_checks_ok >= 3 and result.web_checks_failed == 0, (result, tail)
    # The one-second tasks went through the embedded broker to the worker, tick after tick (beside
    # another test worker the run may go on up to 90 s for them: slower, never stuck).
    assert result.tasks_succeeded.get("rollouts.tasks.reconcile_rollouts_task", 0) >= 8, (result.tasks_succeeded, tail)
