"""NVIDIA's sharing config formats: k8s-device-plugin configs, mig-parted configs, their ConfigMaps.

Pure Python (no Django). gpuplane generates configuration for NVIDIA's real components, so the
shapes here are exactly theirs (docs/design.md section 4) and the validators enforce the limits the
components enforce, plus the few gpuplane relies on for its accounting. One module per format:

- `device_plugin`: device plugin configs (``version: v1``, ``flags.migStrategy``,
  ``sharing.timeSlicing`` or ``sharing.mps``), the MPS client limits, their ConfigMap;
- `mig_parted`: mig-parted configs (``version: v1`` / ``mig-configs``, layouts checked with
  ``nodes.mig``), their ConfigMap;
- `configmap`: how both reach the GPU operator, as YAML text in a ConfigMap of its namespace;
- `schema`: what both formats share: the version, the refusal of unknown keys, and
  ``InvalidSharingConfig``.

Unknown keys are rejected rather than ignored: a typo would otherwise silently give a node the
default config.
"""
