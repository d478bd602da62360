"""A GPU row's memory colour is its memory alert's level: the host's alert rules decide both
(95 / 98.5 % by default, configurable per host), hysteresis included, so the row and the
alert never disagree."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from rich.color import Color
from rich.style import Style
from rich.text import Text

from gpumon.backends.alerts.rules import AlertRules
from gpumon.backends.model import GpuSample, Health, HostSample
from gpumon.backends.monitor import HostMonitor, ReplaySource, replay_monitor
from gpumon.backends.recording import Recording
from gpumon.tui.app import GpumonApp
from gpumon.tui.views import health_role

Wait = Callable[..., Awaitable[None]]
FROZEN_NOW = 1795962750.0
TOTAL_MIB = 97887


def colour_of(text: Text, word: str) -> Color | None:
    """The colour ``word`` is drawn in within ``text``."""
    at = text.plain.index(word)
    colours = [
        s.style.color
        for s in text.spans
        if s.start <= at < s.end and not isinstance(s.style, str) and s.style.color is not None
    ]
    return colours[-1] if colours else None


def memory_alert(monitor: HostMonitor, gpu: int) -> Health:
    """The level of ``gpu``'s memory alert (OK when there is none)."""
    alert = next((a for a in monitor.alerts.active() if a.key == f"memory:{gpu}"), None)
    return Health.OK if alert is None else alert.severity


def at_pct(t: float, pct: float) -> HostSample:
    """Eight GPUs at 80 % of their memory, GPU 6 at ``pct`` %."""
    gpus = tuple(
        GpuSample(
            index=g,
            uuid=f"GPU-{g}",
            memory_total_mib=TOTAL_MIB,
            memory_used_mib=round(TOTAL_MIB * (pct if g == 6 else 80.0) / 100.0),
        )
        for g in range(8)
    )
    return HostSample("ct200", t, None, gpus)


async def test_a_gpu_at_97_5_percent_is_drawn_as_the_warning_its_alert_is(wait: Wait) -> None:
    """97.5 % is under the default critical line (98.5 %): warning, in the strip and in the
    row. Then 94 % and 89 %: the alert stays a warning until three calm samples (its
    hysteresis), and so does the row; after that both are OK."""
    pcts = [97.5, 94.0, 89.0, 89.0, 89.0]
    samples = [at_pct(1000.0 + k, p) for k, p in enumerate(pcts)]
    replay = ReplaySource(Recording({"host": "ct200"}, samples, []))
    replay.set_paused(True)
    monitor = replay_monitor(replay)
    app = GpumonApp([monitor], read_only=True, bell=False)
    async with app.run_test(size=(100, 30)) as pilot:
        palette = app.palette
        expected = [Health.WARNING, Health.WARNING, Health.WARNING, Health.WARNING, Health.OK]
        for k, level in enumerate(expected):
            await pilot.press("full_stop")
            await wait(pilot, lambda k=k: replay.position == k + 1, what=f"sample {k + 1}")
            app.dashboard.refresh_dashboard()
            await pilot.pause()
            row = app.dashboard.sections[0].rows[6]
            assert row.view is not None
            assert memory_alert(monitor, 6) is level, k
            assert row.view.cells.memory_pct.role == health_role(level), k
            pct = row.view.cells.memory_pct.text
            warning = Style(color=palette.warning).color
            want = warning if level is Health.WARNING else None  # OK text stays plain
            assert colour_of(row.render(), pct) == want, (k, pct)
            if k == 0:
                assert (
                    "WARNING" in app.dashboard.strip.plain
                    and "GPU 6 memory 97.5% used" in app.dashboard.strip.plain
                )


async def test_row_colours_follow_the_hosts_own_alert_rules(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    """Lower thresholds for this host (80 / 90 %): the demo's GPUs at 86-92 % are warnings
    and criticals, each row as its own alert says."""
    monitor = demo_monitor(clock=lambda: FROZEN_NOW)
    monitor.alerts.rules = AlertRules(memory_warning_pct=80.0, memory_critical_pct=90.0)
    app = GpumonApp([monitor])
    async with app.run_test(size=(80, 24)) as pilot:
        section = app.dashboard.sections[0]
        await wait(
            pilot, lambda: len(section.rows) == 8 and all(r.view for r in section.rows), what="rows"
        )
        rows = section.rows
        levels = [memory_alert(monitor, i) for i in range(8)]
        assert {Health.WARNING, Health.CRITICAL} <= set(levels)
        for i, row in enumerate(rows):
            assert row.view is not None
            assert row.view.cells.memory_pct.role == health_role(levels[i]), i
