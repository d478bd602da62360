"""What gpumon's bootstrap ships to the target, run for real: the agent and the doctor's
probe on a Python 3.8 (where this machine has one), the doctor telling gpumon's own
programs from users of the venv, and an agent of another protocol version refused."""

from __future__ import annotations

import itertools
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gpumon.backends.config import HostConfig
from gpumon.backends.model import ConnState, Source
from gpumon.backends.monitor import demo_settings, make_monitor
from gpumon.backends.monitor.sources.agent import agent_argv
from gpumon.backends.parsers import PROCESS_FIELDS, QUERY_FIELDS
from gpumon.backends.remote import protocol
from gpumon.backends.remote.agent import FOUND_FULL_SITE, FOUND_NO_SITE
from gpumon.backends.remote.bootstrap import program_tag
from gpumon.backends.remote.doctor_probe_fs import proc_facts
from gpumon.backends.sim import write_wrapper


def python_3_8() -> str | None:
    """A Python 3.8 that runs here (a pyenv shim on PATH may not), or None."""
    found = [
        shutil.which("python3.8"),
        *map(str, Path.home().glob(".pyenv/versions/3.8*/bin/python3.8")),
    ]
    for python in filter(None, found):
        check = [python, "-c", "import sys; print(sys.version_info[:2] == (3, 8))"]
        res = subprocess.run(check, capture_output=True, text=True, check=False)
        if res.stdout.strip() == "True":
            return python
    return None


PY38 = python_3_8()
pytestmark = pytest.mark.system


def agent_process(python: str, tmp_path: Path, nvml: bool = False) -> subprocess.Popen[bytes]:
    """The agent as ``AgentSource`` starts it (``agent_argv``: its interpreter flags)."""
    smi = write_wrapper(tmp_path / "bin", demo_settings(demo_time=5, frozen=True))
    options = protocol.AgentOptions(
        fields=list(QUERY_FIELDS),
        process_fields=list(PROCESS_FIELDS),
        nvidia_smi=str(smi),
        interval=0.2,
        nvml=nvml,
    )
    argv, data = agent_argv(python, options)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert proc.stdin is not None
    proc.stdin.write(data)
    proc.stdin.flush()
    return proc


def read_until_gpus(proc: subprocess.Popen[bytes]) -> protocol.Hello:
    assert proc.stdout is not None
    raw = json.loads(proc.stdout.readline())
    hello = protocol.Hello.from_wire(raw)
    while json.loads(proc.stdout.readline())["type"] != "gpus":
        pass
    return hello


def stop(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stdin is not None
    proc.stdin.close()  # how the agent learns gpumon is gone
    assert proc.wait(timeout=5) == 0


@pytest.mark.skipif(PY38 is None, reason="no Python 3.8 interpreter on this machine")
def test_the_agent_runs_on_python_3_8(tmp_path: Path) -> None:
    assert PY38 is not None
    proc = agent_process(PY38, tmp_path)
    try:
        hello = read_until_gpus(proc)
        assert hello.python.startswith("3.8.") and hello.source == Source.AGENT_SMI.value
        assert protocol.version_problem(hello) is None
    finally:
        stop(proc)


@pytest.mark.skipif(PY38 is None, reason="no Python 3.8 interpreter on this machine")
def test_the_doctor_probe_runs_on_python_3_8() -> None:
    assert PY38 is not None
    from gpumon.backends.torchenv import probe_argv

    argv, data = probe_argv(PY38, {"sections": ["python", "gpu"], "nvidia_smi": "/nonexistent"})
    res = subprocess.run(argv, input=data, capture_output=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr.decode()
    facts = json.loads(res.stdout.decode().splitlines()[-1])
    assert facts["python"]["version"].startswith("3.8.") and facts["errors"] == {}


FAKE_NVML = Path(__file__).parents[1] / "support" / "fake_nvml" / "pynvml.py"


def venv_python(python: str, where: Path) -> tuple[str, Path]:
    """A new venv of ``python`` (no pip): its python and its site-packages."""
    subprocess.run([python, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    code = "import sys, site; print(site.getsitepackages()[0])"
    venv = str(where / "bin" / "python")
    out = subprocess.run([venv, "-c", code], capture_output=True, text=True, check=True)
    return venv, Path(out.stdout.strip())


@pytest.mark.parametrize("python", [sys.executable, PY38], ids=["this", "3.8"])
@pytest.mark.parametrize("where", ["site-packages", "pth"])
def test_the_agent_runs_without_site_and_still_finds_pynvml(
    tmp_path: Path, python: str | None, where: str
) -> None:
    """The agent runs with -S (no .pth processing); pynvml in the venv's site-packages is
    found without it (also before 3.11, where -S leaves sys.prefix the base's); one that
    only a .pth file puts on the path is found through the full site processing. The
    Hello says which."""
    if python is None:
        pytest.skip("no Python 3.8 interpreter on this machine")
    venv, site_packages = venv_python(python, tmp_path / "venv")
    if where == "site-packages":
        shutil.copy(FAKE_NVML, site_packages)
    else:
        (tmp_path / "elsewhere").mkdir()
        shutil.copy(FAKE_NVML, tmp_path / "elsewhere")
        (site_packages / "extra.pth").write_text(f"{tmp_path / 'elsewhere'}\n")
    proc = agent_process(venv, tmp_path, nvml=True)
    try:
        hello = read_until_gpus(proc)
    finally:
        stop(proc)
    assert hello.source == Source.AGENT_NVML.value
    found = FOUND_NO_SITE if where == "site-packages" else FOUND_FULL_SITE
    assert hello.note is not None and hello.note.endswith(f"found {found}"), hello.note
    assert str(site_packages if where == "site-packages" else tmp_path / "elsewhere") in hello.note


def test_without_pynvml_the_agent_says_why_and_reads_nvidia_smi(tmp_path: Path) -> None:
    venv, _ = venv_python(sys.executable, tmp_path / "venv")
    proc = agent_process(venv, tmp_path, nvml=True)
    try:
        hello = read_until_gpus(proc)
    finally:
        stop(proc)
    assert hello.source == Source.AGENT_SMI.value
    assert hello.note == "NVML not used: ModuleNotFoundError: No module named 'pynvml'"


def test_the_doctor_tells_gpumons_programs_from_users_of_the_venv(tmp_path: Path) -> None:
    """All run this venv's Python; only the users count (a swap waits for users): gpumon's
    agent and another probe (a plan being replaced) do not; a user process whose argv
    merely holds the word (a job "agent" in tmux session gpumon-agent) does."""
    from gpumon.backends.torchenv import probe_argv

    agent = agent_process(sys.executable, tmp_path)
    probe = subprocess.Popen(probe_argv(sys.executable, {})[0], stdin=subprocess.PIPE)
    sleep = "import time; time.sleep(30)"
    users = [
        subprocess.Popen([sys.executable, "-c", sleep]),
        subprocess.Popen([sys.executable, "-c", sleep, program_tag("agent")]),
    ]
    try:
        read_until_gpus(agent)  # the probe waits for its source on stdin meanwhile
        assert program_tag("agent").encode() in Path(f"/proc/{agent.pid}/cmdline").read_bytes()
        found = [p["pid"] for p in proc_facts(sys.prefix)]
        assert [u.pid in found for u in users] == [True, True]
        assert agent.pid not in found and probe.pid not in found
    finally:
        for proc in (*users, probe):
            proc.kill()
            proc.wait()
        stop(agent)


def test_an_agent_of_another_version_is_a_clear_host_error(tmp_path: Path) -> None:
    """A "python" that passes the version probe but answers with a version-99 agent."""
    fake = tmp_path / "python"
    hello = {"type": "hello", "agent": 99, "source": "agent/nvml"}
    fake.write_text(
        "#!/bin/sh\n"
        'case "$2" in *version_info*) echo True; exit 0;; esac\n'
        f"echo '{json.dumps(hello)}'\n"
        "cat > /dev/null\n"
    )
    fake.chmod(0o755)
    host = HostConfig(name="box", kind="local", python=str(fake), kernel_log=False)
    monitor = make_monitor(host, reconnect=False)

    async def go() -> None:
        monitor.start()
        deadline = time.monotonic() + 15
        while monitor.status.state != ConnState.FAILED:
            assert time.monotonic() < deadline, monitor.status
            await monitor.wait_for_update(0.5)
        await monitor.stop()

    import asyncio

    asyncio.run(go())
    error = monitor.status.error or ""
    assert "incompatible agent" in error and "version 99" in error, error
    assert monitor.samples == 0


FAKE_SMI = Path(__file__).parents[1] / "support" / "fake_smi.py"


class Arrivals:
    """An agent on ``fake_smi`` (two GPUs, steady) and the types of its messages in the
    order they came (a reader thread)."""

    def __init__(self, tmp_path: Path, fallback_s: float) -> None:
        self.drop = tmp_path / "drop"
        options = protocol.AgentOptions(
            fields=list(QUERY_FIELDS),
            process_fields=list(PROCESS_FIELDS),
            nvidia_smi=str(FAKE_SMI),
            interval=0.2,
            process_interval=0.2,
            process_fallback_s=fallback_s,
            nvml=False,
        )
        argv, data = agent_argv(sys.executable, options)
        env = {**os.environ, "FAKE_SMI_GPUS": "2", "FAKE_SMI_DROP": str(self.drop)}
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()
        self.kinds: list[str] = []
        stdout = self.proc.stdout
        reader = threading.Thread(
            target=lambda: self.kinds.extend(json.loads(line)["type"] for line in stdout),
            daemon=True,
        )
        reader.start()

    def polls_after_the_first_round(self) -> int:
        kinds = list(self.kinds)
        return kinds[kinds.index("gpus") :].count("procs") if "gpus" in kinds else 0

    def wait(self, enough: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + 60  # a bound on the event, not a speed figure
        while not enough():
            assert time.monotonic() < deadline, f"no {what}: {self.kinds}"
            time.sleep(0.05)


def test_the_process_list_is_polled_only_when_the_gpus_change(tmp_path: Path) -> None:
    """Steady GPUs (fake_smi: fixed memory) and no fallback: the process list at start
    and for the first round (the start's may come before it, its memory unknown then),
    then none over many rounds; a GPU falling off (a changed round) brings a poll."""
    agent = Arrivals(tmp_path, fallback_s=3600.0)
    try:
        agent.wait(lambda: agent.kinds.count("gpus") >= 15, "15 rounds")
        assert agent.kinds.count("procs") <= 2, agent.kinds
        polls = agent.kinds.count("procs")
        rounds = agent.kinds.count("gpus")
        agent.drop.touch()
        agent.wait(lambda: agent.kinds.count("procs") > polls, "poll after the change")
        assert agent.kinds.count("gpus") > rounds  # the changed round came first
    finally:
        stop(agent.proc)


def test_steady_gpus_are_polled_again_at_the_fallback(tmp_path: Path) -> None:
    """A process replaced by one of the same size changes no GPU's memory: the list is
    polled again every ``process_fallback_s`` all the same."""
    agent = Arrivals(tmp_path, fallback_s=1.0)
    try:
        agent.wait(lambda: agent.polls_after_the_first_round() >= 3, "3 polls")
    finally:
        stop(agent.proc)


# A stand-in for libnvidia-ml.so behind the real nvidia-ml-py, loaded as sitecustomize is
# (as the benches' NVML shim is): one GPU whose every query is NOT_SUPPORTED.
LIBNVML_SITECUSTOMIZE = """
import pynvml

class Lib:
    def __getattr__(self, name):
        return lambda *args: 3  # NVML_ERROR_NOT_SUPPORTED

    nvmlInitWithFlags = staticmethod(lambda *args: 0)

    @staticmethod
    def nvmlDeviceGetCount_v2(ref):
        ref._obj.value = 1
        return 0

pynvml.nvmlLib = Lib()
"""


def extension_modules(names: list[str]) -> dict[str, str]:
    """Of ``names``, those this interpreter loads from a shared object: name -> its file
    name (a built-in one never shows in /proc/PID/maps)."""
    import importlib.util

    out = {}
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin and spec.origin.endswith(".so"):
            out[name] = os.path.basename(spec.origin)
    return out


def nvml_agent_maps(tmp_path: Path) -> tuple[protocol.Hello, str]:
    """The agent with NVML (the real nvidia-ml-py before ``LIBNVML_SITECUSTOMIZE``) and
    nothing to scrape: its Hello and its /proc/PID/maps after its first GPU round."""
    (tmp_path / "sitecustomize.py").write_text(LIBNVML_SITECUSTOMIZE)
    options = protocol.AgentOptions(
        fields=list(QUERY_FIELDS),
        process_fields=list(PROCESS_FIELDS),
        nvidia_smi="/nonexistent/nvidia-smi",
        interval=0.2,
        nvml=True,
    )
    argv, data = agent_argv(sys.executable, options)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert proc.stdin is not None
    proc.stdin.write(data)
    proc.stdin.flush()
    try:
        hello = read_until_gpus(proc)
        # every thread has run a round and gone on: gpus, host stats, the process poll
        sent = {"gpus": 1, "host_stats": 0, "procs": 0}
        while sent["gpus"] < 3 or sent["host_stats"] < 2 or sent["procs"] < 1:
            kind = json.loads(proc.stdout.readline())["type"] if proc.stdout else ""
            sent[kind] = sent.get(kind, 0) + 1
        maps = Path(f"/proc/{proc.pid}/maps").read_text()
    finally:
        stop(proc)
    assert hello.source == Source.AGENT_NVML.value, hello.note
    return hello, maps


def test_the_agent_with_nvml_loads_nothing_it_does_not_use(tmp_path: Path) -> None:
    """With NVML and nothing to scrape the agent starts no child and opens no socket, and
    pynvml calls no ``find_library``: subprocess, socket and ctypes.util (shutil's bz2 and
    lzma) are not imported (~2 MiB of RSS, measured with bench/bench_agent.py). Seen
    from outside, in /proc/PID/maps: their C parts are not mapped, beside ones that are."""
    unused = extension_modules(["_posixsubprocess", "_socket", "_bz2", "_lzma"])
    used = extension_modules(["_json", "_ctypes"])
    if not unused or not used:
        pytest.skip("this interpreter has those modules built in")
    _, maps = nvml_agent_maps(tmp_path)
    assert all(f"/{so}\n" in maps for so in used.values()), (used, maps)
    assert [n for n, so in unused.items() if f"/{so}\n" in maps] == []


HEAP_MAX = 64 << 20  # glibc's thread arena: HEAP_MAX_SIZE reserved, its used part rw


def thread_arenas(maps: str) -> int:
    """glibc thread arenas in /proc/PID/maps: an anonymous rw part and the ---p rest of
    its reservation right after it, together exactly ``HEAP_MAX``."""
    rows = []
    for line in maps.splitlines():
        cells = line.split()
        start, end = (int(x, 16) for x in cells[0].split("-"))
        rows.append((start, end, cells[1], len(cells) > 5))
    return sum(
        1
        for (s1, e1, p1, named1), (s2, e2, p2, named2) in itertools.pairwise(rows)
        if p1 == "rw-p" and p2 == "---p" and not (named1 or named2)
        and e1 == s2 and e2 - s1 == HEAP_MAX
    )  # fmt: skip


def test_the_agents_threads_share_one_malloc_arena(tmp_path: Path) -> None:
    """``mallopt(M_ARENA_MAX, 1)`` before its threads start: none of them (gpus, the
    NVML worker, procs, host stats) gets an arena of its own."""
    if platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc only")
    _, maps = nvml_agent_maps(tmp_path)
    assert thread_arenas(maps) == 0, maps


LAZY_CTYPES_UTIL = """
import json, sys
from gpumon.backends.remote import agent
assert "ctypes.util" not in sys.modules, "imported before the test"
import ctypes
with agent._lazy_ctypes_util():
    from ctypes.util import find_library
    import ctypes.util as util_then
    before_call = type(sys.modules["ctypes.util"]).__name__, type(util_then).__name__
    found = find_library("c")
    after_call = type(sys.modules["ctypes.util"]).__name__
after = sys.modules.get("ctypes.util")
import ctypes.util
print(json.dumps({
    "before_call": before_call,
    "after_call": after_call,
    "real_after": ctypes.util is after and type(after).__name__ == "module",
    "found": found,
    "same": found == ctypes.util.find_library("c"),
}))
"""


def test_the_ctypes_util_stand_in_loads_the_real_one_when_used() -> None:
    """While pynvml is imported ``ctypes.util`` is a stand-in: ``find_library`` through it
    imports the real module at the first call and answers as it does; afterwards the real
    module is what ``import ctypes.util`` gives. A fresh interpreter (no ctypes.util yet)."""
    argv = [sys.executable, "-c", LAZY_CTYPES_UTIL]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got["before_call"] == ["_CtypesUtilStandIn", "_CtypesUtilStandIn"], got
    assert got["after_call"] == "module" and got["real_after"], got
    assert got["found"] and got["same"], got


def test_without_ever_using_it_ctypes_util_is_never_imported() -> None:
    """The stand-in leaves: after the block nothing of it is left in sys.modules or on
    the ctypes package, and the real module was never imported."""
    script = (
        "import sys, ctypes\n"
        "from gpumon.backends.remote import agent\n"
        "with agent._lazy_ctypes_util():\n"
        "    from ctypes.util import find_library\n"
        "print('ctypes.util' in sys.modules, hasattr(ctypes, 'util'))\n"
    )
    argv = [sys.executable, "-c", script]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["False", "False"]


TRIM_SCRIPT = """
from gpumon.backends.remote import agent

def anon():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1])

held = [bytes(4000) + bytes([i % 256]) for i in range(8000)]  # ~32 MB of malloc'd blocks
pin = bytes(4000)  # above them: free() alone cannot shrink the heap past it
del held[::2], held[::2]  # 3 of 4 freed, scattered: holes no free() gives back
before = anon()
agent.malloc_trim()
print(before - anon())
"""


def test_malloc_trim_gives_the_heaps_free_pages_back() -> None:
    """The heap's free pages inside it (not only at its top) go back to the system."""
    if platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc only")
    argv = [sys.executable, "-c", TRIM_SCRIPT]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    assert int(res.stdout) > 8 * 1024, res.stdout  # kB: of ~24 MB freed, the whole pages
