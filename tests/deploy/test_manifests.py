"""deploy/: each overlay renders, every object is valid for two Kubernetes versions, and the
installation keeps the promises of docs/install.md (probes, resources, non-root, PDBs, one beat,
the webhook's scope, the API server's way to the webhook, the PriorityClasses the code names)."""
from __future__ import annotations

import importlib

import jsonschema
import kubernetes_validate
import pytest

from nodes.contract import PRIORITY_CLASS_PREFIX
from scheduler.core.types import Priority
from tests.deploy.custom_resource_schemas import SCHEMAS
from tests.deploy.rendering import (
    OVERLAYS,
    container_port,
    containers,
    named,
    of_kind,
    pod_spec,
    render,
    selects,
)

# The oldest Kubernetes with admission matchConditions GA (1.30), and the newest schemas we have.
KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")
WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet", "Job")


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_object_validates_offline_against_the_schemas(overlay, version):
    objects = render(overlay)
    assert len(objects) > 20
    invalid = []
    for obj in objects:
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        custom = SCHEMAS.get((obj["apiVersion"], obj["kind"]))
        try:
            if custom is not None:
                jsonschema.validate(obj, custom)
            else:
                # strict: an unknown field is an error, as `kubectl apply --validate=strict` makes it
                kubernetes_validate.validate(obj, version, strict=True)
        except (jsonschema.ValidationError, kubernetes_validate.ValidationError) as exc:
            invalid.append(f"{where}: {exc.message} at {'/'.join(map(str, exc.path))}")
        except kubernetes_validate.SchemaNotFoundError:
            invalid.append(f"{where}: no schema for {obj['apiVersion']} {obj['kind']} in Kubernetes {version} "
                           "(a custom resource? add its schema to tests/deploy/custom_resource_schemas.py)")
    assert invalid == []


def test_the_validation_would_catch_a_mistake():
    web = dict(named(render("production"), "Deployment", "gpuplane-web"))
    web["spec"] = dict(web["spec"], replica=2)  # misspelt
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(web, KUBERNETES_VERSIONS[0], strict=True)
    monitor = dict(named(render("production"), "ServiceMonitor", "gpuplane"))
    monitor["spec"] = dict(monitor["spec"], endpoint=[])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(monitor, SCHEMAS[("monitoring.coreos.com/v1", "ServiceMonitor")])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_deployment_has_probes_resources_runs_as_non_root_and_has_a_pdb(overlay):
    objects = render(overlay)
    deployments = of_kind(objects, "Deployment")
    assert {d["metadata"]["name"] for d in deployments} >= {"gpuplane-web", "gpuplane-worker", "gpuplane-beat"}
    pdbs = of_kind(objects, "PodDisruptionBudget")
    problems = []
    for deployment in deployments:
        name, spec = deployment["metadata"]["name"], pod_spec(deployment)
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        if not spec.get("securityContext", {}).get("runAsNonRoot"):
            problems.append(f"{name}: pod securityContext.runAsNonRoot is not true")
        for container in containers(deployment):
            resources = container.get("resources", {})
            for part in ("requests", "limits"):
                if not {"cpu", "memory"} <= set(resources.get(part, {})):
                    problems.append(f"{name}/{container['name']}: no cpu and memory {part}")
            if container.get("securityContext", {}).get("allowPrivilegeEscalation") is not False:
                problems.append(f"{name}/{container['name']}: allowPrivilegeEscalation is not false")
        for container in spec["containers"]:
            for probe in ("readinessProbe", "livenessProbe"):
                if probe not in container:
                    problems.append(f"{name}/{container['name']}: no {probe}")
        if not [pdb for pdb in pdbs if pdb["metadata"]["namespace"] == deployment["metadata"]["namespace"]
                and selects(pdb["spec"]["selector"], labels)]:
            problems.append(f"{name}: no PodDisruptionBudget selects its pods")
    assert problems == []


def test_web_runs_at_least_two_replicas_probed_on_healthz():
    web = named(render("production"), "Deployment", "gpuplane-web")
    assert web["spec"]["replicas"] >= 2
    container = pod_spec(web)["containers"][0]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == "/healthz"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_exactly_one_beat_replica_replaced_not_rolled(overlay):
    objects = render(overlay)
    beats = [obj for obj in of_kind(objects, "Deployment") + of_kind(objects, "StatefulSet")
             if "beat" in pod_spec(obj)["containers"][0].get("args", [])]
    assert [beat["metadata"]["name"] for beat in beats] == ["gpuplane-beat"]
    assert beats[0]["spec"]["replicas"] == 1
    assert beats[0]["spec"]["strategy"] == {"type": "Recreate"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_rollout_waits_for_the_migration_job_without_hooks(overlay):
    objects = render(overlay)
    job = named(objects, "Job", "gpuplane-migrate")
    assert pod_spec(job)["containers"][0]["args"] == ["migrate"]
    for deployment in of_kind(objects, "Deployment"):
        init = pod_spec(deployment).get("initContainers", [])
        assert [c["args"] for c in init] == [["wait-for-migrations"]], deployment["metadata"]["name"]
    annotations = [key for obj in objects for key in (obj["metadata"].get("annotations") or {})]
    assert not [key for key in annotations if key.startswith("helm.sh/hook")]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_webhook_skips_kube_system_and_gpuplanes_own_namespace(overlay):
    objects = render(overlay)
    own_namespace = named(objects, "Deployment", "gpuplane-webhook")["metadata"]["namespace"]
    (configuration,) = of_kind(objects, "MutatingWebhookConfiguration")
    (webhook,) = configuration["webhooks"]
    for namespace in ("kube-system", own_namespace):
        assert not selects(webhook["namespaceSelector"], {"kubernetes.io/metadata.name": namespace}), namespace
    assert selects(webhook["namespaceSelector"], {"kubernetes.io/metadata.name": "ml-serving"})
    assert webhook["failurePolicy"] == "Ignore"
    assert webhook["timeoutSeconds"] <= 5
    assert webhook["sideEffects"] == "NoneOnDryRun"
    assert webhook["reinvocationPolicy"] == "IfNeeded"
    assert [rule["resources"] for rule in webhook["rules"]] == [["pods"]]
    (condition,) = webhook["matchConditions"]
    assert "nvidia.com/" in condition["expression"] and "initContainers" in condition["expression"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_webhook_service_reaches_the_webhook_pods_and_a_networkpolicy_admits_the_api_server(overlay):
    objects = render(overlay)
    (configuration,) = of_kind(objects, "MutatingWebhookConfiguration")
    reference = configuration["webhooks"][0]["clientConfig"]["service"]
    assert reference["path"] == "/webhooks/mutate-pods"
    service = named(objects, "Service", reference["name"])
    assert service["metadata"]["namespace"] == reference["namespace"]
    (service_port,) = [p for p in service["spec"]["ports"] if p["port"] == reference.get("port", 443)]
    (backend,) = [d for d in of_kind(objects, "Deployment")
                  if selects({"matchLabels": service["spec"]["selector"]}, d["spec"]["template"]["metadata"]["labels"])]
    port = container_port(backend, service_port["targetPort"])
    assert backend["metadata"]["name"] == "gpuplane-webhook" and port == 8443
    env = {e["name"]: e.get("value") for e in pod_spec(backend)["containers"][0]["env"]}
    assert env["GPUPLANE_BIND"].endswith(f":{port}") and env["GPUPLANE_TLS_CERT_FILE"]

    labels = backend["spec"]["template"]["metadata"]["labels"]
    admitting = []
    for policy in of_kind(objects, "NetworkPolicy"):
        if policy["metadata"]["namespace"] != backend["metadata"]["namespace"]:
            continue
        if not selects(policy["spec"]["podSelector"], labels):
            continue
        for rule in policy["spec"].get("ingress", []):
            ports = [container_port(backend, p["port"]) for p in rule.get("ports", [])]
            # The API server is no pod: only an ipBlock (or no `from` at all) lets it in.
            from_anywhere = not rule.get("from") or any("ipBlock" in peer for peer in rule["from"])
            if (not ports or port in ports) and from_anywhere:
                admitting.append(policy["metadata"]["name"])
    assert admitting, "no NetworkPolicy admits the API server to the webhook port"
    # ...and a default deny makes the others mean something.
    assert any(p["spec"]["podSelector"] == {} and "ingress" not in p["spec"] for p in of_kind(objects, "NetworkPolicy"))


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_priority_classes_are_exactly_those_the_code_names(overlay):
    classes = {pc["metadata"]["name"]: pc for pc in of_kind(render(overlay), "PriorityClass")}
    # scheduler.workloads names `gpuplane-<priority>` for every priority a deploy request may have.
    expected = [f"{PRIORITY_CLASS_PREFIX}{priority.value}" for priority in Priority]
    assert sorted(classes) == sorted(expected)
    # Priority lists its members from the highest down.
    values = [classes[name]["value"] for name in expected]
    assert values == sorted(values, reverse=True) and len(set(values)) == len(values)
    assert not any(pc.get("globalDefault") for pc in classes.values())


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_priority_classes_carry_the_values_gpuplane_starts_with(overlay):
    # seed 002's values, as the migration stores them for gpuplane's PriorityLevel rows
    defaults = importlib.import_module("scheduler.migrations.0013_admission")
    classes = {pc["metadata"]["name"]: pc for pc in of_kind(render(overlay), "PriorityClass")}
    for priority, value, _ in defaults.SEED_002:
        pc = classes[f"{PRIORITY_CLASS_PREFIX}{priority}"]
        assert pc["value"] == value
        assert pc["preemptionPolicy"] == ("Never" if priority == "low" else "PreemptLowerPriority")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_agent_runs_on_gpu_nodes_with_the_nvidia_runtime_and_no_kubernetes_rights(overlay):
    objects = render(overlay)
    agent = named(objects, "DaemonSet", "gpuplane-agent")
    spec = pod_spec(agent)
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["containers"][0]["args"][0] == "agent"
    env = {e["name"]: e for e in spec["containers"][0]["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    # The fallback: a key per node, the optional Secret's entry named after the node.
    assert mounts["agent-keys"] == env["GPUPLANE_AGENT_TOKEN_DIR"]["value"]
    assert volumes["agent-keys"]["secret"] == {"secretName": "gpuplane-agent", "optional": True}
    assert "GPUPLANE_AGENT_TOKEN" not in env  # one key for every node cannot work: a key is one node's
    assert "nvidia.com/gpu" not in str(spec["containers"][0]["resources"])  # takes no GPU from a workload
    bound = [subject["name"] for binding in of_kind(objects, "RoleBinding") + of_kind(objects, "ClusterRoleBinding")
             for subject in binding["subjects"]]
    assert spec["serviceAccountName"] not in bound
    account = named(objects, "ServiceAccount", spec["serviceAccountName"])
    assert spec["automountServiceAccountToken"] is False and account["automountServiceAccountToken"] is False


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_agent_proves_its_node_with_a_projected_token_for_gpuplane_only(overlay, settings):
    objects = render(overlay)
    spec = pod_spec(named(objects, "DaemonSet", "gpuplane-agent"))
    (container,) = spec["containers"]
    env = {e["name"]: e for e in container["env"]}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    (source,) = {v["name"]: v for v in spec["volumes"]}["agent-identity"]["projected"]["sources"]
    token = source["serviceAccountToken"]
    # Not the API server's audience: the token is good for gpuplane alone, and short-lived (the
    # kubelet renews it; 600 s is the least the TokenRequest API takes).
    assert token["audience"] == settings.GPUPLANE_AGENT_TOKEN_AUDIENCE == "gpuplane"
    assert token["expirationSeconds"] == 600
    assert mounts["agent-identity"]["readOnly"] is True
    assert env["GPUPLANE_AGENT_TOKEN_FILE"]["value"] == f"{mounts['agent-identity']['mountPath']}/{token['path']}"
    # The server checks the token is of this ServiceAccount, in the namespace the web pods run in.
    assert spec["serviceAccountName"] == settings.GPUPLANE_AGENT_SERVICE_ACCOUNT
    (web,) = (c for c in pod_spec(named(objects, "Deployment", "gpuplane-web"))["containers"] if c["name"] == "web")
    web_env = {e["name"]: e for e in web["env"]}
    assert web_env["GPUPLANE_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert named(objects, "ServiceAccount", spec["serviceAccountName"])["metadata"]["namespace"] == "gpuplane"


def test_the_production_overlay_asks_cert_manager_for_the_webhook_certificate():
    objects = render("production")
    (configuration,) = of_kind(objects, "MutatingWebhookConfiguration")
    certificate = named(objects, "Certificate", "gpuplane-webhook")
    namespace = certificate["metadata"]["namespace"]
    assert configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"{namespace}/gpuplane-webhook"
    webhook = named(objects, "Deployment", "gpuplane-webhook")
    volumes = {v["name"]: v for v in pod_spec(webhook)["volumes"]}
    assert volumes["webhook-tls"]["secret"]["secretName"] == certificate["spec"]["secretName"]
    service = configuration["webhooks"][0]["clientConfig"]["service"]
    assert f"{service['name']}.{service['namespace']}.svc" in certificate["spec"]["dnsNames"]


def test_the_dev_overlay_makes_the_certificate_with_jobs():
    objects = render("dev")
    jobs = {job["metadata"]["name"]: pod_spec(job)["containers"][0]["args"] for job in of_kind(objects, "Job")}
    assert jobs["gpuplane-webhook-cert-create"][0] == "create"
    assert "--webhook-name=gpuplane" in jobs["gpuplane-webhook-cert-patch"]
