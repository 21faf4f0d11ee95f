"""The GPU catalog against docs/design.md section 14, and GFD product-label mapping."""
from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest

from nodes.catalog import (
    CATALOG,
    MIG_MEMORY_SLICES,
    UnknownGPUProduct,
    find_model,
    known_products,
    lookup_product,
    parse_product,
)

# docs/design.md section 14, copied by hand: key, nominal memory GB, FP16 dense TFLOPS, INT8 dense
# TOPS, TDP W, compute capability, MIG; plus the NVML total in MiB the catalog must carry.
SECTION_14 = [
    ("A100-SXM4-40GB", 40, 312, 624, 400, (8, 0), True, 40960),
    ("A100-SXM4-80GB", 80, 312, 624, 400, (8, 0), True, 81920),
    ("H100-SXM5-80GB", 80, 989, 1979, 700, (9, 0), True, 81559),
    ("H100-PCIe-80GB", 80, 756, 1513, 350, (9, 0), True, 81559),
    ("H100-NVL-94GB", 94, 835, 1670, 400, (9, 0), True, 95830),
    ("H200-SXM-141GB", 141, 989, 1979, 700, (9, 0), True, 143771),
    ("L40S", 48, 362, 733, 350, (8, 9), False, 46068),
    ("L4", 24, 121, 243, 72, (8, 9), False, 23034),
    ("T4", 16, 65, 130, 70, (7, 5), False, 15360),
    ("V100-SXM2-32GB", 32, 125, None, 300, (7, 0), False, 32768),
]

# docs/design.md section 4, one column per memory size, rows in geometry-table order.
MIG_NAMES = {
    "A100-SXM4-40GB": ["1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"],
    "A100-SXM4-80GB": ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
    "H100-SXM5-80GB": ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
    "H100-PCIe-80GB": ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
    "H100-NVL-94GB": ["1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"],
    "H200-SXM-141GB": ["1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"],
}
GEOMETRY = [  # compute slices, memory slices, max count, valid starts
    (1, 1, 7, (0, 1, 2, 3, 4, 5, 6)),
    (1, 2, 4, (0, 2, 4, 6)),
    (2, 2, 3, (0, 2, 4)),
    (3, 4, 2, (0, 4)),
    (4, 4, 1, (0,)),
    (7, 8, 1, (0,)),
]


def test_it_holds_exactly_the_ten_models_of_section_14():
    assert list(CATALOG) == [row[0] for row in SECTION_14]


@pytest.mark.parametrize("key, nominal_gb, fp16, int8, tdp_w, cc, mig, memory_mib", SECTION_14)
def test_it_matches_the_section_14_table(key, nominal_gb, fp16, int8, tdp_w, cc, mig, memory_mib):
    model = CATALOG[key]
    assert model.key == key
    assert (model.fp16_tflops, model.int8_tops, model.tdp_w) == (fp16, int8, tdp_w)
    assert model.compute_capability == cc
    assert model.mig_capable is mig
    assert model.memory_mib == memory_mib
    # NVML totals sit within a few percent of the marketing size (ECC and reserved memory).
    assert abs(model.memory_mib - nominal_gb * 1024) / (nominal_gb * 1024) < 0.07


@pytest.mark.parametrize(
    "key, clients",
    [("T4", 48), ("L4", 48), ("H100-SXM5-80GB", 48), ("A100-SXM4-40GB", 48), ("V100-SXM2-32GB", 16)],
)
def test_it_gives_48_mps_clients_from_compute_capability_7_5_and_16_before(key, clients):
    assert CATALOG[key].mps_max_clients == clients


def test_it_computes_tflops_per_watt_from_fp16_and_tdp():
    assert CATALOG["H100-SXM5-80GB"].tflops_per_watt == pytest.approx(989 / 700)  # 1.413
    assert CATALOG["L4"].tflops_per_watt == pytest.approx(121 / 72)  # 1.681: L4 beats H100 per watt
    assert CATALOG["V100-SXM2-32GB"].tflops_per_watt == pytest.approx(125 / 300)


@pytest.mark.parametrize("key", list(MIG_NAMES))
def test_it_gives_each_mig_model_the_profiles_of_section_4(key):
    model = CATALOG[key]
    assert [p.name for p in model.mig_profiles] == MIG_NAMES[key]
    for profile, (compute, memory_slices, max_count, starts) in zip(model.mig_profiles, GEOMETRY, strict=True):
        assert (profile.compute_slices, profile.memory_slices, profile.max_count) == (compute, memory_slices, max_count)
        assert profile.valid_starts == starts
        # memory_mib is what NVML reports for an instance: under the profile's share of the
        # board's memory slices, in NVML's steps of 128 MiB.
        assert profile.memory_mib < memory_slices * model.memory_mib // MIG_MEMORY_SLICES
        assert profile.memory_mib % 128 == 0


def test_it_gives_mig_profiles_the_instance_memory_nvml_reports():
    # Measured on an H100 80GB HBM3 (driver 580.159.04), per geometry row.
    h100 = CATALOG["H100-SXM5-80GB"]
    assert [p.memory_mib for p in h100.mig_profiles] == [9984, 20096, 20096, 40448, 40448, 81152]
    assert h100.mig_profile("7g.80gb").memory_mib < h100.memory_mib  # 81152 < 81559: the whole board
    # NVIDIA's MIG user guide (nvidia-smi mig -lgip, GiB): A100 40GB 4.75 / 9.62 / 19.50 / 39.25,
    # A100 80GB 9.50 / 19.50 / 39.25 / 79.25.
    assert [p.memory_mib for p in CATALOG["A100-SXM4-40GB"].mig_profiles] == [4864, 9856, 9856, 19968, 19968, 40192]
    assert [p.memory_mib for p in CATALOG["A100-SXM4-80GB"].mig_profiles] == [9728, 19968, 19968, 40192, 40192, 81152]
    # No measurement: the H100 figures scaled by the board, down to a step of 128 MiB:
    # 81152 * 143771 // 81559 = 143051 -> 142976 (1117 steps).
    assert CATALOG["H200-SXM-141GB"].mig_profile("7g.141gb").memory_mib == 142976


def test_a_model_of_9_8_gb_does_not_fit_an_h100_1g_10gb_instance():
    needed_mib = math.ceil(9.8 * 1024)  # 10036: how the deploy request sizes memory_gb
    assert CATALOG["H100-SXM5-80GB"].mig_profile("1g.10gb").memory_mib < needed_mib  # 9984
    assert CATALOG["H100-SXM5-80GB"].mig_profile("1g.20gb").memory_mib >= needed_mib  # 20096


@pytest.mark.parametrize("key", list(MIG_NAMES))
def test_the_instances_of_a_full_layout_fit_the_board(key):
    model = CATALOG[key]
    seven_small = 7 * model.mig_profiles[0].memory_mib
    two_halves = 2 * model.mig_profiles[3].memory_mib
    assert max(seven_small, two_halves, model.mig_profiles[5].memory_mib) <= model.memory_mib


@pytest.mark.parametrize("key", ["L40S", "L4", "T4", "V100-SXM2-32GB"])
def test_it_gives_models_without_mig_no_profiles(key):
    model = CATALOG[key]
    assert model.mig_profiles == ()
    with pytest.raises(KeyError) as excinfo:
        model.mig_profile("1g.10gb")
    assert str(excinfo.value) == f"{key} does not support MIG, so it has no profile '1g.10gb'"


def test_it_names_the_valid_profiles_when_a_profile_is_unknown():
    with pytest.raises(KeyError) as excinfo:
        CATALOG["H100-SXM5-80GB"].mig_profile("3g.20gb")
    message = str(excinfo.value)
    assert "unknown MIG profile '3g.20gb' for H100-SXM5-80GB" in message
    assert "1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb" in message


def test_it_finds_models_by_key_and_lists_the_keys_when_missing():
    assert find_model("L4") is CATALOG["L4"]
    with pytest.raises(KeyError) as excinfo:
        find_model("H100")
    assert str(excinfo.value).startswith("unknown GPU model 'H100' (catalog keys: A100-SXM4-40GB, ")


# GFD's nvidia.com/gpu.product values: NVML name with spaces as "-", then "-MIG-<profile>" under
# the single MIG strategy, then "-SHARED" for replicated resources without renaming.
GFD_PRODUCTS = [
    ("NVIDIA-A100-SXM4-40GB", "A100-SXM4-40GB", None, False),
    ("A100-SXM4-40GB", "A100-SXM4-40GB", None, False),  # drivers before the "NVIDIA " prefix
    ("NVIDIA-A100-SXM4-80GB", "A100-SXM4-80GB", None, False),
    ("NVIDIA-A100-SXM-80GB", "A100-SXM4-80GB", None, False),
    ("NVIDIA-H100-80GB-HBM3", "H100-SXM5-80GB", None, False),
    ("NVIDIA-H100-PCIe", "H100-PCIe-80GB", None, False),
    ("NVIDIA-H100-NVL", "H100-NVL-94GB", None, False),
    ("NVIDIA-H200", "H200-SXM-141GB", None, False),
    ("NVIDIA-L40S", "L40S", None, False),
    ("NVIDIA-L4", "L4", None, False),
    ("Tesla-T4", "T4", None, False),
    ("Tesla-V100-SXM2-32GB", "V100-SXM2-32GB", None, False),
    # Suffixes.
    ("NVIDIA-A100-SXM4-80GB-MIG-3g.40gb", "A100-SXM4-80GB", "3g.40gb", False),
    ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "A100-SXM4-40GB", "1g.5gb", False),
    ("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", "H100-SXM5-80GB", "1g.10gb", False),
    ("NVIDIA-H200-MIG-7g.141gb", "H200-SXM-141GB", "7g.141gb", False),
    ("NVIDIA-H100-NVL-MIG-3g.47gb", "H100-NVL-94GB", "3g.47gb", False),
    ("NVIDIA-H100-80GB-HBM3-SHARED", "H100-SXM5-80GB", None, True),
    ("Tesla-T4-SHARED", "T4", None, True),
    ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED", "A100-SXM4-40GB", "1g.5gb", True),
    ("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb+me", "H100-SXM5-80GB", "1g.10gb", False),  # media extensions
    # Forms people and tools retype: NVML spaces, other case, stray whitespace.
    ("NVIDIA H100 80GB HBM3", "H100-SXM5-80GB", None, False),
    ("nvidia-l40s", "L40S", None, False),
    ("  NVIDIA-L4\n", "L4", None, False),
]


@pytest.mark.parametrize("product, key, mig_profile, shared", GFD_PRODUCTS)
def test_it_maps_gfd_products_onto_catalog_models(product, key, mig_profile, shared):
    assert lookup_product(product) is CATALOG[key]
    info = parse_product(product)
    assert (info.model.key, info.mig_profile, info.shared) == (key, mig_profile, shared)


def test_it_maps_every_listed_gfd_product_back_to_its_own_model():
    seen: dict[str, str] = {}
    for model in CATALOG.values():
        assert model.gfd_products, model.key
        for product in model.gfd_products:
            assert product.casefold() not in seen, f"{product} claimed by {seen.get(product.casefold())} and {model.key}"
            seen[product.casefold()] = model.key
            assert lookup_product(product) is model
    assert sorted(seen) == sorted(p.casefold() for p in known_products())


@pytest.mark.parametrize(
    "product",
    [
        "NVIDIA-H200-NVL",  # PCIe H200, 600 W: must not pass for the SXM board
        "NVIDIA-A100-PCIE-40GB",
        "NVIDIA-A100-80GB-PCIe",
        "NVIDIA-A10",
        "NVIDIA-H100",
        "",
        "NVIDIA-H100-80GB-HBM3-EXTRA",
        "SHARED",
    ],
)
def test_it_refuses_unknown_products_naming_them_and_the_known_ones(product):
    with pytest.raises(UnknownGPUProduct) as excinfo:
        lookup_product(product)
    error = excinfo.value
    assert isinstance(error, ValueError)
    assert error.product == product
    message = str(error)
    assert f"unknown GPU product {product!r}" in message
    assert "NVIDIA-H100-80GB-HBM3" in message and "Tesla-T4" in message


def test_it_refuses_a_mig_suffix_naming_a_profile_the_model_lacks():
    # 3g.20gb is an A100-40GB profile; on an H100 label it means the label is not what we think.
    with pytest.raises(UnknownGPUProduct) as excinfo:
        lookup_product("NVIDIA-H100-80GB-HBM3-MIG-3g.20gb")
    assert "H100-SXM5-80GB has no MIG profile 3g.20gb" in str(excinfo.value)
    with pytest.raises(UnknownGPUProduct) as excinfo:
        lookup_product("NVIDIA-L4-MIG-1g.10gb")
    assert "L4 has no MIG profile 1g.10gb (valid: none, it does not support MIG)" in str(excinfo.value)


@pytest.mark.parametrize("module", ["nodes/catalog.py", "nodes/mig.py"])
def test_it_keeps_catalog_and_mig_free_of_django(module):
    tree = ast.parse((Path(__file__).resolve().parents[2] / module).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
    assert not [name for name in imported if name.split(".")[0] in {"django", "rest_framework"}]
    # mig.py may use only the catalog from this project.
    project = {name for name in imported if name.split(".")[0] in {"nodes", "scheduler", "gpuplane"}}
    assert project <= {"nodes.catalog"}
