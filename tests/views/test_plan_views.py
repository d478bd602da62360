"""The dialogs' plan and progress views styled from the plans' rows: each row's level picks
its colour, the failing step comes from the outcome, nothing is parsed back from text."""

from __future__ import annotations

import io
from dataclasses import replace

from rich.console import Console, RenderableType
from rich.style import Style

from gpumon.backends.actions import (
    ActionPlan,
    JobRecord,
    JobStatus,
    Outcome,
    Step,
    merge_params,
    render_command,
)
from gpumon.backends.config import JobConfig
from gpumon.backends.torchenv import SwapPlan
from gpumon.backends.torchenv.swap_plan import Refusal
from gpumon.backends.torchenv.swap_steps import SwapCommand
from gpumon.themes import GPUMON_DARK
from gpumon.tui.screens import job_action, swap
from gpumon.tui.views import Palette, Role

PAL = Palette.from_theme(GPUMON_DARK)


def styled(renderable: RenderableType, width: int = 120) -> list[tuple[str, Style]]:
    """The renderable's non-blank segments as (text, style)."""
    console = Console(file=io.StringIO(), width=width, color_system="truecolor")
    segments = console.render(renderable, console.options)
    return [(s.text, s.style or Style.null()) for s in segments if s.text.strip()]


def style_of(renderable: RenderableType, needle: str) -> Style:
    return next(style for text, style in styled(renderable) if needle in text)


def restart_plan(**kw: object) -> ActionPlan:
    job = JobConfig(name="drafter", start="train --budget {budget}", params={"budget": 8})
    record = JobRecord("drafter", 100, 100, "setsid", "/l")
    base: dict[str, object] = {
        "action": "restart",
        "host": "ct200",
        "host_label": "ssh root@pve1",
        "job": job,
        "params": merge_params(job),
        "start_command": render_command(job.start or "", merge_params(job)),
        "stop_command": None,
        "status": JobStatus("drafter", record, alive=True, pids=(100,), log_path="/l"),
        "last_alert": "GPU 6: CUDA out of memory",
        "refusal": "read-only: the host is read_only",
    }
    return ActionPlan(**{**base, **kw})  # type: ignore[arg-type]


def test_restart_plan_view_colours_rows_by_level() -> None:
    view = job_action.plan_view(restart_plan(), PAL)
    assert style_of(view, "read-only: the host") == PAL.text(Role.CRITICAL)
    assert style_of(view, "GPU 6: CUDA out of memory") == PAL.text(Role.WARNING)
    assert style_of(view, "train --budget 8") == Style.null()
    assert style_of(view, "REFUSED:") == PAL.text(Role.MUTED)
    assert style_of(view, "Restart drafter on ct200").bold
    lines = [t for t, _ in styled(view)]
    assert "  wait_free:  " in lines  # the label column is as wide as "  last alert: "


def test_a_step_that_failed_before_saying_anything_is_the_failed_one() -> None:
    steps = (Step.STOP, Step.WAIT_FREE, Step.START, Step.VERIFY)
    history = [(Step.STOP, "stopped"), (Step.WAIT_FREE, "GPUs free")]
    failed = Outcome("failed", "cannot start drafter: workdir missing", step=Step.START)
    states = job_action.step_states(steps, history, failed)
    assert [(s, state) for s, state, _ in states] == [
        (Step.STOP, "done"),
        (Step.WAIT_FREE, "done"),
        (Step.START, "failed"),
        (Step.VERIFY, "pending"),
    ]
    unknown = replace(failed, step=None)  # no step known: the last one that spoke
    assert job_action.step_states(steps, history, unknown)[1][1] == "failed"


def swap_plan(**kw: object) -> SwapPlan:
    base: dict[str, object] = {
        "host": "ct200",
        "python": "/root/venv/bin/python",
        "venv": "/root/venv",
        "tool": "uv",
        "current": "2.11.0+cu128",
        "current_variant": "cu128",
        "target": "2.11.0+cu126",
        "variant": "cu126",
        "cuda": "12.6",
        "index_url": "https://download.pytorch.org/whl/cu126",
        "previous_index_url": "https://download.pytorch.org/whl/cu128",
        "pins": ("torch==2.11.0+cu126",),
        "companions": (),
        "uninstall": (),
        "steps": (SwapCommand("install", "install torch", ("uv", "pip", "install", "torch")),),
        "freeze_path": "/root/venv/.gpumon/freeze.txt",
        "warnings": ("compile caches go cold",),
    }
    return SwapPlan(**{**base, **kw})  # type: ignore[arg-type]


def test_swap_plan_text_colours_rows_and_names_the_force_checkbox() -> None:
    no_code = Refusal("cu126 has no code for sm_120", overridable=True)
    refused = swap.plan_text(swap_plan(refusals=(no_code,)), PAL)
    assert style_of(refused, "refused: cu126 has no code") == PAL.text(Role.CRITICAL)
    assert style_of(refused, "warning: compile caches") == PAL.text(Role.WARNING)
    assert style_of(refused, "1. uv pip install torch") == Style.null()
    forced = swap.plan_text(swap_plan(forced=(no_code,)), PAL)
    texts = [t.strip() for t, _ in styled(forced)]
    assert "Force overrides: cu126 has no code for sm_120" in texts  # the dialog's checkbox
    assert not any(t.startswith("--force") for t in texts)
    assert style_of(forced, "Force overrides") == PAL.text(Role.WARNING)
    noop = swap.plan_text(swap_plan(noop=True, target="2.11.0+cu128"), PAL)
    assert style_of(noop, "nothing to do") == Style.null()  # good news stays calm
