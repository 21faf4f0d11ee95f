"""`/savings/`: what sharing saves against whole GPUs, now, per GPU model and over the last 24 h."""
from __future__ import annotations

from typing import Any

from django.views.generic import TemplateView

from gpuplane.web import RoleRequiredMixin
from savings.services.summary import recent_samples, savings_summary


class SavingsPageView(RoleRequiredMixin, TemplateView):
    """Headline figures and a table per model (the very dict GET /api/v1/savings/ answers, so
    every number equals the API's), and plotly charts of the samples (static/js/savings.js)."""

    template_name = "savings/savings.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        summary = savings_summary()
        context.update(
            savings=summary,
            chart_data={"samples": recent_samples(), "by_model": summary["by_model"]},
        )
        return context
