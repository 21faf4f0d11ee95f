"""The deploy form of the web UI (the list's filters are ``scheduler.filtersets``, shared with the API).

The form only turns text into typed values (numbers, choices, the labels box into a dict); what
a valid deployment is lives once, in ``services.validate_spec``, which the REST API and
``services.deploy`` use too. ``DeployForm.clean`` runs it and puts its messages under the
form's fields, so the page and the API refuse the same requests with the same messages.
"""
from __future__ import annotations

from collections.abc import Collection
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from scheduler import services
from scheduler.core import Priority, SharingRequest, WorkloadType
from scheduler.label_lines import parse_arguments, parse_env, parse_labels

# What each sharing request really gets (docs/design.md sections 3 and 4), shown next to its radio
# button. Each mode sizes by its own unit; a stated compute share binds every mode.
SHARING_HELP: dict[str, str] = {
    SharingRequest.AUTO: (
        "gpuplane picks the node; each mode then sizes by its own unit: a MIG instance or a time-slice "
        "replica by memory, an MPS slot by compute share (25 % under 4 GB, 50 % for 4-16 GB unless you "
        "state a share). Above 16 GB, or high priority with a tight latency SLO, whole GPUs."
    ),
    SharingRequest.EXCLUSIVE: "Whole GPUs, nothing else runs on them. The safest and the most expensive choice.",
    SharingRequest.MIG: (
        "A MIG instance: hardware isolation of compute, memory and faults. Only on nodes whose GPUs are "
        "already partitioned; the smallest free instance with enough memory is used."
    ),
    SharingRequest.MPS: (
        "A slot on a node whose device plugin runs MPS with R replicas per GPU: every client gets 100/R % "
        "of the SMs and 1/R of the memory. Sized by compute share: the one you state, else 25 % under "
        "4 GB and 50 % for 4-16 GB (a 50 % share needs R <= 2). No fault isolation between clients."
    ),
    SharingRequest.MPS_WEIGHTED: (
        "A share of a GPU under gpuplane's own MPS daemon, of the size you state (else 25 % under 4 GB, "
        "50 % for 4-16 GB); shares on one GPU may differ (50 + 25 + 25). "
        "Its limits rest on the CUDA MPS variables (thread percentage, pinned memory) that gpuplane's "
        "webhook sets on each pod; no fault isolation."
    ),
    SharingRequest.TIMESLICE: (
        "Takes turns on a GPU with other replicas: any replica whose GPU has enough memory left. No memory "
        "and no fault isolation (gpuplane accounts memory itself), and only 1 GPU per replica."
    ),
}

# Service-side field names that the form spells differently.
FIELD_ALIASES: dict[str, str] = {"memory_mib": "memory_gb"}
# Stand-ins for required values the form could not read, so that validate_spec can still check
# the rest of the request in the same round; its messages about these fields are dropped.
_PLACEHOLDERS: dict[str, Any] = {"name": "placeholder", "model": "placeholder", "memory_gb": 1.0}


class DeployForm(forms.Form):
    """The deploy request of the REST contract (`POST /api/v1/deployments/`), as a web form.

    `cleaned_data` holds exactly the keyword arguments of `services.DeploySpec`.
    """

    # strip=False: the API refuses " name" too; trimming here would make the two disagree.
    name = forms.CharField(
        strip=False,
        help_text="Lowercase letters, digits and '-'; names the Kubernetes workloads.",
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false", "placeholder": "llama-chat"}),
    )
    model = forms.CharField(
        strip=False,
        help_text="The model served or trained, e.g. llama-3-8b.",
        widget=forms.TextInput(attrs={"spellcheck": "false", "placeholder": "llama-3-8b"}),
    )
    memory_gb = forms.FloatField(
        label="GPU memory (GB)",
        help_text="Memory one replica needs, in GB (1 GB = 1024 MiB); it sizes MIG instances and time-slice "
                  "replicas, and sets the default MPS share (see Sharing).",
        widget=forms.NumberInput(attrs={"step": "any", "inputmode": "decimal"}),
    )
    gpu_count = forms.IntegerField(
        label="GPUs per replica", initial=1, help_text="Tensor-parallel size; all on one node.",
        widget=forms.NumberInput(attrs={"min": 1, "max": services.MAX_GPU_COUNT}),
    )
    replicas = forms.IntegerField(
        initial=1, help_text="Each replica gets its own decision; all are reserved together or none.",
        widget=forms.NumberInput(attrs={"min": 1}),
    )
    workload_type = forms.ChoiceField(choices=WorkloadType.choices(), initial=WorkloadType.INFERENCE, label="Workload type")
    priority = forms.ChoiceField(
        choices=Priority.choices(), initial=Priority.MEDIUM,
        help_text="High priority prefers powerful GPUs; low priority prefers efficient ones.",
    )
    latency_slo_ms = forms.IntegerField(
        label="Latency SLO (ms)", required=False,
        help_text="With high priority, a tight SLO asks for whole GPUs.",
    )
    namespace = forms.CharField(
        strip=False, initial="default",
        widget=forms.TextInput(attrs={"spellcheck": "false"}),
    )
    labels = forms.CharField(
        required=False,
        help_text="Kubernetes labels for the workloads, one key=value a line.",
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false", "placeholder": "team=search\ntier=canary"}),
    )
    sharing = forms.ChoiceField(choices=SharingRequest.choices(), initial=SharingRequest.AUTO, widget=forms.RadioSelect)
    share_percent = forms.IntegerField(
        label="Compute share (%)", required=False,
        help_text="Optional, 1-100: the least share of a GPU's compute each replica gets, in every mode. "
                  "Empty: each mode sizes by its own unit (see Sharing).",
        widget=forms.NumberInput(attrs={"min": 1, "max": 100}),
    )
    cpu = forms.CharField(
        label="CPU", required=False, strip=True,
        help_text='CPU each replica\'s pod requests, a Kubernetes quantity ("8", "500m"). Empty: the workload '
                  "type's default (inference 4, serving 8, training 16, development 2, batch 4).",
        widget=forms.TextInput(attrs={"spellcheck": "false", "placeholder": "4"}),
    )
    memory = forms.CharField(
        label="Host memory", required=False, strip=True,
        help_text='Host memory each replica\'s pod requests ("64Gi", "512Mi"). Empty: the workload type\'s '
                  "default (inference 16Gi, serving 32Gi, training 128Gi, development 8Gi, batch 16Gi).",
        widget=forms.TextInput(attrs={"spellcheck": "false", "placeholder": "16Gi"}),
    )
    enable_gpu_selection = forms.BooleanField(
        label="Let gpuplane choose the node and GPUs", required=False, initial=True,
        help_text="Off: the workload goes to the default Kubernetes scheduler without GPU selection.",
    )
    image = forms.CharField(
        strip=False, required=False, label="Container image",
        help_text="Empty: the default workload image (GPUPLANE_WORKLOAD_IMAGE).",
        widget=forms.TextInput(attrs={"spellcheck": "false", "placeholder": "vllm/vllm-openai:v0.6.3"}),
    )
    command = forms.CharField(
        required=False, label="Command",
        help_text="The container's entrypoint, one argument a line. Empty: the image's own.",
        widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false", "placeholder": "python3\n-m\nvllm.entrypoints.openai.api_server"}),
    )
    args = forms.CharField(
        required=False, label="Arguments",
        help_text="Its arguments, one a line. Empty: the image's own.",
        widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false", "placeholder": "--model\nmeta-llama/Llama-3.1-8B-Instruct"}),
    )
    env = forms.CharField(
        required=False, label="Environment",
        help_text="Extra variables for the container, one NAME=value a line.",
        widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false", "placeholder": "HF_HOME=/models"}),
    )

    def clean(self) -> dict[str, Any]:
        """Run the services' validation (the API's) on the typed values; its messages go under
        the fields they name. Fields that already failed here keep only their own message."""
        cleaned = super().clean()
        failed = set(self.errors)
        values = {name: cleaned[name] for name in self.fields if name in cleaned}
        for name, stand_in in _PLACEHOLDERS.items():
            values.setdefault(name, stand_in)
        try:
            services.validate_spec(services.DeploySpec(**values))
        except ValidationError as error:
            self.add_service_errors(error, skip=failed)
        return cleaned

    def spec(self) -> services.DeploySpec:
        """The deploy request of a valid form."""
        return services.DeploySpec(**self.cleaned_data)

    def sharing_options(self) -> list[tuple[Any, str]]:
        """The sharing radio buttons, each with what that mode really gives (SHARING_HELP)."""
        return [(radio, SHARING_HELP.get(str(radio.data["value"]), "")) for radio in self["sharing"]]

    def clean_labels(self) -> dict[str, str]:
        return parse_labels(self.cleaned_data.get("labels") or "")

    def clean_cpu(self) -> str | None:
        return self.cleaned_data.get("cpu") or None  # empty: the workload type's default

    def clean_memory(self) -> str | None:
        return self.cleaned_data.get("memory") or None
    def clean_command(self) -> list[str]:
        return parse_arguments(self.cleaned_data.get("command") or "")

    def clean_args(self) -> list[str]:
        return parse_arguments(self.cleaned_data.get("args") or "")

    def clean_env(self) -> dict[str, str]:
        return parse_env(self.cleaned_data.get("env") or "")

    def add_service_errors(self, error: ValidationError, *, skip: Collection[str] = ()) -> None:
        """Show a services ValidationError on the form: each message under its field, or above the
        form when it names no field of the form; messages about fields in `skip` are dropped."""
        if not hasattr(error, "error_dict"):
            self.add_error(None, error)
            return
        for field, errors in error.error_dict.items():
            target = FIELD_ALIASES.get(field, field)
            if target in skip:
                continue
            self.add_error(target if target in self.fields else None, errors)
