"""The action keys driven the way a user drives them: restart / stop / start of the demo's
drafter job, the doctor and the torch swap, on the simulated CT200 (real agent, real sim
job, real audit log in the test's private state dir)."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import pytest
from textual.geometry import Region
from textual.pilot import Pilot
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Button, Checkbox, Input, Log, Select

from gpumon.backends.actions import (
    ActionPlan,
    JobRun,
    JobTarget,
    Outcome,
    Step,
    audit,
)
from gpumon.backends.monitor import HostMonitor
from gpumon.backends.torchenv import OnEvent, SwapEvent, SwapOutcome, SwapPlan, plan_swap
from gpumon.backends.torchenv.doctor import Check
from gpumon.backends.workloads import JobState
from gpumon.tui.app import GpumonApp
from gpumon.tui.dashboard import ACTIONS
from gpumon.tui.screens import DetailScreen, DoctorScreen, JobActionScreen, SwapScreen, swap

from palette import run_from_palette, search_palette, title_of

Wait = Callable[..., Awaitable[None]]
KeyActions = Callable[[Screen[Any]], set[str]]
OOM_GPU = 6  # training-oom: the drafter (GPUs 5-7) died of CUDA OOM on GPU 6 at ~60 s


@pytest.fixture
def oom_demo(demo_monitor: Callable[..., HostMonitor]) -> HostMonitor:
    """The training-oom demo 10 s after the drafter's OOM, live (not frozen)."""
    return demo_monitor(frozen=False, demo_time=70.0, interval=0.5)


def shown(widget: Widget) -> str:
    """The text a widget shows on screen now."""
    w, h = widget.size
    return "\n".join(strip.text for strip in widget.render_lines(Region(0, 0, w, h)))


def can(app: GpumonApp, action: str) -> bool:
    """Whether the dashboard's ``action`` can act now."""
    return app.dashboard.check_action(action, ()) is True


async def on_gpu(pilot: Pilot[int], wait: Wait, app: GpumonApp, gpu: int) -> None:
    sections = app.dashboard.sections
    await wait(pilot, lambda: all(len(s.rows) == 8 for s in sections), what="GPU rows")
    await pilot.press(*["down"] * gpu)
    assert app.dashboard.cursor == (0, gpu)


async def oom_seen(pilot: Pilot[int], wait: Wait, monitor: HostMonitor) -> None:
    drafter = monitor.workloads.jobs["drafter"]
    await wait(pilot, lambda: drafter.state is JobState.CRASHED, what="the drafter's crash")


def oom_alerts(monitor: HostMonitor) -> list[str]:
    """The drafter's alerts (CT 201's jupyter on GPU 6 is another container's: a restart
    does not end its ``foreign_process`` condition)."""
    return [
        a.key
        for a in monitor.alerts.active()
        if (a.job == "drafter" or a.gpu == OOM_GPU) and a.kind != "foreign_process"
    ]


async def open_plan(
    pilot: Pilot[int], wait: Wait, app: GpumonApp, key: str = "r"
) -> JobActionScreen:
    await pilot.press(key)
    await wait(pilot, lambda: isinstance(app.screen, JobActionScreen), what="the dialog")
    screen = cast(JobActionScreen, app.screen)
    await wait(pilot, lambda: screen.plan is not None or screen.problem, what="the plan")
    await pilot.pause()
    return screen


def record_notifications(app: GpumonApp) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []

    def notify(message: str, **kw: Any) -> None:
        seen.append((message, str(kw.get("severity", "information"))))

    app.notify = notify  # type: ignore[method-assign]
    return seen


def entries(action: str | None = None) -> list[dict[str, Any]]:
    return [e for e in audit.read_entries() if action is None or e["action"] == action]


async def test_restart_of_the_oom_job_confirms_runs_and_refills_its_gpu(
    oom_demo: HostMonitor, wait: Wait
) -> None:
    app = GpumonApp([oom_demo])
    async with app.run_test(size=(110, 40)) as pilot:
        await on_gpu(pilot, wait, app, OOM_GPU)
        await oom_seen(pilot, wait, oom_demo)
        assert oom_alerts(oom_demo), "the OOM alert is up before the restart"
        assert app.dashboard.check_action("restart_job", ()) is True
        screen = await open_plan(pilot, wait, app)
        plan = screen.plan
        assert plan is not None and plan.start_command
        text = shown(screen.query_one("#restart-plan"))
        assert "Restart drafter on demo" in text
        assert "state:      crashed: OOM on GPU 6" in text  # not nested in brackets
        assert "CUDA out of memory" in text  # the last alert
        assert "--restarted" in text and "gpumon-sim-job" in text  # the exact start command
        assert not screen.query_one("#confirm", Button).disabled

        await pilot.press("y")
        run = screen.run
        assert run is not None and app.session.runs.running("demo", "drafter") is run
        await wait(pilot, lambda: run.outcome is not None, timeout=30, what="the outcome")
        await pilot.pause()
        assert run.outcome is not None and run.outcome.status == "ok", run.outcome
        steps = shown(screen.query_one("#restart-steps"))
        for step in ("stop", "wait_free", "start", "verify"):
            assert f"✓ {step}" in steps, steps
        assert "GPUs free" in steps
        outcome = shown(screen.query_one("#restart-outcome"))
        assert outcome.startswith("OK: drafter restarted"), outcome
        # done: nothing left to cancel or confirm
        assert str(screen.query_one("#close", Button).label) == "Close (Esc)"
        assert not screen.query_one("#confirm").display
        assert not screen.query_one("#cancel-run").display

        def said() -> str:
            return " ".join(shown(screen.query_one("#restart-outcome")).split())

        # the launcher's PID is not on the GPUs: who is (in the outcome when the verify
        # step saw them, else the note once the monitor does); the lower step explained
        workers = f"PID {run.outcome.pid} running (its workers 15200-15202 hold GPUs 5-7)"
        started = f"started PID {run.outcome.pid} (its workers 15200-15202 hold GPUs 5-7)"
        step_back = re.compile(
            r"the step counter went back from \d+ to 65\d: resumed from the checkpoint at "
            r"step 650"
        )
        await wait(
            pilot,
            lambda: (workers in said() or started in said()) and step_back.search(said()),
            timeout=20,
            what="the workers and the step counter explained",
        )

        def gpu6_mib() -> int:
            sample = oom_demo.latest
            used = sample.gpus[OOM_GPU].memory_used_mib if sample else None
            return used or 0

        await wait(pilot, lambda: gpu6_mib() > 4096, timeout=20, what="GPU 6 refilling")
        await wait(pilot, lambda: not oom_alerts(oom_demo), timeout=5, what="alert cleared")
        assert oom_demo.workloads.jobs["drafter"].state is JobState.RUNNING
        [entry] = entries("restart")
        assert entry["outcome"] == "ok" and entry["job"] == "drafter"
        assert entry["commands"][-1] == plan.start_command


async def test_a_second_r_follows_the_running_restart(oom_demo: HostMonitor, wait: Wait) -> None:
    app = GpumonApp([oom_demo])
    async with app.run_test(size=(110, 40)) as pilot:
        await on_gpu(pilot, wait, app, OOM_GPU)
        await oom_seen(pilot, wait, oom_demo)
        screen = await open_plan(pilot, wait, app)
        await pilot.press("y")
        first = screen.run
        assert first is not None
        await pilot.press("escape")  # closes the view; the run goes on
        await wait(pilot, lambda: not isinstance(app.screen, JobActionScreen), what="closed")
        assert first.outcome is None
        await pilot.press("r")
        await wait(pilot, lambda: isinstance(app.screen, JobActionScreen), what="progress")
        again = cast(JobActionScreen, app.screen)
        assert again.run is first  # the same run, not a new plan
        assert again.query_one("#confirm").display is False
        await wait(pilot, lambda: first.outcome is not None, timeout=30, what="the outcome")
        await pilot.pause()
        assert "OK:" in shown(again.query_one("#restart-outcome"))
        assert [e["outcome"] for e in entries("restart")] == ["ok"]  # one restart only


async def test_esc_before_confirming_changes_nothing(oom_demo: HostMonitor, wait: Wait) -> None:
    app = GpumonApp([oom_demo])
    async with app.run_test(size=(110, 40)) as pilot:
        await on_gpu(pilot, wait, app, OOM_GPU)
        await oom_seen(pilot, wait, oom_demo)
        screen = await open_plan(pilot, wait, app)
        assert screen.plan is not None and screen.plan.refusal is None
        await pilot.press("escape")
        await wait(pilot, lambda: not isinstance(app.screen, JobActionScreen), what="closed")
        await pilot.pause(1.0)
        assert app.session.runs.last("demo", "drafter") is None
        assert oom_demo.workloads.jobs["drafter"].state is JobState.CRASHED
        assert oom_alerts(oom_demo)
        # shown and not confirmed: audited as cancelled, as a declined swap is
        [entry] = entries()
        assert (entry["action"], entry["outcome"], entry["job"]) == (
            "restart",
            "cancelled",
            "drafter",
        )
        assert entry["detail"] == "not confirmed: the dialog was closed"
        assert entry["commands"] == screen.plan.commands


async def test_a_plan_that_comes_after_the_dialog_closed_is_dropped(
    oom_demo: HostMonitor, wait: Wait
) -> None:
    """On a slow link the state is read for seconds, and Esc (or Enter on Cancel) closes
    the dialog meanwhile. Textual cancels the dialog's worker, but a plan that comes while
    the closed dialog's widgets are being removed was drawn on them and crashed the app
    (NoMatches '#restart-error', a tmux test under load). Here the closed dialog reads its
    plan again, from the demo: nothing is drawn, audited or raised."""
    app = GpumonApp([oom_demo])
    async with app.run_test(size=(110, 40)) as pilot:
        await on_gpu(pilot, wait, app, OOM_GPU)
        await oom_seen(pilot, wait, oom_demo)
        dialog = await open_plan(pilot, wait, app)
        await pilot.press("escape")
        await wait(pilot, lambda: not isinstance(app.screen, JobActionScreen), what="closed")
        assert not dialog.is_open
        [closed] = entries()  # shown and not confirmed: audited once, as cancelled
        late = dialog.load_plan()
        await wait(pilot, lambda: late.is_finished, timeout=15, what="the late plan")
        await pilot.pause(0.2)
        assert app.is_running and late.error is None, late.error
        assert entries() == [closed]
        screen = await open_plan(pilot, wait, app)  # the key still works
        assert screen.plan is not None and screen.plan.refusal is None


async def confirm_and_finish(pilot: Pilot[int], wait: Wait, screen: JobActionScreen) -> Outcome:
    await pilot.press("y")
    run = screen.run
    assert run is not None
    await wait(pilot, lambda: run.outcome is not None, timeout=30, what="the outcome")
    await pilot.pause()
    assert run.outcome is not None
    return run.outcome


async def test_start_cannot_be_cancelled_once_starting_nor_run_twice(
    oom_demo: HostMonitor, wait: Wait
) -> None:
    app = GpumonApp([oom_demo])
    async with app.run_test(size=(110, 40)) as pilot:
        await on_gpu(pilot, wait, app, OOM_GPU)
        await oom_seen(pilot, wait, oom_demo)
        screen = await open_plan(pilot, wait, app, "S")
        assert "Start drafter on demo" in shown(screen.query_one("#restart-plan"))
        await pilot.press("y")
        run = screen.run
        assert run is not None and run.plan.action == "start"
        await wait(pilot, lambda: run.step is Step.VERIFY, timeout=20, what="verify")
        await pilot.press("c")
        steps = shown(screen.query_one("#restart-steps"))
        assert "cannot cancel: drafter is being started" in steps
        await wait(pilot, lambda: run.outcome is not None, timeout=30, what="the outcome")
        assert run.outcome is not None and run.outcome.ok
        await pilot.press("escape")

        again = await open_plan(pilot, wait, app, "S")  # it runs now: start is refused
        assert again.plan is not None and again.plan.refusal
        assert "REFUSED:    drafter is already running" in shown(again.query_one("#restart-plan"))
        assert again.query_one("#confirm", Button).disabled
        await pilot.press("y", "escape")
        await wait(pilot, lambda: len(entries("start")) == 2, what="the refusal audited")
        assert [e["outcome"] for e in entries("start")] == ["ok", "refused"]


async def test_stop_start_and_a_restart_cancelled_while_waiting_for_the_gpus(
    oom_demo: HostMonitor, wait: Wait
) -> None:
    app = GpumonApp([oom_demo])
    async with app.run_test(size=(110, 40)) as pilot:
        await on_gpu(pilot, wait, app, OOM_GPU)
        await oom_seen(pilot, wait, oom_demo)
        screen = await open_plan(pilot, wait, app, "s")  # the crashed job: nothing to stop
        assert screen.plan is not None and screen.plan.action == "stop"
        assert "nothing to stop (not running)" in shown(screen.query_one("#restart-plan"))
        outcome = await confirm_and_finish(pilot, wait, screen)
        assert outcome.ok and outcome.message == "drafter stopped"
        await pilot.press("escape")
        assert (await confirm_and_finish(pilot, wait, await open_plan(pilot, wait, app, "S"))).ok
        await pilot.press("escape")

        # GPUs that never count as free (free_mib = 0: nothing is below 0 MiB; and no GPU
        # has the 16 TiB it needs free, which would do) keep a restart of the running
        # drafter waiting for free GPUs until it is cancelled.
        drafter = oom_demo.host.jobs[-1]
        never_free = dataclasses.replace(drafter, free_mib=0, need_mib=1 << 24)
        oom_demo.host = dataclasses.replace(oom_demo.host, jobs=(never_free,))
        screen = await open_plan(pilot, wait, app, "r")
        assert screen.plan is not None and screen.plan.pids
        assert f"PIDs {screen.plan.pids[0]}" in shown(screen.query_one("#restart-plan"))
        await pilot.press("y")
        run = screen.run
        assert run is not None
        await wait(pilot, lambda: run.step is Step.WAIT_FREE, timeout=20, what="wait_free")
        await pilot.press("c")
        await wait(pilot, lambda: run.outcome is not None, timeout=10, what="cancelled")
        assert run.outcome is not None and run.outcome.status == "cancelled"
        await pilot.pause()
        assert shown(screen.query_one("#restart-outcome")).startswith("CANCELLED:")
        assert "■ wait_free" in shown(screen.query_one("#restart-steps"))
        await pilot.press("escape")

        # Quitting while a restart waits: it is cancelled and audited, not left behind.
        screen = await open_plan(pilot, wait, app, "r")
        await pilot.press("y")
        last = screen.run
        assert last is not None and last is not run
        await wait(pilot, lambda: last.step is Step.WAIT_FREE, timeout=20, what="wait_free")
        await pilot.press("escape", "q")
    assert last.outcome is not None and last.outcome.status == "cancelled"
    assert [(e["action"], e["outcome"]) for e in entries()] == [
        ("stop", "ok"),
        ("start", "ok"),
        ("restart", "cancelled"),
        ("restart", "cancelled"),
    ]


async def test_a_failed_start_shows_why_and_the_log_tail_in_place(
    oom_demo: HostMonitor, wait: Wait
) -> None:
    drafter = oom_demo.host.jobs[-1]
    broken = dataclasses.replace(drafter, start="echo bad config: token_budget too big; exit 3")
    oom_demo.host = dataclasses.replace(oom_demo.host, jobs=(broken,))
    app = GpumonApp([oom_demo])
    async with app.run_test(size=(110, 40)) as pilot:
        await on_gpu(pilot, wait, app, OOM_GPU)
        await oom_seen(pilot, wait, oom_demo)
        outcome = await confirm_and_finish(pilot, wait, await open_plan(pilot, wait, app))
        assert outcome.status == "failed"
        screen = cast(JobActionScreen, app.screen)
        result = shown(screen.query_one("#restart-outcome"))
        assert result.startswith("FAILED: verify: drafter exited with code 3")
        assert "last lines:" in result and "bad config: token_budget too big" in result
        assert "✗ verify" in shown(screen.query_one("#restart-steps"))
        assert oom_alerts(oom_demo)  # still crashed: its alerts stay
        assert [e["outcome"] for e in entries("restart")] == ["failed"]


async def test_parameters_are_edited_in_place_and_bad_values_are_named(
    oom_demo: HostMonitor, wait: Wait
) -> None:
    drafter = oom_demo.host.jobs[-1]
    budget = dataclasses.replace(
        drafter, params={"budget": 32768}, start=f"{drafter.start} --budget {{budget}}"
    )
    oom_demo.host = dataclasses.replace(oom_demo.host, jobs=(budget,))
    app = GpumonApp([oom_demo])
    async with app.run_test(size=(110, 40)) as pilot:
        await on_gpu(pilot, wait, app, OOM_GPU)
        screen = await open_plan(pilot, wait, app)
        field = screen.query_one("#param-budget", Input)
        assert field.value == "32768"
        assert "--budget 32768" in shown(screen.query_one("#restart-plan"))
        field.value = "lots"
        await pilot.pause()
        error = shown(screen.query_one("#restart-error"))
        assert "parameter budget: expected an integer, got 'lots'" in error
        assert screen.query_one("#confirm", Button).disabled
        assert screen.check_action("confirm", ()) is None
        field.value = "4096"
        await pilot.pause()
        assert shown(screen.query_one("#restart-error")).strip() == ""
        plan_text = shown(screen.query_one("#restart-plan"))
        assert "--budget 4096" in plan_text and "default 32768" in plan_text
        assert not screen.query_one("#confirm", Button).disabled


async def test_closing_a_refused_dialog_says_when_the_audit_log_cannot_be_written(
    oom_demo: HostMonitor, wait: Wait, state_home: Path
) -> None:
    (state_home / "gpumon" / "audit.jsonl").mkdir(parents=True)  # a directory: unwritable

    def no_run(plan: ActionPlan) -> JobRun:
        raise AssertionError(f"a refused plan was run: {plan.title}")

    app = GpumonApp([oom_demo])
    async with app.run_test(size=(120, 50)) as pilot:
        await wait(pilot, lambda: oom_demo.latest is not None, what="a sample")
        seen = record_notifications(app)

        def told() -> list[tuple[str, str]]:
            return [(m, sev) for m, sev in seen if m.startswith("audit log not written: ")]

        target = JobTarget.from_monitor(oom_demo, read_only=True)
        dialog = JobActionScreen(target, oom_demo.host.jobs[-1], "restart", start_run=no_run)
        await app.push_screen(dialog)
        await wait(pilot, lambda: dialog.plan is not None, what="the restart plan")
        assert dialog.plan is not None and dialog.plan.refusal
        await pilot.press("escape")
        await wait(pilot, lambda: len(told()) == 1, what="the restart's audit failure told")
        swap_dialog = SwapScreen(oom_demo.host, oom_demo.transport, read_only=True)
        await app.push_screen(swap_dialog)
        await wait(pilot, lambda: swap_dialog.plan is not None, timeout=60, what="the swap plan")
        await pilot.press("escape")
        await wait(pilot, lambda: len(told()) == 2, what="the swap's audit failure told")
        assert {sev for _, sev in told()} == {"error"} and app.screen is not swap_dialog


async def test_job_keys_without_a_job_under_the_cursor_say_why_r_takes_the_incident(
    oom_demo: HostMonitor, wait: Wait
) -> None:
    app = GpumonApp([oom_demo])
    async with app.run_test(size=(110, 40)) as pilot:
        await on_gpu(pilot, wait, app, 0)  # GPU 0 belongs to no job
        await wait(pilot, lambda: can(app, "doctor"), what="connected")
        await oom_seen(pilot, wait, oom_demo)
        for action in ("restart_job", "stop_job", "start_job"):
            assert app.dashboard.check_action(action, ()) is True, action
        seen = record_notifications(app)
        await pilot.press("s")  # stop acts on the cursor's job only: it says why not
        assert not isinstance(app.screen, JobActionScreen)
        # (an incident's update, CT 201's jupyter joining the OOM, may toast meanwhile)
        said = [m for m, _ in seen if m.startswith("stop: ")]
        assert said and said[0].startswith("stop: GPU 0 runs no configured job"), seen
        await pilot.press("r")  # restart takes the incident's job: the crashed drafter
        await wait(pilot, lambda: isinstance(app.screen, JobActionScreen), what="the dialog")
        assert cast(JobActionScreen, app.screen).job.name == "drafter"


async def test_a_read_only_host_hides_its_mutating_keys(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    monitor = demo_monitor(demo_time=70.0)
    monitor.host = dataclasses.replace(monitor.host, read_only=True)
    app = GpumonApp([monitor])
    async with app.run_test(size=(110, 40)) as pilot:
        await on_gpu(pilot, wait, app, OOM_GPU)
        await wait(pilot, lambda: can(app, "doctor"), what="connected")
        for action in ("restart_job", "stop_job", "start_job", "swap_torch"):
            assert app.dashboard.check_action(action, ()) is False, action
        seen = record_notifications(app)
        app.dashboard.action_stop_job()
        assert seen == [("stop refused: host demo is read_only in the config", "warning")]
        assert [e["outcome"] for e in entries("stop")] == ["refused"]


async def palette_titles(pilot: Pilot[int], wait: Wait, app: GpumonApp, query: str) -> list[str]:
    options = await search_palette(pilot, query)  # every provider answered
    found = [title_of(options.get_option_at_index(i)) for i in range(options.option_count)]
    await pilot.press("escape")
    return [t for t in found if t is not None]  # each title without its help line


async def test_read_only_hides_every_key_that_changes_the_machine(
    oom_demo: HostMonitor, wait: Wait
) -> None:
    app = GpumonApp([oom_demo], read_only=True)
    async with app.run_test(size=(110, 40)) as pilot:
        await on_gpu(pilot, wait, app, OOM_GPU)
        await wait(pilot, lambda: can(app, "doctor"), what="connected")
        keys = app.screen.active_bindings
        assert not {"r", "s", "S", "w"} & set(keys)
        assert keys["d"].enabled
        hidden = {a.name for a in ACTIONS if app.dashboard.action_state(a) is False}
        dangerous = {a.name for a in ACTIONS if a.dangerous}
        assert hidden == dangerous | {a.name for a in ACTIONS if a.replay}  # exactly these
        assert await palette_titles(pilot, wait, app, "job") == []
        assert not any("torch" in t.lower() for t in await palette_titles(pilot, wait, app, "swap"))
        assert any("Doctor" in t for t in await palette_titles(pilot, wait, app, "doctor"))

        seen = record_notifications(app)
        app.dashboard.action_restart_job()
        app.dashboard.action_swap_torch()
        await pilot.pause()
        assert not isinstance(app.screen, (JobActionScreen, SwapScreen))
        assert ("restart refused: gpumon runs with --read-only", "warning") in seen
        assert ("swap-torch refused: gpumon runs with --read-only", "warning") in seen
        assert [e["outcome"] for e in entries()] == ["refused", "refused"]

        await pilot.press("enter")  # nor on the detail view
        await wait(pilot, lambda: isinstance(app.screen, DetailScreen), what="the detail view")
        assert not {"r", "s", "S", "w"} & set(app.screen.active_bindings)
        assert await palette_titles(pilot, wait, app, "job") == []
        await pilot.press("escape")

        await pilot.press("d")  # the doctor only reads: still there
        await wait(pilot, lambda: isinstance(app.screen, DoctorScreen), what="the doctor")
        doctor = cast(DoctorScreen, app.screen)
        await wait(pilot, lambda: doctor.report is not None, timeout=60, what="the checks")


async def test_the_detail_view_keeps_the_dashboard_keys_for_what_is_under_the_cursor(
    oom_demo: HostMonitor, wait: Wait, key_actions: KeyActions
) -> None:
    """The detail view shares the dashboard's keys (as the table says): they act on the
    dashboard behind it, on the GPU on show and its job."""
    app = GpumonApp([oom_demo])
    async with app.run_test(size=(110, 40)) as pilot:
        await on_gpu(pilot, wait, app, OOM_GPU)
        await oom_seen(pilot, wait, oom_demo)
        await pilot.press("enter")
        await wait(pilot, lambda: isinstance(app.screen, DetailScreen), what="the detail view")
        detail = app.screen
        shared = {a.name for a in ACTIONS if a.in_detail and not a.replay}
        assert shared <= key_actions(detail)
        assert detail.active_bindings["r"].enabled
        titles = await palette_titles(pilot, wait, app, "job drafter")
        assert {"Restart job drafter", "Stop job drafter", "Start job drafter"} <= set(titles)
        assert "Open GPU detail" not in await palette_titles(pilot, wait, app, "detail")
        await pilot.press("p")
        assert app.dashboard.paused  # the dashboard's pause, from the detail view
        await pilot.press("p", "r")
        await wait(pilot, lambda: isinstance(app.screen, JobActionScreen), what="the dialog")
        dialog = cast(JobActionScreen, app.screen)
        assert dialog.job.name == "drafter" and dialog.action == "restart"
        await pilot.press("escape")
        await wait(pilot, lambda: app.screen is detail, what="back on the detail view")
        await pilot.press("escape")
        await wait(pilot, lambda: app.screen is app.dashboard, what="back on the dashboard")


async def test_the_palette_offers_the_job_actions(oom_demo: HostMonitor, wait: Wait) -> None:
    app = GpumonApp([oom_demo])
    async with app.run_test(size=(110, 40)) as pilot:
        await on_gpu(pilot, wait, app, OOM_GPU)
        await wait(pilot, lambda: can(app, "doctor"), what="connected")
        titles = await palette_titles(pilot, wait, app, "job drafter")
        assert {"Restart job drafter", "Stop job drafter", "Start job drafter"} <= set(titles)
        await run_from_palette(pilot, "Restart job drafter", "restart job")
        await wait(pilot, lambda: isinstance(app.screen, JobActionScreen), what="the dialog")
        screen = cast(JobActionScreen, app.screen)
        await wait(pilot, lambda: screen.plan is not None, what="the plan")
        assert screen.plan is not None and screen.plan.action == "restart"


async def test_doctor_shows_the_checks_and_reruns(
    oom_demo: HostMonitor, wait: Wait, key_actions: KeyActions
) -> None:
    app = GpumonApp([oom_demo])
    async with app.run_test(size=(120, 50)) as pilot:
        await on_gpu(pilot, wait, app, 0)
        await wait(pilot, lambda: can(app, "doctor"), what="connected")
        await pilot.press("d")
        await wait(pilot, lambda: isinstance(app.screen, DoctorScreen), what="the doctor")
        screen = cast(DoctorScreen, app.screen)
        assert "restart_job" not in key_actions(screen)  # no dashboard keys under a dialog
        await wait(pilot, lambda: screen.report is not None, timeout=60, what="the checks")
        await pilot.pause()
        report = screen.report
        assert report is not None
        torch = report.check("torch")
        # the demo's simulated venv: a torch cu128 the doctor can read
        assert torch is not None and torch.status == "ok" and "2.11.0+cu128" in torch.evidence
        table = shown(screen.query_one("#doctor-table"))
        row = next(line for line in table.splitlines() if " torch " in f" {line} ")
        assert torch.status in row and torch.evidence[:30] in row
        status = shown(screen.query_one("#doctor-status"))
        assert f"python {report.python}" in status
        first = report
        await pilot.press("r")
        await wait(pilot, lambda: screen.report is not first, timeout=60, what="a re-run")
        await pilot.press("escape")
        await wait(pilot, lambda: not isinstance(app.screen, DoctorScreen), what="back")


async def swap_demo_to(
    pilot: Pilot[int], wait: Wait, app: GpumonApp, variant: str, cuda: str
) -> None:
    """``w``, choose ``variant``, check the plan names it (never torch==0.0.0) and Force is
    off, ``y``, see it swapped and verified (torch.version.cuda ``cuda``), close."""
    await pilot.press("w")
    await wait(pilot, lambda: isinstance(app.screen, SwapScreen), what="the dialog")
    screen = cast(SwapScreen, app.screen)
    await wait(pilot, lambda: screen.plan is not None, timeout=60, what="the plan")
    if screen.variant != variant:
        screen.query_one("#swap-variant", Select).value = variant
        await wait(pilot, lambda: screen.plan is None, timeout=10, what="replanning")
    await wait(pilot, lambda: screen.can_confirm, timeout=60, what="a plan to confirm")
    text = shown(screen.query_one("#swap-plan"))
    assert f"torch==2.11.0+{variant}" in text and "0.0.0" not in text, text
    # the simulator's index is a directory read as pip reads it: no raw Python error
    assert "could not be read" not in text and "Error" not in text, text
    force = screen.query_one("#swap-force", Checkbox)
    assert not force.value and "X" not in force.render().plain
    await pilot.press("y")
    await wait(pilot, lambda: screen.outcome is not None, timeout=120, what="the swap")
    outcome = screen.outcome
    assert outcome is not None
    assert outcome.message == f"swapped to 2.11.0+{variant}, verified", outcome.message
    assert cuda in shown(screen.query_one("#swap-plan"))  # the verification
    # done: nothing left to swap or cancel
    assert not screen.query_one("#confirm").display
    assert str(screen.query_one("#close", Button).label) == "Close (Esc)"
    await pilot.press("escape")
    await wait(pilot, lambda: not isinstance(app.screen, SwapScreen), what="closed")


async def test_w_on_the_demo_swaps_its_simulated_venv_to_cu130_and_back(
    oom_demo: HostMonitor, wait: Wait
) -> None:
    """The demo has a venv of its own (torch 2.11.0+cu128, stand-in wheels from the
    simulator's local index): the plan names the real target, never torch==0.0.0, and the
    swap runs, verified, there and back; gpumon's own environment is not touched."""
    python = oom_demo.host.python
    assert python is not None and "gpumon-sim-" in python and python != sys.executable
    app = GpumonApp([oom_demo])
    async with app.run_test(size=(120, 50)) as pilot:
        await on_gpu(pilot, wait, app, 0)
        await wait(pilot, lambda: can(app, "swap_torch"), what="connected")
        for variant, cuda in (("cu130", "13.0"), ("cu128", "12.8")):
            await swap_demo_to(pilot, wait, app, variant, cuda)
        await pilot.press("d")  # the doctor reads the same venv
        await wait(pilot, lambda: isinstance(app.screen, DoctorScreen), what="the doctor")
        doctor = cast(DoctorScreen, app.screen)
        await wait(pilot, lambda: doctor.report is not None, timeout=60, what="the checks")
        assert "2.11.0+cu128" in shown(doctor.query_one("#doctor-table"))
    assert [e["outcome"] for e in entries("swap-torch")] == ["started", "swapped"] * 2


async def test_torch_swap_plan_is_refused_when_read_only(oom_demo: HostMonitor, wait: Wait) -> None:
    app = GpumonApp([oom_demo])
    async with app.run_test(size=(120, 50)) as pilot:
        await on_gpu(pilot, wait, app, 0)
        await wait(pilot, lambda: oom_demo.latest is not None, what="a sample")
        screen = SwapScreen(oom_demo.host, oom_demo.transport, read_only=True)
        await app.push_screen(screen)
        await wait(pilot, lambda: screen.plan is not None, timeout=60, what="the plan")
        await pilot.pause()
        assert "refused: demo is read-only" in shown(screen.query_one("#swap-plan"))
        assert screen.query_one("#confirm", Button).disabled
        await pilot.press("escape")
        await wait(pilot, lambda: not isinstance(app.screen, SwapScreen), what="closed")
        assert "read-only" in entries("swap-torch")[0]["detail"]


async def test_a_confirmed_swap_streams_its_output_and_ends_in_place(
    oom_demo: HostMonitor, wait: Wait, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo refuses every swap (it has no venv of its own): the plan's refusals are
    lifted and execute_swap stands in, reporting what the real one reports."""
    ran: list[SwapPlan] = []
    release = asyncio.Event()

    async def runnable_plan(*args: Any, **kwargs: Any) -> SwapPlan:
        plan = await plan_swap(*args, **kwargs)
        return dataclasses.replace(plan, refusals=(), forced=(), noop=False)

    async def execute(plan: SwapPlan, *_: Any, on_event: OnEvent, **__: Any) -> SwapOutcome:
        ran.append(plan)
        on_event(SwapEvent("step", "freeze", "312 packages saved", "ok"))
        on_event(SwapEvent("step", "install", "install torch 2.11.0+cu130", "running"))
        for n in range(3):
            on_event(SwapEvent("line", "install", f"Downloading torch part {n}"))
        await release.wait()
        on_event(SwapEvent("step", "install", "done", "ok"))
        on_event(SwapEvent("step", "verify", "torch 2.11.0+cu130, CUDA 13.0", "ok"))
        checks = (Check("torch.version.cuda", "ok", "13.0 as expected"),)
        return SwapOutcome("swapped", "swapped to 2.11.0+cu130, verified", verification=checks)

    monkeypatch.setattr(swap, "plan_swap", runnable_plan)
    monkeypatch.setattr(swap, "execute_swap", execute)
    app = GpumonApp([oom_demo])
    async with app.run_test(size=(120, 50)) as pilot:
        await on_gpu(pilot, wait, app, 0)
        await wait(pilot, lambda: can(app, "swap_torch"), what="connected")
        await pilot.press("w")
        await wait(pilot, lambda: isinstance(app.screen, SwapScreen), what="the swap dialog")
        screen = cast(SwapScreen, app.screen)
        await wait(pilot, lambda: screen.can_confirm, timeout=60, what="a runnable plan")
        await pilot.press("y")
        await wait(pilot, lambda: screen.running, what="the swap running")
        await pilot.pause()
        log = screen.query_one("#swap-log", Log)
        assert list(log.lines) == [f"Downloading torch part {n}" for n in range(3)]
        steps = shown(screen.query_one("#swap-steps"))
        assert "✓ freeze" in steps and "▶ install" in steps
        await pilot.press("escape")  # not while it runs
        assert app.screen is screen
        release.set()
        await wait(pilot, lambda: screen.outcome is not None, what="the outcome")
        await pilot.pause()
        assert len(ran) == 1
        assert shown(screen.query_one("#swap-outcome")).startswith(
            "SWAPPED: swapped to 2.11.0+cu130, verified"
        )
        assert "13.0 as expected" in shown(screen.query_one("#swap-plan"))  # verification
        assert screen.query_one("#confirm", Button).disabled
        await pilot.press("escape")
        await wait(pilot, lambda: app.screen is not screen, what="closed")
        assert entries("swap-torch") == []  # a run audits itself (here: the stand-in)


async def test_esc_skips_the_evidence_step_and_the_restart_goes_on(
    oom_demo: HostMonitor, wait: Wait
) -> None:
    app = GpumonApp([oom_demo])
    async with app.run_test(size=(110, 40)) as pilot:
        await on_gpu(pilot, wait, app, OOM_GPU)
        await oom_seen(pilot, wait, oom_demo)
        await confirm_and_finish(pilot, wait, await open_plan(pilot, wait, app, "S"))
        await pilot.press("escape")
        # The drafter runs again. Its evidence is kept as a py-spy stuck on a process in
        # the kernel keeps it: never, until Esc.
        hung = asyncio.Event()
        runs = app.runtime.session.runs
        kept: list[tuple[int, ...]] = []

        async def stuck(
            target: JobTarget, job: Any, pids: tuple[int, ...], *_: Any, **__: Any
        ) -> Any:
            kept.append(pids)
            await hung.wait()

        runs.evidence = stuck
        screen = await open_plan(pilot, wait, app, "r")
        assert "evidence:" in shown(screen.query_one("#restart-plan")), "a step of the plan"
        assert screen.plan is not None
        [row] = [r for r in screen.plan.rows() if r.step is Step.EVIDENCE]
        assert row.text.endswith("at most 15 s (Esc skips it)"), row.text
        await pilot.press("y")
        run = screen.run
        assert run is not None
        await wait(pilot, lambda: bool(kept), timeout=20, what="the evidence step")
        await pilot.pause()
        steps = shown(screen.query_one("#restart-steps"))
        assert "keeping evidence of PIDs" in steps and "Esc: skip the rest" in steps
        await pilot.press("escape")
        await wait(pilot, lambda: run.outcome is not None, timeout=30, what="the outcome")
        assert run.outcome is not None and run.outcome.ok, run.outcome
        assert isinstance(app.screen, JobActionScreen)  # Esc skipped; it did not close
        said = dict(run.history)
        assert said[Step.EVIDENCE].startswith("skipped after")
        assert [s for s, _ in run.history].index(Step.STOP) > 0
    assert "bundle" not in entries("restart")[-1]


async def test_r_on_the_stalled_demo_names_the_rank_in_its_evidence_step(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    """Issue 37 point 5: the stall demo after its watchdog's timeout (90 s), whose ranks
    dumped their flight recorders (the real capture's): r's evidence step says the rank
    that never arrived, the stalled alert says it too, and the restart goes on."""
    monitor = demo_monitor(frozen=False, demo_time=95.0, interval=0.5, scenario="stall")
    app = GpumonApp([monitor])
    async with app.run_test(size=(120, 40)) as pilot:
        await on_gpu(pilot, wait, app, 6)

        def stalled() -> bool:
            return any(a.kind == "job_stalled" for a in monitor.alerts.active())

        await wait(pilot, stalled, timeout=60, what="job_stalled")
        screen = await open_plan(pilot, wait, app, "r")
        outcome = await confirm_and_finish(pilot, wait, screen)
        assert outcome.ok, outcome
        run = screen.run
        assert run is not None
        named = "drafter stalled: rank 2 (GPU 7) never entered all_reduce #17 (ranks 0, 1 waiting"
        said = [m for s, m in run.history if s is Step.EVIDENCE]
        assert any(m.startswith(named) for m in said), said
        assert named in shown(screen.query_one("#restart-steps"))
        (alert,) = [a for a in monitor.alerts.history() if a.kind == "job_stalled"]
        assert alert.peak_message.startswith(named)
        assert alert.facts.collective is not None
