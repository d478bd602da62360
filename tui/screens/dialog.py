"""What the action dialogs (restart, torch swap, doctor) share: the titled box, the parts
addressed by name (``#restart-plan``, ``#swap-steps``), plan rows and outcomes styled by
their level, audit-log failures told to the user, and closing.

A dialog names itself with ``NAME``: its screen id, and the prefix of its parts' ids
(``#NAME-box``, ``#NAME-plan``). Its parts are Statics that never parse markup (their text
comes from the target). ``Close (Esc)`` (``#close``) and the ``close`` action ask
``before_close()`` first, so a dialog can refuse to close (a swap running) or do what
closing means for it (audit a refused plan).

Enter never confirms a destructive action: the focused button when a dialog opens is
``#close`` (``AUTO_FOCUS``; "Cancel (Esc)" in a dialog that asks first), so Enter cancels;
confirming takes the dialog's explicit key (``y``) or moving focus to its confirm button.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from rich.console import RenderableType
from rich.style import Style
from rich.text import Text
from textual import on
from textual.containers import Horizontal, Vertical
from textual.events import Resize
from textual.screen import ModalScreen
from textual.widgets import Button, Static
from textual.widgets._toast import ToastRack

from gpumon.backends.actions import Level
from gpumon.tui.views import Palette, Role

LEVEL_ROLES: Mapping[Level, Role] = {
    "ok": Role.OK,
    "info": Role.NORMAL,
    "warning": Role.WARNING,
    "problem": Role.CRITICAL,
}


def level_style(pal: Palette, level: Level) -> Style:
    """A row's text in its level's colour (info and ok stay plain, as all calm text does)."""
    return pal.text(LEVEL_ROLES[level])


def outcome_line(word: str, level: Level, message: str, duration_s: float, pal: Palette) -> Text:
    """``FAILED: verify: drafter exited with code 3 (12.5 s)``: the outcome's word in bold in
    its level's colour, then its message and how long the run took."""
    text = Text(f"{word.upper()}: ", Style(color=pal.colour(LEVEL_ROLES[level]), bold=True))
    text.append(f"{message} ({duration_s:.1f} s)")
    return text


TOP_KEPT = 3  # lines under a dialog's title that toasts never cover


class DialogBox(Vertical):
    """A dialog's box: when its size or place changes, its dialog moves its toasts."""

    def on_resize(self, event: Resize) -> None:
        screen = self.screen
        if isinstance(screen, Dialog):
            screen.place_toasts()


class Dialog(ModalScreen[None]):
    """A modal dialog over the dashboard: one bordered box, titled with what it acts on."""

    NAME: ClassVar[str]  # "restart": the screen's id and its parts' prefix
    AUTO_FOCUS = "#close"  # Enter on a fresh dialog cancels, never confirms
    DEFAULT_CSS = """
    Dialog { align: center middle; }
    Dialog .dialog-box { border: round $primary; background: $surface; padding: 0 1; }
    Dialog .dialog-buttons { height: auto; align-horizontal: right; }
    Dialog .dialog-buttons Button { margin-left: 1; }
    """

    def __init__(self) -> None:
        super().__init__(id=self.NAME)

    # --- layout -------------------------------------------------------------------------
    def frame(self, title: str, *, subtitle: str = "") -> Vertical:
        """The dialog's box (``#NAME-box``) with ``title`` on its border."""
        box = DialogBox(id=f"{self.NAME}-box", classes="dialog-box")
        box.border_title = title
        if subtitle:
            box.border_subtitle = subtitle
        return box

    def static(self, part: str, content: RenderableType = "") -> Static:
        """A part (``#NAME-PART``) that shows text as it is, never as markup."""
        return Static(content, id=f"{self.NAME}-{part}", markup=False)

    def button_row(self) -> Horizontal:
        """The row of buttons at the bottom right (``#NAME-buttons``)."""
        return Horizontal(id=f"{self.NAME}-buttons", classes="dialog-buttons")

    @staticmethod
    def close_button(label: str = "Close") -> Button:
        """``#close``: "Close (Esc)", or "Cancel (Esc)" in a dialog that asks before it acts;
        it has the focus when the dialog opens."""
        return Button(f"{label} (Esc)", id="close", compact=True)

    def offer_close(self) -> None:
        """The action is over (or goes on by itself): ``#close`` says "Close (Esc)", no
        longer "Cancel (Esc)", since there is nothing left to cancel by closing."""
        self.query_one("#close", Button).label = "Close (Esc)"

    def place_toasts(self) -> None:
        """Toasts over the box's last lines: they end just above its buttons (or its bottom
        border) and never reach its title and first ``TOP_KEPT`` lines, wherever the box
        sits and however tall it is (the toast rack is docked to the screen, not the box)."""
        box = self.query_one(f"#{self.NAME}-box")
        racks = self.query(ToastRack)  # none where notifications are off (tests, headless)
        if not box.region.height or not racks:
            return
        buttons = box.query(".dialog-buttons")
        row = buttons.first().region if buttons else None
        bottom = row.y if row is not None and row.height else box.region.bottom - 1
        rack = racks.first()
        rack.styles.margin = (0, 0, max(self.size.height - bottom, 0), 0)
        rack.styles.max_height = max(bottom - (box.region.y + 1 + TOP_KEPT), 1)

    def part(self, part: str) -> Static:
        return self.query_one(f"#{self.NAME}-{part}", Static)

    def show(self, part: str, content: RenderableType, *, visible: bool | None = None) -> None:
        """Update a part; an empty one takes no room unless ``visible`` says otherwise."""
        static = self.part(part)
        static.update(content)
        static.display = bool(content) if visible is None else visible

    @property
    def is_open(self) -> bool:
        """Whether the dialog is still on the screen stack (a worker that outlived its
        closing has nothing left to draw on)."""
        return self.is_attached and self in self.app.screen_stack

    @property
    def palette(self) -> Palette:
        return Palette.from_theme(self.app.current_theme)

    # --- audit and closing --------------------------------------------------------------
    def audit_not_written(self, error: str) -> None:
        """Tell the user that an audit entry could not be written (through the app: the
        dialog may be closing)."""
        self.app.notify(f"audit log not written: {error}", severity="error")

    def before_close(self) -> bool:
        """What closing does first; False keeps the dialog open."""
        return True

    def action_close(self) -> None:
        if self.before_close():
            self.dismiss()

    @on(Button.Pressed, "#close")
    def _close_pressed(self) -> None:
        self.action_close()
