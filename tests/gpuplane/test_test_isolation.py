"""The suite enqueues only into brokers it creates, and its leak check sees a message that escapes.

tests/settings.py gives the suite an in-memory broker and a scratch var/; tests/leaks.py is the
session check (tests/conftest.py) that fails a run leaving messages in a broker it did not create.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.conf import settings

from gpuplane.celery import app
from gpuplane.tasks import ping_task
from tests import leaks
from tests.conftest import BASE_DIR
from tests.redis_scratch import SCRATCH_PREFIX, delete_prefixed_keys, scratch_prefix


def test_the_suite_enqueues_into_an_in_memory_broker_of_its_own():
    assert app.conf.broker_url == "memory://"
    assert settings.CACHES["default"]["BACKEND"] == "django.core.cache.backends.locmem.LocMemCache"
    assert settings.CACHES["fleet"]["BACKEND"] == "django.core.cache.backends.locmem.LocMemCache"
    # Whatever a child process or the embedded broker writes goes under a scratch folder, not var/.
    assert not Path(settings.VAR_DIR).is_relative_to(BASE_DIR)
    assert os.environ["GPUPLANE_VAR_DIR"] == str(settings.VAR_DIR)


def test_a_task_a_test_sends_reaches_no_developer_broker(tmp_path):
    developer_var = BASE_DIR / "var"
    before = leaks.snapshot(os.environ.get("REDIS_URL", ""), [developer_var])

    ping_task.delay()

    found = leaks.leaks(before, leaks.snapshot(os.environ.get("REDIS_URL", ""), [developer_var]))
    # Keys under another test's scratch prefix are that test's (pytest-xdist runs one beside this).
    assert [line for line in found if SCRATCH_PREFIX not in line] == []


def test_the_leak_check_reports_a_message_file_left_in_an_embedded_broker(tmp_path):
    queue = tmp_path / "var" / "celery-broker" / "queue"
    queue.mkdir(parents=True)
    (queue / "old.msg").write_text("{}")
    before = leaks.snapshot("", [tmp_path / "var"])

    (queue / "new.msg").write_text("{}")

    assert leaks.leaks(before, leaks.snapshot("", [tmp_path / "var"])) == [
        f"embedded broker: new message file {queue / 'new.msg'}"
    ]


@pytest.mark.redis
@pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="REDIS_URL is not set: no Redis to check")
def test_the_leak_check_reports_a_new_key_and_a_queue_that_grew_in_any_redis_database():
    import redis

    url = os.environ["REDIS_URL"]
    prefix = scratch_prefix()
    other_db = leaks.redis_url_for_db(url, 15)
    queue_key, new_key = f"{prefix}queue".encode(), f"{prefix}new".encode()
    redis.Redis.from_url(url).rpush(queue_key, "first")
    try:
        before = leaks.snapshot(url, [])
        redis.Redis.from_url(url).rpush(queue_key, "second")
        redis.Redis.from_url(other_db).set(new_key, "x")

        found = leaks.leaks(before, leaks.snapshot(url, []))
    finally:
        delete_prefixed_keys(url, prefix)
        delete_prefixed_keys(other_db, prefix)

    db = int(leaks.urlsplit(url).path.lstrip("/") or 0)
    assert f"redis db {db}: {queue_key!r} grew from 1 to 2" in found
    assert f"redis db 15: new key {new_key!r} (size 1)" in found
