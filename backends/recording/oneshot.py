"""One flight recording per incident for the one-shot commands (``check``, ``snapshot``).

A Nagios check runs ``gpumon check`` every minute, each a new process with a new monitor:
a GPU whose memory stays critical would be a new recording every run, one a minute. The
one-shots remember, per host, the incidents open at their last run (by what each is
about: its job, else its GPU, as ``alerts.incident`` groups them, else its kind) with
the recording written for each: ``recordings/.oneshot-HOST.json``. A run whose critical
alert belongs to an incident that was open at the last run, at most ``SAME_INCIDENT_S``
before, with its recording still there, reuses that recording instead of writing one; an
incident no longer open at a run is over, and its next alert starts a new one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path

from gpumon.backends import untrusted
from gpumon.backends.alerts.incident import subject
from gpumon.backends.alerts.store import Alert

log = logging.getLogger(__name__)

__all__ = ["SAME_INCIDENT_S", "OneShotIncidents", "subject_key"]

# A run this long after the last one sees its incidents anew (a check every few minutes
# sees one incident; a run the next morning, a new recording of what is true then).
SAME_INCIDENT_S = 3600.0
VERSION = 1


def subject_key(alert: Alert) -> str:
    """What ``alert`` is about, as text: "job:drafter", "gpu:6"; an alert of neither by its
    kind ("kind:stale_data"): an event's key holds the run's own serial number, which the
    next run's alert of the same incident does not share."""
    _, what, value = subject(alert)
    return f"kind:{alert.kind}" if what == "key" else f"{what}:{value}"


class OneShotIncidents:
    """The incidents of ``host`` open at the last one-shot run, with their recordings
    (``file``); read once, written at the end of this run (``close``)."""

    def __init__(self, file: Path) -> None:
        self.file = file
        self._last: dict[str, str | None] | None = None
        self.written: dict[str, Path] = {}  # this run's recordings, by subject

    def _previous(self, now: float) -> dict[str, str | None]:
        if self._last is None:
            self._last = {}
            try:
                data = untrusted.loads(self.file.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return self._last  # none yet, or unreadable: every incident is new
            when, found = data.get("time"), data.get("open")
            recent = isinstance(when, int | float) and 0 <= now - when <= SAME_INCIDENT_S
            if data.get("version") == VERSION and isinstance(found, dict) and recent:
                self._last = {str(k): v if isinstance(v, str) else None for k, v in found.items()}
        return self._last

    def recording_of(self, alert: Alert, now: float) -> Path | None:
        """The recording an earlier run wrote of ``alert``'s incident, when that incident
        was open at the last run and the file is still there; None: write one."""
        key = subject_key(alert)
        if key in self.written:
            return self.written[key]
        said = self._previous(now).get(key)
        path = Path(said) if said else None
        return path if path is not None and path.is_file() else None

    def wrote(self, alert: Alert, path: Path) -> None:
        self.written[subject_key(alert)] = path

    def close(self, active: Iterable[Alert], now: float) -> None:
        """Remember the incidents open now (``active``: the host's active alerts) with
        their recordings. Raises OSError."""
        previous = self._previous(now)
        found: dict[str, str | None] = {}
        for alert in active:
            key = subject_key(alert)
            path = self.written.get(key)
            found[key] = str(path) if path is not None else previous.get(key) or found.get(key)
        data = {"version": VERSION, "time": now, "open": found}
        self.file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.file.with_name(f"{self.file.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
            tmp.replace(self.file)
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
