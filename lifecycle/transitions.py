"""Persisted state machines: move a row from one state to another with a conditional update.

``transition`` is healthchecks' claim pattern: ``UPDATE ... WHERE pk = %s AND status IN (...)``
changes the row only if it is still in an expected state, so two workers (or a worker and a
user) racing on the same object cannot both move it; the loser learns it lost (False) and does
nothing. Each successful transition records an audit event in the same transaction.

``StateMachine`` is the one helper every persisted state machine (a rollout, its nodes, a
consolidation plan) moves through: its legal moves as data, each move a ``transition``.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
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


class IllegalTransition(ValueError):
    """A move a state machine does not have (a programming error, not a lost race)."""


@dataclass(frozen=True)
class StateMachine:
    """One persisted state machine: which state may follow which, on which field of which model.

    ``allowed`` maps each target state to the states it may come from; ``move`` is ``transition``
    (a conditional UPDATE that only one racing caller wins, with its audit event
    ``"<model>.<state>"``) restricted to those moves. Every app declares its machines as data
    (``rollouts.models``, ``consolidation.models``) instead of wrapping ``transition`` itself.

    Each move writes ``reason`` into ``note_field`` (None: nowhere but the audit event); entering
    a state of ``final`` stamps ``finished_field`` with now, entering one of ``started`` stamps
    ``started_field`` unless the caller's copy already has it (a resumed run keeps its first start).
    """

    model: type[models.Model]
    allowed: Mapping[str, tuple[str, ...]]
    field: str = "status"
    note_field: str | None = "reason"
    final: tuple[str, ...] = ()
    finished_field: str | None = None
    started: tuple[str, ...] = ()
    started_field: str | None = None

    def sources(self, to: str) -> tuple[str, ...]:
        """The states ``to`` may be entered from; IllegalTransition when no move leads there."""
        if to not in self.allowed:
            raise IllegalTransition(f"a {self.model._meta.verbose_name} never moves to {to!r}")
        return self.allowed[to]

    def move(self, obj: models.Model, to: str, *, actor: Any = None, reason: str = "",
             values: Mapping[str, Any] | None = None) -> bool:
        """Move ``obj`` (its row) to ``to``; False when the row is no longer in a state that allows it.

        ``values``: further fields written in the same UPDATE. ``obj`` gets every written field
        when the row moved, and is left as it was otherwise.
        """
        sources = self.sources(to)
        now = timezone.now()
        changes: dict[str, Any] = {}
        if self.note_field is not None:
            changes[self.note_field] = reason
        if self.started_field is not None and to in self.started and getattr(obj, self.started_field) is None:
            changes[self.started_field] = now
        if self.finished_field is not None and to in self.final:
            changes[self.finished_field] = now
        changes.update(values or {})
        moved = transition(self.model, obj.pk, sources, to, field=self.field, actor=actor, reason=reason,
                           values=changes)
        if moved:
            setattr(obj, self.field, to)
            for name, value in changes.items():
                setattr(obj, name, value)
        return moved
