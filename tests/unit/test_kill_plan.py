"""``kill_plan``: which PID through which way, and the exact command: guarded by the start
time when the record has one (on the host's /proc, or the simulator's; inside the
container wrapped in ``pct exec``), the plain ``kill`` when it has none, and what the
dialog says about it."""

from __future__ import annotations

import dataclasses
import shlex

import pytest

from gpumon.backends.actions.kill import KillError, guarded_script, kill_plan
from gpumon.backends.model import GpuProcess, ProcessSource

THEIRS = GpuProcess(
    pid=None,
    name="jupyter-lab",
    memory_mib=6144,
    host_pid=3187442,
    container="201",
    user="root",
    start_ticks=10000,
    source=ProcessSource.HOST.value,
)
OURS = GpuProcess(
    pid=861,
    name="python3",
    memory_mib=80000,
    host_pid=2418861,
    container="200",
    start_ticks=4242,
    source=ProcessSource.HOST.value,
)


def test_on_the_host_the_guard_reads_the_host_side_proc() -> None:
    plan = kill_plan("ct200", THEIRS, host_access=True, container=200, host_proc="/sim/proc")
    assert (plan.on_host, plan.pid, plan.start_ticks) == (True, 3187442, 10000)
    argv = plan.command("TERM")
    assert argv[:2] == ["sh", "-c"] and argv[2] == guarded_script(
        3187442, 10000, "TERM", "/sim/proc"
    )
    assert "cat /sim/proc/3187442/stat" in argv[2]
    assert plan.shell_line("TERM") == shlex.join(argv)  # the host runs it as it is
    assert "tick 10000" in plan.guard_text() and plan.where == "on the Proxmox host"


def test_inside_the_container_it_is_the_container_pid_through_pct_and_its_own_proc() -> None:
    plan = kill_plan("ct200", OURS, host_access=False, container=200, host_proc="/sim/proc")
    assert (plan.on_host, plan.pid) == (False, 861)
    line = plan.shell_line("KILL")
    assert line.startswith("pct exec 200 -- sh -c ")
    assert "cat /proc/861/stat" in line and '[ "${20}" = 4242 ]' in line
    assert line.endswith("exec kill -s KILL 861'")
    assert shlex.split(line)[4:] == plan.command("KILL")  # exactly what pct exec runs


def test_without_a_start_time_the_plain_kill_runs_and_the_dialog_says_so() -> None:
    plain = GpuProcess(pid=4242, name="python3", memory_mib=100)
    plan = kill_plan("box", plain, host_access=False, container=None)
    assert plan.start_ticks is None
    assert plan.command("TERM") == ["kill", "-s", "TERM", "4242"]
    assert plan.shell_line("TERM") == "kill -s TERM 4242"
    assert "not ruled out" in plan.guard_text()


def test_another_containers_process_without_host_access_cannot_be_reached() -> None:
    with pytest.raises(KillError, match="host-side access"):
        kill_plan("ct200", THEIRS, host_access=False, container=200)


def test_kill_alert_is_the_holders_foreign_process_else_an_alert_of_its_gpu() -> None:
    """The incident K's evidence is of: the foreign_process naming the process its holder
    (not the newer one of another holder), else the newest foreign_process or
    gpu_idle_held of its GPUs; an ended alert or one of another kind is none."""
    from gpumon.backends.actions.kill import kill_alert
    from gpumon.backends.alerts.facts import AlertFacts, Held, Holder
    from gpumon.backends.alerts.store import Alert
    from gpumon.backends.model import GpuProcess, Health

    def alert(key: str, kind: str, gpu: int, t: float, holder: int | None = None) -> Alert:
        held = Held(6144, Holder("201", holder, "jupyter-lab")) if holder else None
        return Alert(key, Health.WARNING, kind, "ct200", gpu, None, key, t, t,
                     facts=AlertFacts(held=held))  # fmt: skip

    jupyter = GpuProcess(pid=None, name="jupyter-lab", memory_mib=6144, host_pid=4242)
    mine = alert("foreign_process:6", "foreign_process", 6, 10.0, holder=4242)
    other = alert("foreign_process:6b", "foreign_process", 6, 20.0, holder=999)
    idle = alert("gpu_idle_held:6", "gpu_idle_held", 6, 30.0)
    assert kill_alert([mine, other, idle], jupyter, {6}) == "foreign_process:6"
    assert kill_alert([other, idle], jupyter, {6}) == "gpu_idle_held:6"
    assert kill_alert([other, idle], jupyter, {5}) is None
    ended = dataclasses.replace(idle, active=False)
    hot = alert("gpu_hot:6", "gpu_hot", 6, 40.0)
    assert kill_alert([ended, hot], jupyter, {6}) is None
