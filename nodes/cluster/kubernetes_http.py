"""What gpuplane's requests to the Kubernetes API say about themselves: who writes (the field
manager) and what the body is (content types). Plain values, no client: tests' fake API server
checks requests against them."""
from __future__ import annotations

# Recorded in managedFields, so `kubectl get -o yaml --show-managed-fields` shows who changed what.
FIELD_MANAGER = "gpuplane"

JSON = "application/json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
MERGE_PATCH = "application/merge-patch+json"


def json_content() -> dict[str, str]:
    # The generated create methods send no Content-Type (and ignore `_content_type`); say what
    # the body is, as kubectl does, rather than rely on the API server's default. A fresh dict
    # each time: the client adds its Accept header to the one it is given.
    return {"Content-Type": JSON}
