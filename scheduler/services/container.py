"""What a deploy request may say of its workload's container: image, command, args and env.

Empty means gpuplane's defaults: the image of `GPUPLANE_WORKLOAD_IMAGE`, the image's own
entrypoint and arguments, no environment beyond gpuplane's own variables. The rules are those
the cluster applies (an env var name is a C identifier, which every Kubernetes version accepts;
an image reference follows docker/distribution's grammar: [registry[:port]/]path[:tag]
[@sha256:digest]), so that a request the API accepts is not refused by the cluster afterwards. gpuplane's own variables are refused: it sets them (the model's name, the
MPS limits the webhook enforces, the devices the device plugin gives).
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from nodes.contract import ENV_MODEL_NAME, ENV_MPS_MEMORY_LIMIT, ENV_MPS_THREAD_PERCENTAGE

IMAGE_MAX_CHARS = 512
MAX_ARGS = 64  # per list: command, args
MAX_ARG_CHARS = 4096
MAX_ENV = 64
ENV_VALUE_MAX_CHARS = 32_768
# Set by gpuplane (or by NVIDIA's components for the GPUs it was given): a workload must not override them.
RESERVED_ENV = frozenset({
    ENV_MODEL_NAME, ENV_MPS_THREAD_PERCENTAGE, ENV_MPS_MEMORY_LIMIT,
    "NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "CUDA_MPS_PIPE_DIRECTORY",
})

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?))*(?::[0-9]+)?"
IMAGE_PATTERN = (
    rf"^(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?(?:@sha256:[a-f0-9]{{64}})?$"
)
_IMAGE = re.compile(IMAGE_PATTERN)
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
_ENV_NAME = re.compile(ENV_NAME_PATTERN)


def image_errors(image: Any) -> list[str]:
    """Why `image` is not an image reference ("" is: the default image)."""
    if not isinstance(image, str):
        return ["Enter an image reference as text, e.g. vllm/vllm-openai:v0.6.3."]
    if image == "":
        return []
    if len(image) > IMAGE_MAX_CHARS:
        return [f"Ensure this field has no more than {IMAGE_MAX_CHARS} characters."]
    if not _IMAGE.fullmatch(image):  # fullmatch: "$" would let a trailing newline through
        return [f"{image!r} is not an image reference: [registry[:port]/]name[:tag][@sha256:digest], lowercase name."]
    return []


def arguments_errors(values: Any) -> list[str]:
    """Why `values` is not a list of container arguments (command or args; [] is: the image's own)."""
    if isinstance(values, str) or not isinstance(values, Sequence):
        return ["Enter a list of strings, one argument each."]
    if len(values) > MAX_ARGS:
        return [f"At most {MAX_ARGS} arguments; got {len(values)}."]
    for position, value in enumerate(values):
        if not isinstance(value, str):
            return [f"Argument {position}: a string is required, not {type(value).__name__}."]
        if "\x00" in value:
            return [f"Argument {position}: null characters are not allowed."]
        if len(value) > MAX_ARG_CHARS:
            return [f"Argument {position}: at most {MAX_ARG_CHARS} characters."]
    return []


def env_errors(env: Any) -> list[str]:
    """Why `env` is not a set of environment variables for the container ({} is: none)."""
    if not isinstance(env, Mapping):
        return ["Enter an object of variable names to string values."]
    if len(env) > MAX_ENV:
        return [f"At most {MAX_ENV} variables; got {len(env)}."]
    errors = []
    for name, value in env.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            errors.append(f"{name!r} is not a variable name: letters, digits and '_', not starting with a digit.")
        elif name in RESERVED_ENV:
            errors.append(f"{name} is set by gpuplane (or NVIDIA's device plugin) for the GPUs it gives.")
        elif not isinstance(value, str):
            errors.append(f"{name}: a string value is required, not {type(value).__name__}.")
        elif "\x00" in value:
            errors.append(f"{name}: null characters are not allowed.")
        elif len(value) > ENV_VALUE_MAX_CHARS:
            errors.append(f"{name}: at most {ENV_VALUE_MAX_CHARS} characters.")
    return errors
