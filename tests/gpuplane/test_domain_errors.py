"""Domain errors carry their HTTP answer (lifecycle.errors) and the API maps them once (gpuplane.api).

The viewsets hold no try/except for them: a service's refusal reaches the exception handler,
which answers its status and body.
"""
from __future__ import annotations

import ast
from pathlib import Path

from rest_framework.test import APIRequestFactory

from consolidation.approval import NotAllowed as PlanNotAllowed
from gpuplane.api import exception_handler
from lifecycle.errors import Conflict, DomainError, InvalidRequest
from nodes.cluster.base import ClusterError, EvictionBlocked
from rollouts.control import NotAllowed as RolloutNotAllowed
from rollouts.creating import InvalidRollout
from scheduler.services.errors import NoCapacity

ROOT = Path(__file__).resolve().parents[2]


def _answer(error: Exception) -> tuple[int, object]:
    request = APIRequestFactory().post("/api/v1/anything/")
    response = exception_handler(error, {"request": request, "view": None})
    assert response is not None
    return response.status_code, response.data


def test_it_answers_a_conflict_with_409_and_its_fields():
    assert _answer(PlanNotAllowed("Cannot approve a plan that is executed.", status="executed")) == (
        409, {"detail": "Cannot approve a plan that is executed.", "status": "executed"})
    assert _answer(RolloutNotAllowed("Not safe to start now.", status="pending"))[0] == 409


def test_it_answers_invalid_input_with_400_and_the_messages_per_field():
    assert _answer(InvalidRollout({"nodes": ["Unknown node: x."]})) == (400, {"nodes": ["Unknown node: x."]})


def test_a_cluster_failure_is_a_502_and_no_capacity_a_409_with_its_explanation():
    assert _answer(ClusterError("the API server is away")) == (502, {"detail": "the API server is away"})
    assert _answer(EvictionBlocked("a PodDisruptionBudget forbids it"))[0] == 502
    status, body = _answer(NoCapacity("0/3 nodes are available", {"nodes": []}, 1,
                                      explanation={"reason": "memory", "suggestion": None}))
    assert status == 409
    assert body == {"detail": "0/3 nodes are available", "replica": 1, "reason": "memory", "suggestion": None,
                    "released_replicas": 0, "decision": {"nodes": []}, "preemption": None}


def test_the_services_errors_are_domain_errors():
    for error in (PlanNotAllowed, RolloutNotAllowed, NoCapacity):
        assert issubclass(error, Conflict)
    assert issubclass(InvalidRollout, InvalidRequest)
    assert issubclass(ClusterError, DomainError)


def _domain_error_names() -> set[str]:
    found: set[str] = set()
    pending = [DomainError]
    while pending:
        cls = pending.pop()
        found.add(cls.__name__)
        pending.extend(cls.__subclasses__())
    return found


def test_no_api_module_catches_a_domain_error():
    names = _domain_error_names()
    offenders = []
    for path in sorted(ROOT.glob("*/api/*.py")) + [ROOT / "gpuplane" / "token_api.py"]:
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ExceptHandler) or node.type is None:
                continue
            caught = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
            for expr in caught:
                name = expr.attr if isinstance(expr, ast.Attribute) else getattr(expr, "id", "")
                if name in names:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} catches {name}")
    assert not offenders, "let the API's exception handler answer domain errors:\n" + "\n".join(offenders)
