"""Plans as rows: each line of a restart or swap plan is a label, its text, a level and the
step it describes, so the CLI prints them plainly and the TUI styles them by level without
parsing text back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# How a row reads: "ok" (good news: nothing to do), "info" (what will happen), "warning"
# (it runs, but look), "problem" (it must not run as it is).
Level = Literal["ok", "info", "warning", "problem"]


@dataclass(frozen=True, slots=True)
class PlanRow:
    """One line of a plan. ``label`` names what it is (``state``, ``stop``, ``refused``);
    ``step`` is the key of the step the row describes (``"stop"``, ``"install"``), None for
    a row that is no step."""

    label: str
    text: str
    level: Level = "info"
    step: str | None = None


__all__ = ["Level", "PlanRow"]
