"""doctor and swap-torch over a real sshd through the stand-in ``pct exec 200``, against a
venv (its path has a space and a ';') holding stand-in torch wheels served from a local
PEP 503 index (tests/support/torch_index.py). Simulated GPUs: 8 x sm_120, driver 590.48.01.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpumon.backends.actions import read_entries
from gpumon.backends.paths import torch_seen_log

from sshd_server import SshServer, free_port
from torch_index import IndexServer, build_index, release_bases, standard_bases

pytestmark = pytest.mark.integration
CLI = [sys.executable, "-m", "gpumon.tui.cli"]


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = build_index(tmp_path_factory.mktemp("torch-index"), standard_bases() | release_bases())
    with IndexServer(root) as server:
        yield server.url


@pytest.fixture(scope="module")
def venv_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    return path


def pip(python: Path, *args: str) -> str:
    res = subprocess.run(
        [str(python), "-m", "pip", *args], capture_output=True, text=True, check=True
    )
    return res.stdout


@pytest.fixture
def venv(tmp_path: Path, venv_template: Path, index: str) -> Path:
    """A venv with torch 2.11.0+cu128 and torchvision 0.26.0+cu128 (stand-ins)."""
    path = tmp_path / "target venv; touch pwned"
    shutil.copytree(venv_template, path, symlinks=True)
    pip(
        path / "bin" / "python",
        "install",
        "-q",
        "--index-url",
        f"{index}/good/cu128",
        "torch==2.11.0+cu128",
        "torchvision==0.26.0+cu128",
    )
    return path


def torch_state(venv: Path) -> str:
    code = "import torch, torchvision; print(torch.__version__, torch.version.cuda, torchvision.__version__)"  # noqa: E501
    res = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True)
    return res.stdout.strip()


def config(tmp_path: Path, sshd: SshServer, venv: Path, torch_index: str, extra: str = "") -> str:
    text = sshd.config_toml(
        container=200, python=str(venv / "bin" / "python"), torch_index=torch_index
    )
    path = tmp_path / "config.toml"
    path.write_text(text + extra)
    return str(path)


def gpumon(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def swap(cfg: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return gpumon(["--config", cfg, "swap-torch", "ct200", *args], env)


def outcomes(env: dict[str, str]) -> list[str]:
    return [e["outcome"] for e in read_entries(env) if e["action"] == "swap-torch"]


def test_swap_to_cu130_and_back_verified(
    sshd: SshServer, client_env: dict[str, str], tmp_path: Path, venv: Path, index: str
) -> None:
    cfg = config(tmp_path, sshd, venv, f"{index}/good")
    res = swap(cfg, client_env, "cu130", "--yes")
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.strip().splitlines()[-1] == "swapped to 2.11.0+cu130, verified"
    assert "moves with torch: torchvision 0.26.0+cu128 -> 0.26.0+cu130" in res.stdout
    assert "    | Successfully installed torch-2.11.0+cu130" in res.stdout  # streamed
    assert torch_state(venv) == "2.11.0+cu130 13.0 0.26.0+cu130"
    (freeze,) = (venv / ".gpumon").glob("freeze-*-cu128.txt")
    assert "torch==2.11.0+cu128" in freeze.read_text().splitlines()
    assert set(sshd.pct_log.read_text().split()) == {"200"}
    assert not list(tmp_path.glob("pwned*")) and not Path("pwned").exists()
    assert not (Path.home() / "pwned").exists()

    res = swap(cfg, client_env, "cu128", "--yes")
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.strip().splitlines()[-1] == "swapped to 2.11.0+cu128, verified"
    assert torch_state(venv) == "2.11.0+cu128 12.8 0.26.0+cu128"
    assert outcomes(client_env) == ["started", "swapped", "started", "swapped"]


def test_failed_install_is_rolled_back(
    sshd: SshServer, client_env: dict[str, str], tmp_path: Path, venv: Path, index: str
) -> None:
    cfg = config(tmp_path, sshd, venv, f"{index}/badinstall")
    res = swap(cfg, client_env, "cu130", "--yes")
    assert res.returncode == 1, res.stdout + res.stderr
    last = res.stdout.strip().splitlines()[-1]
    assert last.startswith("install failed: ") and "is invalid" in last
    assert last.endswith("; rolled back to 2.11.0+cu128, verified")
    assert torch_state(venv) == "2.11.0+cu128 12.8 0.26.0+cu128"
    assert outcomes(client_env) == ["started", "rolled-back"]


def test_wrong_variant_after_install_is_rolled_back(
    sshd: SshServer, client_env: dict[str, str], tmp_path: Path, venv: Path, index: str
) -> None:
    cfg = config(tmp_path, sshd, venv, f"{index}/badverify")
    res = swap(cfg, client_env, "cu130", "--yes")
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stdout.strip().splitlines()[-1] == (
        "verification failed: expected 2.11.0+cu130, torch.version.cuda 13.0, got "
        "2.11.0+cu130, torch.version.cuda 12.8; rolled back to 2.11.0+cu128, verified"
    )
    assert "[rollback-install] ok" in res.stdout
    assert torch_state(venv) == "2.11.0+cu128 12.8 0.26.0+cu128"


def test_running_job_refuses_the_swap(
    sshd: SshServer, client_env: dict[str, str], tmp_path: Path, venv: Path, index: str
) -> None:
    argv = [str(venv / "bin" / "python"), "-c", "import time; time.sleep(60)"]
    job = f"\n[hosts.ct200.jobs.train]\ngpus = [0]\nstart = {json.dumps(shlex.join(argv))}\n"
    cfg = config(tmp_path, sshd, venv, f"{index}/good", job)
    sleeper = subprocess.Popen(argv)
    try:
        res = swap(cfg, client_env, "cu130", "--yes")
    finally:
        sleeper.kill()
        sleeper.wait()
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"job train (pid {sleeper.pid}:" in res.stdout
    assert "swap refused: 1 process(es) use" in res.stderr
    assert torch_state(venv) == "2.11.0+cu128 12.8 0.26.0+cu128"
    assert not (venv / ".gpumon").exists()
    assert outcomes(client_env) == ["refused"]


def test_dry_run_changes_nothing_and_shows_the_exact_commands(
    sshd: SshServer, client_env: dict[str, str], tmp_path: Path, venv: Path, index: str
) -> None:
    python = venv / "bin" / "python"
    before = pip(python, "freeze", "--all")
    cfg = config(tmp_path, sshd, venv, f"{index}/good")
    res = swap(cfg, client_env, "cu130", "--dry-run")
    assert res.returncode == 0, res.stdout + res.stderr
    install = [
        str(python),
        "-m",
        "pip",
        "install",
        "--progress-bar",
        "off",
        "--index-url",
        f"{index}/good/cu130",
        "torch==2.11.0+cu130",
        "torchvision==0.26.0+cu130",
    ]
    assert f"    2. {shlex.join(install)}\n" in res.stdout
    assert res.stdout.strip().endswith("dry run: nothing changed")
    assert pip(python, "freeze", "--all") == before
    assert not (venv / ".gpumon").exists()
    assert outcomes(client_env) == []


def test_cu126_is_refused_on_sm120_and_unconfirmed_swaps_too(
    sshd: SshServer, client_env: dict[str, str], tmp_path: Path, venv: Path, index: str
) -> None:
    cfg = config(tmp_path, sshd, venv, f"{index}/good")
    res = swap(cfg, client_env, "cu126", "--yes")
    assert res.returncode == 2
    assert "cu126 has no code for sm_120 (compute capability 12.0" in res.stderr
    res = swap(cfg, client_env, "cu130")  # no --yes, no terminal
    assert res.returncode == 2
    assert "not confirmed: no terminal to ask on; pass --yes" in res.stderr
    assert torch_state(venv) == "2.11.0+cu128 12.8 0.26.0+cu128"
    assert outcomes(client_env) == ["refused", "refused"]


def test_doctor_over_ssh_reports_the_stand_in_torch(
    sshd: SshServer, client_env: dict[str, str], tmp_path: Path, venv: Path, index: str
) -> None:
    cfg = config(tmp_path, sshd, venv, f"{index}/good")
    res = gpumon(["--config", cfg, "doctor", "ct200", "--json"], client_env)
    assert res.returncode == 1, res.stdout + res.stderr  # CUDA unavailable with 8 GPUs present
    data = json.loads(res.stdout)
    assert (data["host"], data["python"]) == ("ct200", str(venv / "bin" / "python"))
    checks = {c["name"]: c for c in data["checks"]}
    assert checks["torch"]["status"] == "ok" and "2.11.0+cu128" in checks["torch"]["evidence"]
    assert checks["gpus"]["evidence"].startswith("8 x NVIDIA RTX PRO 6000")
    assert checks["cuda available"]["status"] == "problem"
    assert checks["arch list"]["status"] == "ok"  # the table: cu128 carries sm_120
    assert checks["driver"]["evidence"].startswith("590.48.01 (nvidia-smi) >= 570.124.06")
    assert checks["torchvision"]["status"] == "ok"
    assert [c["status"] for c in data["checks"] if c["status"] == "problem"] == ["problem"]
    text = gpumon(["--config", cfg, "doctor", "ct200"], client_env)
    assert text.returncode == 1 and "problem  cuda available" in text.stdout
    # Each run noted the torch it found: job_slow names a torch changed outside gpumon.
    seen = [json.loads(line) for line in torch_seen_log(client_env).read_text().splitlines()]
    assert [(e["host"], e["torch"]) for e in seen] == [("ct200", "2.11.0+cu128")] * 2


def test_doctor_unreachable_host_exits_3(client_env: dict[str, str]) -> None:
    res = gpumon(["doctor", f"root@127.0.0.1:{free_port()}", "--json"], client_env)
    assert res.returncode == 3
    assert "cannot connect" in json.loads(res.stdout)["error"]


def test_todays_torch_from_what_the_index_serves(
    sshd: SshServer, client_env: dict[str, str], tmp_path: Path, venv: Path, index: str
) -> None:
    """Issue 17 point 18: the plan asks the configured index from the target (through
    pct exec) which torch versions exist for the variant, in download.pytorch.org's
    layout (tests/support/torch_index.py release_bases): 2.13.0 for cu128 is refused,
    naming what cu128 has; 2.13.0+cu132, which the built-in table knows without an arch
    list, is installed and verified with the torchvision paired with it."""
    cfg = config(tmp_path, sshd, venv, f"{index}/current")
    res = swap(cfg, client_env, "cu128", "--version", "2.13.0", "--dry-run")
    assert res.returncode == 2, res.stdout + res.stderr
    assert (
        f"  refused: torch 2.13.0+cu128 is not on {index}/current/cu128 (cp311 x86_64): "
        "2.9.0, 2.9.1, 2.10.0, 2.11.0\n"
    ) in res.stdout
    res = swap(cfg, client_env, "cu132", "--version", "2.13.0", "--yes")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "moves with torch: torchvision 0.26.0+cu128 -> 0.28.0+cu132" in res.stdout
    assert "warning: the table does not say whether cu132 runs on sm_120" in res.stdout
    assert res.stdout.strip().splitlines()[-1] == "swapped to 2.13.0+cu132, verified"
    assert torch_state(venv) == "2.13.0+cu132 13.2 0.28.0+cu132"
