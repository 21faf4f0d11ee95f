"""How results are printed: kubectl's tables (upper-case headers, columns three spaces apart,
``<none>`` for no value, ages like ``5m`` or ``3d4h``), ``-o json`` and ``-o yaml`` of the API's
own objects, and a progress bar. Pure functions: they return text."""
from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import yaml

NONE = "<none>"
COLUMN_GAP = 3  # kubectl's tabwriter padding
FORMATS = ("table", "wide", "json", "yaml", "name")


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], *, keep_case: Sequence[str] = ()) -> str:
    """Columns padded to their widest cell, three spaces apart, the last one unpadded; headers
    upper-case (but those in ``keep_case``, such as node names), empty cells ``<none>``."""
    cells = [[str(h) if h in keep_case else str(h).upper() for h in headers],
             *([_cell(value) for value in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        padded = [value.ljust(widths[i] + COLUMN_GAP) for i, value in enumerate(row[:-1])]
        lines.append(("".join(padded) + row[-1]).rstrip())
    return "\n".join(lines)


def _cell(value: object) -> str:
    if value is None or value == "":
        return NONE
    return str(value)


def dump(data: Any, fmt: str) -> str:
    """``data`` as JSON (indented, keys in the API's order) or YAML."""
    if fmt == "json":
        return json.dumps(data, indent=2, ensure_ascii=False)
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, default_flow_style=False).rstrip("\n")


def as_list(items: list[Any]) -> dict[str, Any]:
    """A list for `-o json|yaml`, shaped like kubectl's: ``{"kind": "List", "items": [...]}``."""
    return {"kind": "List", "items": items}


def parse_time(value: str | None) -> datetime | None:
    """An API timestamp (ISO 8601, ``Z`` allowed) as an aware datetime; None for none or garbage."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def age(value: str | None, now: datetime) -> str:
    """kubectl's age of a timestamp (its ``HumanDuration``): ``45s``, ``3m20s``, ``25m``,
    ``5h12m``, ``20h``, ``3d4h``, ``45d``, ``2y30d``; ``<none>`` without one, ``<unknown>`` for garbage."""
    if not value:
        return NONE
    then = parse_time(value)
    if then is None:
        return "<unknown>"
    seconds = int((now - then).total_seconds())
    if seconds < -1:
        return "<invalid>"
    return human_duration(max(seconds, 0))


def human_duration(seconds: int) -> str:
    """See ``age``; ``seconds`` >= 0."""
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return f"{minutes}m" if seconds % 60 == 0 else f"{minutes}m{seconds % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 192:
        return f"{days}d" if hours % 24 == 0 else f"{days}d{hours % 24}h"
    if days < 365 * 2:
        return f"{days}d"
    years = days // 365
    if years < 8:
        return f"{years}y" if days % 365 == 0 else f"{years}y{days % 365}d"
    return f"{years}y"


def progress_bar(percent: float, width: int = 30) -> str:
    """``[###############...............]  50.0 %``: filled in proportion, clamped to 0..100."""
    share = min(max(float(percent), 0.0), 100.0)
    filled = int(round(width * share / 100.0))
    return f"[{'#' * filled}{'.' * (width - filled)}] {share:5.1f} %"


def number(value: float | int | None, unit: str = "", digits: int = 1) -> str:
    """``12.5`` -> ``"12.5%"`` (with unit ``%``), ``245.0, " W"`` -> ``"245.0 W"``; None -> ``<none>``."""
    if value is None:
        return NONE
    return f"{float(value):.{digits}f}{unit}"


def gb(mib: int | float | None, digits: int = 1) -> str:
    """MiB as the project's GB (1 GB = 1024 MiB): ``40960`` -> ``"40.0 GB"``."""
    if mib is None:
        return NONE
    return f"{float(mib) / 1024:.{digits}f} GB"


def key_values(pairs: Iterable[tuple[str, object]]) -> str:
    """``kubectl describe``'s aligned ``Key:  value`` lines."""
    pairs = [(key, _cell(value)) for key, value in pairs]
    width = max((len(key) for key, _ in pairs), default=0) + 2
    return "\n".join(f"{(key + ':').ljust(width)}{value}" for key, value in pairs)
