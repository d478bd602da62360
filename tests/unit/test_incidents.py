"""Incidents: the simulator's drafter OOM (memory critical, CUDA OOM line, memory drop) is
one incident, cause first, in the physical GPU's terms; one bell per incident; history
keeps the values an alert had when raised and at its peak; stale data is an alert."""

from __future__ import annotations

import dataclasses

import pytest

from gpumon.backends.alerts.engine import Alert, AlertEngine, AlertRules
from gpumon.backends.alerts.incident import (
    BELL_SUBJECTS_KEPT,
    INCIDENT_GAP_S,
    Fix,
    Incident,
    IncidentBell,
    alert_headline,
    command_fix,
    holder_fix,
    incidents,
    line,
    screen_fixes,
)
from gpumon.backends.alerts.rules import foreign_held
from gpumon.backends.model import GpuProcess, GpuSample, Health, HostSample
from gpumon.backends.sim import OOM_AT, SimSettings, wall_time
from gpumon.backends.sim.job import oom_message

from alert_facts import held_facts
from sim_samples import sim_printers, sim_sample

T0 = 1_800_000_000.0
OOM_LOG = ["CUDA_VISIBLE_DEVICES=5,6,7", "Traceback (most recent call last):", oom_message()]


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def drafter_oom(
    until: float, settings: SimSettings | None = None, *, log_first: bool = True
) -> tuple[AlertEngine, list[Alert]]:
    """The training-oom scenario from its start to ``until`` through a real engine: the
    samples of the simulated nvidia-smi and the drafter's log at the OOM. The drafter is
    configured on GPUs 5-7, as the demo's config has it (the monitor gives the engine its
    jobs); ``log_first``: its log's first line is read before the first sample (else only
    at the OOM: a loaded machine whose first log read came late)."""
    settings = settings or SimSettings()
    printers = sim_printers(settings)
    clock = Clock()
    engine = AlertEngine("ct200", AlertRules(), clock=clock, jobs={"drafter": (5, 6, 7)})
    heard: list[Alert] = []
    engine.add_listener(heard.append)
    if log_first:
        engine.on_log_lines("/root/drafter.log", ["step 1"], job="drafter", gpus=(5, 6, 7))
    t = 0.0
    while t <= until:
        clock.t = wall_time(settings, t)
        engine.on_sample(sim_sample(printers, settings, t))
        if t == OOM_AT:
            engine.on_log_lines("/root/drafter.log", OOM_LOG, job="drafter", gpus=(5, 6, 7))
        t += 0.5
    return engine, heard


def test_the_drafter_oom_is_one_incident_with_the_cuda_oom_first() -> None:
    engine, _ = drafter_oom(OOM_AT + 3)
    kinds = {a.kind for a in engine.history()}
    assert {"memory", "cuda_oom", "oom_death"} <= kinds
    (incident,) = incidents(engine.history())
    assert incident.cause.kind == "cuda_oom"
    assert incident.headline == "drafter: CUDA OOM on GPU 6 (tried 2.00 GiB, 90 MiB free)"
    assert "GPU 1" not in incident.headline  # PyTorch's process-local number stays evidence
    assert (incident.gpu, incident.job, incident.fix) == (6, "drafter", "drafter")
    assert incident.severity is Health.CRITICAL and incident.active
    assert {a.kind for a in incident.evidence} >= {"memory", "oom_death"}
    assert line(incident, "r restart") == f"{incident.headline} — r restart"
    assert incident.fixes == (Fix("r", "restart drafter", "gpumon restart ct200 drafter"),)
    assert screen_fixes(incident) == "r restart drafter"
    assert command_fix(incident) == "fix: gpumon restart ct200 drafter"
    # A job the config cannot restart has no fix to offer, on the screen or headless.
    (bare,) = incidents(engine.history(), restartable=())
    assert bare.fix is None and bare.fixes == ()
    assert screen_fixes(bare) is None and command_fix(bare) is None
    # Only the active alerts (the strip, check): the same incident, the same headline.
    (live,) = incidents(engine.active())
    assert live.headline == incident.headline and live.cause.key == incident.cause.key


def test_gpu_alerts_before_the_jobs_log_was_read_are_the_jobs_incident_from_the_start() -> None:
    """The drafter's log read only at its OOM (a loaded machine: the agent's first log
    read came late): GPU 6's memory warning and time to full, raised before, belong to the
    drafter from the start, as its config says. They carried no job, and opened an
    incident of their own beside the OOM's: two bells, a headline without the holder."""
    engine, heard = drafter_oom(OOM_AT + 3, log_first=False)
    early = [a for a in heard if a.gpu == 6 and a.time < wall_time(SimSettings(), OOM_AT)]
    assert {a.kind for a in early} >= {"memory", "time_to_full"}
    assert {a.job for a in early} == {"drafter"}
    (incident,) = incidents(engine.history())
    assert incident.job == "drafter" and incident.cause.kind == "cuda_oom"
    assert incident.headline.startswith("drafter: CUDA OOM on GPU 6")
    bell = IncidentBell()
    live: list[Alert] = []
    rings = 0
    for alert in heard:
        live = [a for a in live if a.key != alert.key] + [alert]
        rings += bell.rings(alert, live)
    assert rings == 1


def test_advice_without_a_key_or_command_is_said_in_words() -> None:
    _, heard = drafter_oom(OOM_AT + 3)
    (incident,) = incidents(heard)
    advised = dataclasses.replace(
        incident,
        fixes=(Fix("K", "stop it", "gpumon kill ct200 4242"), Fix(None, "reboot the node")),
    )
    assert screen_fixes(advised) == "K stop it, reboot the node"
    assert command_fix(advised) == "fix: gpumon kill ct200 4242"
    assert command_fix(dataclasses.replace(incident, fixes=(Fix(None, "reboot the node"),))) == (
        "fix: reboot the node"
    )
    assert Fix(None, "reboot the node").to_json() == {
        "key": None,
        "words": "reboot the node",
        "command": None,
    }


def test_before_the_oom_the_incident_is_the_warning_with_its_time_to_full() -> None:
    engine, _ = drafter_oom(OOM_AT - 15)
    (incident,) = incidents(engine.active())
    assert incident.cause.kind == "time_to_full"
    assert incident.headline.startswith("drafter: GPU 6 memory full in ~")
    assert incident.severity is Health.WARNING


def test_one_bell_per_incident_not_per_alert() -> None:
    _, heard = drafter_oom(OOM_AT + 3)
    bell = IncidentBell()
    live: list[Alert] = []
    rings = []
    for alert in heard:  # in the order the listeners heard them, as the dashboard does
        live = [a for a in live if a.key != alert.key] + [alert]
        rings.append(bell.rings(alert, live))
    criticals = [a.kind for a in heard if a.severity is Health.CRITICAL]
    assert len(criticals) >= 3  # memory critical, the CUDA OOM, the drop: one bell
    assert sum(rings) == 1
    # Once it is over, the next critical alert of the job is a new incident: it rings.
    ended = [dataclasses.replace(a, active=False) for a in live]
    again = dataclasses.replace(heard[-1], key="log:/root/drafter.log:999", time=T0 + 9999)
    assert bell.rings(again, [*ended, again])


def test_a_warning_never_rings_and_other_subjects_ring_on_their_own() -> None:
    bell = IncidentBell()
    warn = Alert("memory:1", Health.WARNING, "memory", "h", 1, None, "m", T0, T0)
    crit0 = Alert("xid:a:1", Health.CRITICAL, "xid", "h", 0, None, "x", T0, T0)
    crit1 = dataclasses.replace(crit0, key="xid:b:2", gpu=1)
    assert not bell.rings(warn, [warn])
    assert bell.rings(crit0, [warn, crit0])
    assert bell.rings(crit1, [warn, crit0, crit1])  # another GPU: another incident
    for k in range(BELL_SUBJECTS_KEPT + 10):  # one-off alerts each their own subject
        lone = Alert(f"cgroup_oom_kill:m:{k}", Health.CRITICAL, "cgroup_oom_kill", "h", None,
                     None, "x", T0, T0)  # fmt: skip
        assert bell.rings(lone, [lone])
    assert len(bell) == BELL_SUBJECTS_KEPT


def test_incidents_split_by_subject_and_by_time() -> None:
    def alert(key: str, kind: str, t: float, **kw: object) -> Alert:
        base = Alert(key, Health.CRITICAL, kind, "h", None, None, f"{kind} text", t, t, False)
        return dataclasses.replace(base, **kw)  # type: ignore[arg-type]

    old = alert("a", "cuda_oom", T0, job="drafter", gpu=6)
    new = alert("b", "cuda_oom", T0 + INCIDENT_GAP_S + 60, job="drafter", gpu=6, active=True)
    other_gpu = alert("c", "xid", T0 + 1, gpu=2)
    lone = alert("d", "cgroup_oom_kill", T0 + 2)
    found = incidents([old, new, other_gpu, lone])
    assert len(found) == 4
    assert found[0].cause is new  # the active one first
    assert incidents([old, new], restartable={"target"})[0].fix is None


def test_history_keeps_the_raised_and_peak_values_while_the_alert_clears() -> None:
    engine, _ = drafter_oom(OOM_AT + 3)
    memory = next(a for a in engine.history() if a.kind == "memory")
    assert not memory.active and memory.peak is Health.CRITICAL
    raised = float(memory.raised_text.split("memory ")[1].split("%")[0])
    peak = float(memory.peak_text.split("memory ")[1].split("%")[0])
    assert 95.0 <= raised < peak and peak >= 98.5
    # what it read while clearing, shown apart (CT 201's jupyter keeps its 6 GiB there)
    assert "6.3% used" in memory.message
    ttf = next(a for a in engine.history() if a.kind == "time_to_full")
    first = float(ttf.raised_text.split("~")[1].split(" s")[0])
    closest = float(ttf.peak_text.split("~")[1].split(" s")[0])
    assert closest < first  # the peak of a countdown is its nearest point
    assert alert_headline(memory).startswith(f"drafter: {memory.peak_text}")
    out = memory.to_json()
    assert out["first_message"] == memory.raised_text and out["peak_severity"] == "critical"


def test_a_job_down_since_its_logs_oom_says_the_oom_and_not_before_gpumon_started() -> None:
    engine = AlertEngine("h", AlertRules(), clock=Clock())
    engine.on_log_lines("/d.log", [*OOM_LOG, "step 2"], job="drafter", backlog=True)
    engine.judge_job_down("drafter", True, T0)
    (current,) = engine.active()
    assert current.kind == "job_crashed" and "before gpumon started" not in current.message
    (incident,) = incidents([current], restartable={"drafter"})
    assert incident.headline == "drafter: CUDA OOM on GPU 6 (tried 2.00 GiB, 90 MiB free)"
    assert incident.fix == "drafter"  # a restart fixes a job that is down
    engine = AlertEngine("h", AlertRules(), clock=Clock())
    engine.on_log_lines("/d.log", [*OOM_LOG, *[f"step {i}" for i in range(60)]], backlog=True)
    (past,) = engine.history()
    assert not past.active and past.message.endswith("(before gpumon started)")


def _gpu_sample(t: float) -> HostSample:
    gpu = GpuSample(index=0, memory_used_mib=1000, memory_total_mib=90000, memory_free_mib=89000)
    return HostSample("h", t, None, (gpu,), ())


@pytest.mark.parametrize("interval", [1.0, 0.1])
def test_stale_data_warns_then_turns_critical_and_a_sample_ends_it(interval: float) -> None:
    rules = AlertRules(stale_warning_intervals=5, stale_critical_intervals=30)
    engine = AlertEngine("h", rules, clock=Clock())
    heard: list[Alert] = []
    engine.add_listener(heard.append)
    engine.on_sample(_gpu_sample(T0))
    warn_at = max(5 * interval, 3.0)
    assert engine.on_silence(warn_at - 0.1, interval, T0 + warn_at - 0.1) == []
    (warn,) = engine.on_silence(warn_at, interval, T0 + warn_at)
    assert (warn.kind, warn.severity, warn.key) == ("stale_data", Health.WARNING, "stale_data")
    assert f"no GPU data for {warn_at:.0f} s" in warn.message
    crit_at = max(30 * interval, 10.0) + 0.5
    assert engine.on_silence(crit_at, interval, T0 + crit_at)[0].severity is Health.CRITICAL
    assert [a.severity for a in heard] == [Health.WARNING, Health.CRITICAL]
    engine.on_sample(_gpu_sample(T0 + 40))
    assert engine.active() == []
    assert engine.history()[0].peak is Health.CRITICAL


def test_stale_data_ends_when_not_connected_and_can_be_turned_off() -> None:
    engine = AlertEngine("h", AlertRules(), clock=Clock())
    assert engine.on_silence(10.0, 1.0, T0)
    engine.on_silence(None, 1.0, T0 + 1)
    assert engine.active() == []
    off = AlertEngine("h", AlertRules(stale_warning_intervals=0), clock=Clock())
    assert off.on_silence(1e6, 1.0, T0) == []
    with pytest.raises(ValueError, match="stale_critical_intervals"):
        AlertRules.from_mapping({"stale_warning_intervals": 9, "stale_critical_intervals": 3}, "a")


def raised(line: str, gpus: tuple[int, ...] | None = None) -> Alert:
    """The alert the engine raises for a job log's ``line`` (``gpus``: the job's)."""
    engine = AlertEngine("h", AlertRules(), clock=Clock())
    (alert,) = engine.on_log_lines("/x.log", [line], gpus=gpus)
    return alert


def test_an_oom_line_without_pytorchs_numbers_keeps_its_words() -> None:
    plain = raised("RuntimeError: CUDA out of memory. while capturing graph", gpus=(2,))
    assert alert_headline(plain) == "CUDA OOM on GPU 2: while capturing graph"
    assert alert_headline(raised("CUDA error: out of memory")) == "CUDA OOM"
    markup = raised("CUDA out of memory. [b]x[/]")
    assert alert_headline(markup) == "CUDA OOM: [b]x[/]"  # only the engine's GPU note goes


def test_the_oom_numbers_are_said_as_pytorch_printed_them() -> None:
    """PyTorch's ``format_size`` (formats.md 5.1): exactly 1 GiB is ``1024.00 MiB``, a
    full GPU has ``0 bytes`` free; the headline says each as the line did."""

    def oom(tried: str, free: str) -> str:
        line = (
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried}. GPU 0 "
            f"has a total capacity of 94.97 GiB of which {free} is free."
        )
        return alert_headline(raised(line, gpus=(2,)))

    assert oom("1024.00 MiB", "0 bytes") == "CUDA OOM on GPU 2 (tried 1024 MiB, 0 bytes free)"
    assert oom("1.00 GiB", "512.00 KiB") == "CUDA OOM on GPU 2 (tried 1.00 GiB, 512 KiB free)"
    assert oom("0 bytes", "20.50 MiB") == "CUDA OOM on GPU 2 (tried 0 bytes, 20.50 MiB free)"


def foreign(gpu: int, at: float, *, active: bool = True, held: str = "6.0") -> Alert:
    """The engine's ``foreign_process`` condition: another container's memory on ``gpu``."""
    text = f"GPU {gpu}: {held} GiB held by CT 201 jupyter-lab"
    return Alert(
        f"foreign_process:{gpu}", Health.WARNING, "foreign_process", "ct200", gpu, "drafter",
        text, at, at + 25.0, active, facts=held_facts(float(held)),
    )  # fmt: skip


def test_another_containers_memory_on_the_gpu_that_ran_out_is_the_cause() -> None:
    engine, _ = drafter_oom(OOM_AT + 3)
    oom = next(a for a in engine.history() if a.kind == "cuda_oom")
    (incident,) = incidents([*engine.history(), foreign(6, oom.time - 28.0)])
    assert incident.cause.kind == "cuda_oom"
    assert incident.headline == (
        "drafter: CUDA OOM on GPU 6 (tried 2.00 GiB, 90 MiB free; 6.0 GiB held by CT 201 "
        "jupyter-lab)"
    )
    # Restarting alone would run out again: stopping the holder comes first.
    assert incident.fixes == (
        Fix("K", "stop jupyter-lab"),
        Fix("r", "restart drafter", "gpumon restart ct200 drafter"),
    )
    assert screen_fixes(incident) == "K stop jupyter-lab, r restart drafter"
    assert command_fix(incident) == (
        "fix: stop jupyter-lab (the dashboard's K), then gpumon restart ct200 drafter"
    )
    assert line(incident, screen_fixes(incident)).endswith(
        "6.0 GiB held by CT 201 jupyter-lab) — K stop jupyter-lab, r restart drafter"
    )
    # A job nobody can restart: stopping the holder is still offered.
    (bare,) = incidents([*engine.history(), foreign(6, oom.time - 28.0)], restartable=())
    assert bare.fixes == (Fix("K", "stop jupyter-lab"),)
    assert command_fix(bare) == "fix: stop jupyter-lab (the dashboard's K)"
    assert line(bare, screen_fixes(bare)).endswith(" — K stop jupyter-lab")


def test_a_holder_gone_long_before_or_on_another_gpu_is_not_the_cause() -> None:
    engine, _ = drafter_oom(OOM_AT + 3)
    oom = next(a for a in engine.history() if a.kind == "cuda_oom")
    for other in (
        foreign(5, oom.time - 10.0),  # GPU 5 did not run out
        dataclasses.replace(  # ended 90 s before the OOM
            foreign(6, oom.time - 100.0, active=False), last_seen=oom.time - 90.0
        ),
    ):
        found = incidents([*engine.history(), other])
        top = next(i for i in found if i.cause.kind == "cuda_oom")
        assert "held by" not in top.headline
        assert [f.key for f in top.fixes] == ["r"]
    # Ended at the OOM (it died with the drafter): it was holding when it ran out.
    gone = dataclasses.replace(foreign(6, oom.time - 28.0, active=False), last_seen=oom.time)
    (incident,) = incidents([*engine.history(), gone])
    assert "; 6.0 GiB held by CT 201 jupyter-lab)" in incident.headline
    # Before anything runs out the holder leads its own incident: stopping it is the fix.
    (alone,) = incidents([foreign(6, oom.time - 28.0)])
    assert alone.headline == "drafter: GPU 6: 6.0 GiB held by CT 201 jupyter-lab"
    assert alone.fixes == (Fix("K", "stop jupyter-lab"),)
    # A memory condition as the cause says it after its own words.
    memory = next(a for a in engine.history() if a.kind == "memory")
    assert alert_headline(memory, held=held_facts(6.0).held).endswith(
        " (6.0 GiB held by CT 201 jupyter-lab)"
    )


def xid_incident(line_text: str, *, job: str | None = "drafter") -> tuple[Incident, Alert]:
    """The incident of one kernel line through a real engine watching the simulated
    machine (its bus IDs); ``job``: the job of GPUs 5-7."""
    settings = SimSettings()
    engine = AlertEngine("ct200", AlertRules(), clock=Clock())
    if job is not None:
        engine.on_log_lines("/root/drafter.log", ["step 1"], job=job, gpus=(5, 6, 7))
    engine.on_sample(sim_sample(sim_printers(settings), settings, 10.0))
    engine.on_kernel_lines([line_text])
    (xid,) = [a for a in engine.history() if a.kind == "xid"]
    (incident,) = [i for i in incidents(engine.history()) if i.cause is xid]
    return incident, xid


FELL = "79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def test_an_xid_says_what_it_is_and_nvidias_action_is_its_fix() -> None:
    fell = f"NVRM: Xid (PCI:0000:ba:00): {FELL}"
    incident, xid = xid_incident(fell)
    assert xid.gpu == 6 and xid.job == "drafter"  # BA:00 is the simulated GPU 6
    assert incident.headline == "drafter: Xid 79 on GPU 6: fallen off the bus"
    assert incident.fixes == (
        Fix(None, "reboot the node (the GPU cannot be reset in place)"),
        Fix(None, "drain the node"),
        Fix(None, "gpumon bundle ct200"),
    )
    assert line(incident, screen_fixes(incident)) == (
        "drafter: Xid 79 on GPU 6: fallen off the bus — reboot the node (the GPU cannot be "
        "reset in place), drain the node, gpumon bundle ct200"
    )
    assert command_fix(incident) == "fix: reboot the node (the GPU cannot be reset in place)"
    # An application's error: restarting the job is the fix, nothing about the node.
    fault = "NVRM: Xid (PCI:0000:ba:00): 31, pid=874, name=python3, Ch 00000008. MMU Fault"
    app, _ = xid_incident(fault)
    assert app.headline.startswith("drafter: Xid 31 on GPU 6: GPU memory page fault")
    assert app.fixes == (Fix("r", "restart drafter", "gpumon restart ct200 drafter"),)
    # A GPU reset: the command that does it, for the GPU it names.
    reset = "NVRM: Xid (PCI:0000:18:00): 119, pid=1, name=x, Timeout waiting for RPC from GSP!"
    gsp, _ = xid_incident(reset, job=None)
    assert gsp.fixes[0] == Fix(None, "reset the GPU (nvidia-smi -r -i 0)")
    assert [f.words for f in gsp.fixes[1:]] == ["drain the node", "gpumon bundle ct200"]
    # An uncorrectable ECC error: NVIDIA's workflow drains first, said once.
    dbe = "NVRM: Xid (PCI:0000:ba:00): 48, An uncorrectable double bit error (DBE) has been"
    ecc, _ = xid_incident(f"{dbe} detected on GPU in the framebuffer at physAddr 0xe9b9107e0.")
    assert [f.words for f in ecc.fixes] == [
        "drain, then reset the GPU (nvidia-smi -r -i 6)",
        "gpumon bundle ct200",
    ]


def test_a_contained_error_restarts_the_job_then_resets_when_convenient() -> None:
    """Xid 94 (RESTART_APP): the job's restart first, then the catalog's "reset the GPU
    when convenient" with its command, then the node's drain and the bundle."""
    line_94 = "NVRM: Xid (PCI:0000:ba:00): 94, pid=7062, Contained: CE User Channel (0x9)."
    incident, _ = xid_incident(line_94)
    assert [f.words for f in incident.fixes] == [
        "restart drafter",
        "reset the GPU (nvidia-smi -r -i 6) when convenient",
        "drain the node",
        "gpumon bundle ct200",
    ]


def test_a_solo_45_says_restart_the_fabric_manager() -> None:
    """Xid 45 with no other Xid on its bus: the catalog's solo bucket, RESTART_FM."""
    incident, xid = xid_incident("NVRM: Xid (PCI:0000:ba:00): 45, pid=87, name=python3, ch 8")
    assert xid.severity is Health.WARNING
    assert [f.words for f in incident.fixes] == ["restart the Fabric Manager service"]


def test_an_xid_on_a_bus_none_of_the_gpus_has_is_another_containers() -> None:
    other = f"NVRM: Xid (PCI:0000:78:00): {FELL}"
    incident, xid = xid_incident(other)
    assert xid.gpu is None and xid.job is None
    assert incident.headline == (
        "Xid 79 on PCI 0000:78:00 (not a GPU of this host: another container's or the "
        "host's): fallen off the bus"
    )
    assert incident.fixes[0] == Fix(None, "reboot the node (the GPU cannot be reset in place)")
    # A GPU without a job: what runs on it is named.
    sglang = "NVRM: Xid (PCI:0000:18:00): 94, pid=1, name=x, Contained: ..."
    on_gpu0, _ = xid_incident(sglang, job=None)
    assert on_gpu0.headline.startswith("Xid 94 on GPU 0 (running ")


@pytest.mark.parametrize(
    ("holders", "words"),
    [
        ([("201", "/usr/bin/python3 /usr/local/bin/jupyter-lab", 6144)], "stop jupyter-lab"),
        ([(None, "python3 train.py", 2048)], "stop train.py"),
        ([("docker:3f2a9c", "vllm serve", 4096)], "stop vllm"),
        ([("201", None, 6144)], "stop CT 201's process"),
        ([("202", "python3 a.py", 9000), ("201", "jupyter", 100)], "stop a.py"),
    ],
)
def test_k_names_the_holder_the_foreign_process_alert_names(
    holders: list[tuple[str | None, str | None, int]], words: str
) -> None:
    """Issue 36 point 3: the strip's ``K`` says whom it stops, never just "stop it" (which
    reads like ``s``, stop the job): the program of the biggest holder the
    ``foreign_process`` alert's facts name (``alerts.rules.foreign_held``), however it is
    run; "stop the holder" for an alert without them (a recording from before facts)."""
    processes = tuple(
        GpuProcess(None, None, mib, host_pid=1000 + i, container=ct, command=cmd, source="host")
        for i, (ct, cmd, mib) in enumerate(holders)
    )
    held = foreign_held(processes, 200)
    assert held is not None
    assert holder_fix(held) == Fix("K", words)
    assert holder_fix(None) == Fix("K", "stop the holder")


def test_an_xid_before_the_first_process_list_says_what_runs_once_it_comes() -> None:
    """ci14, on a busy machine: the kernel's round came before the first process list, and
    the Xid said no "running ..." for good. It says it once the list comes; an Xid after a
    list that had nothing on its GPU stays as it is."""
    settings = SimSettings()
    engine = AlertEngine("ct200", AlertRules(), clock=Clock())
    full = sim_sample(sim_printers(settings), settings, 10.0)
    engine.on_sample(dataclasses.replace(full, processes=()))
    engine.on_kernel_lines(["NVRM: Xid (PCI:0000:18:00): 94, pid=1, name=x, Contained: ..."])
    (xid,) = [a for a in engine.history() if a.kind == "xid"]
    assert xid.message.startswith("Xid 94 on GPU 0:") and xid.facts.xid is not None
    assert xid.facts.xid.whose is None
    engine.on_processes(full)
    (xid,) = [a for a in engine.history() if a.kind == "xid"]
    assert xid.message.startswith("Xid 94 on GPU 0 (running "), xid.message
    assert xid.facts.xid is not None and xid.facts.xid.whose == xid.message[17:].split(")")[0]
    (incident,) = [i for i in incidents(engine.history()) if i.cause.key == xid.key]
    assert incident.headline.startswith("Xid 94 on GPU 0 (running ")
    # the list known, GPU 1 empty in it: an Xid there names nothing, then or later
    empty = dataclasses.replace(
        full, processes=tuple(p for p in full.processes if p.gpu_uuid != full.gpus[1].uuid)
    )
    engine.on_processes(empty)
    engine.on_kernel_lines(["NVRM: Xid (PCI:0000:2a:00): 94, pid=1, name=x, Contained: ..."])
    engine.on_processes(full)
    later = [a for a in engine.history() if a.kind == "xid" and a.gpu == 1]
    assert [a.message.startswith("Xid 94 on GPU 1:") for a in later] == [True], later


def test_an_xid_between_the_process_list_and_the_next_sample_says_what_runs() -> None:
    """ci15: the process list came, then the kernel's round before the next sample; the
    Xid read what ran from the sample before the list (none)."""
    settings = SimSettings()
    engine = AlertEngine("ct200", AlertRules(), clock=Clock())
    full = sim_sample(sim_printers(settings), settings, 10.0)
    engine.on_sample(dataclasses.replace(full, processes=()))
    engine.on_processes(full)  # the list, between two samples
    engine.on_kernel_lines(["NVRM: Xid (PCI:0000:18:00): 94, pid=1, name=x, Contained: ..."])
    (xid,) = [a for a in engine.history() if a.kind == "xid"]
    assert xid.message.startswith("Xid 94 on GPU 0 (running "), xid.message
