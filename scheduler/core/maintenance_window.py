"""Maintenance windows: when a rollout may start disrupting nodes (docs/design.md section 5, step 1).

Pure Python. A window is a cron expression for when it opens (the five fields of crontab(5):
minute, hour, day of month, month, day of week), a duration in minutes, and an IANA time zone.
The fields match the wall clock in that zone, so ``0 2 * * SAT`` in ``Europe/Berlin`` opens at
02:00 Berlin time in winter and in summer alike. Across a daylight-saving change it behaves as
cron does:

- a wall time the clocks skip (spring forward) opens the window when the clocks jump, at the
  first instant after the gap;
- a wall time that happens twice (fall back) opens it once, at its first occurrence;
- the duration is elapsed time: a 240-minute window stays open four real hours even when the
  clocks change inside it.

``parse_window`` checks a window (``InvalidWindow`` with messages per field);
``window_state(window, now)`` says whether ``now`` is inside it and when it next opens.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, CroniterNotAlphaError, croniter

CRON_FIELDS = 5
MAX_DURATION_MINUTES = 366 * 24 * 60
# Searches start this far (wall clock) to either side of ``now``: more than any clock change, so
# no opening is missed where the wall clock and elapsed time disagree.
_SEARCH_MARGIN = timedelta(hours=3)
# A cron that matches no date (``0 0 30 2 *``) makes croniter give up; so do we.
_CRON_ERRORS = (CroniterBadCronError, CroniterBadDateError, CroniterNotAlphaError, ValueError, KeyError)


class InvalidWindow(ValueError):
    """A window that cannot be used; ``errors`` holds the messages per field."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__("; ".join(f"{field}: {' '.join(messages)}" for field, messages in errors.items()))
        self.errors = errors


@dataclass(frozen=True)
class MaintenanceWindow:
    cron: str
    duration_minutes: int
    timezone: str

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    @property
    def duration(self) -> timedelta:
        return timedelta(minutes=self.duration_minutes)

    def as_dict(self) -> dict[str, Any]:
        return {"cron": self.cron, "duration_minutes": self.duration_minutes, "timezone": self.timezone}

    def describe(self) -> str:
        return f"{self.cron} ({self.timezone}) for {self.duration_minutes} min"


@dataclass(frozen=True)
class WindowState:
    """``open``: ``now`` is inside; ``closes_at``: when the window ``now`` is in ends (None when
    closed); ``next_opens_at``: the first opening after ``now``, in the window's zone (None: a
    cron that matches no date for decades, such as 29 February on a Monday, found none)."""

    open: bool
    closes_at: datetime | None
    next_opens_at: datetime | None


def parse_window(data: Mapping[str, Any]) -> MaintenanceWindow:
    """``{"cron", "duration_minutes", "timezone"}`` as a window, or ``InvalidWindow``."""
    errors: dict[str, list[str]] = {}
    cron = data.get("cron")
    duration = data.get("duration_minutes")
    timezone = data.get("timezone")
    if not isinstance(cron, str) or len(cron.split()) != CRON_FIELDS:
        errors["cron"] = ["Write the five cron fields: minute hour day-of-month month day-of-week (e.g. 0 2 * * SAT)."]
    elif not _cron_matches_some_date(cron):
        errors["cron"] = [f"{cron!r} is not a cron expression that ever matches (crontab(5) syntax)."]
    if isinstance(duration, bool) or not isinstance(duration, int) or not 0 < duration <= MAX_DURATION_MINUTES:
        errors["duration_minutes"] = [f"Give a whole number of minutes from 1 to {MAX_DURATION_MINUTES}."]
    if not isinstance(timezone, str) or not _known_zone(timezone):
        errors["timezone"] = [f"Unknown time zone {timezone!r}: give an IANA name such as Europe/Berlin or UTC."]
    if errors:
        raise InvalidWindow(errors)
    assert isinstance(cron, str) and isinstance(duration, int) and isinstance(timezone, str)
    return MaintenanceWindow(" ".join(cron.split()), duration, timezone)


def window_state(window: MaintenanceWindow, now: datetime) -> WindowState:
    """Whether the aware ``now`` is inside ``window`` and when it next opens (see the module docstring).

    The window is open when the latest opening at or before ``now`` is less than the duration
    ago: an earlier opening still open would mean the latest one is too."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    # In UTC: Python adds to and compares datetimes of one zone by their wall clocks.
    now = now.astimezone(UTC)
    zone = window.zone
    latest = next((o for o in _openings(window.cron, zone, now + _SEARCH_MARGIN, backwards=True) if o <= now), None)
    following = next((o for o in _openings(window.cron, zone, now - _SEARCH_MARGIN, backwards=False) if o > now), None)
    next_opens_at = following.astimezone(zone) if following is not None else None
    if latest is not None and now < latest + window.duration:
        return WindowState(True, (latest + window.duration).astimezone(zone), next_opens_at)
    return WindowState(False, None, next_opens_at)


def _openings(cron: str, zone: ZoneInfo, start: datetime, *, backwards: bool) -> Iterator[datetime]:
    """The openings from ``start``'s wall clock on, one way; each as an instant in UTC.

    Wall times are searched, then placed (``_instant``); placing keeps their order, so a search
    may stop at the first opening past its bound."""
    wall = start.astimezone(zone).replace(tzinfo=None)
    times = croniter(cron, wall)
    while True:
        try:
            step = times.get_prev(datetime) if backwards else times.get_next(datetime)
        except CroniterBadDateError:  # none within croniter's search span
            return
        yield _instant(step, zone)


def _instant(wall: datetime, zone: ZoneInfo) -> datetime:
    """When (in UTC) wall time ``wall`` happens in ``zone``: its first occurrence when it happens
    twice, the moment the clocks jump past it when they skip it."""
    first = wall.replace(tzinfo=zone, fold=0)
    if first.astimezone(UTC).astimezone(zone).replace(tzinfo=None) == wall:
        return first.astimezone(UTC)
    # Skipped: the jump lies between the readings with the offsets before and after it. PEP 495:
    # in a gap, fold=1 reads with the offset after, which gives the earlier instant.
    before = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    after = first.astimezone(UTC)
    while after - before > timedelta(seconds=1):
        middle = before + (after - before) / 2
        if middle.astimezone(zone).replace(tzinfo=None) < wall:
            before = middle
        else:
            after = middle
    return after.replace(microsecond=0)


def _cron_matches_some_date(cron: str) -> bool:
    try:
        if not croniter.is_valid(cron):
            return False
        croniter(cron, datetime(2000, 1, 1)).get_next(datetime)
    except _CRON_ERRORS:
        return False
    return True


def _known_zone(name: str) -> bool:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return False
    return True
