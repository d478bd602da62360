"""A hung SSH link (the serving sshd SIGSTOPped: the TCP connection stays up, nothing
answers, nothing closes) against a real sshd on 127.0.0.1: once the stream is quiet the
link is probed (quick SSH keepalives), found hung and replaced by a new connection,
instead of waiting out the idle keepalive (about 20 s, issue 28 point 5); the old
session's agent ends once its sshd runs again. The order of events is asserted, not how
long each step takes (``bench/bench_faults.py --stops`` gives the figures)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path

import pytest

from gpumon.backends.config import load_config, resolve_host
from gpumon.backends.monitor import HostMonitor, make_monitor
from gpumon.backends.transport.ssh import SshTransport

from sshd_server import SshServer, descendants, serving_sshd

pytestmark = pytest.mark.integration


async def until(cond: object, timeout: float, what: str) -> None:
    assert callable(cond)
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("python", ["python3", "/nonexistent/python3"], ids=["agent", "direct"])
async def test_a_hung_link_is_probed_and_replaced(
    sshd: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, python: str
) -> None:
    events: list[str] = []
    probe = SshTransport.probe_link

    def probing(self: SshTransport) -> bool:
        events.append("probe")
        return probe(self)

    monkeypatch.setattr(SshTransport, "probe_link", probing)
    monkeypatch.setenv("GPUMON_SSH_CONFIG", "")
    cfg = tmp_path / "config.toml"
    cfg.write_text(sshd.config_toml(container=200, interval=0.5, python=python))
    monitor: HostMonitor = make_monitor(resolve_host(load_config(cfg), "ct200"))

    async def follow() -> None:  # every state change, in order, with its error
        seen = None
        while True:
            status = (monitor.status.state, monitor.status.error)
            if status != seen:
                events.append(f"{status[0].name}: {status[1]}")
                seen = status
            await asyncio.sleep(0.01)

    monitor.start()
    follower = asyncio.create_task(follow())
    stopped: list[int] = []
    try:
        await until(lambda: monitor.samples >= 3, 30, "first samples")
        old = descendants(sshd.proc.pid) if sshd.proc else []
        stopped = serving_sshd(sshd)
        assert stopped, "no sshd serving the session"
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        at = time.time()
        events.append("stopped")
        await until(
            lambda: monitor.latest is not None and monitor.latest.time > at + 0.5,
            60,
            "fresh data over a new connection",
        )
        events.append("fresh")
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        follower.cancel()
        await monitor.stop()
    after = events[events.index("stopped") :]
    reconnecting = next(i for i, e in enumerate(after) if e.startswith("RECONNECTING"))
    assert "probe" in after[:reconnecting], after
    assert "the link is hung" in after[reconnecting], after
    assert any(e.startswith("CONNECTED") for e in after[reconnecting:-1]), after
    assert after[-1] == "fresh"
    # The old session (sshd, the agent or nvidia-smi under it) ends once sshd runs again.
    gone = [p for p in old if Path(f"/proc/{p}").exists()]
    await until(lambda: not any(Path(f"/proc/{p}").exists() for p in gone), 15, "old session")
