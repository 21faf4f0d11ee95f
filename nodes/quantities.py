"""Kubernetes resource quantities ("500m", "8", "64Gi", "1e3"): parsing and the canonical forms.

Pure: the cluster parser (``nodes.cluster.parsing``), the deploy request's ``cpu`` and ``memory``
(``scheduler.services.spec``) and the workloads gpuplane writes share these rules. CPU is held in
millicores, memory in MiB (a request is rounded up, never down: a pod gets at least what it asked).
"""
from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_SUFFIXES = {
    "m": Decimal("0.001"),
    "": Decimal(1),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([A-Za-z]*)$")
_MIB = Decimal(2) ** 20


class QuantityError(ValueError):
    """Not a Kubernetes quantity."""


def parse_quantity(value: str | int | float) -> Decimal:
    """A Kubernetes resource quantity ("63500m", "512Gi", "1e3", 8) as a Decimal in base units."""
    if isinstance(value, bool):
        raise QuantityError(f"invalid Kubernetes quantity {value!r}")
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise QuantityError(f"invalid Kubernetes quantity {value!r}")
        return Decimal(str(value))
    match = _QUANTITY.match(value.strip())
    if not match or match.group(2) not in _SUFFIXES:
        raise QuantityError(f"invalid Kubernetes quantity {value!r}")
    try:
        number = Decimal(match.group(1))
    except InvalidOperation:
        raise QuantityError(f"invalid Kubernetes quantity {value!r}") from None
    return number * _SUFFIXES[match.group(2)]


def cpu_milli(value: str | int | float) -> int:
    """Cores as millicores, rounded up ("500m" -> 500, "1.5" -> 1500, 8 -> 8000)."""
    return math.ceil(parse_quantity(value) * 1000)


def memory_mib(value: str | int | float) -> int:
    """Bytes as MiB, rounded up ("64Gi" -> 65536, "1G" -> 954, "512Mi" -> 512)."""
    return math.ceil(parse_quantity(value) / _MIB)


def format_cpu(milli: int) -> str:
    """The canonical CPU quantity: whole cores as "8", else millicores "500m"."""
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def format_memory(mib: int) -> str:
    """The canonical memory quantity: "64Gi" for whole GiB, else "1536Mi"."""
    return f"{mib // 1024}Gi" if mib % 1024 == 0 and mib else f"{mib}Mi"
