"""``gpumon demo`` for real: the installed console script in a detached tmux session (a
private server per test), read back with ``capture-pane`` like a person would see it."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from held_demo import HeldDemo

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
        # the pane's size is the terminal's: COLUMNS and LINES exported by whatever runs
        # the tests (a CI runner) would win over it in gpumon (shutil.get_terminal_size)
        # and pin every session, resized or not, to their size
        self.env.pop("COLUMNS", None)
        self.env.pop("LINES", None)

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
    # the owner column names what runs where no job is configured (issue 26.8: was "-"),
    # once the process list came
    lines = tmux.wait_for(lambda s: "train.target" in gpu_rows(s).get(0, ""), 10, "owners")
    rows = gpu_rows(lines)
    assert all(rows[i].replace("▶", " ").split()[1] == "train.target" for i in range(5))
    assert all("drafter" in rows[i] for i in (5, 6, 7))  # the owner, not the model
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


Cell = tuple[str, int | None]  # (character, background: a 256-colour index, None: default)
SGR = re.compile(r"\x1b\[([0-9;]*)m")


def cells_of(line: str) -> list[Cell]:
    """One ``capture-pane -e`` line as (character, background) cells; only 256-colour and
    default backgrounds are tracked (a truecolor one is -1)."""
    out: list[Cell] = []
    bg: int | None = None
    pos = 0
    for m in SGR.finditer(line + "\x1b[m"):
        out += [(ch, bg) for ch in line[pos : m.start()]]
        pos = m.end()
        params = [int(p) if p else 0 for p in m.group(1).split(";")]
        k = 0
        while k < len(params):
            p = params[k]
            if p in (0, 49):
                bg = None
            elif p == 48 and params[k + 1 : k + 2] == [5]:
                bg, k = params[k + 2], k + 2
            elif p == 48 and params[k + 1 : k + 2] == [2]:
                bg, k = -1, k + 4
            elif p in (38, 58) and params[k + 1 : k + 2] == [5]:
                k += 2
            elif p in (38, 58) and params[k + 1 : k + 2] == [2]:
                k += 4
            k += 1
    return out


def is_grey(index: int | None) -> bool:
    """A 256-colour index on the grey ramp (or black / white / the cube's greys)."""
    return index is None or 232 <= index <= 255 or index in (0, 7, 8, 15, 16, 59, 102, 145, 188)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
@pytest.mark.parametrize("colours", ["256", "NO_COLOR"])
def test_an_empty_memory_bar_never_takes_the_cursor_colour(
    tmux: Tmux, size: tuple[int, int], colours: str
) -> None:
    env = ["env", "-u", "COLORTERM", "TERM=screen-256color"]
    if colours == "NO_COLOR":
        env.append("NO_COLOR=1")
    # 70 s: after the OOM, the drafter's GPUs 5 and 7 are empty (CT 201's jupyter keeps
    # its 6 GiB of GPU 6); the cursor is on GPU 0
    tmux.start([*env, str(GPUMON), "demo", "--demo-time", "70"], *size)
    tmux.wait_for(
        lambda s: len(gpu_rows(s)) == 8 and " 0.0/95.6G" in gpu_rows(s)[7], 20, "the empty GPU 7"
    )
    lines = tmux.run("capture-pane", "-p", "-e", "-t", "t").splitlines()
    plain = [SGR.sub("", line) for line in lines]
    rows = {i: cells_of(lines[plain.index(text)]) for i, text in gpu_rows(plain).items()}
    cursor_bg = next(bg for ch, bg in rows[0] if ch == "▶")
    assert "█" in "".join(ch for ch, _ in rows[1])  # a full bar shows as blocks
    empty = rows[7]
    assert "█" not in "".join(ch for ch, _ in empty)
    backgrounds = {bg for _, bg in empty}
    assert cursor_bg not in backgrounds, (cursor_bg, backgrounds)  # the empty bar reads empty
    assert len(backgrounds) >= 2, "the empty bar's track is drawn"
    assert all(is_grey(bg) for bg in backgrounds), backgrounds  # no cube colour like #005F5F
    if colours == "NO_COLOR":
        assert not any("38;2;" in line or "48;2;" in line for line in lines)


def gib_used(row: str) -> float:
    """The used GiB of a GPU row ("82.5/95.6GiB")."""
    field = next(f for f in row.split() if f.endswith("GiB") and "/" in f)
    return float(field.split("/")[0])


@pytest.mark.parametrize(
    ("size", "colours"),
    [((80, 24), "truecolor"), ((120, 40), "truecolor"), ((80, 24), "256"), ((80, 24), "NO_COLOR")],
    ids=["80x24", "120x40", "80x24-256", "80x24-NO_COLOR"],
)
def test_the_story_from_the_oom_to_the_fix_in_one_key(
    tmux: Tmux, size: tuple[int, int], colours: str, tmp_path: Path
) -> None:
    """The drafter dies of its OOM (60 s of scenario time; held at 30 s, before CT 201's
    jupyter comes at 32 s, until the jobs pane shows it running, its log read, so that the
    jupyter's alert knows the drafter's GPU: 7.5 s after the release at 4x); the strip
    offers the fix; r opens the restart dialog from GPU 0 with Cancel focused (Enter closes
    it, nothing runs); r says that the cause is still on GPU 6 before the plan, and y
    restarts it anyway: GPUs 5-7 refill. Also in a 256-colour terminal and with
    NO_COLOR."""
    env = {
        "truecolor": ["env", "COLORTERM=truecolor"],
        "256": ["env", "-u", "COLORTERM", "TERM=screen-256color"],
        "NO_COLOR": ["env", "NO_COLOR=1"],
    }[colours]
    clock = HeldDemo(tmp_path)
    demo = [str(GPUMON), "demo", "--demo-time", "30", "--demo-speed", "4", *clock.args]
    tmux.start([*env, *demo], *size)
    tmux.wait_for(
        lambda s: any("drafter running" in line and "tok/s" in line for line in s),
        30,
        "the drafter running with its rate",
    )
    clock.release()
    # CT 201's jupyter-lab keeps its 6 GiB of GPU 6: the strip names it and offers K first
    held = {5: 1.0, 6: 6.5, 7: 1.0}
    lines = tmux.wait_for(
        lambda s: (
            any("✖" in line and "K stop" in line and "r restart" in line for line in s)
            and any("crashed: OOM on GPU 6" in line for line in s)
            and all(gib_used(gpu_rows(s)[i]) < held[i] for i in (5, 6, 7) if i in gpu_rows(s))
        ),
        30,
        "the crash, its emptied GPUs and the strip's fixes",
    )
    # the strip: the incident (✖) and its fixes, the keys and their words whole at any
    # width (K with its target: never taken for s), at 80 columns the headline cut before
    # them (issue 36), wider its numbers too
    strip = next(line for line in lines if "✖" in line and "K stop" in line)
    assert "CUDA OOM on GPU 6 (tried 2" in strip
    assert "K stop jupyter-lab, r restart drafter" in strip
    if size[0] > 80:
        assert "CUDA OOM on GPU 6 (tried 2.00 GiB, 90 MiB free" in strip
    tmux.run("send-keys", "-t", "t", "r")
    tmux.wait_for(lambda s: any("Restart drafter on demo" in line for line in s), 10, "dialog")
    tmux.wait_for(lambda s: any("Cancel (Esc)" in line for line in s), 10, "the buttons")
    tmux.run("send-keys", "-t", "t", "Enter")  # Cancel has the focus: nothing happens
    tmux.wait_for(lambda s: not any("Restart drafter on demo" in x for x in s), 10, "closed")
    tmux.run("send-keys", "-t", "t", "r")
    # the jupyter, the OOM's cause, is still on GPU 6: said before the plan, K offered;
    # y restarts anyway (issue 36 point 3)
    plan = tmux.wait_for(
        lambda s: (
            any("Restart anyway (y)" in line for line in s)
            and not any("reading the state" in line for line in s)
        ),
        20,
        "the plan",
    )
    said = " ".join(" ".join(line.strip("│ ").split()) for line in plan)
    assert "the cause is still on GPU 6: CT 201 jupyter-lab holds 6.0 GiB" in said, plan
    assert "K stop jupyter-lab first, or restart anyway" in said, plan
    assert said.index("the cause is still") < said.index("wait_free"), plan
    tmux.run("send-keys", "-t", "t", "y")
    # At 80x24 the steps (their GPU summaries name CT 201's jupyter too) may push the
    # outcome line below the dialog's fold: its verified last step says the same.
    tmux.wait_for(
        lambda s: any("OK:" in line or "✓ verify" in line for line in s),
        60,
        "the restart's outcome",
    )
    # done: the dialog offers Close, nothing to cancel any more
    done = tmux.wait_for(lambda s: any("Close (Esc)" in line for line in s), 10, "Close")
    assert not any("Cancel (Esc)" in line or "Cancel run" in line for line in done)
    tmux.run("send-keys", "-t", "t", "Escape")
    tmux.wait_for(
        lambda s: (
            len(gpu_rows(s)) == 8 and all(gib_used(gpu_rows(s)[i]) > held[i] for i in (5, 6, 7))
        ),
        30,
        "GPUs 5-7 filling up again",
    )


def test_the_stall_is_a_warning_with_its_fix_within_30_s_of_the_last_step(
    tmux: Tmux, tmp_path: Path
) -> None:
    """Issue 36, done when: the stall demo at 80x24 shows a warning with its fix within
    30 s of the drafter's last step (30 s of scenario time; its NCCL watchdog, the
    critical, comes at 90 s). Held at 24 s until the jobs pane shows the drafter running,
    so its last steps are read live. The strip cuts the headline, never "r restart
    drafter"; the warning's own words say how long after the last step it came."""
    clock = HeldDemo(tmp_path)
    demo = [str(GPUMON), "demo", "--scenario", "stall", "--demo-time", "24", *clock.args]
    tmux.start(demo, 80, 24)
    tmux.wait_for(
        lambda s: any("drafter running" in line and "tok/s" in line for line in s),
        30,
        "the drafter running with its rate",
    )
    clock.release()
    lines = tmux.wait_for(
        lambda s: any("▲" in line and "stalled" in line for line in s),
        120,
        "the stall's warning on the strip",
    )
    strip = next(line for line in lines if "▲" in line and "stalled" in line)
    assert not any("✖" in line for line in lines), lines  # before the watchdog's critical
    assert "r restart drafter" in strip, strip
    assert len(strip.rstrip()) <= 80
    after = re.search(r"no step for (\d+) s", strip)
    assert after is not None and int(after[1]) < 30, strip


def test_a_config_gpumon_refuses_does_not_stop_the_demo(tmux: Tmux, tmp_path: Path) -> None:
    """The demo needs no config: a broken one is a warning on the screen (with its line),
    and the simulated machine comes up as always."""
    config = tmp_path / "config" / "gpumon" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[hosts.gpu1]\nssh = "root@gpu1"\nintervall = 2\n')
    tmux.start([str(GPUMON), "demo"], 120, 40)
    lines = tmux.wait_for(lambda s: len(gpu_rows(s)) == 8, 20, "8 GPU rows")
    text = tmux.wait_for(lambda s: "(line 3)" in "\n".join(s), 10, "the config warning")
    said = " ".join(line.strip(" ▌▐") for line in text)
    assert "hosts.gpu1.intervall" in said and "the demo needs no config" in said
    assert lines[0].startswith("demo")


def test_fleet_demo_without_config_or_prometheus(tmux: Tmux) -> None:
    tmux.start([str(GPUMON), "fleet", "demo"], 100, 30)
    lines = tmux.wait_for(lambda s: "50 nodes" in "\n".join(s), 20, "the simulated fleet")
    text = "\n".join(lines)
    assert "fleet demo" in text and "2 critical  2 warning" in text
    assert "gpu-node-17" in text and "Xid 79" in text
    assert "UNREACHABLE" not in text
