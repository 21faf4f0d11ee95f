"""`manage.py gpuplane_agent --server URL (--token-file PATH | --token KEY) [--node NAME] [--interval 30] [--once]`.

The node telemetry agent, meant to run as a DaemonSet on every GPU node: reads the node's GPUs
through NVML every interval and posts them to `POST {server}/api/v1/telemetry/`, after reporting
the node's GPUs (UUIDs, MIG instances) to `POST {server}/api/v1/nodes/<node>/gpu-report/`, which
binds them to the inventory: no annotation or other manual step is needed. See nodes/agent/ for
reports, buffering and retries.

Its credential: the pod's projected ServiceAccount token (`--token-file`, env
GPUPLANE_AGENT_TOKEN_FILE), read again for every post since the kubelet rotates it; the server
asks the cluster which node it is bound to (nodes/agent_identity.py). Or, the fallback where
Kubernetes cannot say that (older than 1.30, `make run`), a node agent key (`--token`, env
GPUPLANE_AGENT_TOKEN; `manage.py create_agent_token NODE`), which wins when both are given.
In a DaemonSet, pass the node name from the downward API (env NODE_NAME from spec.nodeName);
the container needs the NVIDIA runtime. SIGTERM (pod deletion) stops the loop after one last
delivery attempt.
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
    TokenFile,
)
from nodes.collectors.base import CollectorUnavailable
from nodes.collectors.nvml import NVMLCollector
from nodes.contract import ENV_AGENT_TOKEN, ENV_AGENT_TOKEN_FILE, ENV_NODE_NAME

TOKEN_ENV = ENV_AGENT_TOKEN
NODE_ENV = ENV_NODE_NAME


class Command(BaseCommand):
    help = "Read this node's GPUs through NVML every interval and post them to the gpuplane server."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--server", required=True, help="gpuplane base URL, e.g. http://gpuplane.gpuplane-system:8000")
        parser.add_argument(
            "--token",
            default=os.environ.get(TOKEN_ENV, ""),
            help=f"Node agent key (default: env {TOKEN_ENV}); make one with `manage.py create_agent_token NODE`. "
                 "Wins over --token-file.",
        )
        parser.add_argument(
            "--token-file",
            default=os.environ.get(ENV_AGENT_TOKEN_FILE, ""),
            help=f"File holding the pod's projected ServiceAccount token, read again for every post "
                 f"(default: env {ENV_AGENT_TOKEN_FILE}).",
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
        token = self._credential(options["token"], options["token_file"])
        if options["interval"] <= 0 or options["batch_size"] < 1 or options["max_buffer"] < 1:
            raise CommandError("--interval must be > 0, --batch-size and --max-buffer >= 1")
        collector = NVMLCollector()
        try:
            collector.open()
        except CollectorUnavailable as exc:
            raise CommandError(str(exc)) from None
        agent = TelemetryAgent(
            options["server"],
            token,
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
    def _credential(key: str, token_file: str) -> str | TokenFile:
        """The key when given, else the token file (readable now: a wrong path fails at start)."""
        if key:
            return key
        if not token_file:
            raise CommandError(f"an agent credential is required: --token-file (env {ENV_AGENT_TOKEN_FILE}) "
                               f"or --token (env {TOKEN_ENV})")
        credential = TokenFile(token_file)
        try:
            credential()
        except OSError as exc:
            raise CommandError(f"cannot read the agent's token file: {exc}") from None
        return credential

    @staticmethod
    def _stop_on_sigterm(agent: TelemetryAgent) -> None:
        def handler(signum: int, frame: Any) -> None:
            agent.stop()

        signal.signal(signal.SIGTERM, handler)
