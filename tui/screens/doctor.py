"""The doctor screen: the torch / CUDA checks of one host, read-only.

Runs ``run_doctor`` through the host's own connection in a worker ("running checks on
PYTHON ..." meanwhile), then shows one row per check: its status in the theme's severity
colour, the evidence read, and the fix where one is known. Problems and warnings come
first (they are what the on-call person opened it for), and the list has the focus, so
the arrows and PgUp / PgDn scroll it at once; the footer says so. ``r`` runs the checks
again.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.theme import Theme

from gpumon.backends.config import HostConfig
from gpumon.backends.torchenv.doctor import (
    STATUSES,
    Check,
    DoctorReport,
    Status,
    host_python,
    run_doctor,
)
from gpumon.backends.transport import Transport, TransportError
from gpumon.tui.screens.dialog import Dialog
from gpumon.tui.views import Palette, Role
from gpumon.tui.widgets import KeyFooter

STATUS_ROLES = {"ok": Role.OK, "warning": Role.WARNING, "problem": Role.CRITICAL, "n/a": Role.NA}
STATUS_MARKS = {"ok": "✓", "warning": "!", "problem": "✗", "n/a": "-"}


def status_style(pal: Palette, status: str) -> Style:
    """A check status in its severity colour (bold when it needs a look)."""
    role = STATUS_ROLES.get(status, Role.NA)
    return Style(color=pal.colour(role), bold=role in (Role.WARNING, Role.CRITICAL))


FIRST: dict[str, int] = {"problem": 0, "warning": 1}  # the rest keep the doctor's order


def findings_first(checks: Iterable[Check]) -> list[Check]:
    """``checks`` with the problems first, then the warnings, then the others, each in
    the doctor's order."""
    return sorted(checks, key=lambda c: FIRST.get(c.status, len(FIRST)))


def checks_table(checks: Iterable[Check], pal: Palette) -> Table:
    """The checks as a table: status, check, evidence (and the fix below it), the
    problems and warnings first."""
    table = Table(box=None, expand=True, pad_edge=False, show_edge=False)
    table.add_column("status", no_wrap=True, width=9)
    table.add_column("check", no_wrap=True, style=Style(bold=True))
    table.add_column("evidence / fix", ratio=1, overflow="fold")
    for c in findings_first(checks):
        status = Text(f"{STATUS_MARKS.get(c.status, '?')} {c.status}", status_style(pal, c.status))
        evidence = Text(c.evidence)
        if c.fix:
            evidence.append("\nfix: ", Style(color=pal.accent, bold=True))
            evidence.append(c.fix)
        table.add_row(status, c.name, evidence)
    return table


def summary(checks: Iterable[Check]) -> str:
    """``1 problem, 1 warning, 5 ok, 17 n/a`` (worst first)."""
    checks = list(checks)
    counts = {s: sum(c.status == s for c in checks) for s in STATUSES}
    order: tuple[Status, ...] = ("problem", "warning", "ok", "n/a")
    return ", ".join(f"{counts[s]} {s}" for s in order if counts[s])


class ChecksList(VerticalScroll):
    """The checks, scrolled by the arrows and PgUp / PgDn (the footer says so)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("pagedown", "page_down", "Scroll", key_display="↑↓ PgUp PgDn"),
    ]


class DoctorScreen(Dialog):
    NAME = "doctor"
    AUTO_FOCUS = "#doctor-scroll"  # nothing to confirm here: the list takes the keys
    DEFAULT_CSS = """
    #doctor-box { width: 100%; height: 100%; }
    #doctor-status { height: auto; }
    #doctor-scroll { height: 1fr; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "rerun", "Re-run", tooltip="Run the checks again"),
        Binding("escape", "close", "Back"),
    ]

    def __init__(self, host: HostConfig, transport: Transport) -> None:
        """Checks ``host`` through ``transport`` (already connected: the monitor's own)."""
        super().__init__()
        self.host, self.transport = host, transport
        self.report: DoctorReport | None = None
        self.error: str | None = None
        self.running = False

    def compose(self) -> ComposeResult:
        with self.frame(f"doctor {self.host.name}", subtitle="read-only: changes nothing"):
            yield self.static("status")
            with ChecksList(id="doctor-scroll"):
                yield self.static("table")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.app.theme_changed_signal.subscribe(self, self._theme_changed)
        self.run_checks()

    def _theme_changed(self, _theme: Theme) -> None:
        self.show_report()

    @property
    def python(self) -> str:
        return self.report.python if self.report else host_python(self.host)

    @work(exclusive=True, group="doctor")
    async def run_checks(self) -> None:
        self.running, self.error = True, None
        self.refresh_bindings()
        self.part("status").update(Text(f"running checks on {self.python} ...", Style(italic=True)))
        try:
            self.report = await run_doctor(self.transport, self.host)
        except (TransportError, OSError) as e:
            self.error = f"cannot reach {self.host.name}: {e}"
        finally:
            self.running = False
            self.refresh_bindings()
        self.show_report()

    def show_report(self) -> None:
        if self.running or not self.is_open:  # not when closed while the checks ran
            return
        pal = self.palette
        status, table = self.part("status"), self.part("table")
        if self.error is not None:
            status.update(Text(self.error, pal.text(Role.CRITICAL)))
            return
        report = self.report
        if report is None:
            return
        head = Text(f"python {report.python}: ", Style(bold=True))
        statuses = {c.status for c in report.checks}
        worst = next((s for s in ("problem", "warning") if s in statuses), "ok")
        head.append(summary(report.checks), status_style(pal, worst))
        status.update(head)
        table.update(checks_table(report.checks, pal))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "rerun" and self.running:
            return None  # greyed out while the checks run
        return True

    def action_rerun(self) -> None:
        if not self.running:
            self.run_checks()
