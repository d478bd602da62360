"""The doctor's probe as it really runs: through its bootstrap on this interpreter, reading
/proc for the users of a venv, and the whole doctor against a real CPU build of torch in a
throwaway venv (a ~20 s install, cached between runs)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpumon.backends.config import HostConfig
from gpumon.backends.remote import doctor_probe_fs
from gpumon.backends.torchenv import probe_argv, run_doctor
from gpumon.backends.transport import LocalTransport

pytestmark = pytest.mark.system


def test_proc_facts_finds_argv_users_but_not_itself(tmp_path: Path) -> None:
    prefix = tmp_path / "my venv"
    marker = str(prefix / "bin" / "python")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", marker])
    try:
        # Popen returns once exec has begun; the new argv shows in /proc a moment later.
        cmdline = Path(f"/proc/{sleeper.pid}/cmdline")
        deadline = time.monotonic() + 10
        while marker.encode() not in cmdline.read_bytes():
            assert time.monotonic() < deadline, "the sleeper never showed its argv"
            time.sleep(0.01)
        found = doctor_probe_fs.proc_facts(str(prefix))
        assert [(p["pid"], p["why"]) for p in found] == [(sleeper.pid, "argv")]
        assert found[0]["argv"][-1] == marker
        mine = doctor_probe_fs.proc_facts(sys.prefix)
        assert os.getpid() not in [p["pid"] for p in mine]
    finally:
        sleeper.kill()
        sleeper.wait()


def test_probe_runs_through_its_bootstrap_on_this_interpreter() -> None:
    options = {"sections": ["python", "torch", "gpu"], "nvidia_smi": "/nonexistent/nvidia-smi"}
    argv, data = probe_argv(sys.executable, options)
    res = subprocess.run(argv, input=data, capture_output=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr.decode()
    facts = json.loads(res.stdout.decode().splitlines()[-1])
    assert facts["python"]["executable"] == sys.executable
    assert facts["gpu"]["smi"] == "missing"
    assert "runtime" not in facts and facts["errors"] == {}


TORCH_SPEC = "torch==2.13.0"


@pytest.fixture(scope="session")
def cpu_torch_venv() -> Iterator[Path]:
    key = hashlib.sha256(f"{sys.version}|{TORCH_SPEC}".encode()).hexdigest()[:12]
    venv = Path(f"/tmp/gpumon-torch-venv-{key}")
    python = venv / "bin" / "python"
    # Other test sessions may share the cache: one builds it, the others wait.
    with open(f"{venv}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / ".complete").exists():
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            res = subprocess.run(
                [str(python), "-m", "pip", "install", "-q", TORCH_SPEC],
                capture_output=True,
                text=True,
                check=False,
            )
            if res.returncode != 0:
                pytest.fail(f"pip install {TORCH_SPEC} failed:\n{res.stderr[-2000:]}")
            (venv / ".complete").write_text(TORCH_SPEC)
    assert python.exists()
    yield venv


def test_doctor_on_a_real_cpu_torch(cpu_torch_venv: Path) -> None:
    python = str(cpu_torch_venv / "bin" / "python")
    host = HostConfig(
        name="local", kind="local", python=python, nvidia_smi="/nonexistent/nvidia-smi"
    )
    report = asyncio.run(run_doctor(LocalTransport(host), host))
    facts = report.facts
    assert facts["torch"]["version"] == "2.13.0+cpu"
    assert facts["torch"]["version_py"]["cuda"] is None
    assert (facts["runtime"]["version"], facts["runtime"]["cuda"]) == ("2.13.0+cpu", None)
    assert facts["runtime"]["available"] is False
    checks = {c.name: c for c in report.checks}
    assert checks["torch"].status == "ok" and "2.13.0+cpu" in checks["torch"].evidence
    assert checks["torch import"].status == "ok"
    assert (checks["torch.version.cuda"].status, checks["torch.version.cuda"].evidence) == (
        "ok",
        "None: CPU build (no NVIDIA GPU seen (nvidia-smi not found))",
    )
    assert checks["cuda available"].status == "n/a"
    assert checks["gpus"].status == "n/a" and checks["arch list"].status == "n/a"
    assert checks["python"].status == "ok" and str(cpu_torch_venv) in checks["python"].evidence
    assert report.exit_code == 0
    assert json.loads(json.dumps(report.to_json()))["python"] == python


def test_proc_facts_leaves_out_gpumon_s_own_python_check(tmp_path: Path) -> None:
    """The agent's version check (``python -c ... gpumon-check``, run on every reconnect)
    started with the venv's Python does not block a swap as a "user of the venv"."""
    from gpumon.backends.remote.doctor_probe_fs import GPUMON_CHECK

    prefix = tmp_path / "venv"
    (prefix / "bin").mkdir(parents=True)
    python = prefix / "bin" / "python"
    python.symlink_to(sys.executable)
    check = subprocess.Popen([str(python), "-c", "import time; time.sleep(30)", GPUMON_CHECK])
    user = subprocess.Popen([str(python), "-c", "import time; time.sleep(30)", "a job"])
    try:
        deadline = time.monotonic() + 10
        for proc in (check, user):
            while str(python).encode() not in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
                assert time.monotonic() < deadline, "the child never showed its argv"
                time.sleep(0.01)
        found = doctor_probe_fs.proc_facts(str(prefix))
        assert [p["pid"] for p in found] == [user.pid]
    finally:
        for proc in (check, user):
            proc.kill()
            proc.wait()


def test_proc_facts_leaves_out_the_children_of_another_probe(tmp_path: Path) -> None:
    """A plan's probe still running (the choice changed a moment ago and a new plan is being
    made) imports torch in a child run with the venv's Python: not a "user of the venv"
    either (it refused test_swap_real's swap back under load)."""
    prefix = tmp_path / "venv"
    (prefix / "bin").mkdir(parents=True)
    python = prefix / "bin" / "python"
    python.symlink_to(sys.executable)
    code = (
        "# a stand-in for gpumon_remote's doctor probe: a torch import in a child\n"
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.argv[2], '-c', 'import time; time.sleep(30)'])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(30)\n"
    )
    probe = subprocess.Popen(
        [sys.executable, "-c", code, "gpumon-doctor_probe", str(python)], stdout=subprocess.PIPE
    )
    user = subprocess.Popen([str(python), "-c", "import time; time.sleep(30)", "a job"])
    child: int | None = None
    try:
        assert probe.stdout is not None
        child = int(probe.stdout.readline())
        deadline = time.monotonic() + 10
        for pid in (child, user.pid):
            while str(python).encode() not in Path(f"/proc/{pid}/cmdline").read_bytes():
                assert time.monotonic() < deadline, "the child never showed its argv"
                time.sleep(0.01)
        found = doctor_probe_fs.proc_facts(str(prefix))
        assert [p["pid"] for p in found] == [user.pid]
    finally:
        for proc in (probe, user):
            proc.kill()
            proc.wait()
        if child is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, 9)
