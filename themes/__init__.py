"""gpumon's own colour themes and its stylesheet.

Every theme says how "ok", "warning", "critical" and "not reported" look through four
theme variables (``gpumon-ok``, ``gpumon-warning``, ``gpumon-critical``, ``gpumon-na``)
plus ``gpumon-track`` (the empty part of a bar). Textual's built-in themes do not define
them; ``severity_variables`` derives them from ``$success``/``$warning``/``$error``, so
every theme shows the three severities distinctly, plots included.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from textual.color import Color, ColorParseError
from textual.theme import Theme

STYLESHEET = Path(__file__).with_name("gpumon.tcss")
SEVERITY_KEYS = ("gpumon-ok", "gpumon-warning", "gpumon-critical", "gpumon-na", "gpumon-track")

GPUMON_DARK = Theme(
    name="gpumon-dark",
    primary="#4A9EFF",
    secondary="#2F6DB5",
    accent="#C792EA",
    foreground="#D6DEE6",
    background="#0E1217",
    surface="#161C23",
    panel="#1E2630",
    success="#4FBF73",
    warning="#E8A628",
    error="#F0524F",
    dark=True,
    variables={
        "gpumon-ok": "#4FBF73",
        "gpumon-warning": "#E8A628",
        "gpumon-critical": "#F0524F",
        "gpumon-na": "#6B7785",
        "gpumon-track": "#26303B",
    },
)

GPUMON_LIGHT = Theme(
    name="gpumon-light",
    primary="#0A63C9",
    secondary="#3B7DD8",
    accent="#8A3FD1",
    foreground="#1F2328",
    background="#FAFBFC",
    surface="#F0F2F5",
    panel="#E3E7EC",
    success="#1A7F37",
    warning="#A86400",
    error="#C9252D",
    dark=False,
    variables={
        "gpumon-ok": "#1A7F37",
        "gpumon-warning": "#A86400",
        "gpumon-critical": "#C9252D",
        "gpumon-na": "#8C959F",
        "gpumon-track": "#D8DEE4",
    },
)

# Okabe-Ito colours: sky blue / orange / vermillion stay apart for the common kinds of
# colour blindness, where green/red do not. Severity is also carried by glyphs and bold.
GPUMON_CONTRAST = Theme(
    name="gpumon-contrast",
    primary="#56B4E9",
    secondary="#0072B2",
    accent="#F0E442",
    foreground="#FFFFFF",
    background="#000000",
    surface="#0A0A0A",
    panel="#1C1C1C",
    success="#56B4E9",
    warning="#E69F00",
    error="#D55E00",
    dark=True,
    variables={
        "gpumon-ok": "#56B4E9",
        "gpumon-warning": "#E69F00",
        "gpumon-critical": "#D55E00",
        "gpumon-na": "#9A9A9A",
        "gpumon-track": "#333333",
        "footer-key-foreground": "#F0E442",
    },
)

GPUMON_THEMES: tuple[Theme, ...] = (GPUMON_DARK, GPUMON_LIGHT, GPUMON_CONTRAST)
DEFAULT_THEME = GPUMON_DARK.name


_FALLBACK = {
    "gpumon-ok": "ansi_green",
    "gpumon-warning": "ansi_yellow",
    "gpumon-critical": "ansi_red",
    "gpumon-na": "ansi_bright_black",
    "gpumon-track": "ansi_bright_black",
}


def solid_colour(value: str, background: str) -> str | None:
    """``value`` as ``#RRGGBB`` (alpha blended over ``background``), an ``ansi_*`` name
    kept as it is (the terminal's own palette), or None when it cannot be parsed."""
    try:
        colour = Color.parse(value)
    except (ColorParseError, ValueError):
        return None
    if colour.ansi is not None:
        return value.split()[0] if colour.ansi >= 0 else None
    try:
        base = Color.parse(background)
    except (ColorParseError, ValueError):
        base = Color(0, 0, 0)
    if base.ansi is not None:
        base = Color(0, 0, 0) if colour.a == 1 else Color(base.r, base.g, base.b)
    return (base + colour).hex


def severity_variables(theme: Theme) -> dict[str, str]:
    """The five ``gpumon-*`` colours of ``theme``: ``#RRGGBB`` without alpha, or an
    ``ansi_*`` name for Textual's ANSI themes.

    The theme's own ``variables`` win; otherwise they come from its success / warning /
    error colours, a muted foreground and a panel-like track, so built-in themes work.
    """
    system = theme.to_color_system().generate()
    background = system["background"]

    derived = {
        "gpumon-ok": system["success"],
        "gpumon-warning": system["warning"],
        "gpumon-critical": system["error"],
        "gpumon-na": system["foreground-muted"],
        "gpumon-track": system["panel"],
    }
    out = {}
    for key in SEVERITY_KEYS:
        value = solid_colour(theme.variables.get(key, derived[key]), background)
        out[key] = value or _FALLBACK[key]
    return out


def theme_order(available: Mapping[str, Theme]) -> list[str]:
    """Theme names in cycling order: gpumon's own first, then the others by name."""
    own = [t.name for t in GPUMON_THEMES if t.name in available]
    return own + sorted(name for name in available if name not in own)


def choose_theme(
    requested: str | None, remembered: str | None, available: Sequence[str]
) -> tuple[str, str | None]:
    """The theme to start with, and a message when ``requested`` is unknown.

    ``--theme`` wins when it names a theme; an unknown name falls back to the default
    (not to the remembered one: the user asked for something specific and should see it
    did not happen). Without ``--theme``, the remembered theme if it still exists.
    """
    if requested:
        if requested in available:
            return requested, None
        known = ", ".join(sorted(available))
        return DEFAULT_THEME, f"Unknown theme {requested!r}; using {DEFAULT_THEME}. Known: {known}"
    if remembered and remembered in available:
        return remembered, None
    return DEFAULT_THEME, None
