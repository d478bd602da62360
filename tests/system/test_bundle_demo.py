"""``gpumon bundle demo --demo-time 70 -o F`` as a user runs it, with a config whose
notifiers hold a token in a URL and name secrets by ``*_env`` variables that are set: F is
0600 and holds the OOM's timeline, snapshots, recording, nvidia-smi report, log tail,
doctor and config, and none of the secrets; a bundle of that recording (``--replay``);
the sglang demo's Xid in the bundle's kernel log (the demo's own, never this machine's);
a step that does not answer within the budget is listed, not waited for."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from gpumon.backends.bundle.archive import BundleArchive
from gpumon.backends.bundle.collect import Budget, _within
from gpumon.backends.bundle.scrub import Scrubber

pytestmark = pytest.mark.system

# CT 201's jupyter-lab holds 6 GiB of GPU 6 from 32 s and outlives the drafter: the cause
HEADLINE = (
    "drafter: CUDA OOM on GPU 6 (tried 2.00 GiB, 90 MiB free; 6.0 GiB held by CT 201 jupyter-lab)"
)
SECRETS = {
    "NTFY_TOKEN": "tk_ntfy_0123456789abcdef",
    "HOOK_URL": "https://hooks.example.org/in/PathSecret0123456789",
    "HOOK_SECRET": "hmac-shared-secret-abcdef",
}
URL_TOKEN = "UrlQueryToken0123456789"
SLACK_PATH = "T0AAAA/B0BBBB/SlackPathSecret0123"
CONFIG = f"""
[notify.phone]
kind = "ntfy"
url = "https://ntfy.example.org/gpu-topic?auth={URL_TOKEN}"
token_env = "NTFY_TOKEN"

[notify.chat]
kind = "slack"
url = "https://hooks.slack.com/services/{SLACK_PATH}"

[notify.hook]
kind = "webhook"
url_env = "HOOK_URL"
secret_env = "HOOK_SECRET"
"""
EXPECTED = {
    "index.txt",
    "incident.json",
    "incident.txt",
    "audit.jsonl",
    "snapshot.json",
    "snapshot-peak.json",
    "processes.json",
    "recording.jsonl.gz",
    "nvidia-smi-q.txt",
    "version.txt",
    "config.json",
    "doctor.json",
}


def gpumon(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpumon.tui.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def _files(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        members = tar.getmembers()
        root = members[0].name.split("/")[0]
        return {
            m.name.removeprefix(root + "/"): tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in members
        }


def _no_secret(files: dict[str, bytes]) -> None:
    for name, data in files.items():
        text = (gzip.decompress(data) if name.endswith(".gz") else data).decode()
        for secret in [*SECRETS.values(), URL_TOKEN, SLACK_PATH]:
            assert secret not in text, (name, secret)


def test_the_demos_oom_bundle_is_complete_private_and_scrubbed(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(CONFIG)
    env = {**os.environ, **SECRETS}
    out = tmp_path / "oom.tar.gz"
    run = gpumon(
        "bundle", "demo", "--demo-time", "70", "-o", str(out), "--config", str(config), env=env
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith(f"{out}: {HEADLINE} (")
    assert os.stat(out).st_mode & 0o777 == 0o600
    files = _files(out)
    assert set(files) >= EXPECTED, sorted(files)
    assert any(name.startswith("logs/") and name.endswith("drafter.log") for name in files)
    index = files["index.txt"].decode()
    for name in files:
        if name != "index.txt":
            assert f"  {name} " in index, name  # every file listed and explained
    # The demo's own kernel log (never this machine's): the OOM is CUDA's, not the kernel's.
    assert files["kernel.txt"] == b"(no Xid or OOM-killer line in the kernel log)\n"
    assert "  kernel.txt " in index and "`tail -n 5000 " in index
    timeline = json.loads(files["incident.json"])
    assert (
        timeline["headline"] == HEADLINE
        and timeline["fix_command"]
        == "fix: stop jupyter-lab (the dashboard's K), then gpumon restart demo drafter"
    )
    kinds = {a["kind"] for a in timeline["alerts"]}
    assert {"cuda_oom", "memory"} <= kinds  # the ramp before the OOM, from the demo's past
    peak = json.loads(files["snapshot-peak.json"])
    gpu6 = next(g for g in peak["gpus"] if g["index"] == 6)
    assert gpu6["memory_used_mib"] > 0.95 * gpu6["memory_total_mib"]  # at the worst, not after
    assert (
        b"Remapped Rows" in files["nvidia-smi-q.txt"] and b"ECC Errors" in files["nvidia-smi-q.txt"]
    )
    assert b"CUDA out of memory" in next(v for k, v in files.items() if k.startswith("logs/"))
    config_json = json.loads(files["config.json"])
    assert (
        config_json["notify"]["notifiers"]["phone"]["url"]
        == ("https://ntfy.example.org/gpu-topic?auth=<redacted>")
        or config_json["notify"]["notifiers"]["phone"]["url"] == "<redacted>"
    )
    assert config_json["notify"]["notifiers"]["hook"]["url_env"] == "HOOK_URL"  # the name stays
    _no_secret(files)

    # The recording inside plays as a bundle of its own, without a machine.
    recording = tmp_path / "demo.jsonl.gz"
    recording.write_bytes(files["recording.jsonl.gz"])
    out2 = tmp_path / "replayed.tar.gz"
    again = gpumon("bundle", "--replay", str(recording), "-o", str(out2), env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    replayed = _files(out2)
    assert {"incident.json", "incident.txt", "recording.jsonl.gz", "snapshot-peak.json"} <= set(
        replayed
    )
    assert json.loads(replayed["incident.json"])["headline"] == HEADLINE
    assert "target: a recording reaches no machine" in replayed["index.txt"].decode()

    # An existing file is never overwritten.
    refused = gpumon("bundle", "--replay", str(recording), "-o", str(out2), env=env)
    assert refused.returncode == 2 and "exists" in refused.stderr


def test_the_demos_xid_is_in_its_bundles_kernel_log(tmp_path: Path) -> None:
    out = tmp_path / "xid.tar.gz"
    args = ("bundle", "demo", "--scenario", "sglang", "--demo-time", "100", "-o", str(out))
    run = gpumon(*args, env=dict(os.environ))
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith(f"{out}: Xid 63 on GPU 3 (running sglang::scheduler_TP0)")
    kernel = _files(out)["kernel.txt"].decode().splitlines()
    assert kernel == [
        "NVRM: GPU at PCI:0000:5d:00: GPU-41e9d3a8-6c0b-47f2-9d15-28ab6e0c3f97",
        "NVRM: Xid (PCI:0000:5d:00): 63, pid='<unknown>', name=<unknown>, "
        "Row Remapper: New row marked for remapping, reset gpu to activate.",
    ]


def test_a_step_that_does_not_answer_in_the_budget_is_listed() -> None:
    async def main() -> BundleArchive:
        archive = BundleArchive(Scrubber(), "title")
        never = asyncio.get_running_loop().create_future()
        assert await _within(archive, Budget.of(0.2), "sglang/30000-metrics.prom", never) is None
        return archive

    archive = asyncio.run(main())
    [(name, why)] = archive.missing_files
    assert name == "sglang/30000-metrics.prom"
    assert why.startswith("no answer within the bundle's time budget")


PY_SPY = """#!/bin/sh
# A stand-in py-spy: says how it was called, as py-spy dump prints a stack.
echo "py-spy $*"
echo 'Thread 874 (idle): "MainThread"'
echo "    all_reduce (torch/distributed/distributed_c10d.py:2501)"
"""


# One whose native unwinding fails (a build without libunwind support for the target).
PY_SPY_NO_NATIVE = """#!/bin/sh
case " $* " in
*" --native "*) echo "Error: native unwinding is not supported here" >&2; exit 1 ;;
esac
echo "py-spy $*"
echo 'Thread 874 (idle): "MainThread"'
echo "    all_reduce (torch/distributed/distributed_c10d.py:2501)"
"""


def test_a_stalled_jobs_processes_are_dumped_where_py_spy_is(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "py-spy").write_text(PY_SPY)
    (bin_dir / "py-spy").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    out = tmp_path / "stall.tar.gz"
    args = ("bundle", "demo", "--scenario", "stall", "--demo-time", "100", "-o", str(out))
    run = gpumon(*args, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "drafter stalled" in run.stdout
    files = _files(out)
    dumps = {name: data.decode() for name, data in files.items() if name.startswith("py-spy-")}
    assert dumps, sorted(files)
    for name, text in dumps.items():
        pid = name.removeprefix("py-spy-").removesuffix(".txt")
        # --native first: the C/CUDA frames under the Python ones
        assert text.startswith(f"py-spy dump --native --pid {pid}\n") and "all_reduce" in text
    # A py-spy whose native unwinding fails: the plain stacks, the failure said.
    (bin_dir / "py-spy").write_text(PY_SPY_NO_NATIVE)
    no_native = tmp_path / "no-native.tar.gz"
    run = gpumon(*args[:-1], str(no_native), env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    files = _files(no_native)
    dumps = {name: data.decode() for name, data in files.items() if name.startswith("py-spy-")}
    assert dumps, sorted(files)
    for name, text in dumps.items():
        pid = name.removeprefix("py-spy-").removesuffix(".txt")
        assert text.startswith(f"py-spy dump --pid {pid}\n"), text
    assert "--native failed" in files["index.txt"].decode()
    # Without py-spy on the target: said, nothing installed, the rest is there.
    plain = tmp_path / "plain.tar.gz"
    env["PATH"] = os.environ["PATH"]
    run = gpumon(*args[:-1], str(plain), env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    files = _files(plain)
    assert not [name for name in files if name.startswith("py-spy-")]
    assert (
        "py-spy: not on the target (gpumon installs nothing there)" in files["index.txt"].decode()
    )
