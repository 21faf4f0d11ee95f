"""AdmissionReviews and pods for the webhook's tests."""
from __future__ import annotations

import base64
import json
from typing import Any

from django.test import Client


def gpu_pod(name: str = "chat-7d9f", namespace: str = "ml", *, gpus: int = 1, resource: str = "nvidia.com/gpu",
            labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
            memory: str = "8Gi", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}, "annotations": annotations or {}},
        "spec": {"containers": [{"name": "main", "image": "vllm/vllm-openai:v0.9",
                                 "resources": {"limits": {resource: str(gpus), "memory": memory, "cpu": "2"}}}],
                 **spec},
    }


def admission_review(pod: dict[str, Any], *, uid: str = "705ab4f5-6393-11e8-b7cc-42010a800002",
                     dry_run: bool = False, namespace: str | None = None) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": "CREATE",
                        "namespace": namespace or pod.get("metadata", {}).get("namespace", "default"),
                        "object": pod, "dryRun": dry_run}}


def post(client: Client, body: Any) -> tuple[int, dict[str, Any]]:
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    response = client.post("/webhooks/mutate-pods", data=data, content_type="application/json")
    return response.status_code, response.json()


def patch_of(answer: dict[str, Any]) -> list[dict[str, Any]]:
    encoded = answer["response"].get("patch")
    return json.loads(base64.b64decode(encoded)) if encoded else []
