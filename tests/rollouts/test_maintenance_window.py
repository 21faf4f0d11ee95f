"""Maintenance windows (scheduler/core/maintenance_window.py): pure, no database.

Times are written in UTC with the local wall clock in the comment, so each DST case can be
checked against the zone's rules by hand (Europe/Berlin: CET = UTC+1, CEST = UTC+2; clocks go
02:00 -> 03:00 on 2026-03-29 and 03:00 -> 02:00 on 2026-10-25).
"""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scheduler.core.maintenance_window import InvalidWindow, MaintenanceWindow, parse_window, window_state


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def window(cron: str, minutes: int, zone: str = "Europe/Berlin") -> MaintenanceWindow:
    return parse_window({"cron": cron, "duration_minutes": minutes, "timezone": zone})


SATURDAY_NIGHT = window("0 2 * * SAT", 240)


@pytest.mark.parametrize(("now", "inside"), [
    ("2026-01-03T00:59:00+00:00", False),  # Sat 01:59 CET: not yet
    ("2026-01-03T01:00:00+00:00", True),  # Sat 02:00 CET: opens
    ("2026-01-03T04:59:00+00:00", True),  # Sat 05:59 CET
    ("2026-01-03T05:00:00+00:00", False),  # Sat 06:00 CET: 240 min later, closed
    ("2026-07-04T00:00:00+00:00", True),  # Sat 02:00 CEST: the same wall time in summer
    ("2026-07-04T23:30:00+00:00", False),  # Sun 01:30 CEST
    ("2026-01-02T01:00:00+00:00", False),  # Fri 02:00 CET: wrong day
])
def test_the_cron_matches_the_wall_clock_of_the_zone_in_winter_and_in_summer(now, inside):
    assert window_state(SATURDAY_NIGHT, at(now)).open is inside


def test_closed_it_says_when_it_next_opens_in_the_window_zone():
    state = window_state(SATURDAY_NIGHT, at("2026-01-05T12:00:00+00:00"))  # Monday
    assert not state.open and state.closes_at is None
    assert state.next_opens_at == at("2026-01-10T01:00:00+00:00")  # Sat 02:00 CET
    assert state.next_opens_at.isoformat() == "2026-01-10T02:00:00+01:00"


def test_open_it_says_when_it_closes_and_the_opening_after():
    state = window_state(SATURDAY_NIGHT, at("2026-07-04T01:00:00+00:00"))  # Sat 03:00 CEST
    assert state.open
    assert state.closes_at.isoformat() == "2026-07-04T06:00:00+02:00"
    assert state.next_opens_at.isoformat() == "2026-07-11T02:00:00+02:00"


def test_a_wall_time_skipped_in_spring_opens_when_the_clocks_jump():
    nightly = window("30 2 * * *", 60)  # 02:30 does not exist on 2026-03-29
    before = window_state(nightly, at("2026-03-29T00:50:00+00:00"))  # 01:50 CET
    assert not before.open
    assert before.next_opens_at.isoformat() == "2026-03-29T03:00:00+02:00"  # the jump, 01:00 UTC
    assert window_state(nightly, at("2026-03-29T01:00:00+00:00")).open  # 03:00 CEST
    assert window_state(nightly, at("2026-03-29T01:59:00+00:00")).open  # 03:59 CEST: 59 real minutes
    assert not window_state(nightly, at("2026-03-29T02:00:00+00:00")).open  # 04:00 CEST: 60 real minutes
    # The day after, 02:30 exists again.
    assert window_state(nightly, at("2026-03-29T02:00:00+00:00")).next_opens_at.isoformat() == (
        "2026-03-30T02:30:00+02:00")


def test_a_wall_time_repeated_in_autumn_opens_once_at_its_first_occurrence():
    nightly = window("30 2 * * *", 60)  # 02:30 happens at 00:30 UTC (CEST) and at 01:30 UTC (CET)
    assert not window_state(nightly, at("2026-10-25T00:29:00+00:00")).open  # 02:29 CEST
    first = window_state(nightly, at("2026-10-25T00:30:00+00:00"))  # 02:30 CEST
    assert first.open
    # 60 real minutes: 02:30 CET (PEP 495: a repeated time compares unequal across zones, so in UTC).
    assert first.closes_at.astimezone(UTC) == at("2026-10-25T01:30:00+00:00")
    assert first.closes_at.isoformat() == "2026-10-25T02:30:00+01:00"
    assert not window_state(nightly, at("2026-10-25T01:30:00+00:00")).open  # the second 02:30 opens nothing
    later = window_state(nightly, at("2026-10-25T01:45:00+00:00"))  # 02:45 CET
    assert not later.open
    assert later.next_opens_at.isoformat() == "2026-10-26T02:30:00+01:00"


def test_the_duration_is_elapsed_time_across_a_clock_change():
    night = window("0 1 * * *", 240)  # opens 01:00 CEST = 23:00 UTC the day before
    state = window_state(night, at("2026-10-25T02:30:00+00:00"))  # 03:30 CET, 3.5 real hours in
    assert state.open
    # 4 real hours after 01:00 CEST is 04:00 CET: the wall clock shows 3 hours.
    assert state.closes_at.isoformat() == "2026-10-25T04:00:00+01:00"
    assert state.closes_at - at("2026-10-24T23:00:00+00:00") == timedelta(hours=4)
    assert not window_state(night, at("2026-10-25T03:00:00+00:00")).open


def test_a_half_hour_clock_change_lord_howe():
    # Australia/Lord_Howe: +10:30 -> +11:00 at 02:00 on 2026-10-04 (02:00-02:29 do not exist).
    early = window("15 2 * * *", 30, zone="Australia/Lord_Howe")
    state = window_state(early, at("2026-10-03T15:00:00+00:00"))  # 01:30 +10:30
    assert state.next_opens_at.isoformat() == "2026-10-04T02:30:00+11:00"


def test_a_window_at_least_as_long_as_its_period_is_always_open():
    hourly = window("0 * * * *", 60, zone="UTC")
    for minute in (0, 17, 59):
        assert window_state(hourly, at(f"2026-05-05T10:{minute:02d}:00+00:00")).open


def test_now_must_carry_a_time_zone():
    with pytest.raises(ValueError, match="timezone-aware"):
        window_state(SATURDAY_NIGHT, datetime(2026, 1, 3, 2, 0))


@pytest.mark.parametrize(("data", "field"), [
    ({"cron": "0 2 * * SAT *"}, "cron"),  # six fields (seconds) are not crontab(5)
    ({"cron": "61 2 * * *"}, "cron"),
    ({"cron": "0 2 * * FUNDAY"}, "cron"),
    ({"cron": "0 0 30 2 *"}, "cron"),  # 30 February never comes
    ({"cron": ""}, "cron"),
    ({"cron": 5}, "cron"),
    ({"timezone": "Mars/Olympus_Mons"}, "timezone"),
    ({"timezone": "../../etc/passwd"}, "timezone"),
    ({"timezone": ""}, "timezone"),
    ({"duration_minutes": 0}, "duration_minutes"),
    ({"duration_minutes": -30}, "duration_minutes"),
    ({"duration_minutes": True}, "duration_minutes"),
    ({"duration_minutes": "60"}, "duration_minutes"),
    ({"duration_minutes": 10**9}, "duration_minutes"),
])
def test_an_invalid_window_is_refused_with_a_message_for_its_field(data, field):
    good = {"cron": "0 2 * * SAT", "duration_minutes": 240, "timezone": "Europe/Berlin"}
    with pytest.raises(InvalidWindow) as refused:
        parse_window({**good, **data})
    assert list(refused.value.errors) == [field]
    assert refused.value.errors[field][0]


def test_every_bad_field_is_reported_at_once():
    with pytest.raises(InvalidWindow) as refused:
        parse_window({"cron": "nope", "duration_minutes": 0, "timezone": "Nowhere/City"})
    assert set(refused.value.errors) == {"cron", "duration_minutes", "timezone"}


def test_a_valid_window_round_trips_with_its_spacing_normalised():
    parsed = parse_window({"cron": " 0  2 * *   SAT ", "duration_minutes": 240, "timezone": "Europe/Berlin"})
    assert parsed.as_dict() == {"cron": "0 2 * * SAT", "duration_minutes": 240, "timezone": "Europe/Berlin"}
