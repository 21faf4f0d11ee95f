"""What NVIDIA's device plugin and mig-parted formats share: version v1, no unknown keys, one error."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Both the device plugin config and the mig-parted config are at version v1.
CONFIG_VERSION = "v1"


class InvalidSharingConfig(ValueError):
    """A device plugin or mig-parted config that NVIDIA's components (or gpuplane) would refuse."""


def reject_unknown_keys(where: str, mapping: Mapping[str, Any], allowed: set[str] | frozenset[str]) -> None:
    """Raise ``InvalidSharingConfig`` naming every key of ``mapping`` not in ``allowed``, and ``where`` it was.

    NVIDIA's components ignore a key they do not know, so a misspelt one would silently leave a
    node on the default config; refusing it here turns the typo into an error.
    """
    unknown = sorted(str(key) for key in mapping if key not in allowed)
    if unknown:
        raise InvalidSharingConfig(
            f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} in {where} "
            f"(allowed: {', '.join(sorted(allowed))})"
        )
