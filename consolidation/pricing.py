"""What a GPU costs per hour, in money and energy: the catalog's TDP, prices overridable by settings.

Prices are typical on-demand cloud list prices per GPU-hour (2025); an operator sets their own in
``GPUPLANE_GPU_PRICES_USD_PER_HOUR`` (catalog key -> USD). Energy is the model's TDP: an idle GPU
draws less, a freed node also saves its host, so this is an estimate of the GPU part.
"""
from __future__ import annotations

from django.conf import settings

from nodes.catalog import CATALOG

DEFAULT_PRICES_USD_PER_HOUR: dict[str, float] = {
    "A100-SXM4-40GB": 3.0, "A100-SXM4-80GB": 3.7, "H100-SXM5-80GB": 6.9, "H100-PCIe-80GB": 4.8,
    "H100-NVL-94GB": 5.5, "H200-SXM-141GB": 8.0, "L40S": 1.8, "L4": 0.8, "T4": 0.35, "V100-SXM2-32GB": 2.5,
}
FALLBACK_TDP_W = 300  # a GPU whose model the catalog does not know


def price_usd_per_hour(model: str) -> float:
    prices = {**DEFAULT_PRICES_USD_PER_HOUR, **getattr(settings, "GPU_PRICES_USD_PER_HOUR", {})}
    return float(prices.get(model, settings.CONSOLIDATION_DEFAULT_GPU_PRICE_USD_PER_HOUR))


def kwh_per_hour(model: str) -> float:
    gpu = CATALOG.get(model)
    return (gpu.tdp_w if gpu is not None else FALLBACK_TDP_W) / 1000.0
