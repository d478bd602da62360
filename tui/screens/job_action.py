"""The restart / stop / start dialog of a job: the plan to confirm, then the run's progress.

Opened by the dashboard's ``JobActions`` (``r`` / ``s`` / ``S``). First it reads the job
on the target (``make_plan``) and shows exactly what will happen: state, last alert, an
input per parameter (an edit re-renders the plan; a bad value shows its ParamError in
place), the commands and PIDs. ``y`` or the Confirm button starts the run through
``start_run`` (the app's: one run per job, in the shared registry) and the dialog becomes
the run's progress view; ``c`` cancels until the start step (after that the refusal says
why), Esc closes the view and the run goes on (``r`` again shows it). Closing the plan
without confirming it is audited as "cancelled".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

from rich.console import Group
from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.timer import Timer
from textual.widgets import Button, Input, Label

from gpumon.backends.actions import (
    Action,
    ActionPlan,
    Blocker,
    JobError,
    JobRun,
    JobTarget,
    Outcome,
    ParamError,
    Step,
    format_value,
    make_plan,
    record_not_confirmed,
)
from gpumon.backends.config import JobConfig
from gpumon.backends.transport import TransportError
from gpumon.tui.screens.dialog import Dialog, level_style, outcome_line
from gpumon.tui.views import Palette, Role

StartRun = Callable[[ActionPlan], JobRun]
# ``K`` in the dialog: stop another container's process in the way (the dashboard's kill)
StopHolder = Callable[[Blocker], None]
CAUSE_POLL_S = 1.0  # what stands in the way is read again this often while the plan shows
# After a success, what the monitor saw of the job since (its workers, its step counter)
Explain = Callable[[Outcome], str | None]
NOTE_POLL_S, NOTE_POLLS = 1.0, 60  # ... looked at every second for a minute
LABEL_COLUMN = 14  # "  last alert: ": the widest label, then the texts wrap under themselves
MARKS = {"done": "✓", "running": "▶", "failed": "✗", "cancelled": "■", "pending": "·"}
ROLES = {
    "done": Role.OK,
    "running": Role.NORMAL,
    "failed": Role.CRITICAL,
    "cancelled": Role.WARNING,
    "pending": Role.MUTED,
}


def step_states(
    steps: Sequence[Step], history: Sequence[tuple[Step, str]], outcome: Outcome | None
) -> list[tuple[Step, str, str]]:
    """(step, state, its last message) for each step of a run, from its progress history.
    States: pending, running, done, failed, cancelled."""
    said: dict[Step, str] = {}
    current: Step | None = None
    for step, message in history:
        if step is not Step.DONE:
            said[step], current = message, step
    if outcome is not None and outcome.step in steps:
        current = outcome.step  # it may have failed before it said anything
    out = []
    reached = True
    for step in steps:
        if step is current:
            if outcome is None:
                state = "running"
            elif outcome.status == "ok":
                state = "done"
            else:
                state = "failed" if outcome.status == "failed" else "cancelled"
            reached = False
        elif reached and current is not None:
            state = "done"
        else:
            state = "done" if outcome is not None and outcome.ok else "pending"
        out.append((step, state, said.get(step, "")))
    return out


def plan_view(plan: ActionPlan, pal: Palette) -> Group:
    """The plan's title in bold over a two-column grid: each row's label, then its text
    wrapped under itself in its level's colour (the refusal critical, the last alert a
    warning)."""
    grid = Table.grid(expand=True)
    grid.add_column(no_wrap=True, width=LABEL_COLUMN)
    grid.add_column(ratio=1, overflow="fold")
    for row in plan.rows():
        label = Text(f"  {row.label}:".ljust(LABEL_COLUMN), pal.text(Role.MUTED))
        grid.add_row(label, Text(row.text, level_style(pal, row.level)))
    return Group(Text(plan.title, Style(bold=True)), grid)


class JobActionScreen(Dialog):
    """Confirm a job action, then follow its run. ``run`` given: the progress view of a
    run already going (a second ``r``)."""

    NAME = "restart"
    DEFAULT_CSS = """
    #restart-box { width: 96%; max-width: 130; height: auto; max-height: 96%; }
    #restart-body { height: auto; max-height: 80vh; }
    #restart-box.-running #restart-body { max-height: 35vh; }
    #restart-box.-done #restart-body { max-height: 15vh; }
    #restart-progress { height: auto; max-height: 40vh; display: none; }
    #restart-result { height: auto; max-height: 30vh; display: none; }
    .param-row { height: auto; }
    .param-row Label { width: 22; padding: 1 1 0 0; }
    .param-row Input { width: 1fr; }
    #restart-error { color: $error; height: auto; }
    #restart-error, #restart-steps, #restart-outcome { display: none; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "confirm", "Confirm"),
        Binding("K", "stop_holder", "Stop what is in the way"),
        Binding("c", "cancel_run", "Cancel run"),
        # Esc while the run keeps its evidence: go on to the stop without the rest of it
        Binding("escape", "skip_or_close", "Close", key_display="Esc"),
        Binding("n", "close", "Close", show=False),
    ]

    def __init__(
        self,
        target: JobTarget,
        job: JobConfig,
        action: Action,
        *,
        start_run: StartRun,
        state: str | None = None,
        last_alert: str | None = None,
        run: JobRun | None = None,
        explain: Explain | None = None,
        stop_holder: StopHolder | None = None,
    ) -> None:
        super().__init__()
        self.target, self.job, self.action = target, job, action
        self.start_run = start_run
        self.stop_holder = stop_holder
        self.state, self.last_alert = state, last_alert
        self.run: JobRun | None = run
        self.plan: ActionPlan | None = None  # the plan on show (with the edited params)
        self._base_plan: ActionPlan | None = None
        self.problem: str | None = None  # why the plan cannot be confirmed as edited
        self.cancel_note: str | None = None
        # After a success: what the monitor saw of the job since ("started PID 13025 (its
        # workers 15200-15202 hold GPUs 5-7)", "the step counter went back from 709 to
        # 650: resumed from the checkpoint at step 650"), looked at for a minute.
        self.explain = explain
        self.note: str | None = None
        self._note_timer: Timer | None = None

    # --- layout -------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        what = self.run.plan.action if self.run else self.action
        with self.frame(f"{what.capitalize()} {self.job.name} on {self.target.host.name}"):
            with VerticalScroll(id="restart-body"):
                yield self.static("cause")
                yield self.static("plan", self._waiting_text())
                for name, default in self.job.params.items():
                    with Horizontal(classes="param-row"):
                        yield Label(name, markup=False)
                        yield Input(format_value(default), id=f"param-{name}", name=name)
                yield self.static("error")
            with VerticalScroll(id="restart-progress"):
                yield self.static("steps")
            with VerticalScroll(id="restart-result"):
                yield self.static("outcome")
            with self.button_row():
                yield Button(
                    f"{self.action.capitalize()} (y)",
                    id="confirm",
                    variant="primary" if self.action == "start" else "error",
                    compact=True,
                )
                yield Button("Stop it (K)", id="stop-holder", variant="warning", compact=True)
                yield Button("Cancel run (c)", id="cancel-run", variant="warning", compact=True)
                yield self.close_button("Close" if self.run else "Cancel")

    def on_mount(self) -> None:
        self.part("cause").display = False
        self.query_one("#stop-holder").display = False
        if self.run is not None:
            self._follow(self.run)
        else:
            self.query_one("#confirm", Button).disabled = True
            self.query_one("#cancel-run").display = False
            self.load_plan()
            self.set_interval(CAUSE_POLL_S, self._read_cause)

    def _waiting_text(self) -> str:
        return f"reading the state of {self.job.name} on {self.target.host.name} ..."

    # --- the plan -----------------------------------------------------------------------
    @work(exclusive=True, group="plan")
    async def load_plan(self) -> None:
        try:
            plan = await make_plan(
                self.target,
                self.job.name,
                self.action,
                state=self.state,
                last_alert=self.last_alert,
            )
        except (JobError, ParamError, TransportError, OSError) as e:
            if not self.is_open:  # closed while the state was read: nothing to show it on
                return
            self._show_problem(f"cannot plan the {self.action}: {e}")
            self.part("plan").update(
                f"{self.action.capitalize()} {self.job.name} on {self.target.host.name}"
            )
            return
        if not self.is_open:  # closed before the plan came (Esc on a slow link): not shown,
            return  # so nothing to audit either
        self._base_plan = plan
        self._apply_params()

    def _param_values(self) -> dict[str, str]:
        return {str(i.name): i.value for i in self.query(Input) if i.name}

    def _apply_params(self) -> None:
        if self._base_plan is None:
            return
        try:
            self.plan = self._base_plan.with_params(self._param_values())
        except ParamError as e:
            self._show_problem(str(e))
            return
        self.problem = self.plan.refusal
        self.show("error", "")
        self._render_plan(self.plan)

    def _show_problem(self, text: str) -> None:
        self.problem = text
        self.show("error", text)
        self._sync_buttons()

    def _render_plan(self, plan: ActionPlan) -> None:
        self._render_cause(plan)
        self.part("plan").update(plan_view(plan, self.palette))
        self._sync_buttons()

    # --- what stands in the way: said before the plan, K offered ------------------------
    def _render_cause(self, plan: ActionPlan) -> None:
        """Before the plan, in the critical colour: "the cause is still on GPU 6: CT 201
        jupyter-lab holds 6.0 GiB — K stop jupyter-lab first, or restart anyway (y)"; the
        buttons say the same. Nothing once it is gone or the run started."""
        shown = plan.warnings if self.run is None else []
        pal = self.palette
        text = Text()
        for line in shown:
            text.append(f"{line}\n", pal.text(Role.CRITICAL) + Style(bold=True))
        if shown:
            name = self._holder_name(plan)
            text.append(
                f"— K stop {name} first, or {self.action} anyway (y)\n", pal.text(Role.WARNING)
            )
        self.show("cause", text if shown else "")
        stop = self.query_one("#stop-holder", Button)
        stop.display = bool(shown) and self.stop_holder is not None
        stop.label = f"Stop {self._holder_name(plan)} (K)"
        confirm = self.query_one("#confirm", Button)
        anyway = " anyway" if shown else ""
        confirm.label = f"{self.action.capitalize()}{anyway} (y)"

    @staticmethod
    def _holder_name(plan: ActionPlan) -> str:
        first = next((b for b in plan.in_the_way if b.holders), None)
        return first.holders[0].name if first is not None else "it"

    def _read_cause(self) -> None:
        """Read again what stands in the way (K stopped it, or it left by itself)."""
        if self.run is not None or self._base_plan is None or self.plan is None:
            return
        found = self.target.in_the_way(self.job)
        if found == self.plan.in_the_way:
            return
        self._base_plan = self._base_plan.with_cause(found)
        self.plan = self.plan.with_cause(found)
        self._render_plan(self.plan)

    def action_stop_holder(self) -> None:
        """``K``: stop the first process in the way (the dashboard's kill dialog)."""
        plan = self.plan
        if self.run is not None or plan is None or not plan.in_the_way:
            return
        if self.stop_holder is None:
            self.notify("nothing here can stop it", severity="warning")
            return
        self.stop_holder(plan.in_the_way[0])

    @on(Button.Pressed, "#stop-holder")
    def _stop_pressed(self) -> None:
        self.action_stop_holder()

    @on(Input.Changed)
    def _param_edited(self, event: Input.Changed) -> None:
        event.stop()
        if self.run is None:
            self._apply_params()

    @on(Input.Submitted)
    def _param_submitted(self, event: Input.Submitted) -> None:
        """Enter in a parameter's input ends the edit on Cancel: a second Enter must not
        start the run (``y`` does)."""
        event.stop()
        self.query_one("#close", Button).focus()

    # --- confirm / cancel / close -------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "confirm":
            if self.run is not None:
                return False
            return True if self.can_confirm else None
        if action == "cancel_run":
            return self.run is not None and self.run.outcome is None
        if action == "stop_holder":
            plan = self.plan
            return self.run is None and plan is not None and bool(plan.warnings)
        return True

    @property
    def can_confirm(self) -> bool:
        return self.run is None and self.plan is not None and self.problem is None

    def _sync_buttons(self) -> None:
        confirm = self.query_one("#confirm", Button)
        confirm.disabled = not self.can_confirm
        confirm.display = self.run is None
        running = self.run is not None and self.run.outcome is None
        self.query_one("#cancel-run").display = running
        if self.run is not None:  # Esc leaves the run going (or done): nothing to cancel
            self.offer_close()
        self.refresh_bindings()

    @on(Button.Pressed, "#confirm")
    def action_confirm(self) -> None:
        if not self.can_confirm or self.plan is None:
            return
        # With something in the way, "y" is the user's "restart anyway": the wait for
        # free GPUs then does not wait for it to leave (it never would by itself).
        run = self.start_run(self.plan.anyway())
        for row in self.query(".param-row"):
            row.display = False
        self._follow(run)
        self.query_one("#cancel-run", Button).focus()

    def action_skip_or_close(self) -> None:
        if self.run is not None and self.run.skip_evidence():
            self.notify(f"{self.run.plan.job.name}: evidence skipped; stopping now", timeout=4)
            return
        self.action_close()

    @on(Button.Pressed, "#cancel-run")
    def action_cancel_run(self) -> None:
        if self.run is None or self.run.outcome is not None:
            return
        result = self.run.cancel()
        self.cancel_note = None if result.cancelled else f"cannot cancel: {result.message}"
        if not result.cancelled:
            self.notify(result.message, title="Not cancelled", severity="warning")
        self._render_progress()

    def before_close(self) -> bool:
        run = self.run
        if run is None and self.plan is not None and self.plan.refusal:
            # What the user tried was refused: the audit log says so (as the CLI does).
            self.app.run_worker(self._audit_refusal(self.plan), group="audit")
        elif run is None and self.plan is not None:
            # Shown and not confirmed: audited as "cancelled", as a declined swap is.
            try:
                record_not_confirmed(self.plan, "not confirmed: the dialog was closed")
            except OSError as e:
                self.audit_not_written(str(e))
        elif run is not None and run.outcome is None:
            self.notify(
                f"{run.plan.job.name}: {run.plan.action} goes on; press r to follow it",
                timeout=4,
            )
        return True

    async def _audit_refusal(self, plan: ActionPlan) -> None:
        outcome = await JobRun(plan, self.target).wait()  # recorded as "refused"
        if outcome.audit_error is not None:
            self.audit_not_written(outcome.audit_error)

    # --- progress -----------------------------------------------------------------------
    def _follow(self, run: JobRun) -> None:
        self.run = run
        self.query_one("#restart-box").add_class("-running")
        self.show("error", "")
        self._render_plan(run.plan)
        run.add_listener(self._on_progress)
        self._render_progress()

    def _on_progress(self, step: Step, message: str) -> None:
        if self.is_attached:  # the listener outlives a closed view
            self._render_progress()

    def _render_progress(self) -> None:
        run = self.run
        if run is None:
            return
        pal = self.palette
        grid = Table.grid(expand=True)
        grid.add_column(no_wrap=True, width=LABEL_COLUMN)
        grid.add_column(ratio=1, overflow="fold")
        for step, state, message in step_states(run.plan.steps, run.history, run.outcome):
            style = pal.text(ROLES[state]) if state != "done" else Style(color=pal.ok)
            grid.add_row(Text(f" {MARKS[state]} {step.value}", style), Text(message))
        note = self.cancel_note if run.outcome is None else None
        if note is None and run.step is Step.EVIDENCE and run.outcome is None:
            note = "Esc: skip the rest of the evidence and stop now"
        parts = [grid, Text(note, pal.text(Role.WARNING))] if note else [grid]
        self.show("steps", Group(*parts), visible=True)
        self.query_one("#restart-progress").display = True
        done = run.outcome is not None
        # done: the plan gives room to the steps, the outcome and Close (at 80x24 too)
        self.query_one("#restart-box").set_class(done, "-done")
        text = self._outcome_text(run.outcome, pal)
        if run.outcome is not None and run.outcome.ok and self._look_for_note(run.outcome):
            text.append(f"\n{self.note}", pal.text(Role.MUTED))
        self.show("outcome", text, visible=done)
        self.query_one("#restart-result").display = done
        self._sync_buttons()

    def _look_for_note(self, outcome: Outcome) -> bool:
        """Whether ``explain`` has a note now; it is asked again every second for a minute
        (the workers appear on the GPUs, and the new run's first progress lines come,
        after the verify step; slower on a loaded machine)."""
        if self.explain is None:
            return False
        self.note = self.explain(outcome)
        if self._note_timer is None:
            self._note_timer = self.set_interval(NOTE_POLL_S, self._poll_note, repeat=NOTE_POLLS)
        return self.note is not None

    def _poll_note(self) -> None:
        if self.is_attached:
            self._render_progress()

    @staticmethod
    def _outcome_text(outcome: Outcome | None, pal: Palette) -> Text:
        if outcome is None:
            return Text()
        text = outcome_line(outcome.status, outcome.level, outcome.message, outcome.duration_s, pal)
        if outcome.detail:
            text.append("\nlast lines:\n", pal.text(Role.MUTED))
            text.append(outcome.detail.rstrip())
        return text
