"""The agent's NVML calls against the real nvidia-ml-py binding (13.615.71, a gpumon
dependency), with a stand-in for libnvidia-ml.so behind it: pynvml reaches the library
only through ``nvmlLib`` and ``_nvmlGetFunctionPointer``, so the symbols a driver branch
has and the struct layout it fills are the stand-in's (tests/support/fake_nvml's tables).

Issue 17 points 10 and 11: pynvml 13.x's nvmlDeviceGetComputeRunningProcesses raises
NVMLLibraryMismatchError, which is no NVMLError, where the library lacks _v3; the agent's
own call falls back _v3 -> _v2 -> v1 and reads the struct the driver writes."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pynvml  # type: ignore[import-untyped,unused-ignore]
import pytest
from nvml_stand_in import load_fake_nvml

from gpumon.backends.remote import agent


class FakeLib:
    """libnvidia-ml.so of one driver branch: its process symbols (the fake's tables), and
    nvmlDeviceGetFieldValues filling the caller's c_nvmlFieldValue_t array."""

    def __init__(self, fake: ModuleType, driver: str, hbm: bool) -> None:
        self.fake, self.driver, self.hbm = fake, driver, hbm

    def __getattr__(self, name: str) -> Any:
        if name == "nvmlDeviceGetFieldValues":
            return self._field_values
        symbols = self.fake._SYMBOLS[self.driver]
        if name not in symbols:
            raise AttributeError(name)  # what ctypes says for a missing symbol
        struct = symbols[name]
        return self.fake._process_call(struct) if struct is not None else (lambda *_a: 0)

    def _field_values(self, handle: int, count: Any, values_ref: Any) -> int:
        values = values_ref._obj
        for i in range(count.value):
            v = values[i]
            ok = v.fieldId == 186 or (v.fieldId == 82 and self.hbm)
            v.nvmlReturn = 0 if ok else pynvml.NVML_ERROR_NOT_SUPPORTED
            v.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
            v.value.uiVal = 83250 if v.fieldId == 186 else 47
        return 0


@pytest.fixture
def library(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    fake = load_fake_nvml("fake_libnvml")

    def use(driver: str, pids: str = "", hbm: bool = False) -> None:
        monkeypatch.setattr(pynvml, "nvmlLib", FakeLib(fake, driver, hbm))
        pynvml._nvmlGetFunctionPointer_cache.clear()
        agent._proc_api.clear()
        monkeypatch.setenv("FAKE_NVML_PROCESS_PID", pids)

    yield use
    pynvml._nvmlGetFunctionPointer_cache.clear()
    agent._proc_api.clear()


@pytest.mark.parametrize("driver", ["r470", "r418"])
def test_pynvml_13_raises_a_mismatch_that_is_no_nvml_error(library: Any, driver: str) -> None:
    """The upstream behaviour the agent must survive (pynvml.py throwOnVersionMismatch)."""
    library(driver, "4242")
    with pytest.raises(pynvml.NVMLLibraryMismatchError) as caught:
        pynvml.nvmlDeviceGetComputeRunningProcesses(ctypes.c_void_p(0))
    assert not isinstance(caught.value, pynvml.NVMLError)


@pytest.mark.parametrize(
    ("driver", "symbol"),
    [
        ("current", "nvmlDeviceGetComputeRunningProcesses_v3"),
        ("r535cc", "nvmlDeviceGetComputeRunningProcesses_v3"),
        ("r470", "nvmlDeviceGetComputeRunningProcesses_v2"),
        ("r418", "nvmlDeviceGetComputeRunningProcesses"),
    ],
)
def test_the_agent_reads_processes_on_every_driver_branch(
    library: Any, driver: str, symbol: str
) -> None:
    library(driver, "4242,5151")
    got = agent.nvml_compute_processes(pynvml, ctypes.c_void_p(0))
    assert got == [(4242, 1000 << 20), (5151, 1024 << 20)]
    assert agent._proc_api[0][0] == symbol


def test_pynvml_misreads_the_r535_cc_struct_the_agent_does_not(library: Any) -> None:
    """On the R535 confidential-computing branch _v3 fills 5-field structs; pynvml 13.x
    reads them as its 4-field c_nvmlProcessInfo_v3_t, so every process after the first is
    garbage (the reason nvitop's libnvml.py picks the struct by the symbols present)."""
    library("r535cc", "4242,5151")
    upstream = pynvml.nvmlDeviceGetComputeRunningProcesses(ctypes.c_void_p(0))
    assert [p.pid for p in upstream][:2] != [4242, 5151]
    assert agent.nvml_compute_processes(pynvml, ctypes.c_void_p(0))[1] == (5151, 1024 << 20)


def test_no_processes_is_an_empty_list(library: Any) -> None:
    library("r470", "")
    assert agent.nvml_compute_processes(pynvml, ctypes.c_void_p(0)) == []


@pytest.mark.parametrize(("hbm", "memory"), [(True, "47"), (False, "N/A")])
def test_field_values_through_the_real_binding(library: Any, hbm: bool, memory: str) -> None:
    """nvmlDeviceGetFieldValues with NVML_FI_DEV_MEMORY_TEMP (82) and
    NVML_FI_DEV_POWER_INSTANT (186): the cells as nvidia-smi prints them."""
    library("current", hbm=hbm)
    assert (pynvml.NVML_FI_DEV_MEMORY_TEMP, pynvml.NVML_FI_DEV_POWER_INSTANT) == (82, 186)
    values = agent._field_values(pynvml, ctypes.c_void_p(0), [82, 186])
    assert agent._field_value_text(pynvml, "temperature.memory", values) == memory
    assert agent._field_value_text(pynvml, "power.draw.instant", values) == "83.25"


def test_the_process_list_carries_the_memory_read_with_it(
    library: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each GPU's used memory is read in the pass that lists its processes (the client
    compares the two; a sample a second older would count a growing job's growth as
    memory no process accounts for), rounded up to MiB as the sample's column is."""
    library("current", "4242")
    fake = load_fake_nvml("fake_libnvml")
    for name in ("nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetUUID"):
        monkeypatch.setattr(pynvml, name, getattr(fake, name))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetPciInfo", fake.nvmlDeviceGetPciInfo)
    used = [(1 << 30) + 1]  # one byte over 1024 MiB: the column says 1025
    monkeypatch.setattr(
        pynvml,
        "nvmlDeviceGetMemoryInfo",
        lambda h, version=1: type("M", (), {"used": used[0], "total": 1 << 36})(),
    )
    memory: dict[str, int] = {}
    rows = agent.nvml_process_rows(pynvml, memory)
    uuid = fake.nvmlDeviceGetUUID(0)
    assert [r.split(", ")[0] for r in rows] == ["4242"] and uuid in rows[0]
    assert memory == {uuid: 1025}
    assert agent.nvml_process_rows(pynvml) == rows  # without a dict: the rows alone
