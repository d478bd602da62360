"""``HostProcessFeed``: the GPU processes as the Proxmox host sees them, beside the agent.

When a host has ``container`` set (and ``host_processes`` is not false), each session also
runs ``remote.host_procs`` on the Proxmox host itself, outside ``pct``, over the same
connection (``Transport.open_host_stream``): with the host's Python as a long-lived program
(like the agent), else ``host_procs.SHELL_LOOP`` streamed by ``sh``. Its records reach the
monitor as ``ingest_proc_records("host", ...)``. With ``auto`` a host side that does not
answer, or whose ``/proc`` cannot be read, turns the feed off with one note; with
``true`` the note is said and the feed tried again at the next session.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from gpumon.backends import untrusted
from gpumon.backends.remote import host_procs, protocol
from gpumon.backends.remote.bootstrap import program_argv
from gpumon.backends.transport.base import ProcessStream, Transport, TransportError

from .base import Sink

__all__ = ["HOST_POLL_S", "HostProcessFeed"]

HOST_POLL_S = 3.0  # one poll every few seconds: process lists change rarely
FIRST_ROUND_S = 30.0  # nvidia-smi on a busy host can take seconds; a dead end is said


class HostProcessFeed:
    """One session's host-side collector; ``state`` says what it is doing, in words."""

    def __init__(self, transport: Transport, poll_s: float | None = None) -> None:
        self.transport = transport
        self.poll_s = poll_s
        self.state = "not started"
        self.method: str | None = None  # "python3 (NVML)", "shell loop", None: off
        # A first round came, or the feed was turned off with its note: until then a
        # one-shot answer waits (its processes would otherwise be the container's view).
        self.answered = False

    def wanted(self, sink: Sink) -> bool:
        return sink.host.container is not None and sink.host.host_processes is not False

    def pending(self, sink: Sink) -> bool:
        """Wanted, and neither a first round nor the "off" note has come yet."""
        return self.wanted(sink) and not self.answered

    async def run(self, sink: Sink) -> None:
        """Feed ``sink`` until the session ends (cancelled); returns at once when the host
        side is not wanted, and when it does not work (after saying so)."""
        if not self.wanted(sink):
            self.state = "off (no container)" if sink.host.container is None else "off"
            return
        poll = self.poll_s if self.poll_s is not None else max(HOST_POLL_S, sink.interval)
        try:
            python = await self._find_python()
            proc = self.transport.host_proc_root
            options = {"interval": poll, "nvidia_smi": sink.host.nvidia_smi, "proc": proc}
            if python is not None:
                argv, data = program_argv(
                    python,
                    "host_procs",
                    args=[json.dumps(options)],
                    flags=("-u",),
                )
                self.method = python
                stream = await self.transport.open_host_stream(argv)
                stream.write(data)
                await self._read(sink, stream, self._json_line)
            else:
                self.method = "shell loop"
                argv = ["sh", "-c", host_procs.SHELL_LOOP, "gpumon-host-procs"]
                stream = await self.transport.open_host_stream(
                    [*argv, f"{poll:g}", sink.host.nvidia_smi, proc]
                )
                rounds = host_procs.ShellRound()
                await self._read(sink, stream, lambda line: _shell_line(rounds, line))
        except TransportError as e:
            self._off(sink, f"the Proxmox host did not answer ({e})")

    async def _find_python(self) -> str | None:
        for py in ("python3", "python"):
            res = await self.transport.run(
                [py, "-c", "import sys; print(sys.version_info >= (3, 8))"],
                timeout=15.0,
                on_host=True,
            )
            if res.exit_code == 0 and res.stdout.strip() == "True":
                return py
        return None

    async def _read(
        self,
        sink: Sink,
        stream: ProcessStream,
        parse: Callable[[bytes], tuple[str, list[dict[str, Any]], str | None] | None],
    ) -> None:
        self.state = f"starting ({self.method})"
        got = False
        try:
            while True:
                try:
                    async with asyncio.timeout(None if got else FIRST_ROUND_S):
                        line = await stream.readline()
                except TimeoutError:
                    self._off(sink, f"no answer within {FIRST_ROUND_S:.0f} s")
                    return
                if not line:
                    break
                parsed = parse(line)
                if parsed is None:
                    continue
                source, records, error = parsed
                if error is not None and not any(not r.get("error") for r in records):
                    self._off(sink, error)
                    return
                got = self.answered = True
                self.state = f"on ({self.method})"
                sink.ingest_proc_records(source, records, sink.clock())
        finally:
            await stream.close(grace=1.0)
        tail = stream.stderr_tail()
        if not got:
            self._off(sink, tail.splitlines()[-1] if tail else "the collector ended at once")

    def _json_line(self, line: bytes) -> tuple[str, list[dict[str, Any]], str | None] | None:
        try:
            raw = untrusted.loads(line)
        except ValueError:
            return None
        if not isinstance(raw, dict) or raw.get("type") != protocol.ProcRecords.TYPE:
            return None
        msg = protocol.ProcRecords.from_wire(raw)
        return msg.source or "host", msg.records, msg.error

    def _off(self, sink: Sink, why: str) -> None:
        self.state = f"off: {why}"
        self.method = None
        self.answered = True
        how = "" if sink.host.host_processes is True else " (host_processes = false to not try)"
        sink.ingest_note(
            f"host-side process attribution is off for {sink.name}: {why}; processes are "
            f"listed from inside the container{how}"
        )


def _shell_line(
    rounds: host_procs.ShellRound, line: bytes
) -> tuple[str, list[dict[str, Any]], str | None] | None:
    done = rounds.feed(untrusted.printable_text(line.decode("utf-8", "replace")))
    if done is None:
        return None
    records, error = done
    return "host", records, error
