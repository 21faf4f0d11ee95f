"""GPU models gpuplane knows: memory, throughput, power, compute capability, MIG profiles.

Pure Python (no Django) so that the scheduler core, benchmarks and property tests can use it
alone. The figures follow docs/design.md section 14 (NVIDIA datasheets); check a new model against its
datasheet before adding it.

Where each number comes from:

- ``memory_mib`` is the total memory NVML reports for the board (``nvidia-smi`` "Memory-Usage"
  total, the same figure GPU feature discovery publishes as ``nvidia.com/gpu.memory``), NOT the
  marketing size: an "80 GB" H100 reports 81559 MiB, an "141 GB" H200 143771 MiB. Comparing the
  catalog with what a node reports therefore needs no unit conversion.
- ``fp16_tflops`` / ``int8_tops`` are dense tensor-core figures (no sparsity), ``tdp_w`` the board
  power limit (SXM / PCIe variant as named by the key), ``max_sm_clock_mhz`` the highest SM
  (boost) clock of the board, as ``nvidia-smi -q`` lists under "Max Clocks". Telemetry bounds
  what it accepts by these (``nodes.telemetry.limits``).
- MIG profiles follow the geometry table of docs/design.md section 4; see ``_MIG_GEOMETRY``. A
  profile's ``memory_mib`` is the memory NVML reports for an instance of it (the MIG device's
  ``nvmlDeviceGetMemoryInfo`` total, ``nvidia-smi mig -lgip``'s "Memory" column in GiB), which is
  less than the profile's share of the board (``_MIG_MEMORY_MIB`` says where each row comes
  from): a workload is sized against what it will really get, so a 9.8 GB model does not fit an
  H100 ``1g.10gb`` (9,984 MiB). The instances of any valid layout add up to less than the board's
  memory, which the inventory's per-GPU memory accounting relies on.
- ``gfd_products`` are the values GPU feature discovery writes to ``nvidia.com/gpu.product``:
  the NVML device name with spaces replaced by ``-`` (``NVIDIA H100 80GB HBM3`` ->
  ``NVIDIA-H100-80GB-HBM3``), plus names older drivers used for the same board.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# A MIG-capable GPU has 8 memory slices and 7 compute slices (docs/design.md section 4).
MIG_MEMORY_SLICES = 8
MIG_COMPUTE_SLICES = 7

# Compute capability from which MPS supports 48 clients per GPU instead of 16 (Volta).
_MPS_48_CLIENTS_FROM_CC = (7, 5)


@dataclass(frozen=True)
class MIGProfile:
    """One MIG GPU-instance profile of one GPU model (e.g. ``3g.40gb`` on an A100-80GB).

    ``valid_starts`` are the memory-slice indexes an instance may start at; an instance occupies
    memory slices ``[start, start + memory_slices)``.
    """

    name: str
    compute_slices: int
    memory_slices: int
    max_count: int
    valid_starts: tuple[int, ...]
    memory_mib: int


@dataclass(frozen=True)
class GPUModel:
    """A GPU board model of the catalog; ``key`` is what ``GPU.model`` / ``Node.gpu_model`` store."""

    key: str
    name: str
    memory_mib: int
    fp16_tflops: float
    int8_tops: float | None  # None where the datasheet gives no INT8 tensor figure (V100)
    tdp_w: int
    compute_capability: tuple[int, int]
    mig_profiles: tuple[MIGProfile, ...]
    gfd_products: tuple[str, ...]
    max_sm_clock_mhz: int

    @property
    def mig_capable(self) -> bool:
        """True when the model can be partitioned with MIG."""
        return bool(self.mig_profiles)

    @property
    def mps_max_clients(self) -> int:
        """Most MPS clients one GPU of this model serves: 48 from compute capability 7.5, else 16."""
        return 48 if self.compute_capability >= _MPS_48_CLIENTS_FROM_CC else 16

    @property
    def tflops_per_watt(self) -> float:
        """Dense FP16 tensor TFLOPS per watt of TDP, the efficiency figure consolidation ranks by."""
        return self.fp16_tflops / self.tdp_w

    def mig_profile(self, name: str) -> MIGProfile:
        """Return the MIG profile called ``name`` (e.g. ``"3g.40gb"``).

        Raises ``UnknownMIGProfile`` (a ``KeyError``) naming the valid profiles when this model has
        no such profile, including every name on a model without MIG.
        """
        for profile in self.mig_profiles:
            if profile.name == name:
                return profile
        if not self.mig_profiles:
            raise UnknownMIGProfile(f"{self.key} does not support MIG, so it has no profile {name!r}")
        valid = ", ".join(p.name for p in self.mig_profiles)
        raise UnknownMIGProfile(f"unknown MIG profile {name!r} for {self.key} (valid: {valid})")


class UnknownMIGProfile(KeyError):
    """A MIG profile name that the GPU model does not have."""

    def __str__(self) -> str:
        # KeyError's str() is the repr of its argument; show the message as written.
        return str(self.args[0]) if self.args else ""


class UnknownGPUModel(KeyError):
    """A catalog key that is not in ``CATALOG``."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnknownGPUProduct(ValueError):
    """A GPU feature discovery product string that maps onto no catalog entry."""

    def __init__(self, product: str, reason: str = "") -> None:
        self.product = product
        known = ", ".join(known_products())
        detail = f"{reason}; " if reason else ""
        super().__init__(
            f"unknown GPU product {product!r}: {detail}it matches no model in the gpuplane catalog "
            f"(known products: {known}). Add the model to nodes/catalog.py after checking its datasheet."
        )


# Geometry rows of docs/design.md section 4, in table order:
# (compute slices, memory slices, max instances per GPU, valid starts in memory slices).
_MIG_GEOMETRY: tuple[tuple[int, int, int, tuple[int, ...]], ...] = (
    (1, 1, 7, (0, 1, 2, 3, 4, 5, 6)),  # slice 7 can only be reached by larger instances
    (1, 2, 4, (0, 2, 4, 6)),
    (2, 2, 3, (0, 2, 4)),
    (3, 4, 2, (0, 4)),
    (4, 4, 1, (0,)),
    (7, 8, 1, (0,)),
)

_PROFILE_NAME = re.compile(r"^(?P<compute>\d+)g\.(?P<gb>\d+)gb$")


def _mig_profiles(
    key: str, gpu_memory_mib: int, names: tuple[str, str, str, str, str, str]
) -> tuple[MIGProfile, ...]:
    """Build a model's profiles from its six profile names, one per geometry row."""
    profiles = []
    memory = _mig_memory_mib(key, gpu_memory_mib)
    for name, (compute, memory_slices, max_count, starts), memory_mib in zip(names, _MIG_GEOMETRY, memory, strict=True):
        match = _PROFILE_NAME.match(name)
        # Guard against a typo in the table below: the name must state the row's compute slices.
        if match is None or int(match["compute"]) != compute:
            raise ValueError(f"MIG profile name {name!r} does not match its geometry row ({compute} compute slices)")
        profiles.append(
            MIGProfile(
                name=name,
                compute_slices=compute,
                memory_slices=memory_slices,
                max_count=max_count,
                valid_starts=starts,
                memory_mib=memory_mib,
            )
        )
    return tuple(profiles)


# Instance memory in MiB per geometry row (1g small, 1g large, 2g, 3g, 4g, 7g) where a real
# figure is known; NVML reports it in multiples of 128 MiB.
# - H100 80GB HBM3, driver 580.159.04, measured with NVML (the MIG device's memory total).
# - A100 40GB / 80GB: NVIDIA's MIG user guide (`nvidia-smi mig -lgip`: 4.75 / 9.62 / 19.50 /
#   39.25 GiB on the 40GB board; 9.50 / 19.50 / 39.25 / 79.25 GiB on the 80GB board), the same
#   figures GPU feature discovery publishes from NVML (`nvidia.com/mig-<profile>.memory`).
# - H100 PCIe 80GB: the H100 80GB figures (same GH100 die, same memory size and slices).
_MEASURED_MIG_MEMORY_MIB: dict[str, tuple[int, int, int, int, int, int]] = {
    "H100-SXM5-80GB": (9984, 20096, 20096, 40448, 40448, 81152),
    "H100-PCIe-80GB": (9984, 20096, 20096, 40448, 40448, 81152),
    "A100-SXM4-40GB": (4864, 9856, 9856, 19968, 19968, 40192),
    "A100-SXM4-80GB": (9728, 19968, 19968, 40192, 40192, 81152),
}
_DERIVED_FROM = "H100-SXM5-80GB"
_DERIVED_FROM_BOARD_MIB = 81559
_NVML_MIG_MEMORY_STEP_MIB = 128


def _mig_memory_mib(key: str, gpu_memory_mib: int) -> tuple[int, ...]:
    """A model's instance memory per geometry row: measured where known (`_MEASURED_MIG_MEMORY_MIB`),
    else the H100 80GB figures scaled by the board's memory and rounded down to NVML's 128 MiB
    step (H100 NVL 94GB, H200 141GB: no measurement yet; the scaled figure keeps the H100's
    reserved share, so it errs neither way by more than a step or two)."""
    measured = _MEASURED_MIG_MEMORY_MIB.get(key)
    if measured is not None:
        return measured
    step = _NVML_MIG_MEMORY_STEP_MIB
    return tuple(
        mib * gpu_memory_mib // _DERIVED_FROM_BOARD_MIB // step * step for mib in _MEASURED_MIG_MEMORY_MIB[_DERIVED_FROM]
    )


def _model(
    key: str,
    name: str,
    memory_mib: int,
    fp16_tflops: float,
    int8_tops: float | None,
    tdp_w: int,
    compute_capability: tuple[int, int],
    gfd_products: tuple[str, ...],
    mig_names: tuple[str, str, str, str, str, str] | None = None,
) -> GPUModel:
    return GPUModel(
        key=key,
        name=name,
        memory_mib=memory_mib,
        fp16_tflops=fp16_tflops,
        int8_tops=int8_tops,
        tdp_w=tdp_w,
        compute_capability=compute_capability,
        mig_profiles=_mig_profiles(key, memory_mib, mig_names) if mig_names else (),
        gfd_products=gfd_products,
        max_sm_clock_mhz=_MAX_SM_CLOCK_MHZ[key],
    )


# Highest SM (boost) clock per model, MHz, from the datasheets ("Max Clocks SM" in nvidia-smi -q).
_MAX_SM_CLOCK_MHZ = {
    "A100-SXM4-40GB": 1410,
    "A100-SXM4-80GB": 1410,
    "H100-SXM5-80GB": 1980,
    "H100-PCIe-80GB": 1755,
    "H100-NVL-94GB": 1785,
    "H200-SXM-141GB": 1980,
    "L40S": 2520,
    "L4": 2040,
    "T4": 1590,
    "V100-SXM2-32GB": 1530,
}

_MIG_A100_40GB = ("1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb")
_MIG_80GB = ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
_MIG_94GB = ("1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb")
_MIG_141GB = ("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb")

_MODELS = (
    # memory_mib: NVML totals as nvidia-smi / GFD (nvidia.com/gpu.memory) report them.
    _model("A100-SXM4-40GB", "NVIDIA A100 SXM4 40GB", 40960, 312, 624, 400, (8, 0),
           # Drivers before the "NVIDIA " prefix reported the bare board name.
           ("NVIDIA-A100-SXM4-40GB", "A100-SXM4-40GB"), _MIG_A100_40GB),
    _model("A100-SXM4-80GB", "NVIDIA A100 SXM4 80GB", 81920, 312, 624, 400, (8, 0),
           # Early 80GB boards reported "NVIDIA A100-SXM-80GB".
           ("NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-SXM-80GB", "A100-SXM4-80GB"), _MIG_80GB),
    _model("H100-SXM5-80GB", "NVIDIA H100 SXM5 80GB", 81559, 989, 1979, 700, (9, 0),
           ("NVIDIA-H100-80GB-HBM3",), _MIG_80GB),
    _model("H100-PCIe-80GB", "NVIDIA H100 PCIe 80GB", 81559, 756, 1513, 350, (9, 0),
           ("NVIDIA-H100-PCIe",), _MIG_80GB),
    _model("H100-NVL-94GB", "NVIDIA H100 NVL 94GB", 95830, 835, 1670, 400, (9, 0),
           ("NVIDIA-H100-NVL",), _MIG_94GB),
    # "NVIDIA H200" is the SXM board; the PCIe "NVIDIA H200 NVL" (600 W) is a different model.
    _model("H200-SXM-141GB", "NVIDIA H200 SXM 141GB", 143771, 989, 1979, 700, (9, 0),
           ("NVIDIA-H200",), _MIG_141GB),
    _model("L40S", "NVIDIA L40S", 46068, 362, 733, 350, (8, 9), ("NVIDIA-L40S",)),
    _model("L4", "NVIDIA L4", 23034, 121, 243, 72, (8, 9), ("NVIDIA-L4",)),
    # Turing and Volta boards keep the "Tesla" brand in their NVML name.
    _model("T4", "NVIDIA T4", 15360, 65, 130, 70, (7, 5), ("Tesla-T4",)),
    _model("V100-SXM2-32GB", "NVIDIA V100 SXM2 32GB", 32768, 125, None, 300, (7, 0),
           ("Tesla-V100-SXM2-32GB",)),
)

CATALOG: dict[str, GPUModel] = {model.key: model for model in _MODELS}

# Product lookups ignore case: tools and people retype these labels with varying case.
_BY_PRODUCT: dict[str, GPUModel] = {
    product.casefold(): model for model in _MODELS for product in model.gfd_products
}

# GFD appends "-MIG-<profile>" to the product under the single MIG strategy (and to the
# per-profile product labels under mixed), and "-SHARED" when a time-slicing or MPS config with
# renameByDefault=false replicates the resource. Both may appear, MIG first.
_SHARED_SUFFIX = "-SHARED"
_MIG_SUFFIX = re.compile(r"-MIG-(?P<profile>\d+g\.\d+gb)(?P<media>\+me)?$", re.IGNORECASE)


@dataclass(frozen=True)
class ProductInfo:
    """What a GFD ``nvidia.com/gpu.product`` value says: the model, and the suffixes GFD added."""

    model: GPUModel
    # "3g.40gb" when the product names a MIG device; a media-extension variant ("1g.10gb+me")
    # is reported by its base profile, whose slices it occupies.
    mig_profile: str | None = None
    shared: bool = False  # "-SHARED": the resource is replicated (time-slicing or MPS)


def known_products() -> list[str]:
    """Every GFD product string the catalog recognises (without suffixes), sorted."""
    return sorted(product for model in _MODELS for product in model.gfd_products)


def parse_product(product: str) -> ProductInfo:
    """Map a GFD product label value onto a catalog model, reading GFD's suffixes.

    Accepts the label form (``NVIDIA-H100-80GB-HBM3``) and the NVML form with spaces
    (``NVIDIA H100 80GB HBM3``), in any case, optionally followed by ``-MIG-<profile>`` (the
    profile must be one of the model's) and then ``-SHARED``. Raises ``UnknownGPUProduct``, whose
    message names the product and lists the known ones, for anything else.
    """
    text = product.strip().replace(" ", "-")
    shared = text.upper().endswith(_SHARED_SUFFIX)
    if shared:
        text = text[: -len(_SHARED_SUFFIX)]
    mig_profile = None
    match = _MIG_SUFFIX.search(text)
    if match is not None:
        mig_profile = match["profile"].lower()
        text = text[: match.start()]
    model = _BY_PRODUCT.get(text.casefold())
    if model is None:
        raise UnknownGPUProduct(product)
    if mig_profile is not None and mig_profile not in {p.name for p in model.mig_profiles}:
        valid = ", ".join(p.name for p in model.mig_profiles) or "none, it does not support MIG"
        raise UnknownGPUProduct(product, f"{model.key} has no MIG profile {mig_profile} (valid: {valid})")
    return ProductInfo(model=model, mig_profile=mig_profile, shared=shared)


def lookup_product(product: str) -> GPUModel:
    """Return the catalog model a GFD ``nvidia.com/gpu.product`` value names.

    See ``parse_product`` for the accepted forms; raises ``UnknownGPUProduct`` (a ``ValueError``)
    for an unknown product.
    """
    return parse_product(product).model


def find_model(key: str) -> GPUModel:
    """Return the catalog model with this key; raises ``UnknownGPUModel`` (a ``KeyError``) listing the keys."""
    try:
        return CATALOG[key]
    except KeyError:
        raise UnknownGPUModel(f"unknown GPU model {key!r} (catalog keys: {', '.join(CATALOG)})") from None
