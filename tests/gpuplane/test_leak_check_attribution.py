"""The broker leak check (tests/leaks.py) tells a running `make run`'s messages from the suite's own.

Every process `make run`'s supervisor starts sends messages with the header `gpuplane_server`
(its supervisor's pid, gpuplane/celery.py). While that supervisor runs, its messages are not the
suite's; a message without the header, or from a server that is gone, still fails the run.
"""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gpuplane.supervisor import ProcessSpec, Supervisor
from tests import leaks
from tests.conftest import BASE_DIR
from tests.redis_scratch import delete_prefixed_keys, scratch_prefix


def message(marker: str | None) -> str:
    headers = {"task": "gpuplane.tasks.ping_task", **({"gpuplane_server": marker} if marker else {})}
    return json.dumps({"body": "W10=", "headers": headers, "properties": {}})


def gone_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.mark.parametrize(("raw", "expected"), [
    (message(str(os.getpid())), True),   # a live "server"
    (message(None), False),              # no header: the suite's
    (message("not-a-pid"), False),
    ("{not json", False),
    (b"\xff\xfe", False),
])
def test_a_message_is_a_servers_only_with_the_header_of_a_live_supervisor(raw, expected):
    assert leaks.server_message(raw) is expected


def test_a_message_of_a_server_that_is_gone_counts_as_a_leak():
    assert not leaks.server_message(message(str(gone_pid())))


def test_the_check_skips_a_running_servers_message_files_but_not_the_suites(tmp_path):
    queue = tmp_path / "var" / "celery-broker" / "queue"
    queue.mkdir(parents=True)
    before = leaks.snapshot("", [tmp_path / "var"])

    (queue / "1_a.celery.msg").write_text(message(str(os.getpid())))
    (queue / "2_b.celery.msg").write_text(message(None))
    (queue / "3_c.celery.msg").write_text(message(str(gone_pid())))
    (queue / ".4_d.celery.msg.tmp").write_text("")  # being written: not a message yet

    assert leaks.leaks(before, leaks.snapshot("", [tmp_path / "var"])) == [
        f"embedded broker: new message file {queue / '2_b.celery.msg'}",
        f"embedded broker: new message file {queue / '3_c.celery.msg'}",
    ]


SEND_FROM_A_SERVER = """
import os
os.environ.update(DJANGO_SETTINGS_MODULE="gpuplane.settings", GPUPLANE_VAR_DIR={var!r})
for name in ("REDIS_URL", "DATABASE_URL"):
    os.environ.pop(name, None)
import django
django.setup()
from gpuplane.tasks import ping_task
ping_task.delay()
print("SENT", flush=True)
import time
time.sleep(60)
"""


def test_a_message_sent_by_a_process_of_make_runs_supervisor_is_not_a_leak_while_it_runs(tmp_path):
    var = tmp_path / "var"
    before = leaks.snapshot("", [var])
    out = io.StringIO()
    supervisor = Supervisor([ProcessSpec("beat", (sys.executable, "-c", SEND_FROM_A_SERVER.format(var=str(var))))],
                            out, stop_timeout_s=10, cwd=str(BASE_DIR))
    found_while_running: list[list[str]] = []

    def check_then_stop() -> None:
        deadline = time.monotonic() + 60
        while "beat     | SENT" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.1)
        found_while_running.append(leaks.leaks(before, leaks.snapshot("", [var])))
        supervisor.request_stop()

    checker = threading.Thread(target=check_then_stop)
    checker.start()
    supervisor.run()
    checker.join()

    files = list(Path(var, "celery-broker", "queue").glob("*.msg"))
    assert len(files) == 1, out.getvalue()
    assert json.loads(files[0].read_text())["headers"]["gpuplane_server"] == str(os.getpid())
    assert found_while_running == [[]]
    # (This supervisor ran inside the test process, which is still alive; a server that is gone
    # makes its messages leaks again: test_a_message_of_a_server_that_is_gone_counts_as_a_leak.)


@pytest.mark.redis
@pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="REDIS_URL is not set: no Redis to check")
def test_a_redis_queue_grown_by_a_running_servers_messages_is_not_a_leak():
    import redis

    url = os.environ["REDIS_URL"]
    prefix = scratch_prefix()
    server_queue, suite_queue = f"{prefix}server".encode(), f"{prefix}suite".encode()
    client = redis.Redis.from_url(url)
    client.rpush(suite_queue, message(None))
    try:
        before = leaks.snapshot(url, [])
        client.rpush(server_queue, message(str(os.getpid())))
        client.rpush(suite_queue, message(str(os.getpid())), message(None))
        found = leaks.leaks(before, leaks.snapshot(url, []))
    finally:
        delete_prefixed_keys(url, prefix)
        client.close()

    db = int(leaks.urlsplit(url).path.lstrip("/") or 0)
    # Only this test's keys: a test running beside it (pytest-xdist) may write its own meanwhile.
    assert [line for line in found if prefix in line] == [f"redis db {db}: {suite_queue!r} grew from 1 to 2"]
