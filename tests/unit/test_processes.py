"""Process attribution, pure parts: cgroup paths to containers (Proxmox, LXC, Docker,
containerd, Kubernetes), NSpid and uid_map, ``/proc/<pid>/stat``, the shell loop's output,
records to GpuProcess, the container view, foreign and unattributed memory (its threshold
checked against the real captures), and the ``foreign_process`` alert."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpumon.backends.alerts.engine import Alert, AlertEngine
from gpumon.backends.alerts.rules import AlertRules, foreign_memory
from gpumon.backends.config import HostConfig
from gpumon.backends.model import GpuProcess, GpuSample, HostSample, ProcessSource
from gpumon.backends.monitor import HostMonitor
from gpumon.backends.monitor.sources import AgentSource
from gpumon.backends.parsers.processes import (
    UNATTRIBUTED_MIN_MIB,
    container_view,
    foreign,
    from_record,
    process_words,
    unattributed_mib,
)
from gpumon.backends.remote import host_procs as hp
from gpumon.backends.remote import procfacts
from gpumon.backends.transport import LocalTransport

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures/nvidia/real-captures"
DOCKER_ID = "3f2a9c1b7d4e5f60718293a4b5c6d7e8f9012345678901234567890abcdef12"


@pytest.mark.parametrize(
    ("cgroup", "container"),
    [
        ("0::/lxc/200/ns/user.slice/user-0.slice/session-3.scope\n", "200"),  # Proxmox, v2
        ("0::/lxc/200/ns\n", "200"),
        ("0::/lxc.monitor/200\n", None),  # the LXC monitor is the host's
        ("0::/lxc.payload.web/init.scope\n", "lxc:web"),  # plain LXC 4+
        ("0::/lxc.payload.201/ns\n", "201"),
        (f"0::/system.slice/docker-{DOCKER_ID}.scope\n", "docker:3f2a9c1b7d4e"),
        (f"0::/docker/{DOCKER_ID}\n", "docker:3f2a9c1b7d4e"),
        (f"0::/system.slice/cri-containerd-{DOCKER_ID}.scope\n", "containerd:3f2a9c1b7d4e"),
        (
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-"
            "pod1a2b3c4d_5e6f_7a8b_9c0d_1e2f3a4b5c6d.slice/cri-containerd-"
            f"{DOCKER_ID}.scope\n",
            "k8s:1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d",
        ),
        (f"0::/kubepods/burstable/pod1a2b3c4d-5e6f-7a8b/{DOCKER_ID}\n", "k8s:1a2b3c4d-5e6f-7a8b"),
        (f"0::/lxc/200/ns/system.slice/docker-{DOCKER_ID}.scope\n", "200"),  # outermost wins
        ("0::/user.slice/user-1000.slice/session-2.scope\n", None),  # the host
        ("0::/\n", None),
        # hybrid (v1 + v2): the v2 line is empty, a v1 hierarchy names the container
        ("12:memory:/lxc/200/ns\n11:cpu,cpuacct:/lxc/200/ns\n0::/\n", "200"),
        ("garbage\n\n", None),
    ],
)
def test_the_container_of_a_cgroup(cgroup: str, container: str | None) -> None:
    assert hp.container_of(cgroup) == container


def test_uid_map_offsets_name_the_user_inside() -> None:
    proxmox = hp.parse_uid_map("         0     100000      65536\n")
    assert hp.inner_uid(100000, proxmox) == 0
    assert hp.inner_uid(101000, proxmox) == 1000
    assert hp.inner_uid(99999, proxmox) is None  # not this container's
    assert hp.parse_uid_map("junk\n0 0 4294967295\n") == [(0, 0, 4294967295)]


STAT = (
    "4242 (python3 (x) y) S 1 4242 4242 0 -1 4194560 500 0 0 0 250 50 0 0 20 0 9 0 12345 1000"
    " 2560\n"
)


def test_stat_parsing_survives_a_command_name_with_parentheses() -> None:
    assert procfacts.parse_stat(STAT) == (300, 12345, 2560)
    assert procfacts.parse_stat("4242 (short) S 1") is None


def facts(pid: int, nspid: str, uid: int, cgroup: str) -> dict[str, object]:
    return {
        "status": f"Name:\tpython3\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nNSpid:\t{nspid}\n",
        "cgroup": cgroup,
        "uid_map": "0 100000 65536\n" if uid >= 100000 else "0 0 4294967295\n",
        "stat": STAT,
        "cmdline": b"python3\0train.py\0--cfg\0x.yaml\0",
        "passwd": "root:x:0:0::/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\n",
    }


def test_a_record_has_the_pid_inside_the_user_inside_and_on_the_host() -> None:
    cpu = procfacts.CpuClock()
    rec = hp.record_from_facts(
        4242, facts(4242, "4242\t88", 101000, "0::/lxc/200/ns\n"), now=1000.0, btime=500.0, cpu=cpu
    )
    assert (rec["container"], rec["pid"], rec["uid"], rec["user"]) == ("200", 88, 1000, "alice")
    assert (rec["host_uid"], rec["host_user"], rec["command"]) == (
        101000,
        "101000",
        "python3 train.py --cfg x.yaml",
    )
    assert rec["started"] == 500.0 + 12345 / 100 and rec["rss_mib"] == 10.0
    assert rec["start_ticks"] == 12345  # as /proc/PID/stat has it: K's PID-reuse guard
    later = hp.record_from_facts(
        4242,
        {
            **facts(4242, "4242\t88", 101000, "0::/lxc/200/ns\n"),
            "stat": STAT.replace(" 250 ", " 350 "),
        },
        now=1002.0,
        btime=500.0,
        cpu=cpu,
    )
    assert rec["cpu_pct"] is None and later["cpu_pct"] == 50.0  # 100 ticks in 2 s
    host = hp.record_from_facts(7, facts(7, "7", 0, "0::/user.slice\n"), now=1.0, btime=0, cpu=cpu)
    assert (host["container"], host["pid"], host["user"]) == (None, 7, "root")
    # Docker inside the CT: the CT's own PID is NSpid's second entry, not the last
    nested = hp.record_from_facts(
        9, facts(9, "9\t51\t1", 100000, "0::/lxc/200/ns/docker/x\n"), now=1, btime=0, cpu=cpu
    )
    assert nested["pid"] == 51
    gone = hp.record_from_facts(5, {"error": "/proc/5: No such file"}, now=1, btime=0, cpu=cpu)
    assert gone["error"] and gone["container"] is None and gone["command"] is None


SHELL_ROUND = f"""@round 1000
@btime btime 500
@app 4242, 30000, GPU-a, 00000000:18:00.0
@app 4242, 2000, GPU-b, 00000000:2A:00.0
@app 777, 6144, GPU-b, 00000000:2A:00.0
@pid 4242
@cgroup 0::/lxc/200/ns
@status Name:\tpython3
@status Uid:\t100000\t100000\t100000\t100000
@status NSpid:\t4242\t88
@uid_map          0     100000      65536
@stat {STAT.strip()}
@cmdline python3 train.py --cfg x.yaml
@pid 777
@error /proc/777: not readable
@end
"""


def test_the_shell_loops_output_becomes_the_same_records() -> None:
    rounds = hp.ShellRound()
    done = [d for d in map(rounds.feed, SHELL_ROUND.splitlines()) if d is not None]
    [(records, error)] = done
    assert error is None  # one unreadable process of two is not the whole host side
    assert [(r["host_pid"], r["gpu_uuid"], r["memory_mib"]) for r in records] == [
        (4242, "GPU-a", 30000),
        (4242, "GPU-b", 2000),
        (777, "GPU-b", 6144),
    ]
    first = records[0]
    assert (first["container"], first["pid"], first["user"]) == ("200", 88, "root")
    assert first["command"] == "python3 train.py --cfg x.yaml"
    assert records[2]["error"] == "/proc/777: not readable"
    failed = hp.ShellRound()
    lines = ["@round 1", "@smi_error 9", "@text NVIDIA-SMI has failed", "@end"]
    [(none, why)] = [d for d in map(failed.feed, lines) if d is not None]
    assert none == [] and why == "nvidia-smi failed on the host (exit 9): NVIDIA-SMI has failed"
    hidden = hp.ShellRound()
    lines = ["@round 1", "@app 5, 10, GPU-a, 0", "@pid 5", "@error /proc/5: hidepid", "@end"]
    [(_, hidepid)] = [d for d in map(hidden.feed, lines) if d is not None]
    assert hidepid == "cannot read the GPU processes' /proc entries: /proc/5: hidepid"


def test_records_become_processes_with_no_pid_outside_the_watched_container() -> None:
    ours = {
        "host_pid": 4242,
        "pid": 88,
        "container": "200",
        "memory_mib": 100,
        "user": "root",
        "command": "python3 train.py",
        "gpu_uuid": "GPU-a",
    }
    theirs = {**ours, "host_pid": 777, "pid": 12, "container": "201", "command": "jupyter-lab"}
    hostile = {"host_pid": "x", "pid": True, "container": 5, "memory_mib": -3, "gpus": "0"}
    a, b, c = (from_record(r, "host", 200) for r in (ours, theirs, hostile))
    assert (a.pid, a.host_pid, a.container, a.source) == (88, 4242, "200", "host")
    assert (b.pid, b.container) == (None, "201")
    assert (c.pid, c.host_pid, c.container, c.memory_mib, c.gpus) == (None, None, None, None, ())
    assert foreign((a, b, c), 200) == (b, c)  # the host's own (container None) counts too
    assert foreign((a, b), None) == ()
    assert process_words(b) == "host PID 777 jupyter-lab in CT201"
    assert process_words(a) == "88 train.py in CT200"


def test_the_container_view_keeps_only_pids_that_are_processes_here() -> None:
    driver = (
        GpuProcess(2418873, None, 30000, "GPU-a"),  # a host PID (old driver)
        GpuProcess(88, "python3", 2000, "GPU-b"),  # our own (new driver)
    )
    files = (
        GpuProcess(
            88,
            "python3",
            None,
            source=ProcessSource.DEVICE_FILES,
            gpus=(0, 1),
            command="python3 train.py",
            user="root",
        ),
        GpuProcess(99, "python3", None, source=ProcessSource.DEVICE_FILES, gpus=(2,)),
    )
    view = container_view(driver, files, 200)
    assert [(p.pid, p.host_pid, p.memory_mib, p.source) for p in view] == [
        (None, 2418873, 30000, "container-nvml"),
        (88, None, 2000, "container-nvml"),
        (99, None, None, "device-files"),
    ]
    assert view[1].command == "python3 train.py" and view[1].gpus == ()
    assert container_view(driver, (), 200) == driver  # nothing to compare with: as given


def capture_residues() -> list[tuple[str, int]]:
    """(capture, used memory minus the compute processes' memory) for each loaded
    nvidia-smi table of the Linux captures (graphics-only contexts are not compute apps)."""
    out = []
    for path in sorted(CAPTURES.glob("linux-*.txt")):
        text = path.read_text(encoding="utf-8")
        for block in re.split(r"# \$ nvidia-smi \n#+\n", text)[1:]:
            table = block.split("####")[0]
            used = re.search(r"\|\s+(\d+)MiB /\s+\d+MiB", table)
            if used is None:
                continue
            procs = 0
            for line in table.splitlines():
                m = re.match(r"\|\s+\d+\s+\S+\s+\S+\s+\d+\s+(\S+)\s+.*?(\d+)MiB\s*\|", line)
                if m and "C" in m.group(1):
                    procs += int(m.group(2))
            out.append((path.name, int(used.group(1)) - procs))
    return out


def test_the_unattributed_threshold_is_above_what_real_drivers_keep() -> None:
    residues = capture_residues()
    if not residues:
        pytest.skip(f"no real captures at {CAPTURES}")
    assert len(residues) >= 14
    worst = max(r for _, r in residues)
    assert 500 < worst < UNATTRIBUTED_MIN_MIB, residues  # a desktop's compositor, the most
    held = (GpuProcess(1, "x", 30000, "GPU-a"),)

    def rest(
        used: int, procs: tuple[GpuProcess, ...] = held, at_list: int | None = None
    ) -> int | None:
        gpu = GpuSample(0, uuid="GPU-a", memory_used_mib=used)
        at = () if at_list is None else ((0, at_list),)
        sample = HostSample("h", 0.0, None, (gpu,), procs, memory_at_processes=at)
        return unattributed_mib(sample, gpu)

    assert rest(30000 + worst) is None
    assert rest(30000 + 12288) == 12288
    unknown = (GpuProcess(1, "x", None, source=ProcessSource.DEVICE_FILES, gpus=(0,)),)
    assert rest(30000 + 12288, unknown) is None  # device files: nothing can be said
    # The job grew 2 GiB since its list was taken: not "unattributed" until the next list
    assert rest(30000 + 2048, at_list=30000) is None
    assert rest(30000 + 2048, at_list=30000 + 12288) == 12288  # what that moment said


def test_foreign_memory_raises_and_ends_the_foreign_process_alert() -> None:
    now = [1000.0]
    engine = AlertEngine("ct200", AlertRules(clear_samples=2), clock=lambda: now[0], container=200)
    gpu = GpuSample(6, uuid="GPU-6", memory_used_mib=50000, memory_total_mib=97887)
    jupyter = GpuProcess(
        None,
        "python3",
        20582,
        "GPU-6",
        host_pid=777,
        container="201",
        command="/usr/bin/python3 /usr/local/bin/jupyter-lab",
        source="host",
    )
    ours = GpuProcess(88, "python3", 29000, "GPU-6", host_pid=4242, container="200", source="host")
    assert foreign_memory(gpu, (ours, jupyter), 200) == "GPU 6: 20.1 GiB held by CT 201 jupyter-lab"
    heard: list[Alert] = []
    engine.add_listener(heard.append)
    engine.on_sample(HostSample("ct200", now[0], None, (gpu,), processes=(ours, jupyter)))
    [alert] = [a for a in engine.active() if a.kind == "foreign_process"]
    assert alert.severity.value == "warning" and alert.gpu == 6 and heard == [alert]
    for _ in range(2):
        now[0] += 1
        engine.on_sample(HostSample("ct200", now[0], None, (gpu,), processes=(ours,)))
    assert not [a for a in engine.active() if a.kind == "foreign_process"]


def test_memory_not_attributed_is_judged_at_the_moment_of_the_process_list() -> None:
    """The process list comes every few seconds, the memory every second: a job that
    grows between two lists must not make "not attributed" blink on and off."""
    host = HostConfig(name="box", kind="local", interval=1.0, kernel_log=False)
    monitor = HostMonitor(host, AgentSource(LocalTransport(host)), record=False)
    fields = ("index", "uuid", "memory.used", "memory.total")
    monitor.ingest_gpu_rows(["0, GPU-a, 30000, 97887"], fields)
    monitor.ingest_processes((GpuProcess(1, "train", 29500, "GPU-a"),), monitor.clock())
    assert (
        monitor.latest is not None
        and unattributed_mib(monitor.latest, monitor.latest.gpus[0]) is None
    )
    monitor.ingest_gpu_rows(["0, GPU-a, 33000, 97887"], fields)  # the job grew 3 GB
    latest = monitor.latest
    assert latest is not None
    assert latest.gpus[0].memory_used_mib == 33000 and latest.memory_at_processes == ((0, 30000),)
    assert unattributed_mib(latest, latest.gpus[0]) is None
    monitor.ingest_processes((GpuProcess(1, "train", 29500, "GPU-a"),), monitor.clock())
    latest = monitor.latest
    assert unattributed_mib(latest, latest.gpus[0]) == 3500  # the list says so


def test_memory_read_with_the_process_list_is_the_one_compared_with_it() -> None:
    """NVML's process list comes with each GPU's used memory read in the same pass: a
    list taken between two samples of a growing job (the sample said 30000, the job
    already had 31500 when listed) is compared with its own reading, not the sample's."""
    host = HostConfig(name="box", kind="local", interval=1.0, kernel_log=False)
    monitor = HostMonitor(host, AgentSource(LocalTransport(host)), record=False)
    fields = ("index", "uuid", "memory.used", "memory.total")
    monitor.ingest_gpu_rows(["0, GPU-a, 30000, 97887"], fields)
    row = "1, train, 31500, GPU-a, 00000000:18:00.0"
    monitor.ingest_process_rows([row], {"GPU-a": 32100})
    latest = monitor.latest
    assert latest is not None and latest.memory_at_processes == ((0, 32100),)
    assert unattributed_mib(latest, latest.gpus[0]) is None  # 600 MiB: the driver's own
    monitor.ingest_process_rows([row])  # nvidia-smi sends no reading: the sample's
    latest = monitor.latest
    assert latest is not None and latest.memory_at_processes == ((0, 30000),)
    monitor.ingest_process_rows([row], {"GPU-a": 33000})
    latest = monitor.latest
    assert latest is not None and unattributed_mib(latest, latest.gpus[0]) == 1500


def test_only_gpu_device_files_count_as_gpus() -> None:
    paths = ["/dev/nvidia0", "/dev/nvidia12", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/null"]
    assert [procfacts.device_index(p) for p in paths] == [0, 12, None, None, None]
    assert procfacts.device_index("/dev/nvidia-caps/nvidia-cap1") is None


def test_a_poll_reads_a_process_user_names_again_only_when_it_is_new_or_they_are_old(
    tmp_path: Path,
) -> None:
    """Issue 41: the agent's poll read /proc/PID/root/etc/passwd and uid_map of every
    process on every poll; they are kept by PID and start time for KEEP_FACTS_S (the
    other files, stat's CPU and RSS among them, are read each time)."""
    proc = tmp_path / "proc"
    (proc / "4242" / "root" / "etc").mkdir(parents=True)
    (proc / "stat").write_text("cpu 1 2 3\nbtime 500\n")
    for name, text in facts(4242, "4242", 1000, "0::/user.slice\n").items():
        path = proc / "4242" / ("root/etc/passwd" if name == "passwd" else name)
        path.write_bytes(text if isinstance(text, bytes) else str(text).encode())
    passwd = proc / "4242" / "root" / "etc" / "passwd"
    cpu = procfacts.CpuClock()

    def user(now: float) -> tuple[object, object]:
        [rec] = procfacts.describe(str(proc), [4242], cpu, now)
        return rec["user"], rec["cpu_pct"]

    assert user(1000.0) == ("alice", None)
    passwd.write_text("root:x:0:0::/root:/bin/sh\nbob:x:1000:1000::/home/bob:/bin/sh\n")
    stat = proc / "4242" / "stat"
    stat.write_text(STAT.replace(" 250 ", " 350 "))
    assert user(1002.0) == ("alice", 50.0)  # kept; stat read again
    assert user(1000.0 + procfacts.KEEP_FACTS_S) == ("bob", 0.0)  # old: read again
    passwd.write_text("root:x:0:0::/root:/bin/sh\ncarol:x:1000:1000::/home/carol:/bin/sh\n")
    stat.write_text(STAT.replace(" 12345 ", " 12346 "))  # the PID reused by a new process
    assert user(1061.0)[0] == "carol"
