"""The node agent (`manage.py gpuplane_agent`): reads its node's GPUs through NVML, reports them, and
pushes their telemetry to the gpuplane API. One concern per module:

- `loop`    TelemetryAgent: collect, report, buffer, post; delivery and retry rules
- `report`  the GPU report (UUIDs, product, memory, MIG mode and instances) from the readings
- `http`    POST JSON with the agent's credential (a key, or a token file read again each time),
            answers sorted into taken / retry / refused

Standard library only beside the collector: the agent runs without a database.
"""
from nodes.agent.http import TokenFile
from nodes.agent.loop import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_INTERVAL_S,
    DEFAULT_MAX_BUFFER_SAMPLES,
    AgentStats,
    TelemetryAgent,
    sample_payload,
)

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_INTERVAL_S",
    "DEFAULT_MAX_BUFFER_SAMPLES",
    "AgentStats",
    "TelemetryAgent",
    "TokenFile",
    "sample_payload",
]
