"""The built-in simulated CT200 (the demo host and the tests)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpumon.backends.lazy import lazy_exports

if TYPE_CHECKING:
    from .fields import GPU_FIELDS, PROCESS_FIELDS
    from .scenario import (
        DEFAULT_T0,
        DRAFTER_GPUS,
        ENV_VARS,
        GPU_COUNT,
        MEMORY_RESERVED_MIB,
        MEMORY_TOTAL_MIB,
        OOM_AT,
        OOM_GPU,
        TARGET_GPUS,
        UUIDS,
        SimSettings,
        compute_processes,
        drafter_run,
        gpu_states,
        scenario_time,
        wall_time,
    )
    from .sglang_model import MODEL, TOKENS_PER_S, UPTIME_AT_T0, metrics_text
    from .sglang_server import SglangServers, parse_ports
    from .state import read_restarts, read_stops, record_restart, record_stop, with_state
    from .transport import SimTransport
    from .wrapper import write_job_wrapper, write_wrapper

__all__ = [
    "DEFAULT_T0",
    "DRAFTER_GPUS",
    "ENV_VARS",
    "GPU_COUNT",
    "GPU_FIELDS",
    "MEMORY_RESERVED_MIB",
    "MEMORY_TOTAL_MIB",
    "MODEL",
    "OOM_AT",
    "OOM_GPU",
    "PROCESS_FIELDS",
    "TARGET_GPUS",
    "TOKENS_PER_S",
    "UPTIME_AT_T0",
    "UUIDS",
    "SglangServers",
    "SimSettings",
    "SimTransport",
    "compute_processes",
    "drafter_run",
    "gpu_states",
    "metrics_text",
    "parse_ports",
    "read_restarts",
    "read_stops",
    "record_restart",
    "record_stop",
    "scenario_time",
    "wall_time",
    "with_state",
    "write_job_wrapper",
    "write_wrapper",
]

# Not seen by mypy: a module __getattr__ would make every unknown name Any; mypy checks
# the names against the TYPE_CHECKING imports above instead.
if not TYPE_CHECKING:
    __getattr__ = lazy_exports(
        __name__,
        {
            "DEFAULT_T0": "scenario",
            "DRAFTER_GPUS": "scenario",
            "ENV_VARS": "scenario",
            "GPU_COUNT": "scenario",
            "GPU_FIELDS": "fields",
            "MEMORY_RESERVED_MIB": "scenario",
            "MEMORY_TOTAL_MIB": "scenario",
            "MODEL": "sglang_model",
            "OOM_AT": "scenario",
            "OOM_GPU": "scenario",
            "PROCESS_FIELDS": "fields",
            "SglangServers": "sglang_server",
            "SimSettings": "scenario",
            "SimTransport": "transport",
            "TARGET_GPUS": "scenario",
            "TOKENS_PER_S": "sglang_model",
            "UPTIME_AT_T0": "sglang_model",
            "UUIDS": "scenario",
            "compute_processes": "scenario",
            "drafter_run": "scenario",
            "gpu_states": "scenario",
            "metrics_text": "sglang_model",
            "parse_ports": "sglang_server",
            "read_restarts": "state",
            "read_stops": "state",
            "record_restart": "state",
            "record_stop": "state",
            "scenario_time": "scenario",
            "wall_time": "scenario",
            "with_state": "state",
            "write_job_wrapper": "wrapper",
            "write_wrapper": "wrapper",
        },
    )
