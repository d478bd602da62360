"""A watched log the agent may not read (permission denied) is said once, naming the
path and the reason, and cleared when it can be read again; the monitor shows it as a
warning alert while it lasts. The agent's LogTail runs as an unprivileged user (root
reads everything), in a child process. A FIFO among the watched logs is no log: said,
never opened for reading (it hung the agent's log thread)."""

from __future__ import annotations

import json
import os
import pwd
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpumon.backends.config import HostConfig
from gpumon.backends.model import Health
from gpumon.backends.monitor import HostMonitor, demo_settings
from gpumon.backends.monitor.sources import AgentSource
from gpumon.backends.monitor.sources.agent import dispatch, handlers
from gpumon.backends.parsers import PROCESS_FIELDS, QUERY_FIELDS
from gpumon.backends.remote import AgentOptions, program_argv, protocol
from gpumon.backends.sim import write_wrapper
from gpumon.backends.transport import LocalTransport

REMOTE = Path(__file__).parents[2] / "backends" / "remote"
# Polls the log on each line of stdin, prints what take_problems() said as JSON.
CHILD = """
import json, sys
sys.path.insert(0, sys.argv[2])
from gpumon_remote.logtail import LogTail
tail = LogTail({"path": sys.argv[1], "tag": "watch"})
for _ in sys.stdin:
    tail.poll()
    print(json.dumps([[p.path, p.problem] for p in tail.take_problems()]), flush=True)
"""

pytestmark = pytest.mark.system


def _user() -> int | None:
    """The unprivileged user to run as (None: this test already is one)."""
    if os.getuid() != 0:
        return None
    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        pytest.skip("no unprivileged user to run the follower as")


def _python(user: int | None) -> str:
    """An interpreter the unprivileged user may run (the venv's may be root's alone)."""
    if user is None:
        return sys.executable
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    pytest.skip("no system python3 for the unprivileged user")


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory the unprivileged user can reach (pytest's tmp_path is root's alone)."""
    with tempfile.TemporaryDirectory(prefix="gpumon-log-") as d:
        os.chmod(d, 0o755)
        yield Path(d)


def test_a_log_that_cannot_be_read_is_said_once_and_cleared(open_dir: Path) -> None:
    """The agent's own files, as shipped (stdlib only), in a package the user can read."""
    user = _user()
    tmp_path = open_dir
    package = tmp_path / "pkg" / "gpumon_remote"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for name in ("logfile.py", "logtail.py", "protocol.py"):
        (package / name).write_text((REMOTE / name).read_text(encoding="utf-8"))
    for d in (package.parent, package):
        d.chmod(0o755)
    log = tmp_path / "train.log"
    log.write_text("a line\n")
    log.chmod(0o600)
    if os.getuid() == 0:
        os.chown(log, 0, 0)
    else:
        log.chmod(0o000)
    child = subprocess.Popen(
        [_python(user), "-c", CHILD, str(log), str(package.parent)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        user=user,
    )
    assert child.stdin is not None and child.stdout is not None

    def poll() -> list[list[object]]:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write("\n")
        child.stdin.flush()
        return json.loads(child.stdout.readline())  # type: ignore[no-any-return]

    try:
        assert poll() == [[str(log), "Permission denied"]]
        assert poll() == []  # said once
        log.chmod(0o644)
        assert poll() == [[str(log), None]]
    finally:
        child.kill()
        child.wait()


def test_the_monitor_shows_an_unreadable_log_as_a_warning_until_it_is_readable() -> None:
    host = HostConfig(name="box", kind="local", kernel_log=False)
    monitor = HostMonitor(host, AgentSource(LocalTransport(host)), record=False)
    table = handlers(monitor, lambda _hello: False)

    def say(problem: str | None) -> None:
        msg = protocol.LogProblem("job:train", "/data/train.log", problem)
        dispatch(monitor, table, protocol.encode(msg).encode())

    say("Permission denied")
    (alert,) = monitor.alerts.active()
    assert alert.severity is Health.WARNING and alert.kind == "log_unreadable"
    assert "/data/train.log" in alert.message and "Permission denied" in alert.message
    say(None)
    assert monitor.alerts.active() == []
    assert [a.kind for a in monitor.alerts.history()] == ["log_unreadable"]


def test_a_fifo_among_the_followed_logs_is_said_and_the_other_logs_still_arrive(
    tmp_path: Path,
) -> None:
    """The real agent (shipped as the target gets it) follows a FIFO and a log: the FIFO
    is ``not a regular file``, said once as a log problem, and a line written to the other
    log after the start arrives. Its blocking open waited for a writer and hung the
    agent's log thread: no log of that host was followed again."""
    fifo = tmp_path / "a-fifo.log"
    os.mkfifo(fifo)
    log = tmp_path / "train.log"
    log.write_text("step 1\n")
    options = AgentOptions(
        fields=list(QUERY_FIELDS),
        process_fields=list(PROCESS_FIELDS),
        nvidia_smi=str(write_wrapper(tmp_path / "bin", demo_settings(demo_time=5, frozen=True))),
        interval=0.5,
        nvml=False,
        logs=[{"path": str(fifo), "tag": "watch"}, {"path": str(log), "tag": "job:train"}],
        log_poll_s=0.1,
    )
    argv, src = program_argv(sys.executable, "agent", args=[options.to_json()], flags=("-u",))
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(src)
    proc.stdin.flush()
    messages: list[dict[str, Any]] = []

    def read_until(found: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
        assert proc.stdout is not None
        deadline = time.monotonic() + 30
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([proc.stdout], [], [], max(left, 0))
            kinds = sorted({m["type"] for m in messages})
            assert ready, f"no {what} in 30 s; the agent sent only {kinds}"
            messages.append(json.loads(proc.stdout.readline()))
            if found(messages[-1]):
                return messages[-1]

    def log_line(text: str) -> Callable[[dict[str, Any]], bool]:
        return lambda m: m["type"] == "log" and m["path"] == str(log) and text in m["lines"]

    try:
        read_until(log_line("step 1"), "backlog of train.log")
        with log.open("a") as f:
            f.write("step 2\n")
        read_until(log_line("step 2"), "new line of train.log")
        said = [m for m in messages if m["type"] == "log_problem"]
        assert [(m["path"], m["problem"]) for m in said] == [(str(fifo), "not a regular file")]
    finally:
        proc.kill()
        proc.wait()
