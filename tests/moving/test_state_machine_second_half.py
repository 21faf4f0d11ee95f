"""The second half of the mover's random scenarios (issue 18, must-show 1): see test_state_machine.py.

A file of its own so that pytest-xdist (``--dist loadfile``) can run it beside the first half.
"""
from __future__ import annotations

import pytest

from tests.moving.test_state_machine import SCENARIOS, run_scenarios

pytestmark = pytest.mark.django_db


def test_moves_never_leak_lose_or_break_a_budget_under_any_sequence_second_half():
    run_scenarios(SCENARIOS // 2)
