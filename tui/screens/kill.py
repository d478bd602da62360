"""The terminate-process dialog (``K``): what will be signalled, then its evidence kept
(as a restart keeps a job's: the process's stacks, the flight recorder's dumps, the
GPUs' health and the logs, at most ``evidence_s``; ``Esc`` skips it and goes on), then
SIGTERM, then an offer of SIGKILL when the process is still there after ``TERM_WAIT_S``.

It names the process exactly (host PID, container PID, user, command, GPU memory), how it
was chosen (``why``: the GPU's biggest holder when the cursor is on a GPU row), and the
command that will run, exactly as the target's shell gets it, with its PID-reuse check.
Cancel has the focus; only an explicit ``y`` (or the button) acts. Every signal is
audited (``actions.kill``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
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
from gpumon.backends.actions.run import Kept
from gpumon.backends.model import GpuProcess
from gpumon.backends.transport import Transport
from gpumon.backends.untrusted import printable
from gpumon.tui.screens.dialog import Dialog
from gpumon.tui.views import Role, gib

State = Literal["ask", "evidence", "term", "offer_kill", "kill", "done"]
KILL_WAIT_S = 5.0
# Keeps the process's evidence, saying its progress (the runtime's keep_evidence, bound to
# the process by the dashboard's actions)
Evidence = Callable[[Callable[[str], None]], Awaitable[Kept]]


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
        evidence: Evidence | None = None,
        evidence_s: float = 0.0,
    ) -> None:
        """``why``: how this process was chosen, when the user did not select it;
        ``evidence``: keeps its evidence before the signal, within ``evidence_s`` (None or
        0: straight to the signal)."""
        super().__init__()
        self.transport = transport
        self.plan = plan
        self.why = why
        self.term_wait_s = term_wait_s
        self.evidence = evidence if evidence_s > 0 else None
        self.evidence_s = evidence_s
        self.state: State = "ask"
        self.messages: list[str] = []
        self.progress = ""  # the evidence step's latest words
        self.bundle: str | None = None  # the evidence kept, named by the audit entry
        self._evidence_task: asyncio.Future[Kept] | None = None
        self._skipped = False

    def compose(self) -> ComposeResult:
        what = "a process" if on_no_gpu(self.plan.process) else "a GPU process"
        with self.frame(f"Terminate {what} on {self.plan.host}"):
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
        if on_no_gpu(p):
            text.append("holds no GPU memory itself\n", muted)
        else:
            mem = "unknown" if p.memory_mib is None else f"{gib(p.memory_mib)} GiB"
            text.append(f"GPU memory {mem}\n", muted)
        guard_role = Role.MUTED if self.plan.start_ticks is not None else Role.WARNING
        text.append(f"{self.plan.guard_text()}\n", self.palette.text(guard_role))
        if self.evidence is not None:
            text.append(
                f"first keeps its evidence: at most {self.evidence_s:g} s (Esc skips it)\n", muted
            )
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
            "evidence": (
                f"keeping evidence: {self.progress}; Esc: skip the rest and send SIGTERM",
                Role.NORMAL,
            ),
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

    def before_close(self) -> bool:
        if self.state != "evidence":
            return True
        task = self._evidence_task  # Esc skips the evidence; the signal follows
        if task is not None and not task.done():
            self._skipped = True
            task.cancel()
        return False

    def action_confirm(self) -> None:
        if self.state == "ask" and self.evidence is not None:
            self.state = "evidence"
            self._keep_then_term()
        elif self.state == "ask":
            self.state = "term"
            self._signal("TERM", self.term_wait_s)
        elif self.state == "offer_kill":
            self.state = "kill"
            self._signal("KILL", KILL_WAIT_S)
        self._show_status()

    @on(Button.Pressed, "#kill-confirm")
    def _confirm_pressed(self) -> None:
        self.action_confirm()

    def _say(self, message: str) -> None:
        self.progress = message
        self._show_status()

    @work(exclusive=True, group="kill")
    async def _keep_then_term(self) -> None:
        self.messages.append(await self._keep_evidence())
        self.state = "term"
        self._show_status()
        await self._send("TERM", self.term_wait_s)

    async def _keep_evidence(self) -> str:
        """Keep the evidence within ``evidence_s``; what came of it, in words. Whatever
        happens here, the signal follows (as a restart's evidence step)."""
        assert self.evidence is not None
        t0 = time.monotonic()
        self._evidence_task = asyncio.ensure_future(self.evidence(self._say))
        try:
            async with asyncio.timeout(self.evidence_s):
                kept = await self._evidence_task
        except asyncio.CancelledError:
            if not self._skipped:
                raise  # the dialog itself is going
            return f"evidence skipped after {time.monotonic() - t0:.1f} s (Esc): nothing kept"
        except TimeoutError:
            return f"evidence cut at {self.evidence_s:g} s: nothing kept"
        except Exception as e:  # noqa: BLE001 - the user asked for the kill: it goes on
            return f"evidence failed ({e}): going on without it"
        self.bundle = kept.bundle
        where = f" in {kept.bundle}" if kept.bundle else ""
        return f"evidence kept{where} after {time.monotonic() - t0:.1f} s: {kept.summary}"

    @work(exclusive=True, group="kill")
    async def _signal(self, sig: Literal["TERM", "KILL"], wait_s: float) -> None:
        await self._send(sig, wait_s)

    async def _send(self, sig: Literal["TERM", "KILL"], wait_s: float) -> None:
        outcome = await send_signal(
            self.transport, self.plan, sig, bundle=self.bundle if sig == "TERM" else None
        )
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


def on_no_gpu(process: GpuProcess) -> bool:
    """Whether ``process`` is on no GPU at all: no GPU, no device file, no memory (a vLLM
    server's API server, which an incident's K stops: its engine core holds the GPU)."""
    on_gpu = process.gpu_uuid is not None or bool(process.gpus or process.minors)
    return not on_gpu and process.memory_mib is None
