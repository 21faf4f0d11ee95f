"""How the core words numbers for people: memory in GB (the deploy request's unit), shares in
percent, and counts with the right grammar ("1 node has", "2 nodes have")."""
from __future__ import annotations

from nodes.vocabulary import MIB_PER_GB


def gb(memory_mib: int) -> str:
    """Memory in the request's unit, to 0.1 GB: 81920 -> "80 GB", 1536 -> "1.5 GB", 81559 -> "79.6 GB"."""
    return f"{memory_mib / MIB_PER_GB:.1f}".removesuffix(".0") + " GB"


def percent(share_milli: int) -> str:
    """A compute share in thousandths as a rounded percentage: 250 -> "25%", 428 -> "43%"."""
    return f"{round(share_milli / 10):d}%"


def gpus(share_milli: int) -> str:
    """Compute in GPU-equivalents: 1000 -> "1 GPU", 2500 -> "2.5 GPUs", 250 -> "0.25 GPU", 0 -> "0 GPUs"."""
    amount = f"{share_milli / 1000:.3f}".rstrip("0").removesuffix(".")
    return f"{amount} {'GPU' if 0 < share_milli <= 1000 else 'GPUs'}"


def counted(count: int, singular: str, plural: str | None = None) -> str:
    """"1 node", "2 nodes", "0 nodes" (``plural`` defaults to ``singular`` + "s")."""
    return f"{count} {singular if count == 1 else (plural or singular + 's')}"


def nodes_that(count: int, singular_verb: str, plural_verb: str) -> str:
    """"1 node has" / "2 nodes have" (the verb agrees with the count)."""
    return f"{counted(count, 'node')} {singular_verb if count == 1 else plural_verb}"
