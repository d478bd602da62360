"""The agent's NVML worker: one thread for every call, and a hung call given up on."""

from __future__ import annotations

import threading
import time

from gpumon.backends.remote.agent import NvmlWorker


def test_every_call_runs_in_one_long_lived_thread() -> None:
    worker = NvmlWorker()
    before = threading.active_count()
    threads = [worker.call(lambda: threading.get_ident(), 5.0) for _ in range(20)]
    assert {done for done, _ in threads} == {True}
    assert len({ident for _, ident in threads}) == 1
    assert threading.get_ident() not in {ident for _, ident in threads}
    assert threading.active_count() == before + 1


def test_an_exception_is_the_answer() -> None:
    def fail() -> None:
        raise RuntimeError("driver in trouble")

    done, answer = NvmlWorker().call(fail, 5.0)
    assert done and isinstance(answer, RuntimeError) and str(answer) == "driver in trouble"


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
