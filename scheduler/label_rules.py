"""Kubernetes label rules, pure: what the deploy request's labels and a sharing policy's selector
must be (the models import the policies, which check selectors; so no models here)."""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from nodes.contract import RESERVED_LABEL_KEYS, RESERVED_LABEL_PREFIX

_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def label_errors(labels: Any, *, selector: bool = False) -> list[str]:
    """Why ``labels`` is not a valid set of Kubernetes labels for a workload ([] when it is);
    ``selector``: labels a selector matches, where gpuplane's own keys may be named too.

    Keys: an optional DNS-subdomain prefix and "/", then a name of at most 63 characters
    (alphanumerics, '-', '_', '.'; alphanumeric at both ends). Values: empty or such a name.
    gpuplane's own keys (``gpuplane.io/*``, ``app.kubernetes.io/managed-by`` and ``/name``) are refused.
    """
    if not isinstance(labels, Mapping):
        return ["Enter an object of label names to string values."]
    errors = []
    for key, value in labels.items():
        if not isinstance(key, str) or not isinstance(value, str):
            errors.append(f"Label {key!r}: keys and values must be strings.")
            continue
        if "\x00" in key or "\x00" in value:
            errors.append("Null characters are not allowed.")
            continue
        prefix, _, name = key.rpartition("/")
        if (prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix))) or len(name) > 63 \
                or not _LABEL_NAME.match(name):
            errors.append(f"Label key {key!r} is not a valid Kubernetes label key.")
        elif not selector and (key in RESERVED_LABEL_KEYS or prefix == RESERVED_LABEL_PREFIX
                               or prefix.endswith("." + RESERVED_LABEL_PREFIX)):
            errors.append(f"Label key {key!r} is set by gpuplane.")
        elif value and (len(value) > 63 or not _LABEL_NAME.match(value)):
            errors.append(f"Label {key!r}: {value!r} is not a valid Kubernetes label value.")
    return errors
