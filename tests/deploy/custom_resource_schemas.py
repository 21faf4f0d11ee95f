"""Schemas of the custom resources deploy/ uses, which Kubernetes' own schemas do not cover.

Written from the CRDs' API references (cert-manager.io/v1 Certificate and Issuer,
monitoring.coreos.com/v1 ServiceMonitor), limited to the fields gpuplane sets but strict about
them: an unknown or misspelt field, a wrong type or a missing required field fails, as the API
server's structural schema would refuse it.
"""
from __future__ import annotations

from typing import Any

_STR: dict[str, Any] = {"type": "string"}
_METADATA: dict[str, Any] = {
    "type": "object",
    "required": ["name"],
    "properties": {"name": _STR, "namespace": _STR, "labels": {"type": "object", "additionalProperties": _STR},
                   "annotations": {"type": "object", "additionalProperties": _STR}},
    "additionalProperties": False,
}


def _resource(api_version: str, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {"apiVersion": {"const": api_version}, "kind": {"const": kind}, "metadata": _METADATA,
                       "spec": spec},
        "additionalProperties": False,
    }


def _object(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


_SECRET_KEY_SELECTOR = _object({"name": _STR, "key": _STR, "optional": {"type": "boolean"}}, ("key",))
_DURATION = {"type": "string", "pattern": r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"}

SCHEMAS: dict[tuple[str, str], dict[str, Any]] = {
    ("cert-manager.io/v1", "Issuer"): _resource("cert-manager.io/v1", "Issuer", _object({
        "selfSigned": _object({"crlDistributionPoints": {"type": "array", "items": _STR}}),
        "ca": _object({"secretName": _STR}, ("secretName",)),
    })),
    ("cert-manager.io/v1", "Certificate"): _resource("cert-manager.io/v1", "Certificate", _object({
        "secretName": _STR,
        "commonName": _STR,
        "dnsNames": {"type": "array", "items": _STR, "minItems": 1},
        "duration": _DURATION,
        "renewBefore": _DURATION,
        "isCA": {"type": "boolean"},
        "privateKey": _object({
            "algorithm": {"enum": ["RSA", "ECDSA", "Ed25519"]},
            "size": {"type": "integer"},
            "rotationPolicy": {"enum": ["Never", "Always"]},
            "encoding": {"enum": ["PKCS1", "PKCS8"]},
        }),
        "issuerRef": _object({"name": _STR, "kind": _STR, "group": _STR}, ("name",)),
    }, ("secretName", "issuerRef"))),
    ("monitoring.coreos.com/v1", "ServiceMonitor"): _resource("monitoring.coreos.com/v1", "ServiceMonitor", _object({
        "selector": _object({"matchLabels": {"type": "object", "additionalProperties": _STR},
                             "matchExpressions": {"type": "array"}}),
        "namespaceSelector": _object({"any": {"type": "boolean"}, "matchNames": {"type": "array", "items": _STR}}),
        "jobLabel": _STR,
        "endpoints": {"type": "array", "minItems": 1, "items": _object({
            "port": _STR,
            "targetPort": {"type": ["string", "integer"]},
            "path": _STR,
            "scheme": {"enum": ["http", "https"]},
            "interval": _DURATION,
            "scrapeTimeout": _DURATION,
            "authorization": _object({"type": _STR, "credentials": _SECRET_KEY_SELECTOR}),
            "bearerTokenSecret": _SECRET_KEY_SELECTOR,
            "honorLabels": {"type": "boolean"},
        })},
    }, ("selector", "endpoints"))),
}
