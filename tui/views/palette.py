"""The one place where cell roles become colours, from the current theme's variables."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from rich.color import Color as RichColor
from rich.color import ColorParseError, ColorSystem
from rich.style import Style
from textual.color import Color as TextualColor
from textual.color import ColorParseError as TextualColorParseError
from textual.theme import Theme

from gpumon.themes import severity_variables, solid_colour
from gpumon.tui.views.gpu_cells import Role

CURSOR_ALPHA = 0.22  # the cursor row's background: $primary at 22 % (``GpuRows``)


@dataclass(frozen=True, slots=True)
class Palette:
    """Colours of one theme as Rich colours. Equal palettes compare equal, so widgets
    can tell whether a theme switch changed anything they draw."""

    ok: str
    warning: str
    critical: str
    na: str
    track: str
    foreground: str
    background: str
    accent: str
    cursor: str | None = None  # the cursor row's background; None: drawn reversed

    @property
    def cursor_style(self) -> Style:
        """The cursor row's background, as ``GpuRows`` draws it ($primary 22%)."""
        return Style(bgcolor=self.cursor) if self.cursor else Style(reverse=True)

    @classmethod
    def from_theme(cls, theme: Theme) -> Palette:
        """Colours as Rich understands them: ``#RRGGBB``, or a standard colour name for
        Textual's ANSI themes (so the terminal's own palette is used)."""
        sev = {k: _rich(v) for k, v in severity_variables(theme).items()}
        system = theme.to_color_system().generate()
        bg = system["background"]
        cursor = _blend(system["primary"], bg, CURSOR_ALPHA)
        return cls(
            ok=sev["gpumon-ok"],
            warning=sev["gpumon-warning"],
            critical=sev["gpumon-critical"],
            na=sev["gpumon-na"],
            track=neutral(sev["gpumon-track"], avoid=cursor, lighter=theme.dark),
            foreground=_rich(solid_colour(system["foreground"], bg) or "ansi_default"),
            background=_rich(solid_colour(bg, bg) or "ansi_default"),
            accent=_rich(solid_colour(system["primary"], bg) or "ansi_blue"),
            cursor=cursor,
        )

    def colour(self, role: Role) -> str:
        """The colour of a role for bars, sparklines and plots (severity colours)."""
        return {
            Role.OK: self.ok,
            Role.WARNING: self.warning,
            Role.CRITICAL: self.critical,
            Role.NA: self.na,
            Role.MUTED: self.na,
        }.get(role, self.foreground)

    def text(self, role: Role, *, stale: bool = False) -> Style:
        """The style of a text cell. "ok" text stays plain: colour is kept for what needs a
        look, so a healthy screen is calm. Stale data is dimmed whatever its role."""
        return _text_style(self, role, stale)

    def fill(self, role: Role) -> Style:
        """The style of a bar or sparkline drawn in a role's colour; NORMAL (a series
        without judgement, like utilisation) takes the theme's accent."""
        return _fill_style(self, role)

    @property
    def track_style(self) -> Style:
        """The empty part of a bar."""
        return _fill_style(self, None)

    def _text(self, role: Role, stale: bool) -> Style:
        if stale:
            return Style(color=self.na, italic=True)
        if role == Role.WARNING:
            return Style(color=self.warning, bold=True)
        if role == Role.CRITICAL:
            return Style(color=self.critical, bold=True)
        if role in (Role.NA, Role.MUTED):
            return Style(color=self.na)
        return Style.null()

    def badge(self, role: Role) -> Style:
        """A reversed block for states that must jump out (PAUSED, STALE)."""
        return Style(color=self.background, bgcolor=self.colour(role), bold=True)

    def rgb(self, role: Role) -> tuple[int, int, int]:
        """An RGB triple for plotext (ANSI colours approximated)."""
        return rgb(self.colour(role))


@functools.lru_cache(maxsize=256)
def _text_style(palette: Palette, role: Role, stale: bool) -> Style:
    return palette._text(role, stale)


@functools.lru_cache(maxsize=256)
def _fill_style(palette: Palette, role: Role | None) -> Style:
    if role is None:
        return Style(bgcolor=palette.track)
    return Style(color=palette.accent if role == Role.NORMAL else palette.colour(role))


def _blend(colour: str, background: str, alpha: float) -> str | None:
    """``colour`` at ``alpha`` over ``background`` as ``#RRGGBB``; None for ANSI colours
    (the terminal's palette is unknown, so there is nothing to blend)."""
    try:
        top, base = TextualColor.parse(colour), TextualColor.parse(background)
    except (ColorParseError, TextualColorParseError, ValueError):
        return None
    if top.ansi is not None or base.ansi is not None:
        return None
    return base.blend(top.with_alpha(1.0), alpha).hex


def neutral(colour: str, *, avoid: str | None = None, lighter: bool = True) -> str:
    """``colour`` as the grey of the same lightness (an ANSI name kept as it is), moved a
    step of the grey ramp (``lighter`` or darker) while it falls on the same 256-colour
    index as ``avoid`` (the cursor row's background).

    A bar's empty track must read as empty on every terminal: in 256 colours (tmux without
    truecolor) a bluish grey like ``#26303B`` becomes the colour cube's ``#005F5F``, the very
    colour the cursor row's background becomes, and an empty bar looks full. Greys map to
    the 256-colour grey ramp."""
    try:
        parsed = RichColor.parse(colour)
    except ColorParseError:
        return colour
    if parsed.triplet is None:
        return colour  # a terminal palette colour: the terminal decides
    r, g, b = parsed.triplet
    grey = round(0.2126 * r + 0.7152 * g + 0.0722 * b)
    step = 10 if lighter else -10  # the grey ramp's spacing
    for _ in range(4):
        text = f"#{grey:02x}{grey:02x}{grey:02x}"
        if avoid is None or _eight_bit(text) != _eight_bit(avoid):
            return text
        grey = min(max(grey + step, 0), 255)
    return text


def _eight_bit(colour: str) -> int | None:
    """The 256-colour index a terminal without truecolor shows ``colour`` as."""
    try:
        return RichColor.parse(colour).downgrade(ColorSystem.EIGHT_BIT).number
    except ColorParseError:
        return None


def _rich(colour: str) -> str:
    """``ansi_bright_red`` -> ``bright_red``, ``ansi_default`` -> ``default``."""
    return colour.removeprefix("ansi_") if colour.startswith("ansi_") else colour


def rgb(colour: str) -> tuple[int, int, int]:
    """``#RRGGBB`` or a Rich colour name as an RGB triple; grey when unknown."""
    try:
        triplet = RichColor.parse(colour).get_truecolor()
    except ColorParseError:
        return (128, 128, 128)
    return (triplet.red, triplet.green, triplet.blue)
