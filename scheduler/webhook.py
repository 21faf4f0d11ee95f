"""`POST /webhooks/mutate-pods`: the Kubernetes mutating admission endpoint (AdmissionReview v1).

Thin: the body goes to ``scheduler.admission.review``, which never raises; the answer is always
HTTP 200 with an AdmissionReview (a malformed body too: its uid is "" and the pod, if any, is
admitted unchanged). The API server reaches it over TLS on the webhook pods (deploy/base/webhook.yaml);
no session or token is involved, so it is exempt from CSRF and from sign-in.
"""
from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from scheduler.admission import review


@csrf_exempt
@require_POST
def mutate_pods(request: HttpRequest) -> JsonResponse:
    return JsonResponse(review(request.body))
