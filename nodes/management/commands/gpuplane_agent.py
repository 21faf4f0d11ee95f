"""`manage.py gpuplane_agent --server URL --token TOKEN [--node NAME] [--interval 30] [--once]`.

The node telemetry agent, meant to run as a DaemonSet on every GPU node: reads the node's GPUs
through NVML every interval and posts them to `POST {server}/api/v1/telemetry/` with a node
agent token (`manage.py create_agent_token NODE`), after reporting the node's GPUs (UUIDs, MIG
instances) to `POST {server}/api/v1/nodes/<node>/gpu-report/`, which binds them to the inventory:
no annotation or other manual step is needed. See nodes/agent/ for reports, buffering and retries.

In a DaemonSet, pass the node name from the downward API (env NODE_NAME from spec.nodeName)
and the token from a Secret (env GPUPLANE_AGENT_TOKEN); the container needs the NVIDIA runtime.
SIGTERM (pod deletion) stops the loop after one last delivery attempt.
"""
from __future__ import annotations

import os
import signal
import socket
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from nodes.agent import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_INTERVAL_S,
    DEFAULT_MAX_BUFFER_SAMPLES,
    TelemetryAgent,
)
from nodes.collectors.base import CollectorUnavailable
from nodes.collectors.nvml import NVMLCollector
from nodes.contract import ENV_AGENT_TOKEN, ENV_NODE_NAME

TOKEN_ENV = ENV_AGENT_TOKEN
NODE_ENV = ENV_NODE_NAME


class Command(BaseCommand):
    help = "Read this node's GPUs through NVML every interval and post them to the gpuplane server."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--server", required=True, help="gpuplane base URL, e.g. http://gpuplane.gpuplane-system:8000")
        parser.add_argument(
            "--token",
            default=os.environ.get(TOKEN_ENV, ""),
            help=f"Node agent token (default: env {TOKEN_ENV}); make one with `manage.py create_agent_token NODE`.",
        )
        parser.add_argument(
            "--node",
            default=os.environ.get(NODE_ENV) or socket.gethostname(),
            help=f"Kubernetes node name this agent reports for (default: env {NODE_ENV}, else the hostname).",
        )
        parser.add_argument("--interval", type=float, default=DEFAULT_INTERVAL_S, help="Seconds between readings (default 30).")
        parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="Samples per POST (default 500).")
        parser.add_argument(
            "--max-buffer",
            type=int,
            default=DEFAULT_MAX_BUFFER_SAMPLES,
            help="Samples kept while the server is unreachable; the oldest go first (default 10000).",
        )
        parser.add_argument("--once", action="store_true", help="Read and post once, then exit (non-zero if not delivered).")

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["token"]:
            raise CommandError(f"an agent token is required: --token or env {TOKEN_ENV}")
        if options["interval"] <= 0 or options["batch_size"] < 1 or options["max_buffer"] < 1:
            raise CommandError("--interval must be > 0, --batch-size and --max-buffer >= 1")
        collector = NVMLCollector()
        try:
            collector.open()
        except CollectorUnavailable as exc:
            raise CommandError(str(exc)) from None
        agent = TelemetryAgent(
            options["server"],
            options["token"],
            options["node"],
            collector,
            interval_s=options["interval"],
            max_buffer_samples=options["max_buffer"],
            batch_size=options["batch_size"],
        )
        try:
            if options["once"]:
                delivered = agent.run_once()
                stats = agent.stats_dict()
                if not delivered or stats["dropped_rejected"]:
                    raise CommandError(f"telemetry not delivered to {agent.url}: {stats}")
                self.stdout.write(
                    f"Posted {stats['delivered']} sample(s) for node {options['node']} "
                    f"({stats['duplicates']} already stored)."
                )
                return
            self._stop_on_sigterm(agent)
            self.stdout.write(
                f"gpuplane agent for node {options['node']}: posting to {agent.url} every {options['interval']:g} s"
            )
            try:
                agent.run()
            except KeyboardInterrupt:
                pass
            agent.flush(force=True)  # one last attempt for what is still buffered
            self.stdout.write(f"gpuplane agent stopped: {agent.stats_dict()}")
        finally:
            collector.close()

    @staticmethod
    def _stop_on_sigterm(agent: TelemetryAgent) -> None:
        def handler(signum: int, frame: Any) -> None:
            agent.stop()

        signal.signal(signal.SIGTERM, handler)
