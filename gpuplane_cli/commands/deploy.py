"""`deploy NAME`: `POST /api/v1/deployments/` with the deploy API's fields as flags; the answer
says where each replica went (or, on a 409, why nothing fits and what would)."""
from __future__ import annotations

import argparse
from typing import Any

from gpuplane_cli.bodies import merged, read_file, set_values, string_map
from gpuplane_cli.context import Context
from gpuplane_cli.errors import APIError, CLIError, Target, from_api_error
from gpuplane_cli.resources import placement_sharing, placement_where

WORKLOAD_TYPES = ("inference", "serving", "training", "development", "batch")
PRIORITIES = ("high", "medium", "low")
SHARING = ("auto", "exclusive", "mig", "mps", "mps-weighted", "timeslice")


def register(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    deploy = subparsers.add_parser(
        "deploy", parents=parents, help="place a model: decide every replica, reserve its GPUs, start its workloads",
        description="Deploy a model (POST /api/v1/deployments/). Fields the flags do not name go in "
                    "--set FIELD=VALUE or a -f file; flags win over the file.")
    deploy.add_argument("name", nargs="?", help="DNS-1123 label; names the Kubernetes workloads (or in -f)")
    deploy.add_argument("--model", help="model name, e.g. llama-3-8b")
    deploy.add_argument("--memory-gb", type=float, help="GPU memory one replica needs, in GB (1 GB = 1024 MiB)")
    deploy.add_argument("--gpus", "--gpu-count", dest="gpu_count", type=int, help="GPUs per replica (tensor-parallel)")
    deploy.add_argument("--replicas", type=int)
    deploy.add_argument("--workload-type", choices=WORKLOAD_TYPES)
    deploy.add_argument("--priority", choices=PRIORITIES)
    deploy.add_argument("--latency-slo-ms", type=int)
    deploy.add_argument("-n", "--namespace")
    deploy.add_argument("-l", "--label", action="append", metavar="KEY=VALUE", help="a Kubernetes label (repeatable)")
    deploy.add_argument("--sharing", choices=SHARING)
    deploy.add_argument("--share-percent", type=int, help="compute share per GPU, 1-100")
    deploy.add_argument("--no-gpu-selection", action="store_true",
                        help="hand every replica to the default Kubernetes scheduler")
    deploy.add_argument("--allow-default-scheduler", action="store_true",
                        help="when only busy GPUs stand in the way, hand over to the default scheduler")
    deploy.add_argument("--set", action="append", metavar="FIELD=VALUE", help="any other field (repeatable)")
    deploy.add_argument("-f", "--filename", help="the request body as YAML or JSON (- for standard input)")
    deploy.set_defaults(handler=run_deploy)


def deploy_body(args: argparse.Namespace) -> dict[str, Any]:
    """The request body: the file, then the flags, then --set."""
    flags: dict[str, Any] = {
        "name": args.name, "model": args.model, "memory_gb": args.memory_gb, "gpu_count": args.gpu_count,
        "replicas": args.replicas, "workload_type": args.workload_type, "priority": args.priority,
        "latency_slo_ms": args.latency_slo_ms, "namespace": args.namespace, "sharing": args.sharing,
        "share_percent": args.share_percent,
        "labels": string_map(args.label, "--label") or None,
        "enable_gpu_selection": False if args.no_gpu_selection else None,
        "allow_default_scheduler": True if args.allow_default_scheduler else None,
    }
    return merged(read_file(args.filename), flags, set_values(args.set))


def run_deploy(ctx: Context) -> int:
    body = deploy_body(ctx.args)
    name = str(body.get("name") or "")
    if not name:
        raise CLIError("error: a deployment needs a NAME (or name: in the -f file)")
    client = ctx.client()
    try:
        deployment = client.post("deployments/", body)
    except APIError as error:
        raise from_api_error(error, Target("deployments", name), creating=True) from None
    if ctx.emit_data(deployment):
        return 0
    if ctx.output == "name":
        ctx.print(f"deployment/{deployment['name']}")
        return 0
    ctx.print(f"deployment/{deployment['name']} created (id {deployment['id']}, {deployment['status']})")
    for placement in deployment.get("placements") or []:
        memory = placement.get("memory_gb")
        size = f", {float(memory):.1f} GB" if memory is not None else ""
        ctx.print(f"  replica {placement.get('replica_index')}: {placement_where(placement)} "
                  f"({placement_sharing(placement)}{size})")
    ctx.print(f'Run "{ctx.prog} explain {deployment["name"]}" to see why.')
    return 0
