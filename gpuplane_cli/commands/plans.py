"""`plans list|show|create|approve|reject`: consolidation plans (`/api/v1/consolidations/`).
Creating (running the analysis now), approving and rejecting need the admin role."""
from __future__ import annotations

import argparse
from typing import Any

from gpuplane_cli.commands.get import show
from gpuplane_cli.context import Context
from gpuplane_cli.errors import APIError, Target, UsageError, from_api_error
from gpuplane_cli.output import key_values, number, table
from gpuplane_cli.resources import PLANS


def register(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    plans = subparsers.add_parser("plans", parents=parents, help="consolidation plans: list, show, approve, reject")
    verbs = plans.add_subparsers(dest="verb", metavar="VERB", required=True)
    listing = verbs.add_parser("list", parents=parents, help="every plan, newest first")
    listing.add_argument("--status", action="append", help="only plans in this status (repeatable)")
    listing.set_defaults(handler=run_list)
    for verb, text in (("show", "a plan's moves, savings and disruption"),
                       ("approve", "approve a proposed plan: the executor moves each workload replacement-first")):
        parser = verbs.add_parser(verb, parents=parents, help=text)
        parser.add_argument("plan", metavar="PLAN", help="the plan's id")
        parser.set_defaults(handler=run_show if verb == "show" else run_approve)
    reject = verbs.add_parser("reject", parents=parents, help="reject a proposed plan; nothing moves")
    reject.add_argument("plan", metavar="PLAN", help="the plan's id")
    reject.add_argument("--reason", required=True, help="why (kept in the audit log)")
    reject.set_defaults(handler=run_reject)
    create = verbs.add_parser("create", parents=parents, help="run the consolidation analysis now and store its plan")
    create.set_defaults(handler=run_create)


def _plan_id(ctx: Context) -> str:
    if not str(ctx.args.plan).isdigit():
        raise UsageError(f"error: a plan is named by its id (a number), got {ctx.args.plan!r}")
    return str(ctx.args.plan)


def run_list(ctx: Context) -> int:
    params = {"status": ctx.args.status} if ctx.args.status else {}
    try:
        items = list(ctx.client().pages(PLANS.path, params))
    except APIError as error:
        raise from_api_error(error, Target("plans")) from None
    show(ctx, PLANS, items)
    return 0


def plan_text(plan: dict[str, Any]) -> str:
    savings = plan.get("savings_per_hour") or {}
    disruption = plan.get("disruption") or {}
    summary = key_values([
        ("Plan", plan.get("id")), ("Status", plan.get("status")), ("Method", plan.get("method")),
        ("Frees", f"{', '.join(plan.get('nodes_freed') or []) or 'no node'}; {plan.get('gpus_freed')} GPU(s)"),
        ("Saves per hour", f"${number(savings.get('usd'), '', 2)}, {number(savings.get('kwh'), ' kWh', 2)}"),
        ("Moves", f"{len(plan.get('moves') or [])} ({disruption.get('workloads_moved', 0)} workload(s) disrupted)"),
        ("Created", f"{plan.get('created_at')} by {plan.get('created_by') or 'system'}"),
        ("Expires", plan.get("expires_at")), ("Decided by", plan.get("decided_by")), ("Reason", plan.get("reason")),
    ])
    rows = [(m.get("workload"), f"{m.get('from_node')} {m.get('from_gpus')}", f"{m.get('to_node')} {m.get('to_gpus')}",
             m.get("mig_profile"), m.get("why")) for m in plan.get("moves") or []]
    return f"{summary}\n\n{table(('workload', 'from', 'to', 'mig-profile', 'why'), rows)}" if rows else summary


def run_show(ctx: Context) -> int:
    plan_id = _plan_id(ctx)
    try:
        plan = ctx.client().get(f"{PLANS.path}{plan_id}/")
    except APIError as error:
        raise from_api_error(error, Target("plans", plan_id)) from None
    if not ctx.emit_data(plan):
        ctx.print(plan_text(plan))
    return 0


def _decide(ctx: Context, verb: str, body: dict[str, Any] | None = None) -> int:
    plan_id = _plan_id(ctx)
    try:
        plan = ctx.client().post(f"{PLANS.path}{plan_id}/{verb}/", body)
    except APIError as error:
        raise from_api_error(error, Target("plans", plan_id)) from None
    if not ctx.emit_data(plan):
        ctx.print(f"plan/{plan['id']} {plan['status']}")
    return 0


def run_approve(ctx: Context) -> int:
    return _decide(ctx, "approve")


def run_reject(ctx: Context) -> int:
    return _decide(ctx, "reject", {"reason": ctx.args.reason})


def run_create(ctx: Context) -> int:
    try:
        plan = ctx.client().post(PLANS.path)
    except APIError as error:
        raise from_api_error(error, Target("plans")) from None
    if ctx.emit_data(plan):
        return 0
    if "moves" not in plan:  # 200: no new plan, only what the analysis found (and the proposed plan it matched)
        same = plan.get("plan")
        ctx.print(str(plan.get("detail")) + (f" (plan/{same['id']}, {same['status']})" if same else ""))
        return 0
    ctx.print(f"plan/{plan['id']} created ({plan['status']}): {len(plan.get('moves') or [])} move(s), "
              f"frees {', '.join(plan.get('nodes_freed') or []) or 'no node'}")
    return 0
