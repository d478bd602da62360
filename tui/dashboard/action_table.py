"""Every action of the dashboard, once (k9s' action table): its keys, footer label, help
line, palette entry, and what it needs to act.

From this table come the BINDINGS of the app (its own actions: quit, help, theme), of the
dashboard and of the detail view over it, the command palette's entries, the help
screen's dashboard section and what read-only mode hides. The order is the footer's, which
cuts what does not fit (80 columns hold about ten keys): the keys an on-call person needs
first (quit, help, detail, alerts), then those that act on a machine, then the view keys.

What an action needs decides, on each screen that has it, whether its key is shown
(``check_action`` True), greyed out (None) or hidden (False): ``DashboardScreen.action_state``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from textual.binding import Binding

_SPEED = Binding.Group("Speed", compact=True)
_INTERVAL = Binding.Group("Interval", compact=True)

Where = Literal["app", "dashboard", "detail"]
JUMP_HELP = "Jump to that GPU of the host under the cursor"


@dataclass(frozen=True, slots=True)
class DashboardAction:
    """One action. ``action`` is the Textual action string on the screen (or, ``app``, on
    the app); ``palette`` its title in the command palette, where ``{job}`` and ``{host}``
    name what is under the cursor (None: not in the palette)."""

    action: str
    keys: str  # Textual key names, comma-separated: "plus,equals_sign"
    label: str  # in the footer
    help: str  # on the help screen, and the footer key's tooltip
    palette: str | None = None
    palette_help: str = ""
    key_display: str | None = None
    footer: bool = True
    group: Binding.Group | None = None
    app: bool = False  # the app's own: it works on every screen (quit, help, theme)
    in_detail: bool = True  # also on the detail view, acting on the dashboard behind it
    dangerous: bool = False  # changes a machine: hidden and refused in read-only mode
    machine: bool = False  # acts on the machine: hidden in a replay (there is none)
    live: bool = False  # needs live sampling: greyed out in a replay
    replay: bool = False  # only for a replay: hidden on live hosts
    needs_host: bool = False  # greyed out unless the host under the cursor is connected
    needs_gpu: bool = False  # greyed out without a GPU under the cursor
    needs_job: bool = False  # greyed out without a job under the cursor
    # with no job under the cursor, acts on the job of the newest critical incident
    incident_job: bool = False
    starts_job: bool = False  # greyed out when the job has no start command

    @property
    def name(self) -> str:
        """The action's name, without its parameters: "cursor" for "cursor(1)"."""
        return self.action.split("(", 1)[0]

    def action_on(self, where: Where) -> str:
        """The action string on ``where``: the app's own actions run on the app from any
        screen; the detail view passes the dashboard's to the dashboard."""
        if self.app and where != "app":
            return f"app.{self.action}"
        if where == "detail":
            return f"dashboard({self.action!r})"
        return self.action

    def binding(self, where: Where) -> Binding:
        """The key binding on ``where``."""
        return Binding(
            self.keys,
            self.action_on(where),
            self.label,
            show=self.footer,
            key_display=self.key_display,
            group=self.group,
            tooltip=self.help,
        )


ACTIONS: tuple[DashboardAction, ...] = (
    DashboardAction(
        "quit", "q", "Quit", "Quit gpumon", "Quit gpumon", "Leave the dashboard", app=True
    ),
    DashboardAction(
        "help",
        "question_mark",
        "Help",
        "This list of keys",
        "Keys (help)",
        "List every key",
        key_display="?",
        app=True,
    ),
    DashboardAction(
        "open_detail",
        "enter",
        "Detail",
        "Detail view of the GPU at the cursor",
        "Open GPU detail",
        "History plots and processes of the GPU under the cursor",
        in_detail=False,
        needs_gpu=True,
    ),
    DashboardAction(
        "alerts",
        "a",
        "Alerts",
        "Alert history: acknowledge alerts",
        "Alert history",
        "Active and past alerts; acknowledge them",
    ),
    DashboardAction(
        "restart_job",
        "r",
        "Restart",
        "Restart the job under the cursor",
        "Restart job {job}",
        "Stop {job} and start it again on {host}",
        dangerous=True,
        machine=True,
        needs_host=True,
        needs_job=True,
        starts_job=True,
        incident_job=True,
    ),
    # s / S stay out of the footer so it fits 80 columns (help and palette list them).
    DashboardAction(
        "stop_job",
        "s",
        "Stop",
        "Stop the job under the cursor (else the job holding its GPUs idle)",
        "Stop job {job}",
        "Stop {job} on {host}",
        footer=False,
        dangerous=True,
        machine=True,
        needs_host=True,
        needs_job=True,
    ),
    DashboardAction(
        "start_job",
        "S",
        "Start",
        "Start the (stopped) job under the cursor",
        "Start job {job}",
        "Start {job} on {host}",
        footer=False,
        dangerous=True,
        machine=True,
        needs_host=True,
        needs_job=True,
        starts_job=True,
    ),
    DashboardAction(
        "toggle_processes",
        "x",
        "Procs",
        "Show / hide the processes of the GPU at the cursor (the cursor walks them)",
        "Show / hide the GPU's processes",
        "List the processes under the GPU row; the cursor selects one for K",
        footer=False,
        in_detail=False,
        needs_gpu=True,
    ),
    DashboardAction(
        "kill_process",
        "K",
        "Kill",
        "Terminate the selected GPU process (SIGTERM, then SIGKILL)",
        "Terminate a GPU process on {host}",
        "SIGTERM the process selected (x lists a GPU's; else the GPU's top holder)",
        footer=False,
        dangerous=True,
        machine=True,
        needs_host=True,  # a GPU's process, or from anywhere the incident's holder
    ),
    DashboardAction(
        "doctor",
        "d",
        "Doctor",
        "Torch / CUDA checks of the host (read-only)",
        "Doctor: check {host}",
        "Torch / CUDA checks, read-only",
        machine=True,
        needs_host=True,
    ),
    DashboardAction(
        "swap_torch",
        "w",
        "Torch",
        "Swap the host's torch CUDA variant",
        "Swap torch on {host}",
        "Install another torch CUDA variant",
        dangerous=True,
        machine=True,
        needs_host=True,
    ),
    DashboardAction(
        "usage",
        "u",
        "Usage",
        "GPU-hours used and held idle, energy and cost of the host (gpumon usage)",
        "Usage of {host}",
        "GPU-hours used and held idle per container, user, job or GPU",
        footer=False,
        machine=True,
    ),
    DashboardAction(
        "toggle_pause",
        "p",
        "Pause",
        "Pause or resume updates (or the replay)",
        "Pause / resume updates",
        "Freeze the rows; monitoring goes on",
    ),
    DashboardAction(
        "replay_step",
        "full_stop",
        "Step",
        "Replay: play the next sample (while paused)",
        "Replay: step one sample",
        "Play the next sample (while paused)",
        key_display=".",
        replay=True,
    ),
    DashboardAction(
        "replay_step_back",
        "comma",
        "Back",
        "Replay: go one sample back (while paused)",
        "Replay: one sample back",
        "Go back one sample (while paused): the recording plays again up to it",
        key_display=",",
        replay=True,
    ),
    DashboardAction(
        "replay_slower",
        "left_square_bracket",
        "Slower",
        "Replay: slower",
        "Replay: slower",
        "Play the recording slower",
        key_display="[",
        group=_SPEED,
        replay=True,
    ),
    DashboardAction(
        "replay_faster",
        "right_square_bracket",
        "Faster",
        "Replay: faster",
        "Replay: faster",
        "Play the recording faster",
        key_display="]",
        group=_SPEED,
        replay=True,
    ),
    DashboardAction(
        "faster",
        "plus,equals_sign",
        "Faster",
        "Sample faster, on every host",
        "Refresh faster",
        "Shorter sampling interval on every host",
        key_display="+",
        group=_INTERVAL,
        live=True,
        needs_host=True,
    ),
    DashboardAction(
        "slower",
        "minus",
        "Slower",
        "Sample slower, on every host",
        "Refresh slower",
        "Longer sampling interval on every host",
        key_display="-",
        group=_INTERVAL,
        live=True,
        needs_host=True,
    ),
    DashboardAction(
        "cycle_theme",
        "t",
        "Theme",
        "Next colour theme (remembered)",
        "Next theme",
        "Cycle through the colour themes",
        app=True,
    ),
    DashboardAction(
        "toggle_spark",
        "m",
        "Mem/Util",
        "Sparklines: memory or utilisation",
        "Sparkline: memory / utilisation",
        "Toggle what the sparklines show",
        in_detail=False,
    ),
    DashboardAction("cursor(1)", "down,j", "Next row", "Next row", footer=False),
    DashboardAction("cursor(-1)", "up,k", "Previous row", "Previous row", footer=False),
    # Navigation as in k9s and htop (all keys only: the help screen lists them).
    DashboardAction("cursor_end(-1)", "g,home", "First row", "First row", footer=False),
    DashboardAction("cursor_end(1)", "G,end", "Last row", "Last row", footer=False),
    DashboardAction("cursor_page(1)", "pagedown", "Page down", "One page down", footer=False),
    DashboardAction("cursor_page(-1)", "pageup", "Page up", "One page up", footer=False),
    DashboardAction(
        "next_alerting(1)",
        "n",
        "Next alert",
        "Next row with an active alert (replay: the next incident's first sample, paused)",
        footer=False,
    ),
    DashboardAction(
        "next_alerting(-1)",
        "N",
        "Prev alert",
        "Previous row with an active alert (replay: the previous incident's first sample)",
        footer=False,
    ),
    # The digits jump to that GPU of the host under the cursor (on the detail view they
    # choose the plots' window instead).
    *(
        DashboardAction(
            f"jump_gpu({n})",
            str(n),
            f"GPU {n}",
            JUMP_HELP,
            footer=False,
            in_detail=False,
            needs_gpu=False,
        )
        for n in range(10)
    ),
)

# by name: cursor(1) and cursor(-1) need the same, so either stands for both
BY_NAME: dict[str, DashboardAction] = {a.name: a for a in ACTIONS}


def actions_on(where: Where) -> list[DashboardAction]:
    """The actions ``where`` has, in footer order."""
    if where == "app":
        return [a for a in ACTIONS if a.app]
    if where == "detail":
        return [a for a in ACTIONS if a.in_detail]
    return list(ACTIONS)


def bindings(where: Where) -> list[Binding]:
    """The key bindings of ``where``, in footer order."""
    return [a.binding(where) for a in actions_on(where)]


@dataclass(frozen=True, slots=True)
class PaletteEntry:
    """One command in the palette: title, help line and the action string to run."""

    title: str
    help: str
    action: str


def palette_entries(
    actions: Iterable[DashboardAction], where: Where, *, job: str | None, host: str
) -> list[PaletteEntry]:
    """Palette entries of ``actions`` (those with a palette title) on ``where``, for the
    job (None: none under the cursor, so no job actions) and host under the cursor."""
    out = []
    names = {"job": job or "", "host": host}
    for a in actions:
        if a.palette is None or (a.needs_job and job is None):
            continue
        title, help_text = a.palette.format(**names), a.palette_help.format(**names)
        out.append(PaletteEntry(title, help_text, a.action_on(where)))
    return out
