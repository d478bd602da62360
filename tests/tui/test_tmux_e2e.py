"""``gpumon demo`` for real: the installed console script in a detached tmux session (a
private server per test), read back with ``capture-pane`` like a person would see it."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

GPUMON = Path(sys.executable).parent / "gpumon"


class Tmux:
    """One private tmux server with one session running ``gpumon demo``."""

    def __init__(self, tmp: Path) -> None:
        self.socket = f"gpumon-test-{os.getpid()}-{tmp.name}"
        self.tmpdir = tmp / "tmp"  # the simulator's files: every helper's command names it
        self.tmpdir.mkdir()
        self.env = dict(os.environ)
        self.env.update(
            TMPDIR=str(self.tmpdir),
            XDG_STATE_HOME=str(tmp / "state"),
            XDG_CONFIG_HOME=str(tmp / "config"),
            HOME=str(tmp),
            TERM="xterm-256color",
        )
        self.env.pop("GPUMON_CONFIG", None)
        self.env.pop("TMUX", None)

    def run(self, *args: str) -> str:
        out = subprocess.run(
            ["tmux", "-L", self.socket, "-f", "/dev/null", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        return out.stdout

    def start(self, command: list[str], width: int, height: int) -> None:
        self.run(
            "new-session", "-d", "-s", "t", "-x", str(width), "-y", str(height), *command,
            ";", "set-option", "-t", "t", "remain-on-exit", "on",
        )  # fmt: skip

    def screen(self) -> list[str]:
        return self.run("capture-pane", "-p", "-t", "t").splitlines()

    def info(self, fmt: str) -> str:
        return self.run("display-message", "-p", "-t", "t", fmt).strip()

    def wait_for(self, check: Callable[[list[str]], bool], timeout: float, what: str) -> list[str]:
        deadline = time.monotonic() + timeout
        while True:
            lines = self.screen()
            if check(lines):
                return lines
            if time.monotonic() > deadline:
                text = "\n".join(lines)
                pytest.fail(f"timed out waiting for {what}; the screen was:\n{text}")
            time.sleep(0.05)

    def kill(self) -> None:
        subprocess.run(
            ["tmux", "-L", self.socket, "kill-server"], env=self.env, capture_output=True
        )


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Tmux]:
    if shutil.which("tmux") is None:
        pytest.fail("tmux is not installed (apt-get install tmux); .ci/run installs it")
    assert GPUMON.exists(), f"console script missing: {GPUMON}"
    t = Tmux(tmp_path)
    try:
        yield t
    finally:
        t.kill()


def gpu_rows(lines: list[str]) -> dict[int, str]:
    """GPU index -> its first line, for lines that show a memory total."""
    rows = {}
    for line in lines:
        fields = line.replace("▶", " ").split()
        if fields and fields[0].isdigit() and "/95.6G" in line:
            rows[int(fields[0])] = line
    return rows


def processes_mentioning(text: str) -> set[int]:
    """Live processes whose command line contains ``text``."""
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if text in cmdline and alive(int(entry.name)):
                out.add(int(entry.name))
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_demo_in_tmux_lists_every_gpu_relayouts_and_quits(tmux: Tmux, tmp_path: Path) -> None:
    status = tmp_path / "exit-status"
    # sh records gpumon's exit status (tmux's own pane_dead_status is racy in tmux 3.3).
    script = f'{shlex.quote(str(GPUMON))} demo; echo "$?" > {shlex.quote(str(status))}'
    tmux.start(["sh", "-c", script], 80, 24)
    lines = tmux.wait_for(lambda s: len(gpu_rows(s)) == 8, 20, "8 GPU rows")
    rows = gpu_rows(lines)
    assert sorted(rows) == list(range(8))
    assert all("RTX PRO 6000 Bw" in rows[i] for i in range(5))
    assert all("drafter" in rows[i] for i in (5, 6, 7))  # narrow: the owner, not the model
    lines = tmux.wait_for(
        lambda s: any(line.startswith("drafter ") and "/5000" in line for line in s),
        10,
        "the jobs pane with the drafter's step/total",
    )
    job = next(line for line in lines if line.startswith("drafter "))
    assert "running" in job and "5-7" in job
    assert lines[0].startswith("demo") and "connected" in lines[0]
    assert max(len(line) for line in lines) <= 80
    assert "Quit" in lines[-1]  # the footer is on screen, below all 8 rows

    tmux.run("resize-window", "-t", "t", "-x", "200", "-y", "60")
    wide = tmux.wait_for(
        lambda s: (
            "SM clk" in "\n".join(s)
            and sum("procs:" in line for line in s) == 8
            and len(gpu_rows(s)) == 8
        ),
        10,
        "the 200x60 layout (extra columns, 3-line rows)",
    )
    assert max(len(line.rstrip()) for line in wide) > 150  # the room is used
    assert gpu_rows(wide)[0].count("█") > rows[0].count("█")  # a wider memory bar
    assert "RTX PRO 6000 Bw" in gpu_rows(wide)[6] and "drafter" in gpu_rows(wide)[6]  # both

    tmux.run("send-keys", "-t", "t", "q")
    deadline = time.monotonic() + 10
    while not status.exists() or not status.read_text().strip():
        if time.monotonic() > deadline:
            screen = "\n".join(tmux.screen())
            pytest.fail(f"gpumon did not exit on q; the screen was:\n{screen}")
        time.sleep(0.05)
    assert status.read_text().strip() == "0"
    assert tmux.info("#{alternate_on}") == "0"  # the terminal was given back


@pytest.mark.parametrize("how", ["hangup", "SIGTERM"])
def test_demo_cleans_up_when_its_terminal_goes_away_or_on_sigterm(tmux: Tmux, how: str) -> None:
    tmux.start([str(GPUMON), "demo"], 80, 24)
    tmux.wait_for(lambda s: len(gpu_rows(s)) == 8, 20, "8 GPU rows")
    pid = int(tmux.info("#{pane_pid}"))
    sim = str(tmux.tmpdir)
    assert processes_mentioning(sim), "the simulator's tools should be running"
    if how == "hangup":
        tmux.kill()  # the pane's terminal goes away: SIGHUP
    else:
        os.kill(pid, signal.SIGTERM)  # leaves like q
    deadline = time.monotonic() + 15
    while alive(pid) or processes_mentioning(sim):
        left = processes_mentioning(sim) | ({pid} if alive(pid) else set())
        assert time.monotonic() < deadline, f"still running after {how}: {sorted(left)}"
        time.sleep(0.05)
    assert not any(tmux.tmpdir.iterdir()), f"the simulator's files were not cleaned up ({how})"


def test_ctrl_c_quits(tmux: Tmux, tmp_path: Path) -> None:
    status = tmp_path / "exit-status"
    script = f'{shlex.quote(str(GPUMON))} demo; echo "$?" > {shlex.quote(str(status))}'
    tmux.start(["sh", "-c", script], 80, 24)
    tmux.wait_for(lambda s: len(gpu_rows(s)) == 8, 20, "8 GPU rows")
    tmux.run("send-keys", "-t", "t", "C-c")
    deadline = time.monotonic() + 10
    while not status.exists() or not status.read_text().strip():
        assert time.monotonic() < deadline, "gpumon did not exit on Ctrl+C:\n" + "\n".join(
            tmux.screen()
        )
        time.sleep(0.05)
    assert status.read_text().strip() == "0"
    assert not any(tmux.tmpdir.iterdir()), "the simulator's files were not cleaned up"
