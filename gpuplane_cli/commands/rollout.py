"""`rollout preview|create|start|pause|resume|abort|status|history|list`: node reconfiguration
rollouts (`/api/v1/rollouts/`). `status --watch` follows one with a progress bar until it ends,
as `kubectl rollout status` does: exit 0 when it succeeded, 1 when it failed or rolled back."""
from __future__ import annotations

import argparse
import time
from typing import Any

from gpuplane_cli.bodies import merged, read_file, set_values, string_map
from gpuplane_cli.commands.get import show
from gpuplane_cli.context import Context
from gpuplane_cli.errors import APIError, CLIError, Target, UsageError, from_api_error
from gpuplane_cli.output import NONE, key_values, progress_bar, table
from gpuplane_cli.resources import ROLLOUTS, config_text, fetch_one
from gpuplane_cli.rollout_text import render_preview

ACTIVE = ("pending", "running", "paused")  # any other status is final (newer servers may add some)
ACTIONS = ("start", "pause", "resume", "abort")


def register(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    rollout = subparsers.add_parser("rollout", parents=parents, help="reconfigure nodes' GPU sharing, batch by batch")
    verbs = rollout.add_subparsers(dest="verb", metavar="VERB", required=True)

    preview = verbs.add_parser("preview", parents=parents, help="dry run: batches, moves, capacity dip, blockers")
    preview.add_argument("name", nargs="?", default="preview", help="the rollout's name (default: preview)")
    _config_flags(preview)
    preview.set_defaults(handler=run_preview)

    create = verbs.add_parser("create", parents=parents, help="create a pending rollout (its preview must be safe)")
    create.add_argument("name", nargs="?", help="the rollout's name (or name: in the -f file)")
    _config_flags(create)
    create.set_defaults(handler=run_create)

    for verb in ACTIONS:
        act = verbs.add_parser(verb, parents=parents, help=f"{verb} a rollout")
        act.add_argument("rollout", metavar="ROLLOUT", help="name or id")
        act.set_defaults(handler=run_action, action=verb)

    status = verbs.add_parser("status", parents=parents, help="progress and each node's state")
    status.add_argument("rollout", metavar="ROLLOUT", help="name or id")
    status.add_argument("-w", "--watch", action="store_true", help="follow it until it ends")
    status.add_argument("--interval", type=float, default=2.0, help="seconds between reads with --watch (default 2)")
    status.add_argument("--timeout", type=float, default=0.0, help="give up after this many seconds (0: never)")
    status.set_defaults(handler=run_status)

    history = verbs.add_parser("history", parents=parents, help="the rollout's and its nodes' events, newest first")
    history.add_argument("rollout", metavar="ROLLOUT", help="name or id")
    history.set_defaults(handler=run_history)

    listing = verbs.add_parser("list", parents=parents, help="every rollout (as get rollouts)")
    listing.add_argument("--status", action="append")
    listing.set_defaults(handler=run_list)


def _config_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", action="append", metavar="NODE[,NODE]", help="target nodes by name (repeatable)")
    parser.add_argument("-l", "--selector", action="append", metavar="KEY=VALUE", help="target nodes by label")
    parser.add_argument("--mode", help="sharing mode: exclusive, mig, mps, mps-weighted, timeslice")
    parser.add_argument("--replicas", type=int, help="replicas per GPU (mps, mps-weighted, timeslice)")
    parser.add_argument("--mig-layout", metavar="PROFILE=COUNT[,...]", help="mig only, e.g. 3g.40gb=2")
    parser.add_argument("--strategy", choices=("rolling", "blue-green"))
    parser.add_argument("--max-unavailable", type=int)
    parser.add_argument("--on-failure", choices=("pause", "rollback"))
    parser.add_argument("--window-cron", metavar="CRON", help='maintenance window opening, e.g. "0 2 * * SAT"')
    parser.add_argument("--window-minutes", type=int, help="how long the window stays open")
    parser.add_argument("--window-timezone", default=None, help="the window's IANA time zone (default UTC)")
    parser.add_argument("--move-back", action="store_true", help="move the workloads back once a node is proven")
    parser.add_argument("--set", action="append", metavar="FIELD=VALUE", help="any other field (repeatable)")
    parser.add_argument("-f", "--filename", help="the request body as YAML or JSON (- for standard input)")


def rollout_body(args: argparse.Namespace) -> dict[str, Any]:
    """The create/preview body: the file, then the flags, then --set."""
    nodes = [node for value in args.nodes or [] for node in value.split(",") if node]
    layout = {profile: int(count) for profile, count in string_map(
        [args.mig_layout] if args.mig_layout else [], "--mig-layout").items() if count.isdigit()}
    if args.mig_layout and not layout:
        raise UsageError("error: --mig-layout takes PROFILE=COUNT[,PROFILE=COUNT], e.g. 3g.40gb=2")
    window = None
    if args.window_cron or args.window_minutes:
        if not (args.window_cron and args.window_minutes):
            raise UsageError("error: a maintenance window needs both --window-cron and --window-minutes")
        window = {"cron": args.window_cron, "duration_minutes": args.window_minutes,
                  "timezone": args.window_timezone or "UTC"}
    flags: dict[str, Any] = {
        "name": args.name, "nodes": nodes or None, "node_selector": string_map(args.selector, "--selector") or None,
        "config": {"mode": args.mode, "replicas": args.replicas, "mig_layout": layout or None},
        "strategy": args.strategy, "max_unavailable": args.max_unavailable, "on_failure": args.on_failure,
        "maintenance_window": window, "move_back": True if args.move_back else None,
    }
    body = merged(read_file(args.filename), flags, set_values(args.set))
    if not (body.get("config") or {}).get("mode"):
        raise UsageError("error: give the new sharing mode: --mode (or config.mode in -f)")
    return body


def run_preview(ctx: Context) -> int:
    try:
        preview = ctx.client().post("rollouts/preview/", rollout_body(ctx.args))
    except APIError as error:
        raise from_api_error(error, Target("rollouts")) from None
    if not ctx.emit_data(preview):
        ctx.print(render_preview(preview))
    return 0


def run_create(ctx: Context) -> int:
    body = rollout_body(ctx.args)
    name = str(body.get("name") or "")
    if not name:
        raise UsageError("error: a rollout needs a NAME (or name: in the -f file)")
    try:
        rollout = ctx.client().post("rollouts/", body)
    except APIError as error:
        if error.status == 409 and isinstance(error.body, dict) and isinstance(error.body.get("preview"), dict):
            ctx.warn(render_preview(error.body["preview"]))
            ctx.warn("")
        raise from_api_error(error, Target("rollouts", name), creating=True) from None
    if ctx.emit_data(rollout):
        return 0
    ctx.print(f"rollout/{rollout['name']} created (id {rollout['id']}, {rollout['status']}): "
              f"{config_text(rollout.get('config'))} on {len(rollout.get('nodes') or [])} node(s)")
    ctx.print(f'Run "{ctx.prog} rollout start {rollout["name"]}" to start it.')
    return 0


def run_action(ctx: Context) -> int:
    client = ctx.client()
    rollout = fetch_one(client, ROLLOUTS, ctx.args.rollout)
    try:
        rollout = client.post(f"rollouts/{rollout['id']}/{ctx.args.action}/")
    except APIError as error:
        raise from_api_error(error, Target("rollouts", ctx.args.rollout)) from None
    if not ctx.emit_data(rollout):
        past = {"start": "started", "pause": "paused", "resume": "resumed", "abort": "aborted"}[ctx.args.action]
        ctx.print(f"rollout/{rollout['name']} {past} (now {rollout['status']})")
    return 0


def summary_line(rollout: dict[str, Any]) -> str:
    """``running   [######......]  50.0 %   a100-node-1 succeeded, a100-node-3 draining``."""
    nodes = ", ".join(f"{n.get('node')} {n.get('state')}" for n in rollout.get("nodes") or [])
    waiting = f"   {rollout['waiting_for_window']}" if rollout.get("waiting_for_window") else ""
    return f"{str(rollout.get('status')):<10}{progress_bar(float(rollout.get('progress_percent') or 0))}   {nodes}{waiting}"


def status_text(rollout: dict[str, Any]) -> str:
    """The rollout's status block: header with the bar, the message, each node's row."""
    header = key_values([
        ("Rollout", f"{rollout.get('name')} (id {rollout.get('id')})"),
        ("Config", f"{config_text(rollout.get('config'))}, {rollout.get('strategy')}, max unavailable "
                   f"{rollout.get('max_unavailable')}, on failure {rollout.get('on_failure')}"),
        ("Status", rollout.get("status")),
        ("Progress", progress_bar(float(rollout.get("progress_percent") or 0))),
        ("Message", rollout.get("message") or rollout.get("waiting_for_window") or NONE),
        *([("Start by", rollout["start_by"])] if rollout.get("status") == "pending" and rollout.get("start_by") else []),
    ])
    rows = [(n.get("node"), n.get("batch_index") if n.get("batch_index") is not None else "-", n.get("state"),
             n.get("reason")) for n in rollout.get("nodes") or []]
    return f"{header}\n\n{table(('node', 'batch', 'state', 'reason'), rows)}" if rows else header


def run_status(ctx: Context) -> int:
    client = ctx.client()
    rollout = fetch_one(client, ROLLOUTS, ctx.args.rollout)
    if ctx.args.watch:
        rollout = _watch(ctx, client, rollout)
    if not ctx.emit_data(rollout):
        ctx.print(status_text(rollout))
    if not ctx.args.watch:
        return 0
    if rollout.get("status") == "succeeded":
        if ctx.output not in ("json", "yaml"):
            ctx.print(f'rollout "{rollout.get("name")}" successfully rolled out')
        return 0
    raise CLIError(f'error: rollout "{rollout.get("name")}" {rollout.get("status")}: {rollout.get("message") or NONE}')


def _watch(ctx: Context, client: Any, rollout: dict[str, Any]) -> dict[str, Any]:
    """Read the rollout every --interval seconds until it ends; one line per change (redrawn in place on a terminal)."""
    tty = ctx.out.isatty() and ctx.output in ("table", "wide")
    started, last = time.monotonic(), ""
    while True:
        line = summary_line(rollout)
        if ctx.output in ("table", "wide") and line != last:
            ctx.out.write(f"\r\x1b[K{line}" if tty else f"{line}\n")
            ctx.out.flush()
            last = line
        if rollout.get("status") not in ACTIVE:
            if tty:
                ctx.out.write("\n")
            return rollout
        if ctx.args.timeout and time.monotonic() - started > ctx.args.timeout:
            raise CLIError("error: timed out waiting for the condition")
        ctx.sleep(max(ctx.args.interval, 0.05))
        try:
            rollout = client.get(f"rollouts/{rollout['id']}/")
        except APIError as error:
            raise from_api_error(error, Target("rollouts", ctx.args.rollout)) from None


def run_history(ctx: Context) -> int:
    client = ctx.client()
    rollout = fetch_one(client, ROLLOUTS, ctx.args.rollout)
    try:
        events = client.get(f"rollouts/{rollout['id']}/events/")
    except APIError as error:
        raise from_api_error(error, Target("rollouts", ctx.args.rollout)) from None
    if ctx.emit_data(events, many=True):
        return 0
    ctx.print(table(("at", "actor", "verb", "node", "reason"),
                    [(e.get("at"), e.get("actor"), e.get("verb"), e.get("node"), e.get("reason")) for e in events]))
    return 0


def run_list(ctx: Context) -> int:
    params = {"status": ctx.args.status} if ctx.args.status else {}
    try:
        items = list(ctx.client().pages("rollouts/", params))
    except APIError as error:
        raise from_api_error(error, Target("rollouts")) from None
    show(ctx, ROLLOUTS, items)
    return 0

