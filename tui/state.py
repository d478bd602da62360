"""What the dashboard remembers between runs: ``$XDG_STATE_HOME/gpumon/state.json``.

The theme and the detail view's plot window. A missing, unreadable or malformed file
reads as "nothing remembered"; a failed write is logged and otherwise ignored: losing a
preference must never stop the dashboard.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from typing import Any

from gpumon.backends.paths import ui_state_file

log = logging.getLogger(__name__)


def load_state() -> dict[str, Any]:
    """The remembered settings; ``{}`` when there are none or the file is unusable."""
    try:
        data = json.loads(ui_state_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def remembered_theme() -> str | None:
    theme = load_state().get("theme")
    return theme if isinstance(theme, str) and theme else None


def remember_theme(name: str) -> None:
    """Store ``name`` as the theme for the next run (other keys are kept)."""
    update_state(theme=name)


def remembered_window() -> float | None:
    """The detail view's plot window chosen last (seconds), or None."""
    window = load_state().get("detail_window")
    return float(window) if isinstance(window, int | float) and window > 0 else None


def remember_window(seconds: float) -> None:
    """Store the detail view's plot window for the next opening and the next run."""
    update_state(detail_window=seconds)


def update_state(**values: Any) -> None:
    """Merge ``values`` into the state file, written atomically."""
    path = ui_state_file()
    data = {**load_state(), **values}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".state-", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)
    except OSError as e:
        log.warning("cannot save %s: %s", path, e)
