"""`manage.py load_demo_deployments [--if-empty]`: the demo's gpuplane deployments (scheduler.demo).

Run after `load_demo_cluster` (make run does both). Refused when GPUPLANE_CLUSTER=kubernetes.
"""
from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduler.demo import DEMO_NODE, DemoDeploymentsError, load_demo_deployments
from scheduler.models import Deployment


class Command(BaseCommand):
    help = "Place the demo's three inference deployments, each alone on a GPU (a consolidation opportunity)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--if-empty", action="store_true",
                            help="Do nothing when any deployment exists (safe to run on every start).")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            deployments = load_demo_deployments(if_empty=options["if_empty"])
        except DemoDeploymentsError as exc:
            raise CommandError(str(exc)) from None
        if not deployments:
            why = ("deployments exist already" if Deployment.objects.exists()
                   else f"the inventory has no {DEMO_NODE}: not the demo cluster")
            self.stdout.write(f"No demo deployments placed (--if-empty): {why}.")
            return
        for deployment in deployments:
            placement = deployment.placements.get()
            self.stdout.write(f"{deployment.namespace}/{deployment.name}: {placement.node.name} GPU "
                              f"{','.join(str(i) for i in placement.gpu_indexes)}")
