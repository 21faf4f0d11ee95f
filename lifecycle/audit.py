"""Recording audit events: ``record`` for one, ``record_many`` for a batch (one INSERT).

Callers record inside the transaction that makes the change, so an event exists exactly when
its change was committed. The actor is a user (its username is stored) or a string naming a
component, "system:<component>" by convention (``SYSTEM_*`` below).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import models
from django.utils import timezone

from lifecycle.models import AuditEvent

SYSTEM_SCHEDULER = "system:scheduler"
SYSTEM_INVENTORY_SYNC = "system:inventory-sync"
SYSTEM_WATCHER = "system:deployment-watch"
_REPR_MAX = AuditEvent._meta.get_field("object_repr").max_length or 200


@dataclass(frozen=True)
class AuditEntry:
    """One event to record: ``obj`` is a model instance or an (object_type, object_id) pair."""

    verb: str
    obj: models.Model | tuple[str, Any]
    actor: Any = None
    reason: str = ""
    before: Mapping[str, Any] | None = None
    after: Mapping[str, Any] | None = None
    object_repr: str | None = None


def object_type_of(obj: models.Model | type[models.Model]) -> str:
    """``"app_label.model"`` of a model instance or class (Django's own label_lower)."""
    return obj._meta.label_lower


def actor_name(actor: Any) -> str:
    """A user's username, a component's name as given, "system" when nobody is named."""
    if actor is None:
        return "system"
    if isinstance(actor, str):
        return actor
    if getattr(actor, "is_authenticated", False):
        return str(actor.get_username())
    return "anonymous"


def _event(entry: AuditEntry, at: datetime) -> AuditEvent:
    if isinstance(entry.obj, models.Model):
        object_type, object_id = object_type_of(entry.obj), str(entry.obj.pk)
        text = entry.object_repr if entry.object_repr is not None else str(entry.obj)
    else:
        object_type, object_id = entry.obj[0], str(entry.obj[1])
        text = entry.object_repr or ""
    return AuditEvent(
        at=at, actor=actor_name(entry.actor), verb=entry.verb, object_type=object_type, object_id=object_id,
        object_repr=text[:_REPR_MAX], reason=entry.reason,
        before=dict(entry.before) if entry.before is not None else None,
        after=dict(entry.after) if entry.after is not None else None,
    )


def record(verb: str, obj: models.Model | tuple[str, Any], *, actor: Any = None, reason: str = "",
           before: Mapping[str, Any] | None = None, after: Mapping[str, Any] | None = None,
           object_repr: str | None = None, at: datetime | None = None) -> AuditEvent:
    """Store one audit event and return it. ``before``/``after`` hold the changed fields only."""
    event = _event(AuditEntry(verb, obj, actor, reason, before, after, object_repr), at or timezone.now())
    event.save()
    return event


def record_many(entries: Iterable[AuditEntry], *, at: datetime | None = None) -> int:
    """Store a batch of events in one INSERT (all with the same time); return how many."""
    when = at or timezone.now()
    events = [_event(entry, when) for entry in entries]
    if events:
        AuditEvent.objects.bulk_create(events)
    return len(events)


def events_for(obj: models.Model | tuple[str, Any], limit: int = 50) -> list[AuditEvent]:
    """The newest events about one object, newest first (what object pages show)."""
    if isinstance(obj, models.Model):
        object_type, object_id = object_type_of(obj), str(obj.pk)
    else:
        object_type, object_id = obj[0], str(obj[1])
    return list(AuditEvent.objects.filter(object_type=object_type, object_id=object_id)[:limit])
