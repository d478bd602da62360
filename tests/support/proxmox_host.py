"""A test "Proxmox host" built from real kernel facts: containers are PID + mount + user
namespaces whose init sits in a cgroup v2 ``.../lxc/<ID>/ns`` (so ``/proc/<pid>/cgroup``
reads as on Proxmox), a ``pct`` that runs ``pct exec ID -- CMD`` as ``nsenter --target
<init> --user --pid --mount -- CMD`` from inside that cgroup, GPU "processes" that hold
``/dev/nvidiaN`` open in the container (its ``/dev`` is a tmpfs holding the device files
of the GPUs passed through to it, the host's minors: a container given GPUs 4-7 has
``/dev/nvidia4`` to ``/dev/nvidia7``), the driver's ``/proc/driver/nvidia/gpus`` (every
GPU of the host, as a container sees it: NVIDIA's ``nv-procfs.c`` format, bind-mounted over
the container's ``/proc/driver``), and a fake ``nvidia-smi`` that lists a container's GPUs
renumbered from 0 (as nvidia-smi does) and whose ``--query-compute-apps`` reports the
processes as a driver would:

- ``mode = "host"`` (old drivers): host PIDs wherever it runs (``[Not Found]`` names
  inside a container);
- ``mode = "translate"`` (new drivers): inside a container the container's own PIDs and
  nothing of other containers; on the host, host PIDs.

Anything else it passes to the simulator's nvidia-smi (GPU rows), so the agent runs as
usual. A GPU process holds an ``flock`` on its lock file while it lives, which is how the
fake tells a dead one from a live one across namespaces.

Each container's root user is host uid 100000 (``setpriv`` then ``unshare --user
--map-root-user``: ``uid_map`` ``0 100000 1``), as in an unprivileged Proxmox CT.
``skip_reason()`` says why this machine cannot build it (no unshare, no cgroup2, not root).
``stop()`` kills every namespace (SIGKILL to each init) and removes every cgroup.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from gpumon.backends.parsers.nvidia_smi import QUERY_FIELDS
from gpumon.backends.sim.scenario import BUS_IDS, UUIDS

CT_UID = 100000
SYSTEM_PYTHON = "/usr/bin/python3"  # a container's root may not reach gpumon's venv
TOOLS = ("unshare", "nsenter", "setpriv")

INIT = """
D=$1
mkdir -p "$D/hostdev"
mount --rbind /dev "$D/hostdev"
mount -t tmpfs -o mode=755 tmpfs /dev
for n in null zero urandom random; do touch /dev/$n; mount --bind "$D/hostdev/$n" /dev/$n; done
umount -l "$D/hostdev"
# the CT's own ptys, as LXC mounts them (tmux in the CT needs them)
mkdir /dev/pts
mount -t devpts -o newinstance,ptmxmode=0666,mode=620 devpts /dev/pts
ln -s pts/ptmx /dev/ptmx
for n in $2; do touch /dev/nvidia$n; done
touch /dev/nvidiactl
mount --bind "${D%/*}/driver" /proc/driver
while [ ! -e "$D/go" ]; do sleep 0.02; done
echo ready > "$D/ready"
while :; do sleep 1; done
"""

GPU_PROCESS = """
import fcntl, sys, time
lock, gpus = sys.argv[1], sys.argv[2]
f = open(lock, "w")
fcntl.flock(f, fcntl.LOCK_EX)
held = [open("/dev/nvidia%s" % g) for g in gpus.split(",")]
open("/dev/nvidiactl")
while True:
    time.sleep(3600)
"""

FAKE_SMI = '''#!/usr/bin/python3
"""Fake nvidia-smi (tests/support/proxmox_host.py): GPU rows and compute apps as a driver
reports them. Runs with the system Python: a container's root (host uid 100000) may not
reach gpumon's venv."""
import fcntl, json, os, re, sys, time

STATE = {state!r}
NAMES = {names!r}
args = sys.argv[1:]
with open(STATE) as f:
    state = json.load(f)


def alive(lock):
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True  # its process holds it
    finally:
        os.close(fd)
    return False


def option(prefix):
    return next((a.split("=", 1)[1] for a in args if a.startswith(prefix)), None)


if "--help-query-gpu" in args:
    print("\\n".join('"%s"' % n for n in NAMES))
    sys.exit(0)
with open("/proc/self/cgroup") as f:
    m = re.search(r"/lxc/(\\d+)/ns", f.read())
    here = m.group(1) if m else None
# the GPUs this nvidia-smi sees (a container's: those passed through), numbered from 0
seen = state["visible"].get(here, range(len(state["gpus"]))) if here else range(len(state["gpus"]))
live = [p for p in state["processes"] if alive(p["lock"]) and p["gpu"] in seen]
gpu_fields = option("--query-gpu=")
if gpu_fields is not None:
    fields = gpu_fields.split(",")
    loop = args[args.index("-lms") + 1] if "-lms" in args else None
    while True:
        for i, g in enumerate(seen):
            uuid, bus = state["gpus"][g]
            used = state["base_mib"][g] + sum(p["memory_mib"] for p in live if p["gpu"] == g)
            cells = {{
                "index": i, "uuid": uuid, "pci.bus_id": bus, "name": "NVIDIA TEST GPU",
                "memory.total": 97887, "memory.used": used, "memory.free": 97250 - used,
                "memory.reserved": 637, "timestamp": time.strftime("%Y/%m/%d %H:%M:%S.000"),
            }}
            print(", ".join(str(cells.get(k, "[N/A]")) for k in fields), flush=True)
        if loop is None:
            sys.exit(0)
        time.sleep(int(loop) / 1000.0)
        with open(STATE) as f:
            state = json.load(f)
        live = [p for p in state["processes"] if alive(p["lock"]) and p["gpu"] in seen]
query = option("--query-compute-apps=")
if query is None:
    print("fake nvidia-smi: unsupported arguments %r" % (args,), file=sys.stderr)
    sys.exit(2)
fields = query.split(",")
for p in live:
    name = p["name"]
    if here is None:
        pid = p["host_pid"]
    elif state["mode"] == "host":
        pid = p["host_pid"]
        name = "[Not Found]"
    elif p["ct"] == here:
        pid = p["pid"]
    else:
        continue
    cells = {{
        "pid": pid, "process_name": name, "name": name,
        "used_memory": p["memory_mib"], "used_gpu_memory": p["memory_mib"],
        "gpu_uuid": p["gpu_uuid"], "gpu_bus_id": p["gpu_bus_id"],
    }}
    print(", ".join(str(cells.get(k, "[N/A]")) for k in fields))
'''

PCT = """#!/bin/sh
# Test pct: `pct exec ID -- CMD...` runs CMD in container ID's namespaces and cgroup.
[ "$1" = exec ] || {{ echo "pct: only 'exec' is supported here" >&2; exit 2; }}
ct=$2; shift 2
[ "$1" = -- ] && shift
echo "$ct" >> "{log}"
init=$(cat "{root}/ct$ct/init" 2>/dev/null) || {{ echo "pct: CT $ct does not exist" >&2; exit 2; }}
echo $$ > "{cgroup}/lxc/$ct/ns/cgroup.procs"
exec nsenter --target "$init" --user --pid --mount -- "$@"
"""


def cgroup2_root() -> Path | None:
    """Where cgroup v2 is mounted (``/proc/mounts``), or None."""
    with open("/proc/mounts") as f:
        for line in f:
            words = line.split()
            if len(words) > 2 and words[2] == "cgroup2":
                return Path(words[1])
    return None


def skip_reason() -> str | None:
    """Why this machine cannot build the test Proxmox host (None: it can)."""
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if not Path(SYSTEM_PYTHON).exists():
        missing.append(SYSTEM_PYTHON)
    if missing:
        return f"{', '.join(missing)} not installed (util-linux)"
    if os.geteuid() != 0:
        return "needs root (cgroups, namespaces, setpriv)"
    if cgroup2_root() is None:
        return "no cgroup2 mount in /proc/mounts"
    probe = subprocess.run(
        [
            "unshare",
            "--user",
            "--map-root-user",
            "--pid",
            "--fork",
            "--mount",
            "--mount-proc",
            "true",
        ],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        return f"unshare cannot make user + PID namespaces here: {probe.stderr.strip()}"
    return None


@dataclass
class GpuProc:
    """A GPU "process" in a container: its PIDs once started."""

    ct: int
    gpus: tuple[int, ...]
    memory_mib: int
    label: str  # its argv's marker words: "train.py --cfg drafter.yaml"
    host_pid: int = 0
    pid: int = 0
    lock: str = ""

    def alive(self) -> bool:
        return alive(self.host_pid)


@dataclass
class Container:
    ct: int
    dir: Path
    init_pid: int
    unshare: subprocess.Popen[bytes]
    gpus: tuple[int, ...]  # the host's GPUs passed through (host index = device minor)
    procs: list[GpuProc] = field(default_factory=list)


# NVIDIA's /proc/driver/nvidia/gpus/<bus>/information, as nv-procfs.c (open-gpu-kernel-modules
# 595.45.04, nv_procfs_read_gpu_info) prints it; the folder is named by the bus location.
INFORMATION = (
    "Model: \t\t NVIDIA TEST GPU\n"
    "IRQ:   \t\t {irq}\n"
    "GPU UUID: \t {uuid}\n"
    "Video BIOS: \t 98.02.2e.00.01\n"
    "Bus Type: \t PCIe\n"
    "DMA Size: \t 52 bits\n"
    "DMA Mask: \t 0xfffffffffffff\n"
    "Bus Location: \t {bus}\n"
    "Device Minor: \t {minor}\n"
    "GPU Firmware: \t 595.45.04\n"
    "GPU Excluded:\t No\n"
)


def driver_bus(bus_id: str) -> str:
    """``00000000:9A:00.0`` (nvidia-smi) as the driver names it (``%04x:%02x:%02x.%x``)."""
    domain, bus, rest = bus_id.split(":")
    return f"{int(domain, 16):04x}:{bus}:{rest}".lower()


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


def alive(host_pid: int) -> bool:
    """Whether the process of that host PID runs (not gone, not a zombie)."""
    return _state(host_pid) not in "ZX"


def _wait(cond: object, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise RuntimeError(f"test Proxmox host: {what} did not happen")
        time.sleep(0.02)


class ProxmoxHost:
    """Containers on this machine, a test ``pct`` and a fake ``nvidia-smi`` in ``bin``."""

    def __init__(self, mode: str = "host", base_mib: tuple[int, ...] = (0,) * 8) -> None:
        cg2 = cgroup2_root()
        assert cg2 is not None
        self.root = Path(tempfile.mkdtemp(prefix="gpumon-pve-"))
        self.root.chmod(0o755)  # the containers' root (host uid 100000) reads in here
        self.cgroup = cg2 / f"gpumon-test-{os.getpid()}-{self.root.name}"
        self.bin = self.root / "bin"
        self.bin.mkdir()
        self.bin.chmod(0o755)
        self.mode = mode
        self.base_mib = list(base_mib)  # used memory no listed process accounts for
        self.containers: dict[int, Container] = {}
        self.pct_log = self.root / "pct.log"
        self.state = self.root / "smi-state.json"
        self._write_tools()
        self._write_driver()

    def _write_tools(self) -> None:
        smi = self.bin / "nvidia-smi"
        smi.write_text(FAKE_SMI.format(state=str(self.state), names=list(QUERY_FIELDS)))
        smi.chmod(0o755)
        pct = self.bin / "pct"
        pct.write_text(PCT.format(log=self.pct_log, root=self.root, cgroup=self.cgroup))
        pct.chmod(0o755)
        (self.root / "init.sh").write_text(INIT)
        (self.root / "gpu_process.py").write_text(GPU_PROCESS)
        self.write_state()

    def _write_driver(self) -> None:
        """The driver's ``gpus`` folder: one per GPU of the host, its minor its host index
        (the minors follow the PCI order, as nvidia-smi's indexes do on the host)."""
        for minor, (uuid, bus_id) in enumerate(zip(UUIDS, BUS_IDS, strict=True)):
            bus = driver_bus(bus_id)
            folder = self.root / "driver" / "nvidia" / "gpus" / bus
            folder.mkdir(parents=True)
            info = INFORMATION.format(irq=200 + minor, uuid=uuid, bus=bus, minor=minor)
            (folder / "information").write_text(info)
        for path in (self.root / "driver", *(self.root / "driver").rglob("*")):
            path.chmod(0o755 if path.is_dir() else 0o644)  # the containers' root reads it

    def write_state(self) -> None:
        procs = [
            {
                "ct": str(p.ct),
                "host_pid": p.host_pid,
                "pid": p.pid,
                "name": "python3",
                "memory_mib": p.memory_mib,
                "gpu_uuid": UUIDS[g],
                "gpu_bus_id": BUS_IDS[g],
                "lock": p.lock,
                "gpu": g,
            }
            for c in self.containers.values()
            for p in c.procs
            for g in p.gpus[:1]  # the driver lists a process on the GPU it computes on
        ]
        tmp = self.state.with_suffix(".tmp")
        gpus = list(zip(UUIDS, BUS_IDS, strict=True))
        visible = {str(c.ct): list(c.gpus) for c in self.containers.values()}
        data = {
            "mode": self.mode,
            "processes": procs,
            "gpus": gpus,
            "base_mib": self.base_mib,
            "visible": visible,
        }
        tmp.write_text(json.dumps(data))
        tmp.chmod(0o644)
        tmp.replace(self.state)

    def set_mode(self, mode: str) -> None:
        self.mode = mode
        self.write_state()

    # --- containers --------------------------------------------------------------------
    def start_container(self, ct: int, gpus: tuple[int, ...] = tuple(range(8))) -> Container:
        """CT ``ct``, given the host's GPUs ``gpus`` (their ``/dev/nvidiaN``; its
        nvidia-smi lists them as 0, 1, ...)."""
        d = self.root / f"ct{ct}"
        d.mkdir()
        os.chown(d, CT_UID, CT_UID)
        cg = self.cgroup / "lxc" / str(ct) / "ns"
        cg.mkdir(parents=True)
        argv = [
            "setpriv", f"--reuid={CT_UID}", f"--regid={CT_UID}", "--clear-groups",
            "unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount",
            "--mount-proc", "--propagation", "private",
            "env", "container=lxc",  # as LXC marks its containers' init
            "sh", str(self.root / "init.sh"), str(d), " ".join(map(str, gpus)),
        ]  # fmt: skip
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True
        )
        init = 0

        def forked() -> bool:
            nonlocal init
            try:
                kids = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
            except OSError:
                return False
            init = int(kids[0]) if kids else 0
            return bool(init)

        _wait(forked, f"CT {ct}'s init")
        (cg / "cgroup.procs").write_text(str(init))  # before it starts anything
        (d / "init").write_text(str(init))
        (d / "go").touch()
        _wait(lambda: (d / "ready").exists(), f"CT {ct}'s /dev")
        container = Container(ct, d, init, proc, gpus)
        self.containers[ct] = container
        self.write_state()
        return container

    def start_gpu_process(
        self,
        ct: int,
        gpus: tuple[int, ...],
        memory_mib: int,
        label: str,
        env: dict[str, str] | None = None,
    ) -> GpuProc:
        """A process in CT ``ct`` holding ``/dev/nvidiaN`` for ``gpus``, listed by the fake
        driver with ``memory_mib`` on the first of them; ``env``: variables added to its
        environment (the test ``pct`` passes its environment on)."""
        c = self.containers[ct]
        n = len(c.procs)
        lock = str(c.dir / f"gpu{n}.lock")
        marker = f"gpu-proc-{self.root.name}-{ct}-{n}"
        program, *rest = label.split()  # the script is named as the label says
        script = self.root / program
        if not script.exists():
            shutil.copy(self.root / "gpu_process.py", script)
        argv = [
            str(self.pct_path), "exec", str(ct), "--",
            SYSTEM_PYTHON, str(script), lock, ",".join(map(str, gpus)), *rest, marker,
        ]  # fmt: skip
        environ = {**os.environ, **(env or {})}
        subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True, env=environ)
        p = GpuProc(ct, gpus, memory_mib, label, lock=lock)

        def found() -> bool:
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                try:
                    if marker.encode() not in (entry / "cmdline").read_bytes():
                        continue
                    status = (entry / "status").read_text()
                except OSError:
                    continue
                if not Path(lock).exists():
                    return False
                nspid = [ln for ln in status.splitlines() if ln.startswith("NSpid:")]
                words = nspid[0].split()[1:] if nspid else []
                if len(words) == 2:
                    p.host_pid, p.pid = int(words[0]), int(words[1])
                    return self._holds_lock(lock)
            return False

        _wait(found, f"the GPU process {label!r} in CT {ct}")
        c.procs.append(p)
        self.write_state()
        return p

    def _holds_lock(self, lock: str) -> bool:
        import fcntl

        fd = os.open(lock, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        finally:
            os.close(fd)
        return False

    @property
    def pct_path(self) -> Path:
        return self.bin / "pct"

    # --- cleanup -------------------------------------------------------------------------
    def stop(self) -> None:
        """Every namespace killed (SIGKILL to each init takes its PID namespace down),
        every cgroup removed, the files deleted."""
        for c in self.containers.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(c.init_pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(c.unshare.pid, signal.SIGKILL)
            c.unshare.wait()
        for cg in sorted(self.cgroup.rglob("*"), key=lambda p: -len(p.parts)):
            if cg.is_dir():
                self._rmdir(cg)
        self._rmdir(self.cgroup)
        shutil.rmtree(self.root, ignore_errors=True)

    def _rmdir(self, cg: Path) -> None:
        deadline = time.monotonic() + 5
        while cg.exists():
            try:
                cg.rmdir()
            except OSError:
                procs = (cg / "cgroup.procs").read_text().split() if cg.exists() else []
                for pid in procs:  # a pct exec still winding down
                    with contextlib.suppress(ProcessLookupError, ValueError):
                        os.kill(int(pid), signal.SIGKILL)
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


# A stand-in ``py-spy`` for a CT that forbids ptrace (this stand-in CT allows it: the test
# extra's real py-spy dumps there, tests/integration/test_restart_pve.py): in a
# container's user namespace it fails as py-spy does where ptrace is forbidden (an
# unprivileged Proxmox CT under a stricter policy); in the host's it prints a stack of the
# PID it is given, with that process's command line so a test can tell it was the right one.
PY_SPY = """#!/usr/bin/python3
import sys
pid = sys.argv[sys.argv.index("--pid") + 1]
with open("/proc/self/uid_map") as f:
    if f.read().split() != ["0", "0", "4294967295"]:
        sys.exit("Permission Denied: Try running again with elevated permissions")
with open("/proc/%s/cmdline" % pid, "rb") as f:
    command = f.read().replace(b"\\0", b" ").decode().strip()
print("Process %s: %s" % (pid, command))
print('Thread %s (idle): "MainThread"' % pid)
print("    <module> (gpu_process.py:9)")
"""


def install_py_spy(folder: Path) -> Path:
    """The stand-in ``py-spy`` in ``folder`` (on the PATH of the host's logins)."""
    path = folder / "py-spy"
    path.write_text(PY_SPY)
    path.chmod(0o755)
    return path
