"""`manage.py load_fleet N [--gpus-per-node 8] [--models KEY=W,...] [--replace [--force]]`: a simulated fleet.

Loads N exclusive-mode GPU nodes into the simulated cluster (one state write) and the inventory
(inventory sync's bulk inserts), for fleet-scale benchmarks (`bench/deploy_api.py`). See
`nodes.fleet_loader`. Refused when GPUPLANE_CLUSTER=kubernetes.
"""
from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from nodes.fleet_loader import DEFAULT_MODELS, FleetError, load_fleet


class Command(BaseCommand):
    help = "Load a simulated fleet of N GPU nodes into the simulated cluster and the inventory."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("nodes", type=int, help="How many nodes.")
        parser.add_argument("--gpus-per-node", type=int, default=8, help="GPUs on every node (default 8).")
        parser.add_argument(
            "--models",
            default=DEFAULT_MODELS,
            help=f"Catalog GPU models and their weights, e.g. H100-SXM5-80GB=3,A100-SXM4-40GB=1 (default {DEFAULT_MODELS}).",
        )
        parser.add_argument(
            "--replace", action="store_true", help="Delete every inventory row and empty the simulated cluster first."
        )
        parser.add_argument("--force", action="store_true", help="With --replace: also delete existing placements.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["force"] and not options["replace"]:
            raise CommandError("--force only makes sense with --replace")
        started = time.perf_counter()
        try:
            outcome = load_fleet(
                options["nodes"], gpus_per_node=options["gpus_per_node"], models=options["models"],
                replace=options["replace"], force=options["force"],
            )
        except FleetError as exc:
            raise CommandError(str(exc)) from None
        for line in outcome.summary.lines():
            self.stdout.write(line)
        self.stdout.write(self.style.SUCCESS(f"Loaded in {time.perf_counter() - started:.1f} s."))
