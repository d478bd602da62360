"""The terminate-process dialog (``K``): what will be signalled, then SIGTERM, then an
offer of SIGKILL when the process is still there after ``TERM_WAIT_S``.

It names the process exactly (host PID, container PID, user, command, GPU memory), how it
was chosen (``why``: the GPU's biggest holder when the cursor is on a GPU row), and the
command that will run, exactly as the target's shell gets it, with its PID-reuse check.
Cancel has the focus; only an explicit ``y`` (or the button) acts. Every signal is
audited (``actions.kill``).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Button

from gpumon.backends.actions.kill import (
    TERM_WAIT_S,
    KillPlan,
    send_signal,
    wait_gone,
)
from gpumon.backends.transport import Transport
from gpumon.backends.untrusted import printable
from gpumon.tui.screens.dialog import Dialog
from gpumon.tui.views import Role, gib

State = Literal["ask", "term", "offer_kill", "kill", "done"]
KILL_WAIT_S = 5.0


class KillScreen(Dialog):
    NAME: ClassVar[str] = "kill"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "confirm", "Terminate"),
        Binding("n,escape", "close", "Cancel", key_display="Esc"),
    ]
    DEFAULT_CSS = """
    KillScreen #kill-box { width: 90%; max-width: 110; height: auto; }
    """

    def __init__(
        self,
        transport: Transport,
        plan: KillPlan,
        *,
        term_wait_s: float = TERM_WAIT_S,
        why: str | None = None,
    ) -> None:
        """``why``: how this process was chosen, when the user did not select it."""
        super().__init__()
        self.transport = transport
        self.plan = plan
        self.why = why
        self.term_wait_s = term_wait_s
        self.state: State = "ask"
        self.messages: list[str] = []

    def compose(self) -> ComposeResult:
        with self.frame(f"Terminate a GPU process on {self.plan.host}"):
            yield self.static("what", self._what())
            yield self.static("status")
            with self.button_row():
                yield Button("Cancel (Esc)", id="close", compact=True)
                yield Button("Terminate (y)", id="kill-confirm", variant="error", compact=True)

    def on_mount(self) -> None:
        self.query_one("#close", Button).focus()  # the safe choice is the default one
        self._show_status()

    def _what(self) -> Text:
        p = self.plan.process
        muted = self.palette.text(Role.MUTED)
        text = Text()
        if self.why:
            text.append(f"{self.why}\n", self.palette.text(Role.WARNING))
        text.append(f"{self.plan.summary}\n", "bold")
        text.append(printable(p.command or p.name or "[command not visible]") + "\n")
        mem = "unknown" if p.memory_mib is None else f"{gib(p.memory_mib)} GiB"
        text.append(f"GPU memory {mem}\n", muted)
        guard_role = Role.MUTED if self.plan.start_ticks is not None else Role.WARNING
        text.append(f"{self.plan.guard_text()}\n", self.palette.text(guard_role))
        text.append(f"SIGTERM {self.plan.where}: ", muted)
        text.append(self.plan.shell_line("TERM"))
        return text

    def _show_status(self) -> None:
        if not self.is_open:  # closed while the signal's wait ran: nothing to draw on
            return
        pal = self.palette
        lines = Text("\n").join(Text(m) for m in self.messages)
        prompt = {
            "ask": ("y sends SIGTERM; Esc cancels", Role.WARNING),
            "term": (f"SIGTERM sent; waiting up to {self.term_wait_s:g} s…", Role.NORMAL),
            "offer_kill": (
                f"still running after {self.term_wait_s:g} s: y sends SIGKILL, Esc leaves it",
                Role.CRITICAL,
            ),
            "kill": ("SIGKILL sent; waiting…", Role.NORMAL),
            "done": ("", Role.NORMAL),
        }[self.state]
        if prompt[0]:
            lines = Text("\n").join([*([lines] if self.messages else []), Text(prompt[0])])
            lines.stylize(pal.text(prompt[1]), len(lines) - len(prompt[0]))
        self.show("status", lines, visible=True)
        button = self.query_one("#kill-confirm", Button)
        button.label = "SIGKILL (y)" if self.state == "offer_kill" else "Terminate (y)"
        button.disabled = self.state not in ("ask", "offer_kill")
        close = self.query_one("#close", Button)
        close.label = "Close (Esc)" if self.state == "done" else "Cancel (Esc)"

    def action_confirm(self) -> None:
        if self.state == "ask":
            self.state = "term"
            self._signal("TERM", self.term_wait_s)
        elif self.state == "offer_kill":
            self.state = "kill"
            self._signal("KILL", KILL_WAIT_S)
        self._show_status()

    @on(Button.Pressed, "#kill-confirm")
    def _confirm_pressed(self) -> None:
        self.action_confirm()

    @work(exclusive=True, group="kill")
    async def _signal(self, sig: Literal["TERM", "KILL"], wait_s: float) -> None:
        outcome = await send_signal(self.transport, self.plan, sig)
        self.messages.append(outcome.message)
        if outcome.reused:  # said where it stays after the dialog is closed too
            self.notify(outcome.message, title="Not killed", severity="warning", markup=False)
        if not outcome.ok:
            self.state = "done"
            self._show_status()
            return
        self._show_status()
        gone = await wait_gone(self.transport, self.plan, timeout=wait_s)
        if gone:
            self.messages.append(f"PID {self.plan.pid} has ended")
            self.state = "done"
        elif sig == "TERM":
            self.messages.append(f"SIGKILL {self.plan.where}: {self.plan.shell_line('KILL')}")
            self.state = "offer_kill"
        else:
            self.messages.append(f"PID {self.plan.pid} is still there after SIGKILL")
            self.state = "done"
        self._show_status()
