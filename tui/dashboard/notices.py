"""When a host's connection state changes, what (if anything) to tell the user.

Only transitions are worth a notification: lost (was connected), restored (was lost),
and the first failure of a host that never connected. Retries are in the header.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.notifications import SeverityLevel

from gpumon.backends.model import ConnState

_DOWN = (ConnState.RECONNECTING, ConnState.FAILED)
_SAYS_CANNOT = ("cannot connect", "cannot resolve")  # the transport's errors that say it


@dataclass(frozen=True, slots=True)
class Notice:
    message: str
    title: str
    severity: SeverityLevel
    timeout: float


class ConnectionWatch:
    """Follows one host's connection state; ``change`` says what to announce."""

    def __init__(self, name: str, state: ConnState) -> None:
        self.name = name
        self.state = state
        self.ever_connected = state == ConnState.CONNECTED
        self._told_cannot_connect = False

    def change(self, state: ConnState, error: str | None) -> Notice | None:
        """The notice for moving to ``state`` (None when there is nothing to say)."""
        prev, self.state = self.state, state
        if state == prev:
            return None
        why = error or "no reason given"
        if state == ConnState.CONNECTED:
            restored = self.ever_connected and prev in _DOWN
            self.ever_connected = True
            if restored:
                return Notice(f"{self.name}: connection restored", "Connected", "information", 5)
            return None
        if state not in _DOWN:
            return None
        if prev == ConnState.CONNECTED:
            return Notice(f"{self.name}: connection lost: {why}", "Connection lost", "error", 10)
        if not self.ever_connected and not self._told_cannot_connect:
            self._told_cannot_connect = True
            # the transport's error already says it could not connect ("cannot connect to
            # pve1 port 22: connection refused"): one sentence, not "cannot connect" twice
            said = why if why.startswith(_SAYS_CANNOT) else f"cannot connect: {why}"
            return Notice(f"{self.name}: {said}", "Not connected", "error", 10)
        return None
