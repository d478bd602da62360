"""Reading tests/fixtures/upstream/ (made by scripts/capture-upstream): where it is and a
job tracker fed a captured log as gpumon's log tail would hand it over."""

from __future__ import annotations

from pathlib import Path

from gpumon.backends.workloads import JobTracker

UPSTREAM = Path(__file__).resolve().parents[1] / "fixtures" / "upstream"


def read_log(folder: str, name: str) -> str:
    """A captured log's text with its carriage returns (``read_text`` would turn them
    into newlines)."""
    return (UPSTREAM / folder / name).read_bytes().decode("utf-8")


def fed_tracker(preset: str, text: str) -> JobTracker:
    """A tracker for ``preset`` fed every line of ``text``, one a second."""
    job = JobTracker("capture", preset)
    for i, line in enumerate(text.split("\n")):
        job.feed(line, 1000.0 + i)
    return job
