"""``gpumon bundle`` over the real sshd, through ``pct exec 200``: the incident of a CUDA
OOM line in a watched log, the log's tail (scrubbed of the token the job printed), the
simulated ``nvidia-smi -q -d ...`` read on the target, ``pct config 200`` read on the
Proxmox host side, the kernel log said (read or why not), the file 0600.

Faults (issue 34): a followed log of 64 MiB with no newline is in the bundle, cut to the
per-file cap and said so (it sends no line, and was silently left out); logs named with
an ESC, a bidi override and a newline are read by their real names and shown escaped,
one entry a line; a FIFO, a missing file and a glob matching nothing are said, never
read or waited on; a read stuck on the target (a kernel log read that never returns)
is ended by ``--time`` and killed there; a host that is down gets a bundle of what this
machine has (``gpumon watch``'s recording and outbox), exit 3."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tarfile
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from hostile import forbidden_in
from prometheus_client.parser import text_string_to_metric_families

from gpumon.backends.bundle.archive import FILE_CAP
from gpumon.backends.notify.outbox import Outbox

from prometheus import free_port
from sshd_server import SshServer, processes_matching
from vllm_stand_in import API_KEY, start_vllm, stop_vllm
from waiting import until

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).parents[1] / "fixtures" / "nvidia"
PCT = """#!/bin/sh
# The stand-in pct, with `pct config ID` as Proxmox prints it.
if [ "$1" = config ]; then
cat <<'CONF'
arch: amd64
cores: 32
features: nesting=1
hostname: ct200
memory: 262144
net0: name=eth0,bridge=vmbr0,hwaddr=BC:24:11:5E:7A:01,ip=dhcp,type=veth
ostype: ubuntu
rootfs: local-lvm:vm-200-disk-0,size=500G
swap: 0
lxc.cgroup2.devices.allow: c 195:* rwm
lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file
CONF
exit 0
fi
[ "$1" = exec ] || { echo "pct: only 'exec' and 'config' here" >&2; exit 2; }
shift 2
[ "$1" = -- ] && shift
exec "$@"
"""
HF_TOKEN = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"
# A log name a job on the target may well have been given by its inputs: an ESC starting
# a screen clear, a right-to-left override and a newline.
HOSTILE_NAME = "run\x1b[2J\u202egol\nnext.log"


def _toml_list(paths: list[Path]) -> str:
    """A TOML list of paths: JSON's string escapes (\\n, \\u001b) are TOML's."""
    return "[" + ", ".join(json.dumps(str(p)) for p in paths) + "]"


def _bundle(
    config: Path, out: Path, env: dict[str, str], seconds: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpumon.tui.cli", "--config", str(config), "bundle", "ct200",
         "-o", str(out), "--time", f"{seconds:g}"],
        env=env, capture_output=True, text=True, timeout=seconds + 60,
    )  # fmt: skip


def _files(out: Path) -> dict[str, bytes]:
    with tarfile.open(out) as tar:
        return {
            m.name.split("/", 1)[1]: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
        }


@contextlib.contextmanager
def _releasing(fifo: Path) -> Iterator[None]:
    """Lets go whatever waits to open ``fifo`` for reading, over and over: the agent's
    log follower and the doctor's probe do (their fault, not the bundle's, which never
    opens it), and would otherwise hold the doctor's step to the end of the budget. Were
    the bundle to open it, it would find a file of nothing, not a FIFO said."""
    done = threading.Event()

    def release() -> None:
        while not done.wait(0.1):
            with contextlib.suppress(OSError):  # ENXIO: nobody is waiting now
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    thread = threading.Thread(target=release, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _oom_log(tmp_path: Path) -> Path:
    """A job's log with a CUDA OOM: the incident every bundle here is about."""
    log = tmp_path / "train.log"
    log.write_text("step 1 loss=2.1\n" + (FIXTURES / "torch_oom_traceback.txt").read_text())
    return log


def test_bundle_over_ssh_reads_the_target_and_the_proxmox_host(
    sshd: SshServer, client_env: dict[str, str], tmp_path: Path
) -> None:
    (sshd.bin / "pct").write_text(PCT)
    log = tmp_path / "train.log"
    oom = (FIXTURES / "torch_oom_traceback.txt").read_text()
    log.write_text(f"step 1 loss=2.1\nusing HF_TOKEN={HF_TOKEN}\n{oom}")
    config = tmp_path / "config.toml"
    config.write_text(
        sshd.config_toml(container=200, python=sys.executable) + f'watch_logs = ["{log}"]\n'
    )
    out = tmp_path / "b.tar.gz"
    run = subprocess.run(
        [sys.executable, "-m", "gpumon.tui.cli", "--config", str(config), "bundle", "ct200",
         "-o", str(out), "--time", "60"],
        env=client_env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "CUDA OOM on GPU 6" in run.stdout.splitlines()[0]
    assert os.stat(out).st_mode & 0o777 == 0o600
    with tarfile.open(out) as tar:
        files = {
            m.name.split("/", 1)[1]: tar.extractfile(m).read().decode()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if not m.name.endswith(".gz")
        }
    assert "pct-config.txt" in files and "hostname: ct200" in files["pct-config.txt"]
    assert "lxc.mount.entry: /dev/nvidia0" in files["pct-config.txt"]
    smi = files["nvidia-smi-q.txt"]
    assert "==============NVSMI LOG==============" in smi and smi.count("    Remapped Rows") == 8
    [tail] = [text for name, text in files.items() if name.startswith("logs/")]
    assert "torch.OutOfMemoryError: CUDA out of memory" in tail
    assert HF_TOKEN not in tail and "<redacted>" in tail
    assert all(HF_TOKEN not in text for text in files.values())
    index = files["index.txt"]
    assert "kernel.txt" in index  # read (a file listed) or said why not
    timeline = json.loads(files["incident.json"])
    assert timeline["host"] == "ct200" and timeline["alerts"][0]["kind"] == "cuda_oom"
    assert json.loads(files["config.json"])["host"]["identity"] == ["<redacted>"]


def test_every_followed_log_is_read_by_its_real_name_within_the_caps(
    sshd: SshServer, client_env: dict[str, str], tmp_path: Path
) -> None:
    oom = _oom_log(tmp_path)
    nul = tmp_path / "nul.log"
    with nul.open("wb") as f:  # 64 MiB of NUL bytes (sparse: no disk), not one newline
        f.truncate(64 << 20)
    runs = tmp_path / "runs"  # the config refuses such a name: it comes through a glob
    runs.mkdir()
    hostile = runs / HOSTILE_NAME
    hostile.write_text("a line from the oddly named log\n")
    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)  # nobody writes it: a read would wait for good
    gone = tmp_path / "gone.log"
    none = tmp_path / "none-*.log"
    config = tmp_path / "config.toml"
    config.write_text(
        sshd.config_toml(container=200, python=sys.executable)
        + f"watch_logs = {_toml_list([oom, nul, runs / '*.log', fifo, gone, none])}\n"
    )
    out = tmp_path / "b.tar.gz"
    with _releasing(fifo):
        run = _bundle(config, out, client_env)
    assert run.returncode == 0, run.stdout + run.stderr
    files = _files(out)
    index = files["index.txt"].decode()
    assert forbidden_in(index) == [], index  # no raw ESC, bidi override or stray newline
    logs = {name: data for name, data in files.items() if name.startswith("logs/")}
    entries = [line for line in index.splitlines() if line.startswith("  logs")]
    assert len(logs) == 3 and len(entries) == 6, index  # one line each: 3 read, 3 said

    # The newline-free log: there, cut to the per-file cap, and the index says so.
    [nul_name] = [name for name in logs if name.endswith("nul.log")]
    assert 0 < len(logs[nul_name]) <= FILE_CAP
    assert set(logs[nul_name].decode().split("\\x")) <= {"", "00"}  # NULs, escaped
    [nul_line] = [line for line in entries if line.startswith(f"  {nul_name} ")]
    assert f"{nul}" in nul_line and f"of its {64 << 20} bytes are here" in nul_line
    assert "too large: only the last" in nul_line

    # The hostile name: read by its real name, shown escaped on one line.
    [hostile_name] = [name for name in logs if "next.log" in name]
    assert logs[hostile_name] == b"a line from the oddly named log\n"
    escaped = {"\x1b": "\\x1b", "\u202e": "\\u202e", "\n": "\\x0a"}
    shown = "".join(escaped.get(ch, ch) for ch in str(hostile))
    assert f"the last 2000 lines of {shown}" in index

    # What is not read is said, with why; the FIFO was never opened for reading.
    said = "\n".join(entries)
    assert f"{fifo} is a FIFO, not a regular file" in said
    assert f"{gone}: unreadable: no such file or directory" in said
    assert f"logs ({none}): left out: no file matches" in said
    assert "CUDA out of memory" in next(v for k, v in logs.items() if "train.log" in k).decode()


async def test_a_slow_log_leaves_the_logs_after_it_their_share_of_the_time(
    sshd: SshServer, client_env: dict[str, str], tmp_path: Path
) -> None:
    """Each followed log gets a fair share of what is left of the budget: a first log
    whose read never ends (the target's Python stands in for a 64 MiB tail on a loaded
    machine) is cut at its share, and the job's log after it is still read. It used to
    take the whole budget, and every log after it was "not collected"."""
    slow = tmp_path / "a-slow.log"
    slow.write_text("a line\n")
    python = tmp_path / "python"  # the target's Python, slow for that one log only
    python.write_text(
        f'#!/bin/sh\ncase "$*" in *{bytes(slow).hex()}*) exec sleep 600;; esac\n'
        f'exec {sys.executable} "$@"\n'
    )
    python.chmod(0o755)
    config = tmp_path / "config.toml"
    config.write_text(
        sshd.config_toml(python=str(python))
        + f"watch_logs = {_toml_list([slow, _oom_log(tmp_path)])}\n"
    )
    out = tmp_path / "b.tar.gz"
    run = await asyncio.to_thread(_bundle, config, out, client_env, 30)
    assert run.returncode == 0, run.stdout + run.stderr
    files = _files(out)
    index = files["index.txt"].decode()
    train = [data for name, data in files.items() if name.endswith("train.log")]
    assert len(train) == 1 and b"CUDA out of memory" in train[0], index
    [slow_line] = [line for line in index.splitlines() if "a-slow.log" in line]
    assert "no answer within its share of the bundle's time budget" in slow_line, index


async def test_a_read_stuck_on_the_target_is_ended_by_the_time_budget_and_killed_there(
    sshd: SshServer, client_env: dict[str, str], tmp_path: Path
) -> None:
    """The target's kernel log read never returns (a FIFO nobody writes stands in for a
    wedged /dev/kmsg): the bundle still ends, says which step timed out and what was not
    collected after it, and the stuck command does not outlive it on the target."""
    fifo = tmp_path / "kmsg.fifo"
    os.mkfifo(fifo)
    dmesg = sshd.bin / "dmesg"
    dmesg.write_text(f"#!/bin/sh\nexec cat {fifo}\n")
    dmesg.chmod(0o755)
    config = tmp_path / "config.toml"
    config.write_text(
        sshd.config_toml(python=sys.executable)
        + f"watch_logs = {_toml_list([_oom_log(tmp_path)])}\n"
    )
    out = tmp_path / "b.tar.gz"
    run = await asyncio.to_thread(_bundle, config, out, client_env, 20)
    assert run.returncode == 0, run.stdout + run.stderr
    index = _files(out)["index.txt"].decode()
    assert "  kernel.txt: no answer within the bundle's time budget" in index, index
    assert "not collected: the bundle's time budget was spent" in index, index
    await until(
        lambda: not processes_matching(str(fifo), where="cmdline"),
        10,
        lambda: f"the stuck read killed on the target: {processes_matching(str(fifo), 'cmdline')}",
        step=0.2,
    )


async def test_a_host_that_is_down_gets_a_bundle_of_what_is_here(
    sshd: SshServer, client_env: dict[str, str], tmp_path: Path
) -> None:
    """``gpumon watch`` saw an OOM (its outbox holds the open incident, its flight
    recorder the recording); then the host goes down. The bundle has the incident, the
    recording, the config, the audit log and the version, says why nothing came from the
    host, and exits 3; with nothing recorded here it is an error (2), as before."""
    # an OOM once the watch reads the log opens the incident (one in the log's backlog
    # would be history: issue 34 point 7); a second one: a recording is written of it
    before = tmp_path / "train.log"
    before.write_text("step 1 loss=2.1\n")
    later = tmp_path / "later.log"
    later.write_text("step 1 loss=2.1\n")
    config = tmp_path / "config.toml"
    config.write_text(
        sshd.config_toml(python=sys.executable) + f"watch_logs = {_toml_list([before, later])}\n"
    )
    state = Path(client_env["XDG_STATE_HOME"]) / "gpumon"
    port = free_port()
    watch = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpumon.tui.cli", "watch", "--config", str(config),
        "--metrics-port", str(port),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "watch.log").open("wb"), env=client_env,
    )  # fmt: skip

    def gauge(name: str, kind: str | None = None) -> float:
        """The sum of the watch's exporter's ``name`` samples (of alert ``kind``)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                text = r.read().decode()
        except OSError:
            return 0.0
        return sum(
            s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name == name and (kind is None or s.labels.get("kind") == kind)
        )

    def ooms() -> float:
        """The watch's active CUDA OOM alerts."""
        return gauge("gpumon_alerts_active", "cuda_oom")

    def told() -> list[str]:
        """The open OOM incidents in the watch's outbox."""
        if not (state / "outbox.sqlite3").exists():
            return []
        outbox = Outbox(state / "outbox.sqlite3")
        try:
            return [e.headline for e in outbox.open_incidents() if e.kind == "cuda_oom"]
        finally:
            outbox.close()

    def watched() -> str:
        return (tmp_path / "watch.log").read_text()

    try:
        # Its samples come: the agent read its logs' backlog at its start, before them.
        await until(lambda: gauge("gpumon_agent_up") >= 1, 60, watched, step=0.2, in_thread=True)
        with before.open("a") as f:
            f.write((FIXTURES / "torch_oom_traceback.txt").read_text())
        headlines = await until(told, 60, watched, step=0.2)
        await until(lambda: ooms() >= 1, 60, watched, step=0.2, in_thread=True)
        with later.open("a") as f:
            f.write((FIXTURES / "torch_oom_traceback.txt").read_text())
        await until(lambda: ooms() >= 2, 60, watched, step=0.2, in_thread=True)
    finally:
        watch.send_signal(signal.SIGTERM)  # it writes the pending recording as it stops
        assert await asyncio.wait_for(watch.wait(), 60) == 0
    assert list((state / "recordings").glob("ct200-*.jsonl.gz")), watched()
    sshd.kill()

    out = tmp_path / "down.tar.gz"
    run = await asyncio.to_thread(_bundle, config, out, client_env, 30)
    assert run.returncode == 3, run.stdout + run.stderr
    assert run.stdout.startswith(f"{out}: ") and "CUDA OOM on GPU" in run.stdout.splitlines()[0]
    files = _files(out)
    assert {
        "incident.json",
        "incident.txt",
        "recording.jsonl.gz",
        "audit.jsonl",
        "config.json",
        "version.txt",
        "incident-event.json",
    } <= set(files), sorted(files)
    assert json.loads(files["incident.json"])["alerts"][0]["kind"] == "cuda_oom"
    assert json.loads(files["incident-event.json"])["headline"] in headlines
    index = files["index.txt"].decode()
    assert f"target: host unreachable: cannot connect to 127.0.0.1 port {sshd.port}" in index
    assert "connection refused" in index

    elsewhere = {**client_env, "XDG_STATE_HOME": str(tmp_path / "empty-state")}
    nothing = await asyncio.to_thread(_bundle, config, tmp_path / "none.tar.gz", elsewhere, 30)
    assert nothing.returncode == 2 and not (tmp_path / "none.tar.gz").exists()
    assert (
        "unreachable" in nothing.stderr and "no incident of it is recorded here" in nothing.stderr
    )


def test_a_vllm_servers_section_never_holds_its_api_key(
    sshd: SshServer, client_env: dict[str, str], tmp_path: Path
) -> None:
    """Issue 38 point 5: per vLLM server its ``/metrics``, its output's tail and its
    command line, found with no configuration. The key is masked on the command line and,
    learned there, scrubbed by value everywhere; vLLM prints it at start in its
    non-default args as a list (``'api_key': ['sk-...']``), in the output file and in the
    same file followed as the vLLM log (on main's code it reached logs/ so)."""
    port = free_port()
    output = tmp_path / "vllm-serve.log"
    proc, _ = start_vllm(tmp_path, port, "busy", output=output)
    config = tmp_path / "config.toml"
    config.write_text(
        sshd.config_toml(python=sys.executable)
        + f'watch_logs = ["{_oom_log(tmp_path)}"]\n'
        + f'[hosts.ct200.vllm]\nlog = "{output}"\n'  # ports: discovered
    )
    out = tmp_path / "b.tar.gz"
    try:
        assert API_KEY in output.read_text()  # what vLLM prints
        run = _bundle(config, out, client_env)
    finally:
        stop_vllm(proc)
    assert run.returncode == 0, run.stdout + run.stderr
    files = _files(out)
    assert all(API_KEY.encode() not in data for data in files.values()), [
        name for name, data in files.items() if API_KEY.encode() in data
    ]
    command = files[f"vllm/{port}-command.txt"].decode()
    assert f"serve Qwen/Qwen3-8B --port {port} --api-key **** --tensor-parallel-size 2" in command
    log = files[f"vllm/{port}-log.txt"].decode()
    assert "non-default args: {'model_tag': 'Qwen/Qwen3-8B'" in log
    assert "'api_key': ['<redacted>']" in log
    metrics = files[f"vllm/{port}-metrics.prom"].decode()
    assert 'vllm:num_requests_running{engine="0"' in metrics
    index = files["index.txt"].decode()
    assert f"vllm/{port}-log.txt" in index and str(output) in index
