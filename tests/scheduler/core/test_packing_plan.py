"""gpuplane's sharing plan: best-fit decreasing patterns and the on-plan steps they allow."""
from __future__ import annotations

import numpy as np

from scheduler.core.packing_plan import SharingPlan, best_fit_decreasing


def test_best_fit_decreasing_packs_each_size_onto_the_tightest_gpu():
    # Largest first: 810 (190 left), 650 (350), 470 (530), 470 -> the 530 (60), 320 -> the 350
    # (30, not the 530 that is gone), 160 -> the 190 beside the 810 (30).
    patterns = best_fit_decreasing([470, 160, 650, 320, 810, 470])
    assert patterns == {(810, 160): 1, (650, 320): 1, (470, 470): 1}


def test_best_fit_decreasing_ignores_sizes_that_are_not_a_share_of_one_gpu():
    assert best_fit_decreasing([0, 1200, 400]) == {(400,): 1}


def test_a_step_is_on_plan_when_a_pattern_holds_the_used_milli_and_one_more_of_the_pod():
    plan = SharingPlan.build([650, 320, 470, 470, 230, 230, 230, 230])
    assert plan.patterns == {(650, 320): 1, (470, 470): 1, (230, 230, 230, 230): 1}
    used = np.array([[0, 320, 470, 650], [230, 460, 690, 920]])
    # A 320 opens a GPU (650+320) or joins a 650; beside a 470 it leaves 210: off plan.
    assert plan.on_plan(320, used).tolist() == [[True, False, False, True], [False, False, False, False]]
    # A 230 opens a GPU or joins one to three 230s; a fourth 230 would be 920 + 230: too much.
    assert plan.on_plan(230, used).tolist() == [[True, False, False, False], [True, True, True, False]]
    assert plan.on_plan(470, used)[0].tolist() == [True, False, True, False]


def test_a_size_the_list_does_not_have_is_never_on_plan():
    plan = SharingPlan.build([500, 500])
    assert not plan.on_plan(300, np.array([0, 500])).any()
    assert plan.on_plan(500, np.array([0, 500, 1000])).tolist() == [True, True, False]
