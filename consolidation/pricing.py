"""What a freed GPU saves per hour, in money and energy: the same prices and power as the savings page.

Both come from ``nodes.gpu_costs`` (the catalog's board power; prices overridable by
``GPUPLANE_GPU_PRICE_USD_PER_HOUR``), so a plan's savings and the savings page agree. A model
outside the catalog has no known price (0) and is taken at a typical board power.
"""
from __future__ import annotations

from nodes.gpu_costs import gpu_prices

FALLBACK_TDP_W = 300  # a GPU whose model the catalog does not know


def price_usd_per_hour(model: str) -> float:
    price = gpu_prices().get(model)
    return price.usd_per_hour if price is not None else 0.0


def kwh_per_hour(model: str) -> float:
    price = gpu_prices().get(model)
    return (price.power_w if price is not None else FALLBACK_TDP_W) / 1000.0
