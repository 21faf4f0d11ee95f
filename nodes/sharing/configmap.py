"""How sharing configs reach the GPU operator: YAML text in a ConfigMap of its namespace."""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import yaml

from nodes.contract import LABEL_MANAGED_BY, MANAGED_BY_GPUPLANE
from nodes.sharing.schema import InvalidSharingConfig

# Where the GPU operator finds the named device plugin configs (ClusterPolicy
# devicePlugin.config.name) and the mig-parted configs (migManager.config.name).
GPU_OPERATOR_NAMESPACE = "gpu-operator"

_CONFIGMAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


class _Dumper(yaml.SafeDumper):
    """Block-style YAML as NVIDIA's documentation and kubectl write it; multi-line text as ``|`` blocks."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # Embedded YAML documents (ConfigMap data) stay readable as literal blocks instead of
    # one quoted line full of \n escapes.
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


def to_yaml(obj: Any) -> str:
    """Render ``obj`` as block-style YAML, keys in insertion order; ``yaml.safe_load`` reads it back equal."""
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True)


def plain_data(value: Any) -> Any:
    """Copy into plain dicts and lists so YAML never emits Python-specific tags."""
    if isinstance(value, Mapping):
        return {str(k): plain_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_data(v) for v in value]
    return value


def check_configmap_key(key: str) -> None:
    """Raise ``InvalidSharingConfig`` unless ``key`` can name an entry of a ConfigMap (and so a config)."""
    if not isinstance(key, str) or not _CONFIGMAP_KEY.match(key) or len(key) > 253:
        raise InvalidSharingConfig(f"config name {key!r} is not a valid ConfigMap key (letters, digits, '-', '_', '.')")


def managed_configmap(name: str, namespace: str, data: dict[str, str]) -> dict[str, Any]:
    """A v1 ConfigMap ``namespace/name`` holding ``data``, labelled as managed by gpuplane."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": {LABEL_MANAGED_BY: MANAGED_BY_GPUPLANE}},
        "data": data,
    }
