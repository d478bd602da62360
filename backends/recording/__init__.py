"""The flight recorder and replaying what it wrote."""

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
        load_recording,
        recordings_dir,
        sample_from_json,
        sample_to_json,
    )
    from .replay import SPEEDS, ReplayMonitor

__all__ = [
    "GPU_FIELDS",
    "SPEEDS",
    "WRITTEN_MAX",
    "FlightRecorder",
    "Recording",
    "RecordingError",
    "ReplayMonitor",
    "load_recording",
    "recordings_dir",
    "sample_from_json",
    "sample_to_json",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "FlightRecorder": "recorder",
        "GPU_FIELDS": "recorder",
        "WRITTEN_MAX": "recorder",
        "Recording": "recorder",
        "RecordingError": "recorder",
        "ReplayMonitor": "replay",
        "SPEEDS": "replay",
        "load_recording": "recorder",
        "recordings_dir": "recorder",
        "sample_from_json": "recorder",
        "sample_to_json": "recorder",
    },
)
