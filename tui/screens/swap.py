"""The torch swap dialog: choose a CUDA variant (and a version), see the plan, run it.

The plan (``plan_swap``, which probes the host and changes nothing) is made again whenever
the variant, version or Force changes. It shows the exact commands, the companions that
move with torch, who uses the venv and every refusal; Force is offered only when a refusal
can be overridden, and a refused plan cannot be confirmed. Confirm runs ``execute_swap``:
the install's output streams into the log, step states above it, the outcome (and its
verification) in place at the end. Closing without running audits the plan as refused or
declined (``record_refusal``). The dialog cannot be closed while the swap runs.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from rich.console import Group
from rich.padding import Padding
from rich.style import Style
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.content import Content
from textual.notifications import SeverityLevel
from textual.timer import Timer
from textual.widgets import Button, Checkbox, Input, Label, Log, Select

from gpumon.backends.config import HostConfig
from gpumon.backends.torchenv import (
    FORCED,
    VARIANT_NAMES,
    ProbeError,
    SwapEvent,
    SwapOutcome,
    SwapPlan,
    execute_swap,
    plan_swap,
    record_refusal,
    swap_row_text,
)
from gpumon.backends.transport import Transport, TransportError
from gpumon.tui.screens.dialog import Dialog, level_style, outcome_line
from gpumon.tui.screens.doctor import checks_table
from gpumon.tui.views import Palette, Role

DEFAULT_VARIANT = "cu130"
REPLAN_DELAY_S = 0.8  # after the last keystroke in the version field
STEP_MARKS = {"running": "▶", "ok": "✓", "failed": "✗"}
STEP_ROLES = {"running": Role.NORMAL, "ok": Role.OK, "failed": Role.CRITICAL}


def plan_text(plan: SwapPlan, pal: Palette) -> Group:
    """The plan's title, then its rows in their level's colour (refusals critical,
    warnings and what Force overrides in the warning colour), each wrapped line indented
    under its own start."""
    lines = [Padding(Text(plan.title), 0)]
    for row in plan.rows():
        if row.label == FORCED:
            row = dataclasses.replace(row, label="Force overrides")  # the dialog's checkbox
        indent, body = swap_row_text(row)
        lines.append(Padding(Text(body, level_style(pal, row.level)), (0, 0, 0, indent)))
    return Group(*lines)


class TickBox(Checkbox):
    """A checkbox whose box is empty when off. Textual draws its X either way and only the
    colour tells them apart, which reads as ticked in 256 colours, with NO_COLOR or to a
    colour-blind eye: "Force" looked on when it was off."""

    @property
    def _button(self) -> Content:
        self.BUTTON_INNER = "X" if self.value else " "
        return super()._button


class SwapScreen(Dialog):
    NAME = "swap"
    DEFAULT_CSS = """
    #swap-box { width: 100%; height: 100%; }
    #swap-form { height: auto; }
    #swap-form Label { padding: 0 1 0 0; }
    #swap-variant { width: 12; margin-right: 2; }
    #swap-version { width: 16; margin-right: 2; }
    #swap-plan-box { height: 1fr; min-height: 5; }
    #swap-steps, #swap-outcome { height: auto; display: none; }
    #swap-log { height: 1fr; min-height: 4; border: round $panel; display: none; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "confirm", "Swap"),
        Binding("escape", "close", "Close"),
    ]

    def __init__(
        self,
        host: HostConfig,
        transport: Transport,
        *,
        read_only: bool = False,
        variant: str | None = None,
    ) -> None:
        """``variant``: the one chosen first (an incident's swap back), else ``cu130``."""
        super().__init__()
        self.host, self.transport, self.read_only = host, transport, read_only
        self.first_variant = variant if variant in VARIANT_NAMES else DEFAULT_VARIANT
        self.plan: SwapPlan | None = None
        self.planning = False
        self.running = False
        self.outcome: SwapOutcome | None = None
        self.error: str | None = None
        self.steps: dict[str, tuple[str, str]] = {}  # step key -> (state, text)
        self._replan_timer: Timer | None = None
        self._plan_request = 0

    def compose(self) -> ComposeResult:
        with self.frame(f"torch swap on {self.host.name}"):
            with Horizontal(id="swap-form"):
                yield Label("variant", markup=False)
                yield Select(
                    [(v, v) for v in VARIANT_NAMES],
                    value=self.first_variant,
                    allow_blank=False,
                    id="swap-variant",
                    compact=True,
                )
                yield Label("version", markup=False)
                yield Input(placeholder="installed", id="swap-version", compact=True)
                yield TickBox("Force", id="swap-force", disabled=True, compact=True)
            with VerticalScroll(id="swap-plan-box"):
                yield self.static("plan")
            yield self.static("steps")
            yield Log(id="swap-log", max_lines=2000)
            yield self.static("outcome")
            with self.button_row():
                yield Button("Swap (y)", id="confirm", variant="error", disabled=True, compact=True)
                yield self.close_button("Cancel")

    def on_mount(self) -> None:
        self.make_plan()

    @property
    def variant(self) -> str:
        value = self.query_one("#swap-variant", Select).value
        return value if isinstance(value, str) else DEFAULT_VARIANT

    # --- the plan -----------------------------------------------------------------------
    @work(exclusive=True, group="plan")
    async def make_plan(self) -> None:
        if self.running or self.outcome is not None:
            return
        # A new choice: the plan on show no longer applies and cannot be confirmed.
        self._plan_request += 1
        request = self._plan_request
        self.plan, self.planning, self.error = None, True, None
        self._sync()
        version = self.query_one("#swap-version", Input).value.strip() or None
        force = self.query_one("#swap-force", Checkbox).value
        self.part("plan").update(
            Text(f"probing {self.host.name} for a plan to {self.variant} ...", Style(italic=True))
        )
        try:
            plan = await plan_swap(
                self.transport,
                self.host,
                self.variant,
                version=version,
                force=force,
                read_only=self.read_only,
            )
        except (TransportError, ProbeError, OSError) as e:
            if not self.is_open:  # closed while the probe ran: nothing to show it on
                return
            self.plan, self.error = None, f"cannot plan the swap: {e}"
            self.part("plan").update(Text(self.error, self.palette.text(Role.CRITICAL)))
        else:
            if not self.is_open:
                return
            self.plan = plan
            self.part("plan").update(plan_text(plan, self.palette))
        finally:
            if request == self._plan_request:  # not replaced by a newer request meanwhile
                self.planning = False
        self._sync()

    def _sync(self) -> None:
        """Buttons and Force follow the plan and the run."""
        plan = self.plan
        force = self.query_one("#swap-force", Checkbox)
        overridable = plan is not None and (
            any(r.overridable for r in plan.refusals) or bool(plan.forced)
        )
        force.disabled = self.running or self.outcome is not None or not overridable
        confirm = self.query_one("#confirm", Button)
        confirm.disabled = not self.can_confirm
        if self.outcome is not None:  # done: nothing to swap or cancel any more
            confirm.display = False
            self.offer_close()
        for widget in (self.query_one("#swap-variant"), self.query_one("#swap-version")):
            widget.disabled = self.running or self.outcome is not None
        self.refresh_bindings()

    @property
    def can_confirm(self) -> bool:
        plan = self.plan
        busy = self.planning or self.running or self.outcome is not None
        return plan is not None and plan.ok and not busy

    @on(Select.Changed, "#swap-variant")
    @on(Checkbox.Changed, "#swap-force")
    @on(Input.Submitted, "#swap-version")
    def _replan_now(self) -> None:
        if self._replan_timer is not None:
            self._replan_timer.stop()
        self.make_plan()

    @on(Input.Changed, "#swap-version")
    def _replan_soon(self) -> None:
        if self._replan_timer is not None:
            self._replan_timer.stop()
        self._replan_timer = self.set_timer(REPLAN_DELAY_S, self.make_plan)

    # --- run ----------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "confirm":
            if self.running or self.outcome is not None:
                return False
            return True if self.can_confirm else None
        return True

    @on(Button.Pressed, "#confirm")
    def action_confirm(self) -> None:
        if self.can_confirm and self.plan is not None:
            self.run_swap(self.plan)

    @work(exclusive=True, group="swap")
    async def run_swap(self, plan: SwapPlan) -> None:
        self.running = True
        self._sync()
        self.query_one("#swap-log", Log).display = True
        try:
            self.outcome = await execute_swap(plan, self.transport, self.host, on_event=self._event)
        finally:
            self.running = False
        self._show_outcome(self.outcome)
        self._sync()

    def _event(self, event: SwapEvent) -> None:
        """Called on the event loop by execute_swap: update the widgets, nothing more."""
        if event.kind == "line":
            self.query_one("#swap-log", Log).write_line(event.text)
            return
        self.steps[event.step] = (event.state or "running", event.text)
        pal = self.palette
        text = Text()
        for key, (state, what) in self.steps.items():
            text.append(
                f" {STEP_MARKS.get(state, '·')} {key:<16}", pal.text(STEP_ROLES.get(state, Role.NA))
            )
            text.append(f" {what}\n")
        self.show("steps", text, visible=True)

    def _show_outcome(self, outcome: SwapOutcome) -> None:
        pal = self.palette
        text = outcome_line(outcome.result, outcome.level, outcome.message, outcome.duration_s, pal)
        if outcome.audit_error:
            text.append(f"\naudit log not written: {outcome.audit_error}", pal.text(Role.CRITICAL))
        self.show("outcome", text, visible=True)
        if outcome.verification:
            self.part("plan").update(checks_table(outcome.verification, pal))
        severity: SeverityLevel = "information" if outcome.result == "swapped" else "error"
        self.notify(outcome.message, title=f"torch swap on {self.host.name}", severity=severity)

    def before_close(self) -> bool:
        if self.running:
            self.notify(
                "the swap is running: it cannot be stopped halfway; it rolls back by itself "
                "if a step fails",
                title="Swap running",
                severity="warning",
            )
            return False
        plan = self.plan
        if self.outcome is None and plan is not None and not plan.noop:
            detail = None if plan.refusals else "not confirmed: declined"
            try:
                record_refusal(plan, detail)
            except OSError as e:
                self.audit_not_written(str(e))
        return True
