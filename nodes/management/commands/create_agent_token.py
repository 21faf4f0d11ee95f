"""`manage.py create_agent_token NODE`: a key for NODE's telemetry agent, printed once.

The key alone goes to standard output (`KEY=$(manage.py create_agent_token gpu-node-1)`), the
explanation to standard error. Only its SHA-256 digest is stored: a lost key cannot be shown
again; make a new one and revoke the old one in the admin (Node agent tokens).
"""
from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from nodes.authentication import issue_agent_token
from nodes.models import Node


class Command(BaseCommand):
    help = "Create a node agent token for NODE and print its key (shown only this once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("node", help="Name of the node whose agent will use the key.")

    def handle(self, *args: Any, **options: Any) -> None:
        name = options["node"]
        node = Node.objects.filter(name=name).first()
        if node is None:
            raise CommandError(f"No node named {name!r}; the inventory sync creates nodes, see `manage.py shell`.")
        token, key = issue_agent_token(node)
        self.stderr.write(
            f"Agent token {token.prefix}… for node {node.name}. Store the key now; it cannot be shown again.\n"
            f"Use it as: manage.py gpuplane_agent --server URL --token KEY  (HTTP header: Authorization: Bearer KEY)"
        )
        self.stdout.write(key)
