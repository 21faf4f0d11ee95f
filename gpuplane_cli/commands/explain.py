"""`explain DEPLOYMENT`: the decision matrix of each replica (`GET /api/v1/deployments/{id}/decision/`):
the chosen node and why, why not the others, each plugin's points (``gpuplane_cli.matrix``)."""
from __future__ import annotations

import argparse
from typing import Any

from gpuplane_cli.context import Context
from gpuplane_cli.errors import APIError, Target, from_api_error
from gpuplane_cli.matrix import render_decisions
from gpuplane_cli.resources import DEPLOYMENTS, fetch_one


def register(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    explain = subparsers.add_parser(
        "explain", parents=parents, help="why a deployment's replicas went where they did (the decision matrix)",
        description="Show the placement decision of each replica: outcome, sizing, every node kept with its "
                    "verdict, each score plugin's weighted points per node, and why not the other nodes. "
                    "-o wide adds each score's normalized value and raw value.")
    explain.add_argument("deployment", metavar="DEPLOYMENT", help="the deployment's name or id")
    explain.add_argument("-n", "--namespace")
    explain.add_argument("--replica", type=int, help="only this replica's decision (0-based)")
    explain.add_argument("--top", type=int, default=5, help="feasible nodes whose scores get a column (default 5)")
    explain.set_defaults(handler=run_explain)


def run_explain(ctx: Context) -> int:
    client = ctx.client()
    deployment = fetch_one(client, DEPLOYMENTS, ctx.args.deployment, namespace=ctx.args.namespace)
    try:
        answer = client.get(f"deployments/{deployment['id']}/decision/")
    except APIError as error:
        raise from_api_error(error, Target("deployments", ctx.args.deployment)) from None
    if ctx.emit_data(answer):
        return 0
    ctx.print(render_decisions(deployment, answer, top=ctx.args.top, wide=ctx.output == "wide",
                               replica=ctx.args.replica))
    return 0
