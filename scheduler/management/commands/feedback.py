"""`manage.py feedback [--freeze | --unfreeze | --reset]`: the feedback's learned weights.

Without an option it shows the balanced profile's weights (learned or default), whether learning
is frozen, and the correction factors. Each change is an audit event (scheduler.services.feedback).
"""
from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from scheduler.models import CorrectionFactor, LearnedWeights
from scheduler.services import feedback


class Command(BaseCommand):
    help = "Show, freeze, unfreeze or reset the balanced profile's learned weights and correction factors."

    def add_arguments(self, parser: CommandParser) -> None:
        group = parser.add_mutually_exclusive_group()
        group.add_argument("--freeze", action="store_true", help="Stop learning (weights stay as they are).")
        group.add_argument("--unfreeze", action="store_true", help="Resume learning.")
        group.add_argument("--reset", action="store_true", help="Restore the default weights; clear the factors.")

    def handle(self, *args: Any, **options: Any) -> None:
        actor = "manage.py feedback"
        if options["freeze"] or options["unfreeze"]:
            feedback.freeze(bool(options["freeze"]), user=actor)
        elif options["reset"]:
            feedback.reset(user=actor)
        row = LearnedWeights.objects.filter(profile=feedback.PROFILE).first()
        weights = dict(row.weights) if row is not None and row.weights else feedback.defaults()
        self.stdout.write(f"balanced profile weights ({'frozen' if row is not None and row.frozen else 'learning'}):")
        for name, weight in weights.items():
            self.stdout.write(f"  {name:18} {weight:.4f} (default {feedback.defaults()[name]:.2f})")
        for factor in CorrectionFactor.objects.order_by("model", "gpu_model", "sharing_mode"):
            self.stdout.write(f"  correction {factor}")
