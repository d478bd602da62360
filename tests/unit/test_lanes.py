"""The lane rules of tests/conftest.py, run on small test trees by pytest itself (in
process): a test in tests/unit or tests/views that sleeps fails, with what to do instead;
one in tests/system may sleep; a yield to the event loop is no sleep."""

from __future__ import annotations

from pathlib import Path

import pytest

CONFTEST = Path(__file__).parents[1] / "conftest.py"

SLEEPERS = """
import asyncio
import threading
import time

import pytest


def test_a_fixed_sleep():
    time.sleep(0.001)


@pytest.mark.asyncio
async def test_an_asyncio_sleep():
    await asyncio.sleep(0.001)


def test_a_sleep_the_code_catches():
    try:
        time.sleep(0.001)
    except Exception:
        pass


def test_a_sleep_in_another_thread():
    thread = threading.Thread(target=lambda: time.sleep(0.001))
    thread.start()
    thread.join()


@pytest.mark.asyncio
async def test_a_yield_to_the_loop():
    await asyncio.sleep(0)
    time.sleep(0)
"""


def run_lane(pytester: pytest.Pytester, lane: str) -> pytest.RunResult:
    """SLEEPERS as ``tests/LANE/test_sleepers.py`` beside a copy of the real conftest."""
    tests = pytester.mkdir("tests")
    (tests / "conftest.py").write_text(CONFTEST.read_text())
    (tests / lane).mkdir()
    marker = "pytestmark = pytest.mark.system\n" if lane == "system" else ""
    (tests / lane / "test_sleepers.py").write_text(SLEEPERS + marker)
    pytester.makeini(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
        "markers =\n    system: x\n    integration: x\n"
    )
    plugins_off = [f"-pno:{p}" for p in ("cacheprovider", "textual-snapshot", "hypothesispytest")]
    return pytester.runpytest_inprocess(*plugins_off, "tests")


@pytest.mark.parametrize("lane", ["unit", "views"])
def test_a_sleep_in_an_in_process_lane_fails_and_says_what_to_do(
    pytester: pytest.Pytester, lane: str
) -> None:
    result = run_lane(pytester, lane)
    failures = result.reprec.getfailures()  # type: ignore[attr-defined]
    at_call = {r.nodeid.rsplit("::", 1)[1] for r in failures if r.when == "call"}
    at_teardown = {r.nodeid.rsplit("::", 1)[1] for r in failures if r.when == "teardown"}
    assert at_call == {"test_a_fixed_sleep", "test_an_asyncio_sleep"}
    # caught, or in another thread: the test body passes, its teardown fails it all the same
    assert at_teardown == at_call | {
        "test_a_sleep_the_code_catches",
        "test_a_sleep_in_another_thread",
    }
    text = result.stdout.str()
    assert "time.sleep(0.001)" in text and "asyncio.sleep(0.001)" in text
    assert "move the test to tests/system/ (pytestmark = pytest.mark.system)" in text
    assert "the shared `until` (tests/support/waiting.py) and a `FakeClock`" in text


def test_a_sleep_in_the_system_lane_is_allowed(pytester: pytest.Pytester) -> None:
    result = run_lane(pytester, "system")
    result.assert_outcomes(passed=5)
