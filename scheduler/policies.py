"""Sharing policies: what NVIDIA's components allow a policy to say, and the policies as the core reads them.

``policy_errors`` is the one validation (``SharingPolicy.clean`` calls it, so the admin form and the
API refuse the same things); ``policy_rules`` maps the enabled rows onto ``core.admission.PolicyRule``.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from nodes.catalog import CATALOG
from scheduler.core.admission import (
    MPS_MAX_CLIENTS,
    TIMESLICE_MAX_REPLICAS,
    FairnessMode,
    PolicyRule,
)
from scheduler.core.types import SharingRequest
from scheduler.label_rules import label_errors

if TYPE_CHECKING:
    from scheduler.models import SharingPolicy

_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Strategies a policy may name: "auto" is no strategy, and weighted MPS is a node's mode chosen
# per deploy request (its share), not something a policy sets for every pod it selects.
POLICY_STRATEGIES = (SharingRequest.EXCLUSIVE, SharingRequest.MIG, SharingRequest.MPS, SharingRequest.TIMESLICE)
POLICY_STRATEGY_CHOICES = [(str(s), s.label) for s in POLICY_STRATEGIES]
MIG_PROFILES = frozenset(profile.name for model in CATALOG.values() for profile in model.mig_profiles)


def policy_errors(policy: SharingPolicy) -> dict[str, list[str]]:
    """Field -> messages for what the policy asks that the hardware or the device plugin refuses."""
    errors: dict[str, list[str]] = {}

    def add(name: str, message: str) -> None:
        errors.setdefault(name, []).append(message)

    if policy.strategy not in POLICY_STRATEGIES:
        add("strategy", f"Choose one of {', '.join(POLICY_STRATEGIES)}.")
    namespaces: Any = policy.namespaces
    if not isinstance(namespaces, list) or not all(isinstance(n, str) and _NAMESPACE.match(n) for n in namespaces):
        add("namespaces", "Enter a list of Kubernetes namespaces (DNS-1123 labels).")
    for message in label_errors(policy.match_labels, selector=True):
        add("match_labels", message)
    if policy.strategy == SharingRequest.MIG and policy.mig_profile and policy.mig_profile not in MIG_PROFILES:
        add("mig_profile", f"{policy.mig_profile} is no MIG profile of a known GPU (e.g. 1g.10gb, 3g.40gb).")
    if policy.strategy == SharingRequest.MPS and policy.mps_max_clients is not None:
        if not 2 <= policy.mps_max_clients <= MPS_MAX_CLIENTS:
            add("mps_max_clients", f"MPS serves 2 to {MPS_MAX_CLIENTS} clients per GPU (16 before compute "
                                   f"capability 7.5); {policy.mps_max_clients} is not possible.")
    if policy.strategy == SharingRequest.TIMESLICE and policy.timeslice_replicas is not None:
        if not 2 <= policy.timeslice_replicas <= TIMESLICE_MAX_REPLICAS:
            add("timeslice_replicas", f"Time-slicing takes 2 to {TIMESLICE_MAX_REPLICAS} replicas per GPU.")
    if policy.fairness not in set(FairnessMode):
        add("fairness", f"Choose one of {', '.join(FairnessMode)}.")
    return errors


def policy_rule(policy: SharingPolicy) -> PolicyRule:
    return PolicyRule(
        name=policy.name, strategy=SharingRequest(policy.strategy), precedence=policy.precedence,
        namespaces=tuple(policy.namespaces or ()), match_labels=dict(policy.match_labels or {}),
        mig_profile=policy.mig_profile, mps_max_clients=policy.mps_max_clients,
        mps_memory_limit_mib=policy.mps_memory_limit_mib, timeslice_replicas=policy.timeslice_replicas,
        fairness=FairnessMode(policy.fairness),
    )
