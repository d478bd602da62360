"""Each process's SM and memory-bandwidth % (issue 39 point 1): the agent's reading of
``nvmlDeviceGetProcessUtilization`` through the real nvidia-ml-py binding (13.615.71:
pynvml.py's ``nvmlDeviceGetProcessUtilization(handle, timeStamp)`` asks the library for
the count, then fills ``c_nvmlProcessUtilizationSample_t``; any other first answer, such
as NVML_ERROR_NOT_FOUND for no sample newer than ``timeStamp``, is raised as NVMLError),
``nvidia-smi pmon``'s table from the real captures, and the client's join."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pynvml  # type: ignore[import-untyped,unused-ignore]
import pytest

from gpumon.backends.model import GpuProcess, ProcessSource
from gpumon.backends.parsers.processes import process_columns, with_details, with_usage
from gpumon.backends.remote import agent

CAPTURES = Path(__file__).parents[1] / "fixtures" / "nvidia" / "real-captures"
NOT_FOUND, INSUFFICIENT_SIZE, NOT_SUPPORTED = 6, 7, 3


class SamplingLib:
    """libnvidia-ml.so's nvmlDeviceGetProcessUtilization: the samples newer than the
    caller's lastSeenTimeStamp, (pid, timeStamp us, sm, mem) each, or NOT_FOUND."""

    def __init__(self, samples: list[tuple[int, int, int, int]], answer: int = 0) -> None:
        self.samples, self.answer = samples, answer
        self.asked: list[int] = []

    def __getattr__(self, name: str) -> Any:
        if name != "nvmlDeviceGetProcessUtilization":
            raise AttributeError(name)
        return self.call

    def call(self, handle: Any, array: Any, count_ref: Any, last_seen: Any) -> int:
        if self.answer:
            return self.answer
        self.asked.append(last_seen.value)
        newer = [s for s in self.samples if s[1] > last_seen.value]
        count = count_ref._obj
        if not newer:
            return NOT_FOUND
        if array is None or count.value < len(newer):
            count.value = len(newer)
            return INSUFFICIENT_SIZE
        for slot, (pid, ts, sm, mem) in zip(array, newer, strict=False):
            slot.pid, slot.timeStamp, slot.smUtil, slot.memUtil = pid, ts, sm, mem
        count.value = len(newer)
        return 0


@pytest.fixture
def library(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    def use(lib: SamplingLib) -> None:
        monkeypatch.setattr(pynvml, "nvmlLib", lib)
        pynvml._nvmlGetFunctionPointer_cache.clear()

    yield use
    pynvml._nvmlGetFunctionPointer_cache.clear()


def test_the_samples_since_the_last_read_are_averaged_per_process(library: Any) -> None:
    lib = SamplingLib([(10, 1_000, 90, 30), (11, 1_500, 5, 1), (10, 2_000, 70, 20)])
    library(lib)
    seen = {"GPU-a": 500}
    assert agent.nvml_process_usage(pynvml, ctypes.c_void_p(1), "GPU-a", seen) == {
        10: (80, 25),
        11: (5, 1),
    }
    assert seen == {"GPU-a": 2_000}  # the next read asks for newer ones only
    lib.samples.append((11, 3_000, 40, 9))
    assert agent.nvml_process_usage(pynvml, ctypes.c_void_p(1), "GPU-a", seen) == {11: (40, 9)}
    assert lib.asked[-1] == 2_000


def test_no_sample_since_the_last_read_is_no_answer_not_zero(library: Any) -> None:
    """NOT_FOUND: nothing to say (n/a; the caller gives the listed processes 0 only
    beside a process that has a sample)."""
    library(SamplingLib([(10, 1_000, 90, 30)]))
    assert agent.nvml_process_usage(pynvml, ctypes.c_void_p(1), "GPU-a", {"GPU-a": 5_000}) == {}


def test_a_driver_that_does_not_sample_processes_is_none(library: Any) -> None:
    library(SamplingLib([], answer=NOT_SUPPORTED))
    assert agent.nvml_process_usage(pynvml, ctypes.c_void_p(1), "GPU-a", {}) is None


def _pmon_section(capture: str, phase: str) -> str:
    text = (CAPTURES / capture).read_text()
    start = text.index(f"# {phase} :: pmon")
    return text[start : text.index("\n\n", start)]


def test_pmon_of_a_real_h200_under_load() -> None:
    """590.48.01 on an H200, gpu_burn beside two memhogs (`nvidia-smi pmon -c 5`): the
    newest interval of each process; a memhog without a sample beside gpu_burn's used
    none."""
    text = _pmon_section("linux-x86_64__nvidia-h200__590.48.01.txt", "load")
    got = agent.pmon_usage(text, {"10291", "10293", "10309"})
    assert sorted(got) == [["0", 10291, 0, 0], ["0", 10293, 0, 0], ["0", 10309, 99, 7]]


def test_pmon_of_a_mig_sliced_gpu_says_nothing() -> None:
    """The H100 in MIG mode prints ``-`` for every process, gpu_burn too: not known."""
    text = _pmon_section("linux-x86_64__nvidia-h100-mig__590.48.01.txt", "load")
    assert agent.pmon_usage(text, {"21180", "21181", "21198"}) == []


def test_pmon_of_an_idle_gpu_has_no_process() -> None:
    text = _pmon_section("linux-x86_64__nvidia-h200__590.48.01.txt", "idle")
    assert agent.pmon_usage(text, {"10291"}) == []


def _proc(pid: int | None, host_pid: int | None = None, uuid: str = "GPU-a") -> GpuProcess:
    return GpuProcess(pid=pid, name="python3", memory_mib=100, gpu_uuid=uuid, host_pid=host_pid)


def test_the_client_joins_by_gpu_and_the_drivers_pid() -> None:
    """By UUID (NVML) or index (pmon); inside a container the driver's PID is the host's."""
    procs = (_proc(10), _proc(None, host_pid=3187442), _proc(10, uuid="GPU-b"), _proc(12))
    usage = [["GPU-a", 10, 42, 17], ["GPU-a", 3187442, 3, 1], ["1", 10, 0, 0]]
    got = with_usage(procs, usage, {"0": "GPU-a", "1": "GPU-b"})
    assert [(p.sm_pct, p.mem_bw_pct) for p in got] == [(42, 17), (3, 1), (0, 0), (None, None)]
    said = [(c.sm, c.bw) for c in (process_columns(p, None) for p in got)]
    assert said == [("42%", "17%"), ("3%", "1%"), ("0%", "0%"), ("n/a", "n/a")]


def test_a_hostile_usage_row_is_not_a_percent() -> None:
    got = with_usage((_proc(10),), [["GPU-a", 10, 250, -1]], {})
    assert (got[0].sm_pct, got[0].mem_bw_pct) == (None, None)


def test_the_drivers_processes_get_procs_details_of_their_pid() -> None:
    record = {
        "pid": 10,
        "user": "alice",
        "command": "python3 train.py --rank 1 --api-key s3cret",
        "cpu_pct": 98.5,
        "rss_mib": 2048.0,
        "ppid": 9,
        "parent": "torchrun --nproc-per-node 8 train.py",
    }
    got = with_details((_proc(10), _proc(11)), [record])
    assert got[0].command == "python3 train.py --rank 1 --api-key ****"
    assert (got[0].user, got[0].cpu_pct, got[0].rss_mib, got[0].ppid) == ("alice", 98.5, 2048.0, 9)
    assert got[0].memory_mib == 100 and got[0].source == ProcessSource.CONTAINER_NVML.value
    assert got[1] == _proc(11)


def test_a_driver_pid_of_another_program_here_is_not_described() -> None:
    """A simulated host PID, or a number reused since the driver listed it."""
    rows = ["2418861, /root/venv/bin/python, 90000, GPU-a, 00:18", "7, [Not Found], 10, GPU-a, 00"]
    names = agent.row_names(rows)
    assert names == {"2418861": "/root/venv/bin/python", "7": "[Not Found]"}
    assert agent.same_program("/usr/bin/python train.py --rank 1", names["2418861"])
    assert agent.same_program("python", "python")
    assert not agent.same_program("/usr/sbin/sshd -D", names["2418861"])
    assert not agent.same_program("/bin/sleep 1", names["7"])
    assert agent.same_program("/opt/a-very-long-program-name --x", "a-very-long-pro")  # comm
