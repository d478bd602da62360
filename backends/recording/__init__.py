"""The flight recorder and reading what it wrote (``monitor.ReplaySource`` plays it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpumon.backends.lazy import lazy_exports

if TYPE_CHECKING:
    from .recorder import (
        GPU_FIELDS,
        WRITTEN_MAX,
        FlightRecorder,
        Recording,
        RecordingError,
        host_recordings,
        load_recording,
        sample_from_json,
        sample_to_json,
    )

__all__ = [
    "GPU_FIELDS",
    "WRITTEN_MAX",
    "FlightRecorder",
    "Recording",
    "RecordingError",
    "host_recordings",
    "load_recording",
    "sample_from_json",
    "sample_to_json",
]

# Not seen by mypy: a module __getattr__ would make every unknown name Any; mypy checks
# the names against the TYPE_CHECKING imports above instead.
if not TYPE_CHECKING:
    __getattr__ = lazy_exports(
        __name__,
        {
            "FlightRecorder": "recorder",
            "host_recordings": "recorder",
            "GPU_FIELDS": "recorder",
            "WRITTEN_MAX": "recorder",
            "Recording": "recorder",
            "RecordingError": "recorder",
            "load_recording": "recorder",
            "sample_from_json": "recorder",
            "sample_to_json": "recorder",
        },
    )
