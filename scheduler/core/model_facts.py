"""Catalog facts as arrays indexed by a snapshot's model ids, so plugins read them per node.

A snapshot interns the GPU models its nodes use (id 0 is the unknown model, all zeros); the
plugins then look figures up with ``facts.column[snapshot.model_id[nodes]]`` instead of asking
the catalog node by node.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from nodes.catalog import CATALOG
from scheduler.core.types import gpu_family, mig_share_milli

MIG_PROFILE_ROWS = 6  # geometry rows of docs/design.md section 4, the catalog's profile order
UNKNOWN_MODEL_ID = 0


@dataclass(frozen=True)
class ModelFacts:
    """Per-model figures as arrays indexed by model id; id 0 is the unknown model (all zero)."""

    keys: tuple[str, ...]
    families: tuple[str, ...]  # family name per model id ("" for unknown)
    fp16_tflops: np.ndarray
    tdp_w: np.ndarray
    milli_tflops_per_w: np.ndarray  # int: 1000 * TFLOPS / W
    memory_mib: np.ndarray
    mps_max_clients: np.ndarray
    mig_share_milli: np.ndarray  # (models, 6)
    mig_memory_mib: np.ndarray  # (models, 6), 0 where the model has no such profile
    mig_profiles: tuple[tuple[str, ...], ...]  # profile names per model id

    @classmethod
    def build(cls, keys: Iterable[str]) -> ModelFacts:
        """Facts for "" (unknown) followed by ``keys``; a key the catalog lacks gets zeros."""
        ordered = ("",) + tuple(keys)
        count = len(ordered)
        tflops = np.zeros(count)
        tdp = np.zeros(count, dtype=np.int64)
        memory = np.zeros(count, dtype=np.int64)
        clients = np.zeros(count, dtype=np.int64)
        shares = np.zeros((count, MIG_PROFILE_ROWS), dtype=np.int64)
        mig_memory = np.zeros((count, MIG_PROFILE_ROWS), dtype=np.int64)
        names: list[tuple[str, ...]] = []
        families: list[str] = []
        for i, key in enumerate(ordered):
            model = CATALOG.get(key)
            if model is None:
                names.append(())
                families.append("")
                continue
            families.append(gpu_family(key))
            tflops[i] = model.fp16_tflops
            tdp[i] = model.tdp_w
            memory[i] = model.memory_mib
            clients[i] = model.mps_max_clients
            names.append(tuple(p.name for p in model.mig_profiles))
            for row, profile in enumerate(model.mig_profiles):
                shares[i, row] = mig_share_milli(profile.compute_slices)
                mig_memory[i, row] = profile.memory_mib
        per_w = np.where(tdp > 0, (tflops * 1000) // np.maximum(tdp, 1), 0).astype(np.int64)
        return cls(
            keys=ordered,
            families=tuple(families),
            fp16_tflops=tflops,
            tdp_w=tdp,
            milli_tflops_per_w=per_w,
            memory_mib=memory,
            mps_max_clients=clients,
            mig_share_milli=shares,
            mig_memory_mib=mig_memory,
            mig_profiles=tuple(names),
        )
