"""What every test shares: private XDG directories, the test lanes and their rules.

Every test gets its own XDG config and state directories: nothing a test runs (the
flight recorder, the audit log, the remembered theme) writes into the real home.

The lanes are the folders under tests/ (docs/architecture.md, "Tests"):

- ``unit/`` and ``views/``: in process, no child processes, no real-time waits; the fast
  lane (``scripts/test --fast``). A test here that starts a child process, or that sleeps
  (``time.sleep`` / ``asyncio.sleep`` for more than 0 s, the code under test's sleeps
  included), fails. A test marked ``slow`` (in process, but seconds of work: the soak)
  runs in the whole suite, not in the fast lane.
- ``system/`` (marker ``system``): the real-time simulator, child processes, real shells
  and interpreters.
- ``integration/`` (marker ``integration``): a real sshd on 127.0.0.1.
- ``tui/``: the Textual app driven by Pilot, snapshots, tmux end to end.

Each file in ``system/`` and ``integration/`` says its marker (``pytestmark``), so
``-m 'not integration'`` means the same thing wherever the test lives; collection refuses a
file in the wrong lane.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["pytester"]  # tests/unit/test_lanes.py runs the lane rules on test files

TESTS = Path(__file__).parent
IN_PROCESS_LANES = frozenset({"unit", "views"})
LANE_MARKERS = {"system": "system", "integration": "integration"}


def lane_of(path: Path) -> str:
    """The lane (first folder under tests/) of a test file; "" for one directly in tests/."""
    parts = path.resolve().relative_to(TESTS.resolve()).parts
    return parts[0] if len(parts) > 1 else ""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse a test whose markers disagree with its folder (see the module docstring)."""
    problems: list[str] = []
    for item in items:
        lane = lane_of(item.path)
        wanted = LANE_MARKERS.get(lane)
        if wanted is not None and item.get_closest_marker(wanted) is None:
            problems.append(f"{item.nodeid}: tests/{lane}/ files set pytestmark = {wanted}")
        for lane_name, marker in LANE_MARKERS.items():
            if lane != lane_name and item.get_closest_marker(marker) is not None:
                problems.append(f"{item.nodeid}: a {marker} test belongs in tests/{lane_name}/")
    if problems:
        raise pytest.UsageError("tests in the wrong lane:\n  " + "\n  ".join(problems))


@pytest.fixture(autouse=True)
def _private_xdg_dirs(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path_factory.mktemp("xdg")
    for var in ("XDG_STATE_HOME", "XDG_CONFIG_HOME"):
        path = root / var.lower()
        path.mkdir()
        monkeypatch.setenv(var, str(path))
    monkeypatch.delenv("GPUMON_CONFIG", raising=False)


@pytest.fixture(autouse=True)
def _no_real_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """Child processes import the stand-in tests/support/no_nvml/pynvml.py (an ImportError)
    before the real nvidia-ml-py: on a machine with GPUs the agents the tests start read
    the stand-in nvidia-smi, as everywhere else."""
    path = os.environ.get("PYTHONPATH")
    stub = str(TESTS / "support" / "no_nvml")
    monkeypatch.setenv("PYTHONPATH", stub + (os.pathsep + path if path else ""))


@pytest.fixture(autouse=True)
def _in_process_only(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """In the fast lanes, starting a child process (``subprocess`` or asyncio's, which uses
    it) fails the test, even where the code under test catches the error."""
    if lane_of(request.path) not in IN_PROCESS_LANES:
        yield
        return
    started: list[str] = []

    def refuse(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        started.append(repr(args))
        raise AssertionError(
            f"started {args!r}: a test that runs a child process is in tests/system"
        )

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)
    yield
    if started:
        pytest.fail(f"tests/{lane_of(request.path)}/ runs in process; this test started {started}")


NO_SLEEP_ADVICE = (
    "the in-process lanes (tests/unit, tests/views) allow no real-time wait. Either move "
    "the test to tests/system/ (pytestmark = pytest.mark.system), or wait on a condition "
    "with the shared `until` (tests/support/waiting.py) and a `FakeClock` passed as the "
    "code's clock and sleep"
)


@pytest.fixture(autouse=True)
def _no_real_sleeps(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """In the fast lanes ``time.sleep`` and ``asyncio.sleep`` with a delay above 0 fail
    the test (``asyncio.sleep(0)``, a yield to the loop, is fine), in the test and in the
    code under test, in any thread, even where that code catches the error. A test that
    runs pytest on a tree of its own (``pytester``) leaves the rules to that tree."""
    if lane_of(request.path) not in IN_PROCESS_LANES or "pytester" in request.fixturenames:
        yield
        return
    slept: list[str] = []
    yield_now = asyncio.sleep

    def refuse(call: str) -> None:
        slept.append(call)
        raise AssertionError(f"{call}: {NO_SLEEP_ADVICE}")

    def no_time_sleep(seconds: float) -> None:
        if seconds > 0:
            refuse(f"time.sleep({seconds!r})")

    async def no_asyncio_sleep(delay: float, result: Any = None) -> Any:
        if delay > 0:
            refuse(f"asyncio.sleep({delay!r})")
        return await yield_now(0, result)

    monkeypatch.setattr(time, "sleep", no_time_sleep)
    monkeypatch.setattr(asyncio, "sleep", no_asyncio_sleep)
    monkeypatch.setattr(asyncio.tasks, "sleep", no_asyncio_sleep)
    yield
    if slept:
        pytest.fail(
            f"tests/{lane_of(request.path)}/: this test slept ({', '.join(slept)}); "
            + NO_SLEEP_ADVICE
        )


@pytest.fixture
def utc() -> Iterator[None]:
    """Local time is UTC for the test (alert times and the replay clock are local)."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if before is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = before
    time.tzset()


@pytest.fixture
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``$XDG_STATE_HOME`` for the test: ``tmp_path/state``, not created yet."""
    path = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(path))
    return path
