"""Schemathesis over `/api/schema/`: every operation, valid and invalid data, every check, 0 failures.

The API is called in process through its WSGI application, as an admin with a token, on the
test database. For each operation schemathesis generates requests from the schema (positive:
data the schema allows, which the API must accept; negative: data it forbids, which the API must
refuse with a 4xx) and checks every response: no 5xx, a documented status code and content
type, a body matching the documented schema. A failure means the schema and the API disagree;
the fix is on whichever side is wrong.
"""
from __future__ import annotations

import logging

import pytest
import schemathesis
from django.contrib.auth.models import Group, User
from django.core import signals
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import close_old_connections
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as hypothesis_settings
from hypothesis.errors import Unsatisfiable
from knox.models import AuthToken
from rest_framework.test import APIClient
from schemathesis import GenerationMode
from schemathesis.checks import CHECKS, load_all_checks
from schemathesis.specs.openapi.checks import positive_data_acceptance

from gpuplane.roles import ADMIN
from gpuplane.wsgi import application
from scheduler.label_lines import parse_env, parse_labels
from scheduler.services import label_errors
from scheduler.services.container import env_errors
from scheduler.services.spec import cross_field_errors, host_quantity_errors
from tests.conftest import PASSWORD

# Enough to reach each parameter's edges (0, negatives, empty strings) on every operation while
# the whole run stays around a minute.
MAX_EXAMPLES = 25
ADMIN_USERNAME = "schemathesis-admin"


@pytest.fixture
def admin_headers(db) -> dict[str, str]:
    """An admin's token, obtained the way a client obtains one (however tokens are stored)."""
    user = User.objects.create_user(ADMIN_USERNAME, password=PASSWORD)
    user.groups.add(Group.objects.get_or_create(name=ADMIN)[0])
    response = APIClient().post("/api/v1/auth/token/", {"username": user.username, "password": PASSWORD}, format="json")
    assert response.status_code == 200, response.content
    return {"Authorization": f"Token {response.json()['token']}"}


@pytest.fixture
def keep_test_connection():
    """Django closes old connections when a request starts and ends; called straight through WSGI,
    that would close the test's own connection inside its transaction (PostgreSQL: "the connection
    is closed"). Django's test client disconnects the same two handlers."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


# "Schema-valid data is accepted" cannot hold where validity depends on the database, not the shape.
SKIP_POSITIVE_ACCEPTANCE = {
    "POST /api/v1/auth/token/": "a well-formed username and password are refused unless that user exists",
    "POST /api/v1/telemetry/": "samples are refused for a node gpuplane does not know (this database has none)",
    "POST /api/v1/rollouts/": "a rollout names nodes, which must exist (this database has none)",
    "POST /api/v1/rollouts/preview/": "a preview names nodes, which must exist (this database has none)",
}


def follows_cross_field_rules(case) -> bool:
    """Rules between fields that OpenAPI 3.0 cannot state (each is in its field's description)."""
    body = case.body if isinstance(case.body, dict) else {}
    if case.operation.label == "POST /api/v1/deployments/":
        gpu_count, sharing, share_percent = body.get("gpu_count", 1), body.get("sharing", "auto"), body.get("share_percent")
        if cross_field_errors(gpu_count, sharing, share_percent):
            return False
        # A quantity's bounds (1,024 cores, 16 Ti) are not a pattern's to state.
        if host_quantity_errors(body.get("cpu"), body.get("memory")):
            return False
        # Label keys and env names: OpenAPI 3.0 has no propertyNames; the API's own rule decides.
        # A form body gives them as text, one key=value a line (their descriptions say so).
        labels, env = body.get("labels", {}), body.get("env", {})
        try:
            labels = parse_labels(labels) if isinstance(labels, str) else labels
            env = parse_env(env) if isinstance(env, str) else env
        except DjangoValidationError:
            return False
        return not label_errors(labels) and not env_errors(env)
    if case.operation.label.split(" ")[1].startswith("/api/v1/sharing-policies/"):
        return not label_errors(body.get("match_labels", {}), selector=True)  # keys: no propertyNames in 3.0
    if case.operation.label == "PATCH /api/v1/deployments/{id}/":
        limits = body.get("autoscale_settings") or {}
        return not (isinstance(limits, dict) and limits.get("min_replicas", 1) > limits.get("max_replicas", 10))
    return True


def fresh_token_headers() -> dict[str, str]:
    """A new token of another user: `DELETE ?all=true` revokes all of its user's tokens."""
    user, _ = User.objects.get_or_create(username="schemathesis-revoker")
    _token, key = AuthToken.objects.create(user=user)
    return {"Authorization": f"Token {key}"}


load_all_checks()
ALL_CHECKS = CHECKS.get_all()


def run_operation(operation, mode: GenerationMode, headers: dict[str, str]) -> None:
    excluded = []
    if mode is GenerationMode.POSITIVE and operation.label in SKIP_POSITIVE_ACCEPTANCE:
        excluded.append(positive_data_acceptance)
    # Every media type the schema lists: JSON, and for the deploy and token endpoints form and
    # multipart bodies too (their own components: no null, labels as text; gpuplane/schema.py).
    strategy = operation.as_strategy(generation_mode=mode)
    if mode is GenerationMode.POSITIVE:
        strategy = strategy.filter(follows_cross_field_rules)

    @given(case=strategy)
    @hypothesis_settings(
        max_examples=MAX_EXAMPLES, deadline=None, database=None, derandomize=True,
        phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck),
    )
    def check(case) -> None:
        # Revoking the token a request carries would sign the rest of the run out: each gets its own.
        own = fresh_token_headers() if operation.label == "DELETE /api/v1/auth/token/" else headers
        # Every registered check, as `schemathesis run --checks all` (conformance included).
        case.call_and_validate(headers=own, checks=ALL_CHECKS, excluded_checks=excluded)

    check()


def test_the_api_conforms_to_its_schema_for_every_operation(admin_headers, keep_test_connection):
    # Each refused request would log a warning: thousands of lines that say nothing here.
    logging.getLogger("django.request").setLevel(logging.ERROR)
    schema = schemathesis.openapi.from_wsgi("/api/schema/", application, headers=admin_headers)
    failures: list[str] = []
    operations = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                run_operation(operation, mode, admin_headers)
            except Unsatisfiable:
                continue  # the schema forbids nothing here (a free-form path string): no invalid request exists
            except (Exception, BaseExceptionGroup) as error:  # schemathesis' FailureGroup, or any error it met
                failures.append(f"{operation.label} [{mode.value}]: {error}")

    assert operations > 10
    assert not failures, f"{len(failures)} schemathesis failures:\n\n" + "\n\n".join(failures)
