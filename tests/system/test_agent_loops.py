"""The agent's loops in real time: the NVML worker gives up on a hung call (and on every
call behind it), the host-stats loop trims the heap every so often, and a flooding
nvidia-smi costs the monitor one round per interval."""

from __future__ import annotations

import contextlib
import itertools
import sys
import threading
import time
from pathlib import Path

import pytest

from gpumon.backends.parsers import QUERY_FIELDS
from gpumon.backends.remote import agent
from gpumon.backends.remote.agent import NvmlWorker
from gpumon.backends.remote.protocol import AgentOptions, Gpus, Note, SmiError

pytestmark = pytest.mark.system


def test_a_hung_call_is_given_up_and_so_is_every_later_one() -> None:
    worker = NvmlWorker()
    release = threading.Event()
    started = time.monotonic()
    assert worker.call(release.wait, 0.3) == (False, None)
    assert 0.25 < time.monotonic() - started < 2.0
    started = time.monotonic()
    assert worker.call(lambda: 1, 5.0) == (False, None)  # at once: the worker is stuck
    assert time.monotonic() - started < 0.5 and worker.stuck
    release.set()


def test_a_second_caller_waits_its_turn_and_gives_up_behind_a_hung_call() -> None:
    worker = NvmlWorker()
    release = threading.Event()
    results: list[tuple[bool, object]] = []
    first = threading.Thread(target=lambda: results.append(worker.call(release.wait, 0.5)))
    first.start()
    time.sleep(0.1)
    started = time.monotonic()
    second = worker.call(lambda: 2, 0.2)  # the lock is held by the hung call
    assert second == (False, None) and time.monotonic() - started < 1.0
    first.join(5)
    assert results == [(False, None)]
    release.set()


class _Stop(Exception):
    pass


class _Out:
    """Output's ``send``: keeps the messages; raises ``_Stop`` (ending the loop) once told."""

    def __init__(self) -> None:
        self.sent: list[object] = []
        self.stop = False

    def send(self, msg: object) -> None:
        if self.stop:
            raise _Stop
        self.sent.append(msg)


def test_the_host_stats_loop_trims_the_heap_every_so_often(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every ``TRIM_EVERY_S``, in the host-stats loop's own rounds (no wake-up of its own),
    never at every round."""
    trims: list[float] = []
    monkeypatch.setattr(agent, "malloc_trim", lambda: trims.append(time.monotonic()))
    monkeypatch.setattr(agent, "TRIM_EVERY_S", 0.1)
    options = AgentOptions(
        fields=list(QUERY_FIELDS), process_fields=[], nvidia_smi="nvidia-smi", interval=0.01
    )
    out = _Out()
    loop = agent.Agent(options, out)  # type: ignore[arg-type]

    def run() -> None:
        with contextlib.suppress(_Stop):
            loop.host_stats_loop()

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(0.55)
    out.stop = True
    thread.join(5)
    assert not thread.is_alive()
    assert len(out.sent) >= 20 and 3 <= len(trims) <= 6, (len(out.sent), trims)
    assert all(b - a >= 0.1 for a, b in itertools.pairwise(trims)), trims


FAKE_SMI = Path(__file__).parents[1] / "support" / "fake_smi.py"


def test_a_flood_of_rounds_is_sent_as_the_newest_one_per_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fake nvidia-smi prints 20000 rows at once, each its own round, then nothing: the
    agent sent every one as a sample the monitor processed (25 s of its time at load 8).
    Now the first goes at once, the newest of the rest an interval later, and the drop is
    said; the watchdog then ends the silent loop (its stall) as before."""
    mode = tmp_path / "mode"
    mode.write_text("flood", encoding="utf-8")
    (tmp_path / "pids").mkdir()
    monkeypatch.setenv("FAKE_SMI_MODE", str(mode))
    monkeypatch.setenv("FAKE_SMI_PIDS", str(tmp_path / "pids"))
    fields = ["index", "memory.used"]
    options = AgentOptions(fields=fields, process_fields=[], nvidia_smi="", interval=1.0)
    out = _Out()
    loop = agent.Agent(options, out)  # type: ignore[arg-type]
    argv = [sys.executable, str(FAKE_SMI), "--query-gpu=" + ",".join(fields)]
    argv += ["--format=csv,noheader,nounits", "-lms", "1000"]
    assert loop.stream_smi(argv, fields)  # returns once the watchdog saw the silence
    rounds = [m for m in out.sent if isinstance(m, Gpus)]
    notes = [m.text for m in out.sent if isinstance(m, Note)]
    assert 1 <= len(rounds) <= 3, len(rounds)  # 20000 before
    assert notes[0] == "nvidia-smi gives rounds faster than every 1 s: the newest is sent"
    assert notes[-1].startswith(notes[0] + ", ")
    assert notes[-1].endswith(" older ones were dropped")
    dropped = int(notes[-1].rsplit(", ", 1)[1].split()[0])
    assert dropped + len(rounds) == 20000
    assert isinstance(out.sent[-1], SmiError) and out.sent[-1].exit == 124
