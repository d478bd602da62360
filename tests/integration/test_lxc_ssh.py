"""Issue 10 end to end over the real sshd, on the test Proxmox host of real namespaces
(``tests/support/proxmox_host``): gpumon watches CT 200 through ``pct exec`` and, on the
same connection, collects the GPU processes on the host itself. CT 200's process is
attributed with its inner PID, CT 201's "jupyter" is foreign (flagged, alerted), the
memory no process holds is "not attributed", ``K`` ends the right process through the
host and through ``pct`` and signals nothing when the PID's start time is not the one
listed (a reused PID), the start time read inside the container is the host's, the
fallback without host access lists device-file users, and the doctor says which applies.
Issue 34.2: a server's secrets on its command line and in its log leave in no file of a
bundle and in no snapshot. Skipped with the reason where unshare or cgroup2 is missing.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from proxmox_host import SYSTEM_PYTHON, GpuProc, ProxmoxHost, install_py_spy, skip_reason
from secret_corpus import ARGV, ARGV_SECRETS, CORPUS

from gpumon.backends.actions import audit
from gpumon.backends.actions.kill import KillPlan, Signal, kill_plan, send_signal, wait_gone
from gpumon.backends.config import load_config, resolve_host
from gpumon.backends.model import GpuProcess, ProcessSource
from gpumon.backends.monitor import HostMonitor, make_monitor, snapshot_json
from gpumon.backends.monitor.sources import host_procs as feed
from gpumon.backends.remote.procfacts import parse_stat
from gpumon.backends.sim.scenario import BUS_IDS, UUIDS
from gpumon.backends.torchenv.doctor_procs import process_checks

from sshd_server import SSHD, SshServer
from waiting import until

pytestmark = pytest.mark.integration

REASON = skip_reason()


@dataclass
class Lab:
    host: ProxmoxHost
    server: SshServer
    train: GpuProc
    jupyter: GpuProc
    config: Path
    ct: int = 200  # the container gpumon watches (CT 200 sees every GPU)

    def monitor(self, **extra: object) -> HostMonitor:
        name = f"ct{self.ct}"
        text = self.server.config_toml(
            name, container=self.ct, python=SYSTEM_PYTHON, interval=0.5, **extra
        )
        self.config.write_text(text)
        return make_monitor(resolve_host(load_config(self.config), name), record=False)


def _lab(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, ct: int, gpus: range, train_on: int
) -> Iterator[Lab]:
    """The test Proxmox host with CT ``ct`` given the host's GPUs ``gpus`` (its training
    process on host GPU ``train_on``; 4 GiB no one holds on host GPU 0) and CT 201 every
    GPU (its jupyter on host GPU 6), over the real sshd."""
    if REASON is not None:
        print(f"SKIPPED (no test Proxmox host here): {REASON}")
        pytest.skip(REASON)
    if not Path(SSHD).exists():
        pytest.fail("OpenSSH server not installed (apt-get install openssh-server)")
    monkeypatch.setenv("GPUMON_SSH_CONFIG", "")
    monkeypatch.setattr(feed, "HOST_POLL_S", 1.0)
    host = ProxmoxHost(base_mib=(4096, 0, 0, 0, 0, 0, 0, 0))  # 4 GiB on GPU 0 no one holds
    server = SshServer(host.root / "sshd")  # under the host's 0755 root: CT root reads it
    try:
        server.setup()
        for tool in ("pct", "nvidia-smi"):  # the test Proxmox host's, not the stand-ins
            shutil.copy(host.bin / tool, server.bin / tool)
        server.start()
        host.start_container(ct, tuple(gpus))
        host.start_container(201)
        train = host.start_gpu_process(ct, (train_on,), 30000, "train.py --cfg drafter.yaml")
        jupyter = host.start_gpu_process(201, (6,), 6144, "jupyter-lab --no-browser")
        yield Lab(host, server, train, jupyter, tmp_path / "gpumon.toml", ct)
    finally:
        server.kill()
        host.stop()
    assert not host.cgroup.exists()


@pytest.fixture
def lab(monkeypatch: pytest.MonkeyPatch, state_home: Path, tmp_path: Path) -> Iterator[Lab]:
    yield from _lab(monkeypatch, tmp_path, 200, range(8), 0)


@pytest.fixture
def subset(monkeypatch: pytest.MonkeyPatch, state_home: Path, tmp_path: Path) -> Iterator[Lab]:
    """CT 202 is given the host's GPUs 4-7 (``/dev/nvidia4`` to ``/dev/nvidia7``: the
    host's minors); its nvidia-smi lists them as GPUs 0-3. Its training process holds
    ``/dev/nvidia5`` (GPU 1 there); CT 201's jupyter is on host GPU 6 (CT 202's GPU 2)."""
    yield from _lab(monkeypatch, tmp_path, 202, range(4, 8), 5)


def start_ticks(host_pid: int) -> int:
    """Field 22 of the host's /proc/PID/stat, read here (not through gpumon)."""
    st = parse_stat(Path(f"/proc/{host_pid}/stat").read_text())
    assert st is not None
    return st[1]


def guarded(plan: KillPlan, sig: Signal = "TERM") -> None:
    """The plan's command checks the start time before it signals, and names the PID."""
    line = plan.shell_line(sig)
    assert plan.start_ticks is not None
    assert f'[ "${{20}}" = {plan.start_ticks} ]' in line and f"/proc/{plan.pid}/stat" in line
    assert line.endswith(f"exec kill -s {sig} {plan.pid}'")


async def test_processes_are_attributed_foreign_memory_flagged_and_unattributed_shown(
    lab: Lab,
) -> None:
    monitor = lab.monitor()
    monitor.start()
    try:
        await until(lambda: monitor.host_side_fresh() and monitor.latest is not None, 30, "data")
        procs = {p.host_pid: p for p in monitor.processes}
        mine, theirs = procs[lab.train.host_pid], procs[lab.jupyter.host_pid]
        assert (mine.pid, mine.container, mine.user, mine.source) == (
            lab.train.pid,
            "200",
            "root",
            ProcessSource.HOST,
        )
        assert (theirs.pid, theirs.container, theirs.memory_mib) == (None, "201", 6144)
        assert mine.host_user == "100000" and mine.command and "train.py" in mine.command

        def foreign() -> list[str]:
            return [a.message for a in monitor.alerts.active() if a.kind == "foreign_process"]

        await until(lambda: bool(foreign()), 30, "the foreign_process alert")
        assert foreign() == ["GPU 6: 6.0 GiB held by CT 201 jupyter-lab"]
        data = snapshot_json(monitor, time.time())
        gpu0, gpu6 = data["gpus"][0], data["gpus"][6]
        assert gpu0["memory_unattributed_mib"] == 4096
        [p0] = gpu0["processes"]
        assert (p0["pid"], p0["host_pid"], p0["container"], p0["source"]) == (
            lab.train.pid,
            lab.train.host_pid,
            "200",
            "host",
        )
        assert [p["container"] for p in gpu6["processes"]] == ["201"]
        assert gpu6["processes"][0]["pid"] is None
        assert any(a["kind"] == "foreign_process" for a in data["alerts"])
    finally:
        await monitor.stop()


async def test_k_ends_the_right_process_through_the_host_and_through_pct(lab: Lab) -> None:
    monitor = lab.monitor()
    monitor.start()
    try:
        await until(lambda: monitor.host_side_fresh(), 30, "the host-side list")
        procs = {p.host_pid: p for p in monitor.processes}
        via_host = kill_plan("ct200", procs[lab.jupyter.host_pid], host_access=True, container=200)
        assert via_host.on_host and via_host.pid == lab.jupyter.host_pid
        assert via_host.start_ticks == start_ticks(lab.jupyter.host_pid)
        guarded(via_host)
        outcome = await send_signal(monitor.transport, via_host, "TERM")
        assert outcome.ok, outcome.message
        assert await wait_gone(monitor.transport, via_host, timeout=10)
        assert not lab.jupyter.alive() and lab.train.alive()

        via_pct = kill_plan("ct200", procs[lab.train.host_pid], host_access=False, container=200)
        assert not via_pct.on_host and via_pct.pid == lab.train.pid  # CT 200's own PID
        guarded(via_pct)
        assert via_pct.shell_line("TERM").startswith("pct exec 200 -- sh -c ")
        before = lab.host.pct_log.read_text().count("200")
        outcome = await send_signal(monitor.transport, via_pct, "TERM")
        assert outcome.ok, outcome.message
        assert await wait_gone(monitor.transport, via_pct, timeout=10)
        assert not lab.train.alive()
        assert lab.host.pct_log.read_text().count("200") > before  # it went through pct
        entries = [e for e in audit.read_entries() if e["action"] == "kill"]
        assert [(e["outcome"], e["parameters"]["via"], e["pids"]) for e in entries] == [
            ("ok", "host", [lab.jupyter.host_pid]),
            ("ok", "container", [lab.train.pid]),
        ]
        assert [e["commands"] for e in entries] == [
            [via_host.shell_line("TERM")],
            [via_pct.shell_line("TERM")],
        ]
    finally:
        await monitor.stop()


async def test_a_pid_whose_start_time_is_not_the_listed_one_is_not_signalled(lab: Lab) -> None:
    """A reused PID, simulated by a listed start time one tick off: on the host and
    through pct the check fails on the target, nothing is signalled, the outcome and the
    audit log say so; the same processes then end with the right start time."""
    monitor = lab.monitor()
    monitor.start()
    try:
        await until(lambda: monitor.host_side_fresh(), 30, "the host-side list")
        procs = {p.host_pid: p for p in monitor.processes}
        cases = [(lab.jupyter, True), (lab.train, False)]  # via the host, via pct
        for gp, host_access in cases:
            listed = procs[gp.host_pid]
            assert listed.start_ticks == start_ticks(gp.host_pid)
            assert listed.start_ticks is not None
            other = replace(listed, start_ticks=listed.start_ticks + 1)
            plan = kill_plan("ct200", other, host_access=host_access, container=200)
            signals: tuple[Signal, ...] = ("TERM", "KILL")
            for sig in signals:
                outcome = await send_signal(monitor.transport, plan, sig)
                assert outcome.reused and not outcome.ok, outcome.message
                assert outcome.message.startswith(
                    f"PID {plan.pid} is now a different process; not killed"
                )
                assert f"started at tick {listed.start_ticks}, not {other.start_ticks}" in (
                    outcome.message
                )
            await asyncio.sleep(0.3)
            assert gp.alive()  # not even SIGKILL reached it
            # what was listed counts as ended: that PID is another process's now
            assert await wait_gone(monitor.transport, plan, timeout=0)
        entries = [e for e in audit.read_entries() if e["action"] == "kill"]
        assert [(e["outcome"], e["parameters"]["via"]) for e in entries] == [
            ("refused", "host"),
            ("refused", "host"),
            ("refused", "container"),
            ("refused", "container"),
        ]
        assert all("different process" in e["detail"] for e in entries)
        assert entries[2]["commands"][0].startswith("pct exec 200 -- sh -c ")

        for gp, host_access in cases:  # the listed start time: it ends
            plan = kill_plan("ct200", procs[gp.host_pid], host_access=host_access, container=200)
            outcome = await send_signal(monitor.transport, plan, "TERM")
            assert outcome.ok, outcome.message
            assert await wait_gone(monitor.transport, plan, timeout=10)
            assert not gp.alive()
    finally:
        await monitor.stop()


async def test_without_host_access_the_container_lists_device_file_users(lab: Lab) -> None:
    monitor = lab.monitor(host_processes=False)
    monitor.start()
    try:

        def listed() -> bool:  # which GPU a device file is, the GPUs' sample says
            files = any(p.source == ProcessSource.DEVICE_FILES for p in monitor.processes)
            return files and monitor.latest is not None

        await until(listed, 30, "the device-file users and a sample")
        assert monitor.host_processes_time is None
        files = [p for p in monitor.processes if p.source == ProcessSource.DEVICE_FILES]
        assert [(p.pid, p.gpus, p.memory_mib, p.user) for p in files] == [
            (lab.train.pid, (0,), None, "root")
        ]
        unresolved = {p.host_pid for p in monitor.processes if p.pid is None}
        assert unresolved == {lab.train.host_pid, lab.jupyter.host_pid}  # old driver: host PIDs
        # read in CT 200's own /proc (its PID namespace), the start time is the host's: K's
        # guard compares the same number on either side
        assert files[0].start_ticks == start_ticks(lab.train.host_pid)
        plan = kill_plan("ct200", files[0], host_access=False, container=200)
        guarded(plan)
        outcome = await send_signal(monitor.transport, plan, "TERM")
        assert outcome.ok, outcome.message
        assert await wait_gone(monitor.transport, plan, timeout=10)
        assert not lab.train.alive()
    finally:
        await monitor.stop()


async def test_a_device_file_is_the_gpu_whose_minor_it_is_in_a_container_of_some_gpus(
    subset: Lab,
) -> None:
    """Issue 35.3: CT 202 sees the host's GPUs 4-7, which its nvidia-smi numbers 0-3; a
    process holding ``/dev/nvidia5`` is on GPU 1 there (the GPU whose device minor is 5:
    the agent reads the minors from the driver's ``/proc/driver/nvidia/gpus`` in the CT),
    not on GPU 5, which CT 202 does not have. Before, the minor was taken as the index."""
    monitor = subset.monitor(host_processes=False)
    monitor.start()
    try:

        def listed() -> bool:
            files = any(p.source == ProcessSource.DEVICE_FILES for p in monitor.processes)
            return files and monitor.latest is not None

        await until(listed, 30, "the device-file users and a sample")
        [mine] = [p for p in monitor.processes if p.source == ProcessSource.DEVICE_FILES]
        assert (mine.pid, mine.gpus) == (subset.train.pid, (1,))
        assert mine.minors == (5,)
        assert monitor.latest is not None
        assert [(g.index, g.uuid, g.bus_id, g.minor) for g in monitor.latest.gpus] == [
            (i, UUIDS[4 + i], BUS_IDS[4 + i], 4 + i) for i in range(4)
        ]
        data = snapshot_json(monitor, time.time())
        files = {  # (the driver's rows, host PIDs here, are placed by their UUID)
            g["index"]: [
                (p["pid"], p["gpus"], p["minors"])
                for p in g["processes"]
                if p["source"] == "device-files"
            ]
            for g in data["gpus"]
        }
        assert files == {0: [], 1: [(subset.train.pid, [1], [5])], 2: [], 3: []}
        assert [g["minor"] for g in data["gpus"]] == [4, 5, 6, 7]
    finally:
        await monitor.stop()


async def test_in_that_container_the_hosts_list_is_placed_by_uuid_and_alerts_say_its_index(
    subset: Lab,
) -> None:
    """The Proxmox host's list names each process's GPU by UUID (and bus id): in CT 202
    the training process on host GPU 5 is on GPU 1, CT 201's jupyter on host GPU 6 is
    foreign memory on GPU 2, and the alert says GPU 2 (CT 202's number for it)."""
    monitor = subset.monitor()
    monitor.start()
    try:

        def foreign() -> list[tuple[int | None, str]]:
            found = monitor.alerts.active()
            return [(a.gpu, a.message) for a in found if a.kind == "foreign_process"]

        await until(lambda: monitor.host_side_fresh() and bool(foreign()), 30, "the alert")
        assert foreign() == [(2, "GPU 2: 6.0 GiB held by CT 201 jupyter-lab")]
        data = snapshot_json(monitor, time.time())
        on = {
            g["index"]: [(p["container"], p["host_pid"]) for p in g["processes"]]
            for g in data["gpus"]
        }
        assert on == {
            0: [],
            1: [("202", subset.train.host_pid)],
            2: [("201", subset.jupyter.host_pid)],
            3: [],
        }
    finally:
        await monitor.stop()


@pytest.mark.parametrize(("mode", "translates"), [("host", "no"), ("translate", "yes")])
async def test_doctor_says_host_access_and_whether_the_driver_translates_pids(
    lab: Lab, mode: str, translates: str
) -> None:
    lab.host.set_mode(mode)
    monitor = lab.monitor()
    try:
        host_check, pid_check = await process_checks(monitor.transport, monitor.host)
        assert host_check.status == "ok" and "host access: yes" in host_check.evidence
        assert "containers: 200, 201" in host_check.evidence
        assert f"driver translates PIDs into the container: {translates}" in pid_check.evidence
    finally:
        await monitor.stop()


def _gpumon(lab: Lab, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``gpumon --config CONFIG ARGS`` as a user runs it, against CT 200 (no sglang table:
    discovery is on, and looks inside CT 200)."""
    text = lab.server.config_toml("ct200", container=200, python=SYSTEM_PYTHON, interval=0.5)
    lab.config.write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "gpumon.tui.cli", "--config", str(lab.config), *args],
        env=env, capture_output=True, text=True, timeout=90,
    )  # fmt: skip


def test_the_first_snapshot_has_the_host_side_list_and_the_foreign_process(
    lab: Lab, client_env: dict[str, str]
) -> None:
    """Issue 23: snapshot returned before the host-side collector's first round, so every
    process was the container's view (``container-nvml``, no container) and GPU 6 had no
    ``foreign_process``. The first call now waits for it."""
    res = _gpumon(lab, client_env, "snapshot", "ct200", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    gpu0, gpu6 = data["gpus"][0], data["gpus"][6]
    [mine] = gpu0["processes"]
    assert (mine["container"], mine["pid"], mine["host_pid"], mine["source"]) == (
        "200",
        lab.train.pid,
        lab.train.host_pid,
        "host",
    )
    assert "/train.py " in mine["command"] and "--cfg drafter.yaml" in mine["command"]
    [theirs] = gpu6["processes"]
    assert (theirs["container"], theirs["pid"], theirs["host_pid"]) == (
        "201",
        None,
        lab.jupyter.host_pid,
    )
    assert "/jupyter-lab " in theirs["command"] and "--no-browser" in theirs["command"]
    assert gpu0["memory_unattributed_mib"] == 4096  # on the host-side list: 4 GiB no one holds
    foreign = [a for a in data["alerts"] if a["kind"] == "foreign_process"]
    assert [(a["gpu"], a["message"]) for a in foreign] == [
        (6, "GPU 6: 6.0 GiB held by CT 201 jupyter-lab")
    ]
    assert data["incomplete"] == []


def test_check_judges_foreign_memory_from_the_host_side_list(
    lab: Lab, client_env: dict[str, str]
) -> None:
    res = _gpumon(lab, client_env, "check", "ct200", "--window", "0")
    assert res.returncode == 1, res.stdout + res.stderr
    [line] = res.stdout.splitlines()
    assert line.startswith("WARNING ct200: GPU 6: 6.0 GiB held by CT 201 jupyter-lab"), line
    assert "incomplete" not in line


def test_a_host_side_list_that_does_not_come_is_named_not_replaced_silently(
    lab: Lab, client_env: dict[str, str]
) -> None:
    """The Proxmox host's nvidia-smi hangs on its process query (the container's answers):
    the snapshot waits its 10 s, then names the source that did not answer; the
    container's own view stands in, and says it is that."""
    smi = lab.server.bin / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        'case "$*" in *--query-compute-apps*)\n'
        "  grep -q /lxc/ /proc/self/cgroup || exec sleep 600;;\n"
        "esac\n"
        f'exec {lab.host.bin / "nvidia-smi"} "$@"\n'
    )
    res = _gpumon(lab, client_env, "snapshot", "ct200", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["incomplete"] == ["host processes: no answer in 10 s"]
    procs = [p for g in data["gpus"] for p in g["processes"]]
    assert procs and all(p["source"] != "host" for p in procs)
    text = _gpumon(lab, client_env, "snapshot", "ct200")
    assert "\nincomplete: host processes: no answer in 10 s\n" in text.stdout, text.stdout
    # The container's own view in the dashboard's words (``process_columns``), not the
    # source's name cut to ``contain`` (issue 26.4): a driver PID that is no process here
    # is "?" with its host PID, a device-file user is "files".
    wheres = {row.split()[1] for row in text.stdout.splitlines() if re.match(r"  \d  ", row)}
    assert {"?", "files"} <= wheres and "contain" not in wheres, text.stdout
    said = r"\n  0  \?        h\d+ +\? +[\d.]+ +n/a  n/a  \[not visible from here\]\n"
    assert re.search(said, text.stdout)


def test_no_secret_of_a_servers_command_line_or_its_log_leaves_in_a_bundle_or_snapshot(
    lab: Lab, client_env: dict[str, str], tmp_path: Path
) -> None:
    """Issue 34.2: CT 200 runs a stand-in SGLang server started with ``--api-key KEY``,
    ``--password=...``, ``--hf-token ...``, ``--ssl-keyfile-password ...`` on GPU 1, and
    its followed log holds every secret shape of the corpus (and a CUDA OOM: the
    incident). No secret is in any file of ``gpumon bundle`` (the recording decompressed),
    nor in ``snapshot`` (text, ``--wide``, ``--json``); the flags are, their values masked."""
    lab.host.start_gpu_process(200, (1,), 20000, "launch_server.py " + " ".join(ARGV))
    logs = lab.host.root / "logs"  # under the 0755 root: CT 200's root reads it
    logs.mkdir(mode=0o755)
    log = logs / "sglang.log"
    oom = (Path(__file__).parents[1] / "fixtures/nvidia/torch_oom_traceback.txt").read_text()
    log.write_text("\n".join(text for text, _ in CORPUS) + "\n" + oom)
    log.chmod(0o644)
    config = lab.server.config_toml("ct200", container=200, python=SYSTEM_PYTHON, interval=0.5)
    lab.config.write_text(config + f'watch_logs = ["{log}"]\n')
    secrets = [*ARGV_SECRETS, *(secret for _, secret in CORPUS)]
    masked = "--api-key **** --password=**** --hf-token **** --ssl-keyfile-password ****"

    def gpumon(*args: str) -> str:
        res = subprocess.run(
            [sys.executable, "-m", "gpumon.tui.cli", "--config", str(lab.config), *args],
            env=client_env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert res.returncode == 0, res.stdout + res.stderr
        leaked = [s for s in secrets if s in res.stdout + res.stderr]
        assert not leaked, (args, leaked)
        return res.stdout

    out = tmp_path / "b.tar.gz"
    gpumon("bundle", "ct200", "-o", str(out), "--time", "60")
    files: dict[str, str] = {}
    with tarfile.open(out) as tar:
        for member in tar.getmembers():
            data = tar.extractfile(member).read()  # type: ignore[union-attr]
            if member.name.endswith(".gz"):
                data = gzip.decompress(data)
            files[member.name.split("/", 1)[1]] = data.decode()
    assert {"processes.json", "snapshot.json", "recording.jsonl.gz"} <= set(files)
    for name, text in files.items():
        leaked = [s for s in secrets if s in text]
        assert not leaked, (name, leaked)
    for name in ("processes.json", "snapshot.json", "recording.jsonl.gz"):
        assert masked in files[name], name
    [tail] = [text for name, text in files.items() if name.startswith("logs/")]
    assert "--api-key <redacted> --port 30000" in tail and "X-Api-Key: <redacted>" in tail

    data = json.loads(gpumon("snapshot", "ct200", "--json"))
    [server] = data["gpus"][1]["processes"]
    assert server["container"] == "200" and masked in server["command"]
    assert re.search(r"\n  1  CT200 +\d+ +root", gpumon("snapshot", "ct200"))  # cut at 80
    assert masked in gpumon("snapshot", "ct200", "--wide")


async def test_evidence_takes_stacks_from_the_proxmox_host_where_the_ct_forbids_ptrace(
    lab: Lab, tmp_path: Path
) -> None:
    """py-spy (a stand-in: tests/support/proxmox_host.py PY_SPY) fails in the unprivileged
    CT as ptrace is forbidden there; the evidence step dumps the CT's process by its host
    PID on the Proxmox host instead, and the index says so."""
    from gpumon.backends.actions import JobTarget
    from gpumon.backends.bundle.evidence import keep_evidence
    from gpumon.backends.config import JobConfig

    install_py_spy(lab.server.bin)
    monitor = lab.monitor()
    monitor.start()
    try:
        await until(lambda: monitor.host_side_fresh(), 30, "the host-side list")
        target = JobTarget.from_monitor(monitor)
        kept = await keep_evidence(
            target, JobConfig(name="train"), (lab.train.pid,), 30, lambda _: None, folder=tmp_path
        )
    finally:
        await monitor.stop()
    assert kept.bundle is not None and "1 py-spy stack" in kept.summary, kept.summary
    with tarfile.open(kept.bundle) as tar:
        files = {
            m.name.split("/", 1)[1]: f.read().decode()
            for m in tar.getmembers()
            if "/" in m.name and (f := tar.extractfile(m)) is not None
        }
    stack = files[f"py-spy-{lab.train.pid}.txt"]
    assert stack.startswith(f"Process {lab.train.host_pid}: ") and "train.py" in stack
    index = files["index.txt"]
    assert (
        f"`py-spy dump --native --pid {lab.train.host_pid}` on the Proxmox host (CT 200's PID"
        in index
    )
    assert "Permission Denied" in index  # why the CT's own py-spy did not take it


def bundle_files(path: str) -> dict[str, str]:
    """A bundle's files by their names inside it, as text."""
    with tarfile.open(path) as tar:
        return {
            m.name.split("/", 1)[1]: f.read().decode()
            for m in tar.getmembers()
            if "/" in m.name and (f := tar.extractfile(m)) is not None
        }


async def kill_on_the_dashboard(lab: Lab, host_pid: int) -> tuple[GpuProcess, str, dict[str, str]]:
    """K of the process of ``host_pid`` on CT 200's dashboard (the real app, its kill
    dialog, ``y``), once the host-side list has it: the process as listed, the dialog's
    evidence line and the bundle the audit's kill names."""
    from gpumon.tui.app import GpumonApp
    from gpumon.tui.screens.kill import KillScreen

    monitor = lab.monitor()
    app = GpumonApp([monitor])
    async with app.run_test(size=(130, 45)) as pilot:

        def listed() -> GpuProcess | None:
            procs = monitor.processes if monitor.host_side_fresh() else ()
            return next((p for p in procs if p.host_pid == host_pid), None)

        process = await until(listed, 30, f"host PID {host_pid} listed", pause=pilot.pause)
        assert process is not None  # until returned it: listed
        app.dashboard.actions.open_kill(monitor, process, None)
        dialog = await until(
            lambda: app.screen if isinstance(app.screen, KillScreen) else None,
            10,
            "the kill dialog",
            pause=pilot.pause,
        )
        assert dialog is not None and dialog.plan.on_host and dialog.plan.pid == host_pid
        await pilot.press("y")
        await until(
            lambda: dialog.state == "done", 60, lambda: str(dialog.messages), pause=pilot.pause
        )
        said = dialog.messages[0]
    [entry] = [e for e in audit.read_entries() if e["action"] == "kill"]
    assert entry["outcome"] == "ok" and entry["bundle"] == dialog.bundle, entry
    return process, said, bundle_files(entry["bundle"])


async def test_k_of_another_containers_process_keeps_its_stacks_taken_on_the_proxmox_host(
    lab: Lab,
) -> None:
    """K of CT 201's jupyter on CT 200's dashboard (no PID of it in CT 200: the plan
    signals its host PID on the Proxmox host): before the signal the host's py-spy (the
    stand-in, tests/support/proxmox_host.py PY_SPY) takes its stacks by that host PID;
    the index says which side took them and why, the dialog's evidence line counts them
    and the audit's kill names the bundle. The flight recorder is read in CT 200 only:
    the index says so. (Before: ``kill_evidence`` passed no PID, and kept no stacks.)"""
    install_py_spy(lab.server.bin)
    host_pid = lab.jupyter.host_pid
    process, said, files = await kill_on_the_dashboard(lab, host_pid)
    assert process.pid is None and process.container == "201"
    assert said.startswith("evidence kept in ") and ": 1 py-spy stack," in said, said
    stack = files[f"py-spy-{host_pid}.txt"]
    assert stack.startswith(f"Process {host_pid}: ") and "jupyter-lab" in stack, stack
    index = files["index.txt"]
    assert (
        f"`py-spy dump --native --pid {host_pid}` on the Proxmox host (CT 201 jupyter-lab, "
        f"host PID {host_pid}) (a process of "
    ) in index, index
    flight = "flight-recorder: not read (nor an SGLang server's parts): no PID in the watched"
    assert flight in index, index


async def test_k_of_the_watched_containers_process_by_its_host_pid_keeps_its_stacks(
    lab: Lab,
) -> None:
    """K of CT 200's own training process, with the host-side list current: the plan
    signals its host PID, but it has a PID in CT 200, so its evidence is kept as for any
    of CT 200's processes (here the stand-in py-spy fails in the CT and the host's takes
    the stacks: the fallback). (Before: a host-side plan kept no stacks at all.)"""
    install_py_spy(lab.server.bin)
    process, said, files = await kill_on_the_dashboard(lab, lab.train.host_pid)
    assert process.pid == lab.train.pid and process.container == "200"
    assert ": 1 py-spy stack," in said, said
    stack = files[f"py-spy-{lab.train.pid}.txt"]
    assert stack.startswith(f"Process {lab.train.host_pid}: ") and "train.py" in stack, stack
    assert f"on the Proxmox host (CT 200's PID {lab.train.pid}" in files["index.txt"]


async def test_k_evidence_says_why_without_the_proxmox_hosts_side(lab: Lab, tmp_path: Path) -> None:
    """The Proxmox host's side not reachable (its process list not current: here never
    collected, ``host_processes = false``): the stacks of a process known by its host
    PID only are not taken, and the index says why (never silent)."""
    from gpumon.backends.actions import JobTarget
    from gpumon.backends.bundle.evidence import keep_evidence
    from gpumon.backends.config import JobConfig

    install_py_spy(lab.server.bin)
    host_pid = lab.jupyter.host_pid
    monitor = lab.monitor(host_processes=False)
    monitor.start()
    try:
        await until(lambda: monitor.latest is not None, 30, "the first sample")
        assert not monitor.host_side_fresh()
        kept = await keep_evidence(
            JobTarget.from_monitor(monitor),
            JobConfig(name="jupyter"),
            (),
            30,
            lambda _: None,
            folder=tmp_path,
            host_pids=(host_pid,),
        )
    finally:
        await monitor.stop()
    assert kept.bundle is not None and "0 py-spy stacks" in kept.summary, kept.summary
    assert f"py-spy-{host_pid}.txt" in kept.summary, kept.summary  # not kept: see the index
    files = bundle_files(kept.bundle)
    assert f"py-spy-{host_pid}.txt" not in files
    assert (
        f"py-spy-{host_pid}.txt: another container's or the host's process, host PID {host_pid}: "
        "not "
        "dumped: the Proxmox host is not reachable now (its process list is not current)"
    ) in files["index.txt"], files["index.txt"]


NCCL_ENV = {"NCCL_DEBUG": "INFO", "NCCL_IB_AUTH_TOKEN": "s3cr3t-nccl-value-123"}


async def test_e_reads_the_environment_through_pct_and_on_the_host(lab: Lab) -> None:
    """Issue 39: the detail view's ``e`` (``read_environment``, the dashboard's own call)
    on a rank in CT 200: inside the container by its own PID through ``pct exec``, and on
    the host by its host PID; NCCL_* shows, the token's value is redacted on both."""
    from gpumon.backends.bundle import read_environment
    from gpumon.backends.bundle.scrub import REDACTED

    rank = lab.host.start_gpu_process(200, (1,), 2048, "rank1.py --rank 1", env=NCCL_ENV)
    monitor = lab.monitor()
    monitor.start()
    try:
        await until(lambda: monitor.host_side_fresh(), 30, "the host-side list")
        listed = {p.host_pid: p for p in monitor.processes}
        assert rank.host_pid in listed, listed
        before = lab.host.pct_log.read_text().count("200")
        t = monitor.transport
        in_ct = await read_environment(
            t, replace(listed[rank.host_pid], pid=rank.pid), host_access=False
        )
        assert lab.host.pct_log.read_text().count("200") > before  # it went through pct
        on_host = await read_environment(
            t,
            replace(listed[rank.host_pid], pid=None),
            host_access=True,
            host_proc=t.host_proc_root,
        )
        for lines in (in_ct, on_host):
            assert "NCCL_DEBUG=INFO" in lines, lines
            assert f"NCCL_IB_AUTH_TOKEN={REDACTED}" in lines, lines
            assert not any("s3cr3t" in line for line in lines), lines
    finally:
        await monitor.stop()
