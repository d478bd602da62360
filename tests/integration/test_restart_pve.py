"""Issue 37 point 4 on the stand-in Proxmox host (``tests/support/proxmox_host.py``): a
4-rank job runs in CT 200 through ``pct exec``, configured as a user of a Proxmox host
configures it (``container = 200``); it stalls (rank 2 skipped ``all_reduce`` #17: the
real dumps of torch 2.13.0's capture, where its ``TORCH_FR_DUMP_TEMP_FILE`` says), and
``gpumon restart`` keeps each rank's dump and its py-spy stack (the real py-spy, the test
extra's, run by the CT's root) in the bundle, names rank 2 with its PID, names the bundle in
the audit entry, and starts the job again. Skipped with the reason where unshare or
cgroup2 is missing."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from proxmox_host import CT_UID, SYSTEM_PYTHON, ProxmoxHost, alive, skip_reason

from gpumon.backends.actions import audit

from sshd_server import SSHD, SshServer
from upstream_captures import UPSTREAM
from waiting import until

pytestmark = pytest.mark.integration

REASON = skip_reason()
FR_RANK = str(Path(__file__).resolve().parents[1] / "support" / "fr_rank.py")
CAPTURE = UPSTREAM / "flight-recorder" / "torch-2.13.0" / "on-demand"


@pytest.fixture
def pve(tmp_path: Path) -> Iterator[tuple[ProxmoxHost, SshServer, Path]]:
    """The stand-in Proxmox host with CT 200, over the real sshd whose sessions keep job
    records in a state folder CT 200's root (host uid 100000) owns; that folder."""
    if REASON is not None:
        pytest.skip(REASON)
    if not Path(SSHD).exists():
        pytest.fail("OpenSSH server not installed (apt-get install openssh-server)")
    # the sshd sessions' PATH holds this interpreter's folder (tests/support/sshd_server.py)
    if not (Path(sys.executable).parent / "py-spy").exists():
        pytest.fail("py-spy not installed (the test extra: pip install -r requirements-test.lock)")
    host = ProxmoxHost()
    server = SshServer(host.root / "sshd")  # under the host's 0755 root: CT root reads it
    # The CT shares this machine's /tmp (a real CT has its own): its tmux sockets and job
    # records go to folders its root owns.
    state, tmux = host.root / "ct-state", host.root / "tmux"
    for folder in (state, tmux):
        folder.mkdir()
        os.chown(folder, CT_UID, CT_UID)
    try:
        server.setup()
        for tool in ("pct", "nvidia-smi"):  # the stand-in Proxmox host's
            shutil.copy(host.bin / tool, server.bin / tool)
        config = server.root / "sshd_config"
        config.write_text(
            re.sub(
                r"^SetEnv (.*)$",
                rf"SetEnv \1 XDG_STATE_HOME={state} TMUX_TMPDIR={tmux}",
                config.read_text(),
                flags=re.M,
            )
        )
        server.start()
        host.start_container(200)
        yield host, server, state
    finally:
        server.kill()
        host.stop()


def ranks_in_ct(job: str) -> dict[int, tuple[int, int]] | None:
    """The job's 4 ranks (a RANK and its GPUMON_TEST_JOB in their environment), by rank:
    (host PID, CT 200's PID from NSpid); None until all 4 run."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            status = (entry / "status").read_text()
        except OSError:
            continue
        if f"GPUMON_TEST_JOB={job}".encode() not in environ:
            continue
        rank = next((e[5:].decode() for e in environ if e.startswith(b"RANK=")), None)
        nspid = next((ln.split()[1:] for ln in status.splitlines() if ln.startswith("NSpid:")), [])
        if rank is not None and rank.isdigit() and len(nspid) == 2:
            out[int(rank)] = (int(nspid[0]), int(nspid[1]))
    return out if len(out) == 4 else None


def wait_for_ranks(job: str) -> dict[int, tuple[int, int]]:
    found: dict[int, tuple[int, int]] | None = None

    def ranks() -> dict[int, tuple[int, int]] | None:
        nonlocal found
        found = ranks_in_ct(job)
        return found

    asyncio.run(until(ranks, 30, "the job's 4 ranks in CT 200"))
    assert found is not None
    return found


def test_restart_in_a_proxmox_ct_keeps_each_ranks_dump_and_stack_and_names_the_rank(
    pve: tuple[ProxmoxHost, SshServer, Path], client_env: dict[str, str]
) -> None:
    host, server, _ = pve
    name = "t" + uuid.uuid4().hex[:8]
    work = host.root / name  # CT 200's root writes the log here and reads the dumps
    fr = work / "fr"
    fr.mkdir(parents=True)
    for folder in (work, fr):
        os.chown(folder, CT_UID, CT_UID)
    start = f"{SYSTEM_PYTHON} {shlex.quote(FR_RANK)} --ranks 4"
    table = "\n".join(
        [
            f"[hosts.ct200.jobs.{name}]",
            f"start = {json.dumps(start)}",
            f"log = {json.dumps(str(work / 'job.log'))}",
            "verify_s = 0.8",
            "stop_timeout = 5",
            "evidence_s = 30",
            f"[hosts.ct200.jobs.{name}.env]",
            f"TORCH_FR_DUMP_TEMP_FILE = {json.dumps(str(fr / 'trace_rank_'))}",
            'TORCH_FR_BUFFER_SIZE = "2000"',
            f"GPUMON_TEST_JOB = {json.dumps(name)}",
        ]
    )
    cfg = work / "gpumon.toml"
    cfg.write_text(server.config_toml(container=200, python=SYSTEM_PYTHON) + table + "\n")
    gpumon = [sys.executable, "-m", "gpumon.tui.cli", "restart", "--config", str(cfg)]

    def restart() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*gpumon, "ct200", name, "--yes"],
            env=client_env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    pct_calls = host.pct_log.read_text().count("200") if host.pct_log.exists() else 0
    first = restart()
    assert first.returncode == 0, first.stdout + first.stderr
    assert host.pct_log.read_text().count("200") > pct_calls  # it went through pct
    ranks = wait_for_ranks(name)
    # The job stalls: each rank's flight recorder dumped on its watchdog's timeout.
    for rank in range(4):
        dump = fr / f"trace_rank_{rank}"
        shutil.copy(CAPTURE / f"trace_rank_{rank}", dump)
        dump.chmod(0o644)

    second = restart()
    assert second.returncode == 0, second.stdout + second.stderr
    out = second.stdout
    ct_pid = {rank: pids[1] for rank, pids in ranks.items()}
    said = f"{name} stalled: rank 2 (PID {ct_pid[2]}) never entered all_reduce #17 (ranks 0, 1, 3"
    assert said in out, out
    assert out.index(said) < out.index("[stop] stopping")
    [entry] = [e for e in audit.read_entries(client_env) if e["job"] == name][-1:]
    assert entry["outcome"] == "ok" and entry["bundle"], entry
    with tarfile.open(entry["bundle"]) as tar:
        files = {
            m.name.split("/", 1)[1]: f.read()
            for m in tar.getmembers()
            if "/" in m.name and (f := tar.extractfile(m)) is not None
        }
    index = files["index.txt"].decode()
    for rank, pid in ct_pid.items():
        kept = files[f"flight-recorder/trace_rank_{rank}"]
        assert kept == (CAPTURE / f"trace_rank_{rank}").read_bytes()
        assert f"flight-recorder/trace_rank_{rank}" in index
        # py-spy's own header names the process it read, as CT 200 numbers it, and the
        # Python frames of the rank's loop in fr_rank.py
        stack = files[f"py-spy-{pid}.txt"].decode()
        assert stack.startswith(f"Process {pid}: ") and "fr_rank.py" in stack, stack
        assert "rank_main (fr_rank.py:" in stack, stack
        assert f"py-spy-{pid}.txt" in index
    assert files["flight-recorder/analysis.txt"].decode().startswith(said)

    def restarted() -> dict[int, tuple[int, int]] | None:
        now = ranks_in_ct(name)
        return now if now and not set(now.values()) & set(ranks.values()) else None

    assert asyncio.run(until(restarted, 30, "the job's new ranks in CT 200"))
    assert not any(alive(pids[0]) for pids in ranks.values())
