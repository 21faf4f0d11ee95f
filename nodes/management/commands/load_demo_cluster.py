"""`manage.py load_demo_cluster [--if-empty] [--reset [--force]]`: the demo cluster, in the simulator.

Seeds the simulated cluster (settings.GPUPLANE_SIMULATED_STATE) with the 12-node demo of
`nodes.demo` and syncs the inventory from it. Refused when GPUPLANE_CLUSTER=kubernetes.
"""
from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from nodes.demo import DemoClusterError, load_demo_cluster


class Command(BaseCommand):
    help = "Seed the simulated cluster with the demo (4 H100 + 8 A100 nodes, every sharing mode) and sync the inventory."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--if-empty",
            action="store_true",
            help="Do nothing when the inventory already has nodes (safe to run on every start).",
        )
        parser.add_argument(
            "--reset",
            action="store_true",
            help="Delete every inventory row and empty the simulated cluster first.",
        )
        parser.add_argument(
            "--force",
            action="store_true",
            help="With --reset: also delete existing placements instead of refusing.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["force"] and not options["reset"]:
            raise CommandError("--force only makes sense with --reset")
        try:
            outcome = load_demo_cluster(if_empty=options["if_empty"], reset=options["reset"], force=options["force"])
        except DemoClusterError as exc:
            raise CommandError(str(exc)) from None

        if outcome.skipped:
            self.stdout.write(f"The inventory already has {outcome.summary.nodes} node(s); nothing loaded (--if-empty).")
            return
        if outcome.seeded:
            self.stdout.write(self.style.SUCCESS("Seeded the simulated demo cluster."))
        else:
            self.stdout.write("The simulated cluster already had nodes; synced the inventory from it.")
        report = outcome.report
        if report is not None:
            if report.unknown_products:
                self.stdout.write(self.style.WARNING(f"unknown GPU products: {', '.join(report.unknown_products)}"))
            if report.unplaced_pods:
                self.stdout.write(self.style.WARNING(f"pods without a partition: {', '.join(report.unplaced_pods)}"))
        for line in outcome.summary.lines():
            self.stdout.write(line)
