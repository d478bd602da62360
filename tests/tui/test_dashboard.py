"""The dashboard driven the way a user drives it: keys through Pilot, on the simulated
CT200 (real agent, real parsers), with frozen clocks where the screen must be stable."""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from gpu_rows import click_row
from textual.pilot import Pilot
from textual.screen import Screen

from gpumon.backends.model import ConnState
from gpumon.backends.monitor import HostMonitor
from gpumon.tui.app import GpumonApp
from gpumon.tui.dashboard import INTERVALS, DashboardScreen
from gpumon.tui.dashboard.screen import HostList
from gpumon.tui.screens import AlertHistoryScreen, DetailScreen, HelpScreen, key_text
from gpumon.tui.widgets import HostSection

from palette import run_from_palette

Wait = Callable[..., Awaitable[None]]
KeyActions = Callable[[Screen[Any]], set[str]]
FROZEN_NOW = 1795962750.0


def frozen_clock() -> float:
    return FROZEN_NOW


def section(app: GpumonApp, i: int = 0) -> HostSection:
    return app.dashboard.sections[i]


def row_texts(app: GpumonApp, i: int = 0) -> list[str]:
    return [row.render().plain for row in section(app, i).rows]


async def with_data(pilot: Pilot[int], wait: Wait, app: GpumonApp) -> None:
    """Wait until every connected host's rows are on screen."""
    await wait(
        pilot, lambda: all(len(s.rows) == 8 for s in app.dashboard.sections), what="GPU rows"
    )
    await pilot.pause()


def record_notifications(app: GpumonApp) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    original = app.notify

    def notify(message: str, **kwargs: Any) -> None:
        seen.append((message, str(kwargs.get("severity", "information"))))
        original(message, **kwargs)

    app.notify = notify  # type: ignore[method-assign]
    return seen


async def test_every_gpu_has_a_row_with_memory_and_header(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    app = GpumonApp([demo_monitor(clock=frozen_clock)])
    async with app.run_test(size=(80, 24)) as pilot:
        await with_data(pilot, wait, app)
        await wait(pilot, lambda: "train.target" in row_texts(app)[0], what="the processes")
        rows = row_texts(app)
        assert [r.split()[1] if r.startswith("▶") else r.split()[0] for r in rows] == [
            str(i) for i in range(8)
        ]
        assert all("/95.6G" in r for r in rows)
        # GPUs 5-7 belong to the drafter job: narrow rows name it instead of the model, and
        # the others name what runs there (issue 26.8: was "-"), never a model name
        owners = [r.replace("▶", " ").split()[1] for r in rows[:5]]
        assert owners == ["train.target"] * 5 and not any("RTX" in r for r in rows[:5])
        assert all("drafter" in r and "RTX PRO" not in r for r in rows[5:])
        assert " owner " in section(app).titles.render().plain
        assert all(len(r) <= 80 for r in rows)
        # drawn fresh (on a loaded machine a header drawn late says the data's age)
        await wait(
            pilot,
            lambda: "age <1s" in section(app).header.plain,
            what=lambda: f"a fresh header: {section(app).header.plain!r}",
        )
        header = section(app).header.plain
        assert header.startswith("demo")
        assert "● connected" in header
        assert "0 alerts" in header


async def test_cursor_moves_between_gpus(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    app = GpumonApp([demo_monitor(clock=frozen_clock)])
    async with app.run_test(size=(80, 24)) as pilot:
        await with_data(pilot, wait, app)
        assert app.dashboard.cursor == (0, 0)
        await pilot.press("down", "down", "j")
        assert app.dashboard.cursor == (0, 3)
        assert [r.view is not None and r.view.cursor for r in section(app).rows] == [
            k == 3 for k in range(8)
        ]
        assert row_texts(app)[3].startswith("▶")
        await pilot.press("up", "k")
        assert app.dashboard.cursor == (0, 1)
        await pilot.press(*["down"] * 12)  # past the GPUs, into the jobs pane: the drafter
        assert app.dashboard.cursor == (0, 8)  # and no further: it is the last row
        assert not any(r.view is not None and r.view.cursor for r in section(app).rows)
        jobs = section(app).jobs.view
        assert jobs is not None and jobs.cursor == 0
        assert app.dashboard.check_action("open_detail", ()) is None  # no GPU under the cursor
        await click_row(pilot, app, 5)
        assert app.dashboard.cursor == (0, 5)


async def test_enter_opens_detail_with_plots_and_processes_esc_returns(
    demo_monitor: Callable[..., HostMonitor], wait: Wait, key_actions: KeyActions
) -> None:
    monitor = demo_monitor(clock=frozen_clock)
    app = GpumonApp([monitor])
    async with app.run_test(size=(80, 24)) as pilot:
        await with_data(pilot, wait, app)
        await wait(pilot, lambda: monitor.processes_time is not None, what="processes")
        await pilot.press("down", "down", "enter")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, DetailScreen)
        assert screen.target.gpu_index == 2
        await wait(pilot, lambda: all(p.builds > 0 for p in screen.plots.values()), what="plots")
        assert "memory GiB" in screen.plots["memory"].render().plain
        assert "GPU 2" in str(screen.title_line.render())
        procs = str(screen.processes.render())
        # as CT 200 numbers it (the host's PID 2418863), from the Proxmox host's list
        assert "CT200" in procs and " 863 " in procs and "/root/venv/bin/python3" in procs
        keys = key_actions(screen)
        assert "open_detail" not in keys and "toggle_spark" not in keys  # not on the detail view
        assert {"restart_job", "toggle_pause", "cursor", "alerts", "quit"} <= keys  # these are
        # the detail view follows the cursor
        await pilot.press("down")
        assert screen.target.gpu_index == 3
        await pilot.press("1")
        assert screen.window == 60.0
        assert "window 1 min" in str(screen.title_line.render())
        await pilot.press("3")
        assert screen.window == 3600.0
        await pilot.pause()
        assert "-1h" in screen.plots["power"].render().plain
        await pilot.press("escape")
        assert not isinstance(app.screen, DetailScreen)


async def test_plots_redraw_only_for_new_samples(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    app = GpumonApp([demo_monitor(frozen=False)])
    async with app.run_test(size=(80, 24)) as pilot:
        await with_data(pilot, wait, app)
        await pilot.press("enter")
        screen = app.screen
        assert isinstance(screen, DetailScreen)
        await wait(pilot, lambda: screen.plots["util"].builds > 0, what="first plot")
        # A sample that came since may still have its plots' redraw scheduled for after the
        # next refresh (its text took the lines first): bring both up to date here, with no
        # await between these calls, so no sample comes between them and the assertion.
        screen.refresh_view()
        screen.refresh_view()
        shown = app.dashboard.sections[0].shown
        before = screen.plots["util"].builds
        assert screen.refresh_view() is False  # same sample: nothing to redraw
        assert screen.plots["util"].builds == before
        await wait(pilot, lambda: app.dashboard.sections[0].shown is not shown, what="a new sample")
        await wait(pilot, lambda: screen.plots["util"].builds > before, what="its redraw")
        await pilot.press("p")  # paused: new samples do not redraw
        await pilot.pause()  # a redraw already scheduled for a sample before the pause ends
        builds = screen.plots["util"].builds
        await pilot.pause(2.5)
        assert screen.plots["util"].builds == builds


async def test_rows_scrolled_out_of_view_are_drawn_when_they_come_back(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    """Four hosts at 80x24: a section scrolled out builds no row lines for its new
    samples (it takes their views), and shows the newest when scrolled back."""
    app = GpumonApp([demo_monitor(frozen=False) for _ in range(4)])
    async with app.run_test(size=(80, 24)) as pilot:
        await with_data(pilot, wait, app)
        hosts = app.dashboard.query_one(HostList)
        rows = section(app, 3).gpu_rows

        def drawn() -> list[str]:
            assert rows._strips is not None
            return [strip.text.rstrip() for strip in rows._strips]

        hosts.scroll_end(animate=False, immediate=True)
        await wait(pilot, lambda: rows._seen() and rows._strips is not None, what="drawn")
        hosts.scroll_home(animate=False, immediate=True)
        await wait(pilot, lambda: not rows._seen(), what="the last host scrolled out")
        for _ in range(3):  # main's code built each new sample's changed lines for nobody
            view = rows.view
            await wait(pilot, lambda v=view: rows.view is not v, what="a new sample's rows")
            await pilot.pause()
            assert rows._strips is None
        hosts.scroll_end(animate=False, immediate=True)
        await wait(pilot, lambda: rows._strips is not None, what="the rows drawn again")
        assert drawn() == [line.rstrip() for line in rows.plain.split("\n")]


async def test_help_lists_every_key(demo_monitor: Callable[..., HostMonitor], wait: Wait) -> None:
    app = GpumonApp([demo_monitor(clock=frozen_clock)])
    async with app.run_test(size=(80, 24)) as pilot:
        await with_data(pilot, wait, app)
        await pilot.press("question_mark")
        screen = app.screen
        assert isinstance(screen, HelpScreen)
        text = screen.plain
        for binding in [
            *DashboardScreen.BINDINGS,
            *DetailScreen.BINDINGS,
            *AlertHistoryScreen.BINDINGS,
        ]:
            assert key_text(binding.key) in text  # type: ignore[union-attr]
            assert binding.description in text or binding.tooltip in text  # type: ignore[union-attr]
        # issue 26.8: the digits' row keeps a space before its words, and a wrapped
        # description stays in its column, never flush left under the keys
        sections = {where for where, _, _ in screen.rows}
        seen: list[str] = []
        for _ in range(12):  # page through the box
            lines = [strip.text for strip in screen._compositor.render_strips()]
            inside = [line.split("│")[1] for line in lines if line.count("│") >= 2]
            seen += [line[1:].rstrip() for line in inside]
            await pilot.press("pagedown")
        assert any(re.search(r"0 1 2 3 4 5 6 7 8 9 +Jump", line) for line in seen)
        body = [line for line in seen if line.strip() and line.strip() not in sections]
        flush = [line for line in body if not line.startswith(" ") and "palette" not in line]
        assert not flush, flush
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


async def test_pause_freezes_rows_while_the_monitor_collects(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    monitor = demo_monitor(frozen=False)
    app = GpumonApp([monitor])
    async with app.run_test(size=(80, 24)) as pilot:
        await with_data(pilot, wait, app)
        await pilot.press("p")
        assert app.dashboard.paused
        assert "PAUSED" in section(app).header.plain
        frozen = section(app).shown
        rows = row_texts(app)
        jobs = section(app).jobs.plain
        step = monitor.workloads.jobs["drafter"].step
        samples = monitor.samples
        await wait(pilot, lambda: monitor.samples >= samples + 2, what="two more samples")
        await wait(  # the job went on (its log's next progress line)...
            pilot, lambda: monitor.workloads.jobs["drafter"].step != step, what="a new step"
        )
        await pilot.pause(1.1)  # at least one refresh tick
        assert section(app).shown is frozen
        assert row_texts(app) == rows
        assert section(app).jobs.plain == jobs  # ...and its pane stands still
        assert monitor.latest is not frozen  # monitoring went on: no gap in history
        await pilot.press("p")
        assert not app.dashboard.paused
        shown, latest = section(app).shown, monitor.latest
        # the newest round (a process list arriving since may have re-issued it, same time)
        assert shown is not None and latest is not None and shown.time == latest.time
        assert "PAUSED" not in section(app).header.plain


async def test_plus_minus_change_the_interval_on_every_host(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    monitors = [demo_monitor(clock=frozen_clock), demo_monitor(clock=frozen_clock)]
    app = GpumonApp(monitors)
    async with app.run_test(size=(80, 40)) as pilot:
        await with_data(pilot, wait, app)
        await wait(pilot, lambda: all(m.status.state == ConnState.CONNECTED for m in monitors))
        await pilot.press("plus")
        assert [m.interval for m in monitors] == [0.5, 0.5]
        assert app.dashboard.check_action("faster", ()) is None  # already the fastest: greyed
        await pilot.press("minus", "minus", "minus")
        assert [m.interval for m in monitors] == [5.0, 5.0]
        await pilot.pause()
        assert "every 5s" in section(app).header.plain
        await pilot.press(*["minus"] * 10)
        assert monitors[0].interval == INTERVALS[-1]
        assert app.dashboard.check_action("slower", ()) is None


async def test_keys_greyed_out_while_the_host_is_disconnected(
    unreachable_monitor: Callable[[], HostMonitor], wait: Wait
) -> None:
    monitor = unreachable_monitor()
    app = GpumonApp([monitor])
    seen = record_notifications(app)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait(pilot, lambda: monitor.status.state == ConnState.RECONNECTING)
        await wait(
            pilot, lambda: app.dashboard.check_action("faster", ()) is None, what="greyed keys"
        )
        assert app.dashboard.check_action("slower", ()) is None
        assert app.dashboard.check_action("open_detail", ()) is None
        interval = monitor.interval
        await pilot.press("plus", "enter")
        assert monitor.interval == interval
        assert not isinstance(app.screen, DetailScreen)
        # Between tries the header says when the next one is; during a try (no next one
        # scheduled yet) it says "reconnecting #N" alone: on a loaded machine the presses
        # above can outlast the backoff and land in a try.
        await wait(
            pilot,
            lambda: (
                "reconnecting" in section(app).header.plain
                and "retry in" in section(app).header.plain
            ),
            what="the next try's time in the header",
        )
        assert "127.0.0.1" in section(app).header.plain  # the error line names the target
        assert any("cannot connect" in m and sev == "error" for m, sev in seen)
        # the body says the reason at once, whole, not "waiting for the first sample"
        # (issue 36 point 8): a refused connection is the config or the host to fix
        waiting = str(section(app).waiting.render())
        assert "not connected: cannot connect to 127.0.0.1" in waiting, waiting
        assert "connection refused" in waiting and "check" in waiting
        assert "waiting for the first sample" not in waiting


async def test_one_host_down_does_not_touch_the_other(
    demo_monitor: Callable[..., HostMonitor],
    unreachable_monitor: Callable[[], HostMonitor],
    wait: Wait,
) -> None:
    demo, down = demo_monitor(clock=frozen_clock), unreachable_monitor()
    app = GpumonApp([down, demo])
    async with app.run_test(size=(80, 30)) as pilot:
        await wait(pilot, lambda: len(section(app, 1).rows) == 8, what="demo rows")
        await wait(pilot, lambda: down.status.state == ConnState.RECONNECTING)
        await pilot.pause()
        assert app.dashboard.cursor == (1, 0)  # the cursor lands on the host with data
        assert app.dashboard.check_action("faster", ()) is True
        assert section(app, 0).rows == []
        assert all("/95.6G" in r for r in row_texts(app, 1))


async def test_theme_key_cycles_and_is_remembered(
    demo_monitor: Callable[..., HostMonitor], wait: Wait, state_home: Path
) -> None:
    app = GpumonApp([demo_monitor(clock=frozen_clock)])
    async with app.run_test(size=(80, 24)) as pilot:
        await with_data(pilot, wait, app)
        assert app.theme == "gpumon-dark"
        dark_rows = app.dashboard.sections[0].rows[0].view
        await pilot.press("t")
        await pilot.pause()
        assert app.theme == "gpumon-light"
        state = json.loads((state_home / "gpumon" / "state.json").read_text())
        assert state["theme"] == "gpumon-light"
        assert app.dashboard.sections[0].rows[0].view != dark_rows  # redrawn in the new colours
        await pilot.press("t")
        assert app.theme == "gpumon-contrast"
        await pilot.press("t")  # t cycles gpumon's own three, not Textual's dozen
        assert app.theme == "gpumon-dark"
        app.theme = "nord"  # chosen in the palette: t goes back to gpumon's own
        await pilot.press("t")
        assert app.theme == "gpumon-dark"
        await pilot.press("t", "t")
        assert app.theme == "gpumon-contrast"
    again = GpumonApp([demo_monitor(clock=frozen_clock)])
    async with again.run_test(size=(80, 24)):
        assert again.theme == "gpumon-contrast"


async def test_unknown_theme_says_so_and_falls_back(
    demo_monitor: Callable[..., HostMonitor],
) -> None:
    app = GpumonApp([demo_monitor(clock=frozen_clock)], theme="no-such-theme")
    seen = record_notifications(app)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert app.theme == "gpumon-dark"
        assert any("Unknown theme 'no-such-theme'" in m for m, _ in seen)


async def test_palette_command_runs_an_action(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    app = GpumonApp([demo_monitor(clock=frozen_clock)])
    async with app.run_test(size=(80, 24)) as pilot:
        await with_data(pilot, wait, app)
        await run_from_palette(pilot, "Pause / resume updates", "pause / resume")
        await wait(pilot, lambda: app.dashboard.paused, what="pause from the palette")


async def test_m_toggles_the_sparkline(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    app = GpumonApp([demo_monitor(clock=frozen_clock)])
    async with app.run_test(size=(80, 24)) as pilot:
        await with_data(pilot, wait, app)
        # the sparkline's time scale: 11 columns of 5 s at 80 columns
        assert app.dashboard.sections[0].titles.render().plain.endswith(" mem 55s")
        assert app.dashboard.sections[0].rows[0].view is not None
        assert app.dashboard.sections[0].rows[0].view.spark_is_memory
        await pilot.press("m")
        assert not app.dashboard.spark_memory
        assert app.dashboard.sections[0].titles.render().plain.endswith(" util 55s")
        view = app.dashboard.sections[0].rows[0].view
        assert view is not None and not view.spark_is_memory and view.spark_max == 100.0


async def test_unreported_values_show_na_never_zero(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    app = GpumonApp([demo_monitor(clock=frozen_clock, fault="gpu_lost:4")])
    async with app.run_test(size=(80, 24)) as pilot:
        await with_data(pilot, wait, app)
        lost = row_texts(app)[4]
        first_line, problem = lost.split("\n")
        assert first_line.count("n/a") >= 4  # memory, mem%, util, temperature, power
        assert "0.0/" not in first_line and " 0%" not in first_line and "0W" not in first_line
        assert "✖" in first_line
        assert "GPU is lost" in problem
        assert "1 alert" in section(app).header.plain
        assert "n/a" not in row_texts(app)[3]


async def test_stale_data_is_marked_with_its_age(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    now = [FROZEN_NOW]
    monitor = demo_monitor(clock=lambda: now[0], interval=3600.0)
    app = GpumonApp([monitor])
    async with app.run_test(size=(80, 24)) as pilot:
        await with_data(pilot, wait, app)
        assert "stale" not in section(app).header.plain
        now[0] += 3 * 3600 + 12  # no new sample for three intervals and 12 s
        await wait(pilot, lambda: "stale" in section(app).header.plain, what="stale mark")
        assert "stale 3h00m" in section(app).header.plain
        assert all(row.view is not None and row.view.stale for row in section(app).rows)
        assert all("/95.6G" in r for r in row_texts(app))  # the last values stay


async def test_connection_loss_raises_a_notification(
    demo_monitor: Callable[..., HostMonitor],
    wait: Wait,
    children: Callable[[str], list[int]],
) -> None:
    monitor = demo_monitor(frozen=True)
    app = GpumonApp([monitor])
    seen = record_notifications(app)
    async with app.run_test(size=(80, 24)) as pilot:
        await with_data(pilot, wait, app)
        agents = children("gpumon-agent")
        assert agents, "the simulated host's agent should be a child process"
        for pid in agents:
            os.kill(pid, signal.SIGKILL)
        await wait(pilot, lambda: any("connection lost" in m for m, _ in seen), what="notice")
        assert [sev for m, sev in seen if "connection lost" in m] == ["error"]
        await pilot.pause()
        header = section(app).header.plain
        assert "reconnecting" in header and "stale" in header  # frozen clock: age <1s
        assert all(row.view is not None and row.view.stale for row in section(app).rows)
        assert all("/95.6G" in r for r in row_texts(app))  # the last values stay


async def test_rows_grow_with_the_terminal(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    app = GpumonApp([demo_monitor(clock=frozen_clock)])
    async with app.run_test(size=(200, 60)) as pilot:
        await with_data(pilot, wait, app)
        await pilot.pause()
        assert app.dashboard.row_height == 3
        rows = section(app).rows
        assert all(r.size.height == 3 for r in rows)
        assert rows[0].size.width == 200
        assert "SM clk" in section(app).titles.render().plain  # extra columns
        wide_bar = rows[0].render().plain.count("█")
        await pilot.resize_terminal(80, 24)
        await wait(pilot, lambda: all(r.size.height == 1 for r in rows), what="the relayout")
        assert app.dashboard.row_height == 1
        assert all(r.size.height == 1 for r in rows)
        assert rows[0].render().plain.count("█") < wide_bar
        assert rows[7].region.bottom <= 23  # all 8 visible above the footer
