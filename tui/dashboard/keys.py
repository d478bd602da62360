"""The dashboard's keys, in footer order. Each is an action on the app; ``check_action``
greys out (or, for keys of another mode, hides) what cannot run now.

The footer shows keys in binding order and cuts what does not fit (80 columns hold about
ten), so the order is decided here, once, rather than by the order of the app's base
classes: the keys an on-call person needs first (quit, help, detail, alerts), then the
keys that act on a machine (``actions.ActionsMixin``'s: restart, stop, start, doctor,
torch), then the view keys.
"""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import App
from textual.binding import Binding, BindingType

_SPEED = Binding.Group("Speed", compact=True)
_INTERVAL = Binding.Group("Interval", compact=True)

FIRST_KEYS: list[BindingType] = [
    Binding("q", "quit", "Quit", tooltip="Quit gpumon"),
    Binding("question_mark", "help", "Help", key_display="?", tooltip="This list of keys"),
    Binding("enter", "open_detail", "Detail", tooltip="Detail view of the GPU at the cursor"),
    Binding("a", "alerts", "Alerts", tooltip="Alert history: acknowledge alerts"),
]

VIEW_KEYS: list[BindingType] = [
    Binding("p", "toggle_pause", "Pause", tooltip="Pause or resume updates (or the replay)"),
    Binding(
        "full_stop,n",
        "replay_step",
        "Step",
        key_display=".",
        tooltip="Replay: play the next sample (while paused)",
    ),
    Binding(
        "left_square_bracket",
        "replay_slower",
        "Slower",
        key_display="[",
        group=_SPEED,
        tooltip="Replay: slower",
    ),
    Binding(
        "right_square_bracket",
        "replay_faster",
        "Faster",
        key_display="]",
        group=_SPEED,
        tooltip="Replay: faster",
    ),
    Binding(
        "plus,equals_sign",
        "faster",
        "Faster",
        key_display="+",
        group=_INTERVAL,
        tooltip="Sample faster, on every host",
    ),
    Binding(
        "minus",
        "slower",
        "Slower",
        key_display="-",
        group=_INTERVAL,
        tooltip="Sample slower, on every host",
    ),
    Binding("t", "cycle_theme", "Theme", tooltip="Next colour theme (remembered)"),
    Binding("m", "toggle_spark", "Mem/Util", tooltip="Sparklines: memory or utilisation"),
    Binding("down,j", "cursor(1)", "Next row", show=False),
    Binding("up,k", "cursor(-1)", "Previous row", show=False),
]


def dashboard_keys(action_keys: Sequence[BindingType]) -> list[BindingType]:
    """Every key of the dashboard in footer order, ``action_keys`` after the first ones.
    Textual's own app keys (ctrl+q, ctrl+c) come first, hidden as before."""
    return [*App.BINDINGS, *FIRST_KEYS, *action_keys, *VIEW_KEYS]
