"""The rollout form of the web UI (the list's filter is ``rollouts.filtersets``, shared with the API).

The form only turns text into the API's body (the MIG layout box into a dict); what a valid
rollout is lives once: the API's ``RolloutCreateSerializer`` for the shape and
``rollouts.creating.validate_request`` for NVIDIA's rules per GPU model. ``RolloutForm.clean``
runs both and puts their messages under the form's fields, so the page and the API refuse the
same requests with the same messages.
"""
from __future__ import annotations

from typing import Any

from django import forms

from nodes.models import Node
from nodes.vocabulary import SharingMode
from rollouts.api.serializers import MAX_UNAVAILABLE, RolloutCreateSerializer
from rollouts.choices import OnFailure, RolloutStrategy
from rollouts.creating import InvalidRollout, RolloutRequest, validate_request

# Where the API's nested config errors go on this flat form.
CONFIG_FIELDS = ("mode", "replicas", "mig_layout")
# The maintenance window's keys -> this form's fields.
WINDOW_FIELDS = {"cron": "window_cron", "duration_minutes": "window_duration_minutes", "timezone": "window_timezone"}


def parse_mig_layout(text: str) -> dict[str, int] | None:
    """``"3g.40gb=2, 1g.10gb=1"`` -> ``{"3g.40gb": 2, "1g.10gb": 1}``; empty -> None."""
    layout: dict[str, int] = {}
    for part in (p.strip() for p in text.replace("\n", ",").split(",")):
        if not part:
            continue
        profile, sep, count = part.partition("=")
        if not sep or not profile.strip() or not count.strip().isdigit():
            raise forms.ValidationError(f"Write each profile as profile=count, e.g. 3g.40gb=2 (not {part!r}).")
        layout[profile.strip()] = int(count)
    return layout or None


def parse_node_selector(text: str) -> dict[str, str] | None:
    """``"pool=serving, tier=gold"`` -> ``{"pool": "serving", "tier": "gold"}``; empty -> None."""
    selector: dict[str, str] = {}
    for part in (p.strip() for p in text.replace("\n", ",").split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise forms.ValidationError(f"Write each label as key=value, e.g. pool=serving (not {part!r}).")
        selector[key.strip()] = value.strip()
    return selector or None


def current_mode(mode: str, replicas: int | None) -> str:
    """A node's sharing config as the node choices show it: "mps × 4", "exclusive" (the API's words)."""
    return f"{mode} × {replicas}" if replicas and replicas > 1 else mode


def flatten(errors: Any) -> list[str]:
    """Every message of a DRF error detail (a list, a dict, nested), as text."""
    if isinstance(errors, dict):
        return [m for key, value in errors.items() for m in
                ((f"{key}: {x}" if isinstance(key, int) else x) for x in flatten(value))]
    if isinstance(errors, list | tuple):
        return [m for item in errors for m in flatten(item)]
    return [str(errors)]


class RolloutForm(forms.Form):
    name = forms.CharField(max_length=63, help_text="A DNS label: a-z, 0-9 and '-'.")
    nodes = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple, required=False,
                                      help_text="The nodes to change, each with its sharing config now.")
    node_selector = forms.CharField(
        label="Or by label", required=False, max_length=2000,
        help_text="Every node carrying all of these labels, e.g. pool=serving, tier=gold (a nodeSelector). "
                  "Instead of ticking nodes.")
    mode = forms.ChoiceField(label="Sharing mode", choices=SharingMode.choices())
    replicas = forms.IntegerField(required=False, min_value=2,
                                  help_text="Replicas per GPU for MPS and time-slicing; empty otherwise.")
    mig_layout = forms.CharField(label="MIG layout", required=False,
                                 help_text="For MIG only: profile=count per GPU, e.g. 3g.40gb=2, 1g.10gb=1.")
    strategy = forms.ChoiceField(choices=RolloutStrategy.choices(), initial=RolloutStrategy.ROLLING)
    max_unavailable = forms.IntegerField(min_value=1, max_value=MAX_UNAVAILABLE, initial=1,
                                         help_text="Nodes out of service at once (rolling).")
    on_failure = forms.ChoiceField(label="On failure", choices=OnFailure.choices(), initial=OnFailure.PAUSE)
    move_back = forms.BooleanField(label="Move workloads back", required=False,
                                   help_text="Once a node is proven, move the workloads that left it back onto it.")
    window_cron = forms.CharField(label="Maintenance window opens (cron)", required=False, max_length=200,
                                  help_text="Five crontab fields, e.g. 0 2 * * SAT; empty: any time.")
    window_duration_minutes = forms.IntegerField(label="Open for (minutes)", required=False, min_value=1)
    window_timezone = forms.CharField(label="Time zone", required=False, max_length=64, initial="UTC",
                                      help_text="IANA name, e.g. Europe/Berlin.")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        nodes = Node.objects.order_by("name").values_list("name", "gpu_model", "gpu_count", "sharing_mode", "sharing_replicas")
        self.fields["nodes"].choices = [
            (name, f"{name} ({count} × {model or 'GPU'}) · now {current_mode(mode, replicas)}")
            for name, model, count, mode, replicas in nodes
        ]
        self.request_values: RolloutRequest | None = None

    def clean_node_selector(self) -> dict[str, str] | None:
        return parse_node_selector(self.cleaned_data.get("node_selector") or "")

    def clean_mig_layout(self) -> dict[str, int] | None:
        return parse_mig_layout(self.cleaned_data.get("mig_layout") or "")

    def api_body(self) -> dict[str, Any]:
        data = self.cleaned_data
        targets: dict[str, Any] = {"nodes": list(data["nodes"])} if data.get("nodes") else {}
        if data.get("node_selector"):
            targets["node_selector"] = data["node_selector"]
        return {
            "name": data["name"], **targets,
            "config": {"mode": data["mode"], "replicas": data.get("replicas"), "mig_layout": data.get("mig_layout")},
            "strategy": data["strategy"], "max_unavailable": data["max_unavailable"], "on_failure": data["on_failure"],
            "maintenance_window": self._window_body(), "move_back": bool(data.get("move_back")),
        }

    def _window_body(self) -> dict[str, Any] | None:
        """The window's three fields as the API's object; None when all are left empty (any time)."""
        data = self.cleaned_data
        if not data.get("window_cron") and data.get("window_duration_minutes") is None:
            return None
        return {"cron": data.get("window_cron") or "", "duration_minutes": data.get("window_duration_minutes"),
                "timezone": data.get("window_timezone") or ""}

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.errors:
            return cleaned
        body = RolloutCreateSerializer(data=self.api_body())
        if not body.is_valid():
            self._add_api_errors(body.errors)
            return cleaned
        try:
            self.request_values = validate_request(**body.request_values())
        except InvalidRollout as error:
            self._add_api_errors(error.errors)
        return cleaned

    def _add_api_errors(self, errors: dict[str, Any]) -> None:
        for key, detail in errors.items():
            if key == "config" and isinstance(detail, dict):
                for sub, messages in detail.items():
                    self.add_error(sub if sub in CONFIG_FIELDS else None, flatten(messages))
            elif key == "maintenance_window" and isinstance(detail, dict):
                for sub, messages in detail.items():
                    self.add_error(WINDOW_FIELDS.get(sub), flatten(messages))
            else:
                self.add_error(key if key in self.fields else None, flatten(detail))
