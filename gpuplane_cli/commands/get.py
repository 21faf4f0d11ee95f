"""`get` (alias `list`) and `delete`: objects in kubectl's table, or the API's JSON / YAML.

``get deployments`` leaves deleted ones out unless ``--show-deleted`` or a ``--status`` asks for them.
"""
from __future__ import annotations

import argparse
from typing import Any

from gpuplane_cli.context import Context
from gpuplane_cli.errors import APIError, CLIError, Target, UsageError, from_api_error
from gpuplane_cli.output import table
from gpuplane_cli.resources import DEPLOYMENTS, GPUS, KINDS, Kind, fetch_one, kind_named

LIVE_DEPLOYMENT_STATUSES = ("pending", "placed", "running", "failed")  # every status but "deleted"


def register(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    kinds = ", ".join(kind.plural for kind in KINDS)
    get = subparsers.add_parser(
        "get", aliases=["list"], parents=parents, help=f"list or show objects ({kinds})",
        description=f"List objects of a kind, or show some by name (or id). Kinds: {kinds}. "
                    "TYPE/NAME works too (deployment/chat).")
    get.add_argument("kind", metavar="TYPE", help=kinds)
    get.add_argument("names", nargs="*", default=[], metavar="NAME", help="names or ids; none: every object of the kind")
    get.add_argument("-n", "--namespace", help="deployments of this namespace only")
    get.add_argument("--node", help="GPUs of this node only")
    get.add_argument("--status", action="append", help="only objects in this status (repeatable)")
    get.add_argument("--show-deleted", action="store_true", help="include deleted deployments")
    get.set_defaults(handler=run_get)

    delete = subparsers.add_parser("delete", parents=parents,
                                   help="delete a deployment: its workloads go, its GPUs are released")
    delete.add_argument("kind", metavar="TYPE", help="deployment")
    delete.add_argument("names", nargs="+", metavar="NAME")
    delete.add_argument("-n", "--namespace")
    delete.set_defaults(handler=run_delete)


def split_refs(kind_word: str, names: list[str]) -> tuple[Kind, list[str]]:
    """``get deployment/chat`` and ``get deployment chat`` alike."""
    if "/" in kind_word:
        kind_word, first = kind_word.split("/", 1)
        names = [first, *names]
    return kind_named(kind_word), names


def list_params(ctx: Context, kind: Kind) -> dict[str, Any]:
    args = ctx.args
    params: dict[str, Any] = {}
    if args.namespace and kind is DEPLOYMENTS:
        params["namespace"] = args.namespace
    if args.node:
        if kind is not GPUS:
            raise UsageError("error: --node filters gpus only")
        params["node"] = args.node
    if args.status:
        params["status"] = args.status
    elif kind is DEPLOYMENTS and not args.show_deleted:
        params["status"] = list(LIVE_DEPLOYMENT_STATUSES)
    return params


def run_get(ctx: Context) -> int:
    kind, names = split_refs(ctx.args.kind, ctx.args.names)
    client = ctx.client()
    if names:
        items = [fetch_one(client, kind, name, namespace=ctx.args.namespace) for name in names]
    else:
        try:
            items = list(client.pages(kind.path, list_params(ctx, kind)))
        except APIError as error:
            raise from_api_error(error, Target(kind.plural)) from None
    show(ctx, kind, items, single=len(names) == 1)
    return 0


def show(ctx: Context, kind: Kind, items: list[dict[str, Any]], *, single: bool = False) -> None:
    """Print ``items`` in the chosen output format (one object bare for json/yaml when ``single``)."""
    if ctx.emit_data(items[0] if single else items, many=not single):
        return
    if ctx.output == "name":
        for item in items:
            ctx.print(f"{kind.singular}/{kind.name_of(item)}")
        return
    if not items:
        ctx.warn("No resources found.")
        return
    now = ctx.now()
    wide = ctx.output == "wide"
    headers = kind.headers + (kind.wide_headers if wide else ())
    ctx.print(table(headers, [tuple(kind.row(item, now)) + (tuple(kind.wide_row(item, now)) if wide else ())
                              for item in items]))


def run_delete(ctx: Context) -> int:
    kind, names = split_refs(ctx.args.kind, ctx.args.names)
    if kind is not DEPLOYMENTS:
        raise CLIError(f'error: {kind.plural} cannot be deleted here: only deployments')
    client = ctx.client()
    for name in names:
        deployment = fetch_one(client, kind, name, namespace=ctx.args.namespace)
        try:
            client.delete(f"{kind.path}{deployment['id']}/")
        except APIError as error:
            raise from_api_error(error, Target(kind.plural, name)) from None
        ctx.print(f"deployment/{deployment['name']} deleted")
    return 0
