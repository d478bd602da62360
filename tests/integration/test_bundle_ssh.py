"""``gpumon bundle`` over the real sshd, through ``pct exec 200``: the incident of a CUDA
OOM line in a watched log, the log's tail (scrubbed of the token the job printed), the
simulated ``nvidia-smi -q -d ...`` read on the target, ``pct config 200`` read on the
Proxmox host side, the kernel log said (read or why not), the file 0600."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from sshd_server import SshServer

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
