"""lifecycle.locks: single_run (one holder at a time, released only by its owner) and claim_slot."""
from __future__ import annotations

import time
import uuid

import pytest
from django.core.cache import cache

from lifecycle.locks import claim_slot, interval_slot, single_run

KEY = "gpuplane:test:lock"
# Redis and the file cache count whole seconds; this is past a 1 s lease on both.
PAST_ONE_SECOND_S = 1.2


@pytest.fixture(autouse=True)
def private_cache_keys(settings):
    """A key prefix of our own: a shared Redis (CI) or a running `make run` never sees our keys."""
    settings.CACHES = {"default": {**settings.CACHES["default"], "KEY_PREFIX": f"test-{uuid.uuid4().hex}"}}
    yield
    cache.delete_many([KEY, "gpuplane:test:slot:7"])


def test_it_lets_the_first_holder_in_and_refuses_the_second():
    with single_run(KEY, ttl_s=60) as first:
        with single_run(KEY, ttl_s=60) as second:
            assert (first, second) == (True, False)


def test_the_lock_is_free_again_once_its_holder_is_done():
    with single_run(KEY, ttl_s=60) as first:
        assert first
    assert cache.get(KEY) is None

    with single_run(KEY, ttl_s=60) as again:
        assert again


def test_a_failing_holder_releases_the_lock():
    with pytest.raises(RuntimeError), single_run(KEY, ttl_s=60):
        raise RuntimeError("the task failed")

    assert cache.get(KEY) is None


def test_a_refused_caller_leaves_the_holders_lock_alone():
    cache.add(KEY, "a-slow-previous-run", timeout=60)

    with single_run(KEY, ttl_s=60) as acquired:
        assert not acquired

    assert cache.get(KEY) == "a-slow-previous-run"


def test_only_the_owner_releases_the_lock():
    """Ours expired mid-run and another run took the key: leaving the `with` must not free theirs."""
    with single_run(KEY, ttl_s=60) as acquired:
        assert acquired
        cache.set(KEY, "the-next-run", timeout=60)  # what expiry followed by another add leaves

    assert cache.get(KEY) == "the-next-run"


def test_the_lock_expires_after_its_ttl_and_the_late_owner_leaves_the_new_one_alone():
    first = single_run(KEY, ttl_s=1)
    assert first.__enter__() is True
    time.sleep(PAST_ONE_SECOND_S)  # a run past its lease (or killed) never released it: expiry did

    with single_run(KEY, ttl_s=60) as second:
        assert second
        held_by_second = cache.get(KEY)
        first.__exit__(None, None, None)  # the late first run ends while the second holds the lock
        assert cache.get(KEY) == held_by_second

    assert cache.get(KEY) is None


def test_a_slot_is_claimed_once_until_it_expires():
    assert claim_slot("gpuplane:test:slot:7", ttl_s=1) is True
    assert claim_slot("gpuplane:test:slot:7", ttl_s=1) is False

    time.sleep(PAST_ONE_SECOND_S)

    assert claim_slot("gpuplane:test:slot:7", ttl_s=1) is True


@pytest.mark.parametrize(
    ("interval_s", "now_s", "slot"),
    [
        (30, 0.0, 0),
        (30, 29.9, 0),  # floor(29.9 / 30) = 0
        (30, 30.0, 1),
        (30, 1_700_000_015.0, 56_666_667),  # 1,700,000,015 / 30 = 56,666,667.17
        (3600, 7199.0, 1),
    ],
)
def test_slots_are_aligned_to_the_unix_epoch(interval_s, now_s, slot):
    assert interval_slot(interval_s, now_s) == slot


def test_the_slot_defaults_to_now():
    before = int(time.time() // 30)
    slot = interval_slot(30)
    after = int(time.time() // 30)

    assert before <= slot <= after
