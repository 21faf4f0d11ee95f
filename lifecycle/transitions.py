"""Persisted state machines: move a row from one state to another with a conditional update.

``transition`` is healthchecks' claim pattern: ``UPDATE ... WHERE pk = %s AND status IN (...)``
changes the row only if it is still in an expected state, so two workers (or a worker and a
user) racing on the same object cannot both move it; the loser learns it lost (False) and does
nothing. Each successful transition records an audit event in the same transaction.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.db import models, transaction
from django.utils import timezone

from lifecycle.audit import record


def transition(model: type[models.Model], pk: Any, from_states: str | Iterable[str], to_state: str, *,
               field: str = "status", actor: Any = None, reason: str = "", verb: str | None = None,
               values: Mapping[str, Any] | None = None, instance: models.Model | None = None) -> bool:
    """Move row ``pk`` of ``model`` from one of ``from_states`` to ``to_state``; True if this call did.

    ``values`` are further fields written in the same UPDATE (a message, a timestamp); a model with
    an ``updated_at`` field gets it set to now. The audit event's verb is
    ``"<model>.<to_state>"`` unless ``verb`` is given; its before/after hold the state field.
    Nothing is written, and no event recorded, when the row is gone or in another state.

    ``instance``, the caller's copy of the row, gets the written fields when the row moved. From
    a single state it also spares the locking read: the conditional UPDATE alone decides, the
    state before is that one, and the audit event describes ``instance``.
    """
    expected = [from_states] if isinstance(from_states, str) else list(from_states)
    changes: dict[str, Any] = {field: to_state, **dict(values or {})}
    if any(f.name == "updated_at" for f in model._meta.concrete_fields) and "updated_at" not in changes:
        changes["updated_at"] = timezone.now()
    # Nested in a caller's transaction it needs no savepoint of its own: it catches nothing, so an
    # error here rolls back the caller's whole transaction anyway (two statements fewer per call).
    with transaction.atomic(savepoint=False):
        if instance is not None and len(expected) == 1:
            if not model._default_manager.filter(pk=pk, **{field: expected[0]}).update(**changes):
                return False
            row, before = instance, expected[0]
            for name, value in changes.items():
                setattr(row, name, value)
            record(verb or f"{model._meta.model_name}.{to_state}", row, actor=actor, reason=reason,
                   before={field: before}, after={field: to_state})
            return True
        row = model._default_manager.select_for_update().filter(pk=pk, **{f"{field}__in": expected}).first()
        if row is None:
            return False
        before = getattr(row, field)
        if not model._default_manager.filter(pk=pk, **{field: before}).update(**changes):
            return False
        for name, value in changes.items():
            setattr(row, name, value)
            if instance is not None:
                setattr(instance, name, value)
        record(verb or f"{model._meta.model_name}.{to_state}", row, actor=actor, reason=reason,
               before={field: before}, after={field: to_state})
    return True
