"""The node agent against a real GPU and a real gpuplane server, with zero manual steps, checked
reading by reading against nvidia-smi. Read only: it never changes MIG or any other GPU setting.

    python bench/nvml_check.py --out DIR        # needs the NVIDIA driver (libnvidia-ml, nvidia-smi)

What it does, on a machine with only this repository, Python 3 and gpuplane's runtime
requirements (docs: the report of issue 19 lists them):

1. Reads the GPUs with `nvidia-smi --query-gpu=...` (the name, count and memory a GFD-labelled
   node would carry) into a throw-away var dir (SQLite database, filesystem broker, secret key).
2. Migrates it, and runs gpuplane's real inventory sync on a one-node cluster built from those
   facts as the Kubernetes parser reads a GFD-labelled Node (no `gpuplane.io/gpu-uuids`
   annotation): the GPU rows get placeholder UUIDs, as a fresh real node does. Issues an agent
   token for the node.
3. Starts the real server (`manage.py runserver` on a free loopback port, no worker, no
   telemetry poll) and runs the real agent once (`manage.py gpuplane_agent --once`, real NVML):
   it reports the GPUs, then posts one sample per GPU.
4. Checks zero touch: the command succeeded, its first batch was stored, the rows now carry the
   UUIDs nvidia-smi shows, and a second sync (the one the report queued) keeps them and applies
   the report.
5. Compares what the agent stored (NVML: memory used and reserved apart, total, power, power
   limit, temperature, SM clock, utilization, MIG mode, processes) with nvidia-smi read just
   before and just after the agent, and writes `nvml_check.json` and `nvml_check.md` (a table
   for BENCHMARKS.md) into `--out`. Exit status 0 when everything holds, 1 otherwise.

`--nvidia-smi` names another nvidia-smi (the tests use a fake one together with a faked NVML).
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import platform
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GPU_FIELDS = (
    "index", "uuid", "name", "memory.total", "memory.reserved", "memory.used", "power.draw", "enforced.power.limit",
    "temperature.gpu", "clocks.sm", "utilization.gpu", "mig.mode.current", "driver_version",
)
# (nvidia-smi field, what the agent stored, how close counts as the same reading)
COMPARED: tuple[tuple[str, str, float, float], ...] = (
    # field, stored key, absolute tolerance, relative tolerance
    ("memory.total", "memory_total_mib", 0, 0),
    ("memory.reserved", "memory_reserved_mib", 0, 0),
    ("memory.used", "memory_used_mib", 16, 0.01),
    ("power.draw", "power_w", 5, 0.05),
    ("enforced.power.limit", "power_limit_w", 0.5, 0),
    ("temperature.gpu", "temperature_c", 2, 0),
    ("clocks.sm", "sm_clock_mhz", 30, 0.02),
    ("utilization.gpu", "utilization_pct", 10, 0),
)


def nvidia_smi(binary: str, fields: tuple[str, ...] = GPU_FIELDS) -> list[dict[str, str | None]]:
    """One dict per GPU; a field this nvidia-smi does not know is dropped (and left out) rather than failing."""
    wanted = list(fields)
    while True:
        done = subprocess.run([binary, f"--query-gpu={','.join(wanted)}", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=60, check=False)
        unknown = [name for name in wanted if f'"{name}"' in done.stdout + done.stderr and "not a valid field" in done.stdout + done.stderr]
        if done.returncode != 0 and unknown:
            wanted = [name for name in wanted if name not in unknown]
            continue
        if done.returncode != 0:
            raise RuntimeError(f"{binary} failed ({done.returncode}): {done.stderr or done.stdout}")
        rows = [[cell.strip() for cell in row] for row in csv.reader(io.StringIO(done.stdout)) if row]
        return [{name: _value(cell) for name, cell in zip(wanted, row, strict=True)} for row in rows]


def compute_apps(binary: str) -> dict[str, dict[int, int | None]]:
    """GPU UUID -> {pid: used MiB} from `--query-compute-apps`."""
    done = subprocess.run([binary, "--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True, timeout=60, check=False)
    apps: dict[str, dict[int, int | None]] = {}
    for row in csv.reader(io.StringIO(done.stdout if done.returncode == 0 else "")):
        if len(row) == 3 and row[1].strip().isdigit():
            used = _value(row[2].strip())
            apps.setdefault(row[0].strip(), {})[int(row[1])] = int(float(used)) if used is not None else None
    return apps


def _value(cell: str) -> str | None:
    return None if cell.strip("[]").strip() in {"N/A", "Not Supported", "Unknown Error", ""} else cell


def _number(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def gfd_node(name: str, gpus: list[dict[str, str | None]]) -> dict[str, Any]:
    """The Kubernetes Node object GPU feature discovery would leave for these GPUs (no gpuplane annotation)."""
    product = (gpus[0]["name"] or "").replace(" ", "-")
    return {
        "metadata": {"name": name, "resourceVersion": "1", "annotations": {}, "labels": {
            "kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": product,
            "nvidia.com/gpu.count": str(len(gpus)), "nvidia.com/gpu.memory": str(int(float(gpus[0]["memory.total"] or 0))),
        }},
        "spec": {},
        "status": {"allocatable": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": str(len(gpus))},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }


class OneNodeCluster:
    """A list-only cluster backend holding one Node object, read through gpuplane's own parser."""

    def __init__(self, node: dict[str, Any]) -> None:
        from nodes.cluster.parsing import parse_node

        self.node = parse_node(node)

    def list_nodes(self) -> list[Any]:
        return [self.node]

    def list_gpu_pods(self) -> list[Any]:
        return []


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(url: str, server: subprocess.Popen[str], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the server exited ({server.returncode}): {server.stdout.read() if server.stdout else ''}")
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except urllib.error.HTTPError:
            return  # it answers (401 without credentials)
        except (urllib.error.URLError, OSError):
            time.sleep(0.3)
    raise RuntimeError(f"the server did not answer {url} within {timeout_s:g} s")


def compare(stored: dict[str, Any], before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Each compared metric: the agent's value, nvidia-smi's before and after, and whether they agree."""
    result = {}
    for field, key, absolute, relative in COMPARED:
        mine, low_high = stored.get(key), [_number(before.get(field)), _number(after.get(field))]
        seen = [v for v in low_high if v is not None]
        if mine is None or not seen:
            agrees = mine is None and not seen  # both say "not available"
        else:
            slack = max(absolute, relative * max(seen))
            agrees = min(seen) - slack <= float(mine) <= max(seen) + slack
        result[field] = {"agent": mine, "nvidia_smi_before": low_high[0], "nvidia_smi_after": low_high[1],
                         "tolerance": f"±{absolute:g} or ±{relative:.0%}" if relative else f"±{absolute:g}", "match": agrees}
    return result


def run(nvidia_smi_binary: str, node_name: str, python: str) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="gpuplane-nvml-check-"))
    env = {**os.environ, "GPUPLANE_VAR_DIR": str(work), "DATABASE_URL": f"sqlite:///{work / 'gpuplane.sqlite3'}",
           "REDIS_URL": "", "GPUPLANE_CLUSTER": "simulated", "GPUPLANE_TELEMETRY_SOURCE": "none",
           "SECRET_KEY": secrets.token_urlsafe(32), "ALLOWED_HOSTS": "127.0.0.1,localhost",
           "DJANGO_SETTINGS_MODULE": "gpuplane.settings", "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    os.environ.update(env)
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    from nodes.authentication import issue_agent_token
    from nodes.inventory.sync import sync_inventory
    from nodes.models import GPU, GPUSample, Node, NodeGPUReport

    gpus = nvidia_smi(nvidia_smi_binary)
    if not gpus:
        raise RuntimeError("nvidia-smi lists no GPU")
    call_command("migrate", verbosity=0)
    cluster = OneNodeCluster(gfd_node(node_name, gpus))
    sync_inventory(cluster)
    node = Node.objects.get(name=node_name)
    placeholders = list(node.gpus.order_by("index").values_list("uuid", flat=True))
    _, key = issue_agent_token(node)

    port = free_port()
    server = subprocess.Popen([python, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload", "--nothreading"],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(f"http://127.0.0.1:{port}/api/v1/", server)
        before, apps_before = nvidia_smi(nvidia_smi_binary), compute_apps(nvidia_smi_binary)
        agent = subprocess.run([python, "manage.py", "gpuplane_agent", "--server", f"http://127.0.0.1:{port}",
                                f"--token={key}", "--node", node_name, "--once"],
                               cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
        after, apps_after = nvidia_smi(nvidia_smi_binary), compute_apps(nvidia_smi_binary)
    finally:
        server.terminate()
        server.wait(timeout=30)

    rows = {gpu.index: gpu for gpu in GPU.objects.filter(node=node)}
    uuids_after = [rows[i].uuid for i in sorted(rows)]
    samples = {sample.gpu.index: sample for sample in GPUSample.objects.filter(gpu__node=node).select_related("gpu")}
    report = NodeGPUReport.objects.filter(node=node).first()
    sync_inventory(cluster)  # the sync the report queued (no worker runs here)
    uuids_kept = list(node.gpus.order_by("index").values_list("uuid", flat=True))
    report_applied = report is not None and NodeGPUReport.objects.get(node=node).applied_revision == report.revision
    reported = {gpu["index"]: gpu for gpu in (report.gpus if report else [])}

    per_gpu = []
    for position, smi in enumerate(gpus):
        index = int(smi["index"] or position)
        sample = samples.get(index)
        stored = {} if sample is None else {
            key: getattr(sample, key) for _, key, _, _ in COMPARED
        }
        metrics = compare(stored, before[position], after[position])
        nvml_mig = reported.get(index, {}).get("mig_enabled")
        smi_mig = smi.get("mig.mode.current")  # "Enabled", "Disabled", or None on a board without MIG
        metrics["mig.mode.current"] = {
            "agent": nvml_mig, "nvidia_smi_before": smi_mig, "nvidia_smi_after": after[position].get("mig.mode.current"),
            "tolerance": "exact",
            "match": bool(nvml_mig) == (smi_mig == "Enabled") if smi_mig else nvml_mig in (None, False),
        }
        row = rows.get(index)
        mine = None if row is None or row.processes is None else dict(row.processes)
        smi_before, smi_after = apps_before.get(str(smi["uuid"]), {}), apps_after.get(str(smi["uuid"]), {})
        # Every process nvidia-smi saw both times is the agent's; each of the agent's was seen at least once.
        stable, seen = set(smi_before) & set(smi_after), set(smi_before) | set(smi_after)
        metrics["processes"] = {"agent": mine, "nvidia_smi_before": smi_before, "nvidia_smi_after": smi_after,
                                "tolerance": "same pids", "match": mine is not None and stable <= set(mine) <= seen}
        per_gpu.append({"index": index, "uuid": smi["uuid"], "name": smi["name"], "metrics": metrics})

    smi_uuids = [str(g["uuid"]) for g in gpus]
    zero_touch = {
        "agent_exit_status": agent.returncode,
        "agent_output": (agent.stdout + agent.stderr).strip()[-2000:],
        "uuids_before_agent": placeholders,
        "uuids_after_agent": uuids_after,
        "nvidia_smi_uuids": smi_uuids,
        "first_batch_stored": len(samples) == len(gpus),
        "rows_carry_real_uuids": uuids_after == smi_uuids,
        "sync_kept_them_and_applied_the_report": uuids_kept == smi_uuids and report_applied,
    }
    holds = (agent.returncode == 0 and zero_touch["first_batch_stored"] and zero_touch["rows_carry_real_uuids"]
             and zero_touch["sync_kept_them_and_applied_the_report"]
             and all(m["match"] for gpu in per_gpu for m in gpu["metrics"].values()))
    return {
        "benchmark": "nvml-vs-nvidia-smi",
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": {"hostname": socket.gethostname(), "driver": gpus[0].get("driver_version"),
                    "python": platform.python_version(), "cpus": os.cpu_count()},
        "zero_touch": zero_touch,
        "gpus": per_gpu,
        "holds": holds,
        "work_dir": str(work),
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Driver {result['machine']['driver']}, {result['date']}. Zero touch: agent exit "
        f"{result['zero_touch']['agent_exit_status']}, first batch stored: {result['zero_touch']['first_batch_stored']}, "
        f"rows carry the real UUIDs: {result['zero_touch']['rows_carry_real_uuids']}, sync kept them: "
        f"{result['zero_touch']['sync_kept_them_and_applied_the_report']}.",
        "",
        "| GPU | metric | gpuplane agent (NVML) | nvidia-smi before | nvidia-smi after | tolerance | match |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for gpu in result["gpus"]:
        for name, m in gpu["metrics"].items():
            lines.append(f"| {gpu['index']} {gpu['name']} | {name} | {_cell(m['agent'])} | {_cell(m['nvidia_smi_before'])} | "
                         f"{_cell(m['nvidia_smi_after'])} | {m['tolerance']} | {'yes' if m['match'] else '**no**'} |")
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    """A value as nvidia-smi writes it: 480 rather than 480.0."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=Path("."), help="folder for nvml_check.json and nvml_check.md")
    parser.add_argument("--nvidia-smi", default="nvidia-smi", help="the nvidia-smi to compare with")
    parser.add_argument("--node", default=socket.gethostname().split(".")[0].lower() or "gpu-node",
                        help="the node name the agent reports for (default: this host's)")
    args = parser.parse_args(argv)
    result = run(args.nvidia_smi, args.node, sys.executable)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "nvml_check.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    table = markdown(result)
    (args.out / "nvml_check.md").write_text(table)
    print(table)
    print(f"{'HOLDS' if result['holds'] else 'DOES NOT HOLD'}: {args.out / 'nvml_check.json'}")
    return 0 if result["holds"] else 1


if __name__ == "__main__":
    sys.exit(main())
