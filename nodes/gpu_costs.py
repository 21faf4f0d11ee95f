"""What one GPU-hour of each catalog model costs, in dollars and in energy.

Money: DEFAULT_GPU_PRICE_USD_PER_HOUR below, indicative on-demand cloud prices per GPU-hour
(late 2025, rounded; on-premises owners should set their own amortised figure), overridden per
model by settings.GPU_PRICE_USD_PER_HOUR (env GPUPLANE_GPU_PRICE_USD_PER_HOUR, a JSON object).
Energy: the catalog's board power (`tdp_w`), i.e. what a GPU may draw when busy; a freed GPU is
assumed to be powered off or handed back, so its whole board power is saved.
Savings (savings/) and consolidation price GPUs through `gpu_costs()`, so both agree.
"""
from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from nodes.catalog import CATALOG

# USD per GPU-hour by catalog key (every key of nodes.catalog.CATALOG; a test checks it).
DEFAULT_GPU_PRICE_USD_PER_HOUR: dict[str, float] = {
    "A100-SXM4-40GB": 3.0,
    "A100-SXM4-80GB": 4.0,
    "H100-SXM5-80GB": 6.5,
    "H100-PCIe-80GB": 5.0,
    "H100-NVL-94GB": 5.5,
    "H200-SXM-141GB": 7.5,
    "L40S": 1.9,
    "L4": 0.8,
    "T4": 0.35,
    "V100-SXM2-32GB": 2.5,
}


@dataclass(frozen=True)
class GPUPrice:
    """One GPU-hour of a model: its price and the board power it draws."""

    usd_per_hour: float
    power_w: float


def gpu_prices() -> dict[str, GPUPrice]:
    """Price and power of every catalog model, with settings.GPU_PRICE_USD_PER_HOUR applied; a
    model outside the catalog (or the empty key of an unknown product) is not in it."""
    overrides: dict[str, float] = settings.GPU_PRICE_USD_PER_HOUR
    return {
        key: GPUPrice(overrides.get(key, DEFAULT_GPU_PRICE_USD_PER_HOUR.get(key, 0.0)), float(model.tdp_w))
        for key, model in CATALOG.items()
    }
