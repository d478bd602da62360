"""The agent's NVML round reads each call once (issue 41 point 3): one memory, utilisation
and remapped-rows call per GPU serves every cell read from it, and the GPUs' static cells
(uuid, name, bus id, the board's maxima) are read once and kept (``agent.NvmlStatic``)
until the GPU count changes or a read of that GPU fails. The rows are what they were."""

from __future__ import annotations

import collections
from types import ModuleType
from typing import Any

import pytest
from nvml_stand_in import load_fake_nvml

from gpumon.backends.parsers.nvidia_smi import SAMPLE_FIELDS
from gpumon.backends.remote import agent

FIELDS = list(SAMPLE_FIELDS)


class Counted:
    """The stand-in pynvml with every nvmlDevice* call counted."""

    def __init__(self, nvml: ModuleType) -> None:
        self.nvml = nvml
        self.calls: collections.Counter[str] = collections.Counter()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.nvml, name)
        if not name.startswith("nvmlDevice") or not callable(value):
            return value

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return value(*args, **kwargs)

        return counted


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> Counted:
    monkeypatch.setenv("FAKE_NVML_GPUS", "2")
    monkeypatch.setenv("FAKE_NVML_HEALTH", "")
    return Counted(load_fake_nvml("fake_nvml_static"))


def without_time(rows: list[str]) -> list[str]:
    return [row.split(", ", 1)[1] for row in rows]  # the timestamp cell comes first


def test_the_rows_are_those_read_without_kept_cells(nvml: Counted) -> None:
    static = agent.NvmlStatic()
    plain = without_time(agent.nvml_gpu_rows(nvml, FIELDS))
    for _ in range(3):
        assert without_time(agent.nvml_gpu_rows(nvml, FIELDS, static)) == plain
    assert FIELDS[0] == "timestamp" and "uuid" in FIELDS and "memory.used" in FIELDS


def test_each_call_is_made_once_per_gpu_and_the_static_ones_once(nvml: Counted) -> None:
    static = agent.NvmlStatic()
    agent.nvml_gpu_rows(nvml, FIELDS, static)
    first = dict(nvml.calls)
    # memory.total, .reserved?, .used and .free from one call; gpu and memory utilisation
    # from one; remapped rows pending and failure from one (two GPUs)
    assert first["nvmlDeviceGetMemoryInfo"] == 2
    assert first["nvmlDeviceGetUtilizationRates"] == 2
    assert first["nvmlDeviceGetRemappedRows"] == 2
    assert first["nvmlDeviceGetUUID"] == first["nvmlDeviceGetName"] == 2
    nvml.calls.clear()
    agent.nvml_gpu_rows(nvml, FIELDS, static)
    again = dict(nvml.calls)
    for static_call in ("nvmlDeviceGetUUID", "nvmlDeviceGetName", "nvmlDeviceGetPciInfo"):
        assert static_call not in again
    assert again["nvmlDeviceGetMemoryInfo"] == 2  # what changes is read every round
    assert again["nvmlDeviceGetTemperature"] == 2


def test_a_gpu_that_fails_or_a_new_gpu_count_is_read_in_full_again(
    nvml: Counted, monkeypatch: pytest.MonkeyPatch
) -> None:
    static = agent.NvmlStatic()
    agent.nvml_gpu_rows(nvml, FIELDS, static)
    monkeypatch.setenv("FAKE_NVML_NO_HANDLE", "1")  # GPU 1 cannot be opened this round
    rows = agent.nvml_gpu_rows(nvml, FIELDS, static)
    assert "[Unknown Error]" in rows[1]  # not its kept uuid and name
    monkeypatch.delenv("FAKE_NVML_NO_HANDLE")
    nvml.calls.clear()
    agent.nvml_gpu_rows(nvml, FIELDS, static)
    assert nvml.calls["nvmlDeviceGetUUID"] == 1  # GPU 1's, read again; GPU 0's kept
    monkeypatch.setenv("FAKE_NVML_GPUS", "3")
    nvml.calls.clear()
    rows = agent.nvml_gpu_rows(nvml, FIELDS, static)
    assert nvml.calls["nvmlDeviceGetUUID"] == 3 and len(rows) == 3
