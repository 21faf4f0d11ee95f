"""`GET /api/v1/savings/`: what sharing saves against whole GPUs, now and over the last 24 h."""
from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from gpuplane.strict_input import StrictQueryParametersMixin
from savings.api.serializers import SavingsSerializer
from savings.services.summary import savings_summary


class SavingsView(StrictQueryParametersMixin, APIView):
    """The savings against the baseline "every GPU-requesting workload on whole GPUs" (readable by every role)."""

    @extend_schema(operation_id="savings_retrieve", responses={200: SavingsSerializer})
    def get(self, request: Request) -> Response:
        return Response(SavingsSerializer(savings_summary()).data)
