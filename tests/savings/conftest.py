"""Each savings test starts with the current sampling slot unclaimed (the claim lives in the cache)."""
from __future__ import annotations

import pytest
from django.core.cache import cache

from lifecycle.locks import interval_slot
from savings.tasks import RECORD_SLOT_KEY


@pytest.fixture(autouse=True)
def unclaimed_savings_slot(settings):
    keys = [RECORD_SLOT_KEY.format(slot=slot) for slot in (interval_slot(settings.SAVINGS_SAMPLE_INTERVAL_S), 7)]
    cache.delete_many(keys)
    yield
    cache.delete_many(keys)
