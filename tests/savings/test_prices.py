"""GPU prices and power per catalog model (nodes.gpu_costs) and their environment setting."""
from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from gpuplane.env import env_number_map
from nodes.catalog import CATALOG
from nodes.gpu_costs import DEFAULT_GPU_PRICE_USD_PER_HOUR, gpu_prices


def test_every_catalog_model_has_a_default_price():
    assert set(DEFAULT_GPU_PRICE_USD_PER_HOUR) == set(CATALOG)


def test_prices_use_the_setting_and_the_catalog_power(settings):
    settings.GPU_PRICE_USD_PER_HOUR = {"L4": 0.5}
    prices = gpu_prices()
    assert (prices["L4"].usd_per_hour, prices["L4"].power_w) == (0.5, 72.0)
    assert prices["H100-SXM5-80GB"].usd_per_hour == DEFAULT_GPU_PRICE_USD_PER_HOUR["H100-SXM5-80GB"]


def test_the_environment_setting_is_a_json_object_of_numbers(monkeypatch):
    monkeypatch.setenv("GPUPLANE_GPU_PRICE_USD_PER_HOUR", '{"L4": 0.7, "T4": 1}')
    assert env_number_map("GPUPLANE_GPU_PRICE_USD_PER_HOUR") == {"L4": 0.7, "T4": 1.0}
    for bad in ("0.7", '{"L4": "cheap"}', '{"L4": -1}', "{not json"):
        monkeypatch.setenv("GPUPLANE_GPU_PRICE_USD_PER_HOUR", bad)
        with pytest.raises(ImproperlyConfigured):
            env_number_map("GPUPLANE_GPU_PRICE_USD_PER_HOUR")
