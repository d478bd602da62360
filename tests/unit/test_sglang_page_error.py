"""``sglang_error`` for a server whose ``/metrics`` page comes but cannot be read (issue 28.6).

The errors are the agent's own (``remote/fetch.py``): a page over the bound, a page cut
short by the close; and a page without SGLang's metrics in it. A server that is simply not
listening raises nothing: a stopped server is not a fault.
"""

from __future__ import annotations

import pytest

from gpumon.backends.alerts.engine import TRANSIENT_S, AlertEngine
from gpumon.backends.alerts.incident import incidents
from gpumon.backends.alerts.rules import AlertRules
from gpumon.backends.config.load import HostConfig
from gpumon.backends.config.workloads import SglangConfig
from gpumon.backends.model import Health
from gpumon.backends.remote.fetch import too_large
from gpumon.backends.workloads.watch import Workloads

from waiting import FakeClock

GOOD_PAGE = "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs 3.0\n"
TOO_LARGE = too_large(8 << 20)


def _setup(ports: tuple[int, ...] = (24061,)) -> tuple[Workloads, AlertEngine, FakeClock]:
    clock = FakeClock()
    sglang = SglangConfig(ports=ports, discover=False)
    workloads = Workloads(HostConfig(name="ct200", kind="ssh", sglang=sglang))
    return workloads, AlertEngine("ct200", AlertRules(), clock=clock.time), clock


def _scrape(
    workloads: Workloads,
    engine: AlertEngine,
    clock: FakeClock,
    status: int | None,
    body: str = "",
    error: str | None = None,
    port: int = 24061,
) -> list[str]:
    """One scrape a second later, judged as the monitor does: the active alerts' keys."""
    clock.advance(1.0)
    workloads.on_http(f"sglang:{port}", status, body, error, clock.time())
    workloads.judge_pages(engine, clock.time())
    return [a.key for a in engine.active()]


def test_an_oversized_page_is_a_warning_until_the_page_reads_again() -> None:
    workloads, engine, clock = _setup()
    assert TOO_LARGE == "page larger than 8 MiB: not read"
    assert _scrape(workloads, engine, clock, 200, GOOD_PAGE) == []
    assert _scrape(workloads, engine, clock, None, error=TOO_LARGE) == []  # once: not yet
    assert _scrape(workloads, engine, clock, None, error=TOO_LARGE) == ["sglang_page:24061"]
    [alert] = engine.active()
    assert (alert.kind, alert.severity) == ("sglang_error", Health.WARNING)
    assert alert.message == "sglang :24061 /metrics page larger than 8 MiB: not read"
    [incident] = incidents(engine.active())
    assert incident.headline.startswith("sglang :24061 /metrics page larger than 8 MiB")
    for _ in range(int(TRANSIENT_S) + 10):  # a condition: the log events' expiry spares it
        assert _scrape(workloads, engine, clock, None, error=TOO_LARGE) == ["sglang_page:24061"]
    assert engine.acknowledge("sglang_page:24061")  # silenced, not ended
    [alert] = engine.active()
    assert alert.acknowledged
    assert _scrape(workloads, engine, clock, 200, GOOD_PAGE) == []  # readable again: it ends
    [ended] = [a for a in engine.history() if a.key == "sglang_page:24061"]
    assert not ended.active


@pytest.mark.parametrize(
    ("status", "body", "error", "said"),
    [
        (
            None,
            "",
            "connection closed mid-answer (100 of 5000 bytes)",
            "sglang :24061 /metrics page cut short: connection closed mid-answer "
            "(100 of 5000 bytes)",
        ),
        (
            200,
            "<html>not metrics</html>\n",
            None,
            "sglang :24061 /metrics page cannot be read: no SGLang metrics in the text",
        ),
    ],
)
def test_a_page_cut_short_or_without_sglang_metrics_is_said(
    status: int | None, body: str, error: str | None, said: str
) -> None:
    workloads, engine, clock = _setup()
    for _ in range(2):
        _scrape(workloads, engine, clock, status, body, error)
    [alert] = engine.active()
    assert alert.kind == "sglang_error"
    assert alert.message.startswith(said)


@pytest.mark.parametrize(
    "error", ["ConnectionRefusedError: [Errno 111] Connection refused", "timed out"]
)
def test_a_stopped_or_silent_server_raises_nothing(error: str) -> None:
    workloads, engine, clock = _setup()
    for _ in range(5):
        assert _scrape(workloads, engine, clock, None, error=error) == []
    _scrape(workloads, engine, clock, None, error=TOO_LARGE)
    _scrape(workloads, engine, clock, None, error=TOO_LARGE)
    assert [a.kind for a in engine.active()] == ["sglang_error"]
    assert _scrape(workloads, engine, clock, None, error=error) == []  # stopped: no page, no fault


def test_each_server_has_its_own_alert() -> None:
    workloads, engine, clock = _setup((24061, 24062))
    for _ in range(2):
        _scrape(workloads, engine, clock, None, error=TOO_LARGE, port=24061)
        _scrape(workloads, engine, clock, 200, GOOD_PAGE, port=24062)
    assert [a.key for a in engine.active()] == ["sglang_page:24061"]
    _scrape(workloads, engine, clock, None, error=TOO_LARGE, port=24062)
    keys = _scrape(workloads, engine, clock, None, error=TOO_LARGE, port=24062)
    assert sorted(keys) == ["sglang_page:24061", "sglang_page:24062"]


def test_a_server_killed_mid_answer_raises_nothing() -> None:
    """Its last page is cut short by the close, then the port refuses: stopped, not broken."""
    workloads, engine, clock = _setup()
    _scrape(workloads, engine, clock, 200, GOOD_PAGE)
    cut = "connection closed mid-answer (4096 of 90000 bytes)"
    assert _scrape(workloads, engine, clock, None, error=cut) == []
    assert workloads.waiting_for() == [("SGLang :24061", "no second observation")]
    refused = "ConnectionRefusedError: [Errno 111] Connection refused"
    assert _scrape(workloads, engine, clock, None, error=refused) == []
    assert workloads.waiting_for() == []
    assert engine.history() == []
