"""The ``K`` key on the demo: the foreign jupyter in CT 201 holds 6 GiB of GPU 6 from 32 s;
the detail view lists it (host-side attribution through the real collector), the GPU row
flags it, ``K`` names it, Cancel is the default, ``y`` terminates it through the host's
(simulated) ``kill``, GPU 6 gets the memory back, and the signal is audited."""

from __future__ import annotations

import asyncio
import json
import tarfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

from textual.geometry import Region
from textual.widget import Widget
from textual.widgets import Button

from gpumon.backends.actions import audit
from gpumon.backends.actions.kill import kill_alert
from gpumon.backends.monitor import HostMonitor
from gpumon.backends.sim.scenario import JUPYTER_MIB, JUPYTER_PID
from gpumon.tui.app import GpumonApp
from gpumon.tui.screens import DetailScreen
from gpumon.tui.screens.kill import KillScreen
from gpumon.tui.widgets import RowRef

Wait = Callable[..., Awaitable[None]]
GPU = 6


def shown(what: Widget | RowRef) -> str:
    """A widget's or a GPU row's lines as drawn on screen."""
    if isinstance(what, RowRef):
        return "\n".join(strip.text for strip in what.drawn())
    w, h = what.size
    return "\n".join(strip.text for strip in what.render_lines(Region(0, 0, w, h)))


def squeezed(text: str) -> str:
    return "".join(text.split())


def jupyter_listed(monitor: HostMonitor) -> bool:
    return any(p.host_pid == JUPYTER_PID for p in monitor.processes)


async def test_k_terminates_the_foreign_jupyter_through_the_host(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    monitor = demo_monitor(frozen=False, demo_time=40.0, interval=0.5)
    app = GpumonApp([monitor])
    async with app.run_test(size=(130, 45)) as pilot:
        sections = app.dashboard.sections
        await wait(pilot, lambda: all(len(s.rows) == 8 for s in sections), what="GPU rows")
        await wait(pilot, lambda: jupyter_listed(monitor), timeout=20, what="host-side list")
        assert monitor.host_side_fresh()

        def foreign_alerts() -> list[str]:
            return [a.message for a in monitor.alerts.active() if a.kind == "foreign_process"]

        await wait(pilot, lambda: bool(foreign_alerts()), what="the foreign_process alert")
        assert foreign_alerts() == ["GPU 6: 6.0 GiB held by CT 201 jupyter-lab"]
        app.dashboard.refresh_dashboard()
        await pilot.pause()
        assert "GPU 6: 6.0 GiB held by CT 201 jupyter-lab" in shown(sections[0].rows[GPU])

        await pilot.press(*["down"] * GPU, "enter")
        await wait(pilot, lambda: isinstance(app.screen, DetailScreen), what="the detail view")
        detail = cast(DetailScreen, app.screen)
        table = shown(detail.processes)
        assert "CT201" in table and f"h{JUPYTER_PID}" not in table  # no PID in CT 200
        assert "jupyter-lab --no-browser" in table and "CT200" in table
        procs = [p.host_pid for p in detail._processes()]
        for _ in range(procs.index(JUPYTER_PID)):
            await pilot.press("tab")
        selected = detail.selected_process()
        assert selected is not None and selected.host_pid == JUPYTER_PID

        await pilot.press("K")
        await wait(pilot, lambda: isinstance(app.screen, KillScreen), what="the kill dialog")
        dialog = cast(KillScreen, app.screen)
        what = shown(dialog.query_one("#kill-what"))
        assert f"host PID {JUPYTER_PID}" in what and "in CT201" in what and "user root" in what
        assert "cursor is on" not in what  # selected: no "biggest holder" note
        plan = dialog.plan
        assert plan.on_host and plan.start_ticks is not None  # the record has its start
        command = plan.shell_line("TERM")  # exactly what runs, the reuse check in it
        assert f'[ "${{20}}" = {plan.start_ticks} ]' in command
        assert command.endswith(f"exec kill -s TERM {JUPYTER_PID}'")
        assert "SIGTERM on the Proxmox host:" in what
        assert squeezed(command) in squeezed(what)  # wrapped over lines, but all there
        assert app.focused is dialog.query_one("#close", Button)  # Cancel is the default
        await pilot.press("enter")  # = Cancel
        await wait(pilot, lambda: app.screen is detail, what="cancelled")
        assert audit.read_entries() == [] and jupyter_listed(monitor)

        await pilot.press("K")
        await wait(pilot, lambda: isinstance(app.screen, KillScreen), what="the kill dialog")
        dialog = cast(KillScreen, app.screen)
        await pilot.press("y")
        await wait(pilot, lambda: dialog.state == "done", timeout=20, what="the kill")
        assert f"PID {JUPYTER_PID} has ended" in shown(dialog.query_one("#kill-status"))
        [entry] = audit.read_entries()
        assert entry["action"] == "kill" and entry["outcome"] == "ok"
        assert entry["pids"] == [JUPYTER_PID] and entry["parameters"]["container"] == "201"
        assert entry["commands"] == [command]
        assert entry["parameters"]["start_ticks"] == plan.start_ticks

        def gpu6() -> int:
            sample = monitor.latest
            return (sample.gpus[GPU].memory_used_mib or 0) if sample else 0

        before = gpu6()
        await wait(pilot, lambda: not jupyter_listed(monitor), timeout=20, what="gone")
        await wait(pilot, lambda: gpu6() < before - JUPYTER_MIB // 2, timeout=30, what="freed")
        await wait(pilot, lambda: not foreign_alerts(), timeout=10, what="the alert to end")


async def test_read_only_hides_k_and_refuses_it(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    monitor = demo_monitor(frozen=False, demo_time=40.0, interval=0.5)
    app = GpumonApp([monitor], read_only=True)
    async with app.run_test(size=(130, 45)) as pilot:
        await wait(pilot, lambda: jupyter_listed(monitor), timeout=20, what="host-side list")
        await pilot.press(*["down"] * GPU)
        assert "K" not in app.screen.active_bindings
        app.dashboard.action_kill_process()
        await pilot.pause()
        assert not isinstance(app.screen, KillScreen)
        kills = [e for e in audit.read_entries() if e["action"].startswith("kill")]
        assert [e["outcome"] for e in kills] == ["refused"], audit.read_entries()


async def open_kill_on_jupyter(
    pilot: Any, wait: Wait, app: GpumonApp, monitor: HostMonitor
) -> KillScreen:
    """The kill dialog on CT 201's jupyter (GPU 6's biggest foreign holder, K on its row)."""
    sections = app.dashboard.sections
    await wait(pilot, lambda: all(len(s.rows) == 8 for s in sections), what="GPU rows")
    await wait(pilot, lambda: jupyter_listed(monitor), timeout=20, what="host-side list")
    await pilot.press(*["down"] * GPU, "enter")
    await wait(pilot, lambda: isinstance(app.screen, DetailScreen), what="the detail view")
    detail = cast(DetailScreen, app.screen)
    procs = [p.host_pid for p in detail._processes()]
    for _ in range(procs.index(JUPYTER_PID)):
        await pilot.press("tab")
    await pilot.press("K")
    await wait(pilot, lambda: isinstance(app.screen, KillScreen), what="the kill dialog")
    return cast(KillScreen, app.screen)


async def test_k_keeps_the_evidence_before_the_signal_and_the_audit_names_it(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    monitor = demo_monitor(frozen=False, demo_time=40.0, interval=0.5)
    app = GpumonApp([monitor])
    async with app.run_test(size=(130, 45)) as pilot:
        dialog = await open_kill_on_jupyter(pilot, wait, app, monitor)
        what = shown(dialog.query_one("#kill-what"))
        assert "first keeps its evidence: at most 15 s (Esc skips it)" in what
        await pilot.press("y")
        await wait(pilot, lambda: dialog.state == "done", timeout=30, what="the kill")
        assert "evidence kept in " in squeezed_words(dialog)
        [entry] = audit.read_entries()
        assert entry["action"] == "kill" and entry["outcome"] == "ok"
        bundle = Path(entry["bundle"])  # named by the signal's entry, written before it
        assert bundle.name.startswith("gpumon-evidence-") and bundle == Path(dialog.bundle or "")
        with tarfile.open(bundle) as tar:
            files = {
                m.name.split("/", 1)[1]: f.read()
                for m in tar.getmembers()
                if "/" in m.name and (f := tar.extractfile(m)) is not None
            }
        assert "nvidia-smi-q.txt" in files and "index.txt" in files
        # The jupyter is no job: the bundle is of the foreign_process incident K answers
        [held] = [a for a in monitor.alerts.history() if a.kind == "foreign_process"]
        incident = json.loads(files["incident.json"])
        assert held.key in json.dumps(incident), incident
        index = files["index.txt"].decode()
        assert "6.0 GiB held by CT 201 jupyter-lab" in index
        # Known by its host PID only: its stacks would be the Proxmox host's to take, and
        # the simulated one's PIDs are made up (never a real process's): said, not silent
        assert (
            f"py-spy-{JUPYTER_PID}.txt: CT 201 jupyter-lab, host PID {JUPYTER_PID}: not dumped: "
            "the simulated machine's host PIDs are made up"
        ) in index, index
        # and nothing else is said of py-spy: no PID was left to dump, so it was not looked for
        assert "py-spy: not" not in index, index
        assert bundle.stat().st_mode & 0o777 == 0o600


async def test_esc_skips_the_kills_evidence_and_the_signal_goes_on(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    monitor = demo_monitor(frozen=False, demo_time=40.0, interval=0.5)
    app = GpumonApp([monitor])
    async with app.run_test(size=(130, 45)) as pilot:
        hung, asked = asyncio.Event(), asyncio.Event()

        async def stuck(
            *args: Any, **kwargs: Any
        ) -> Any:  # a py-spy on a process stuck in the kernel
            asked.set()
            await hung.wait()

        app.runtime.session.runs.evidence = stuck
        dialog = await open_kill_on_jupyter(pilot, wait, app, monitor)
        await pilot.press("y")
        await wait(pilot, asked.is_set, what="the evidence step")
        await pilot.pause()
        assert state_of(dialog) == "evidence"
        assert "Esc: skip the rest and send SIGTERM" in squeezed_words(dialog)
        await pilot.press("escape")
        await wait(pilot, lambda: state_of(dialog) == "done", timeout=30, what="the kill")
        assert app.screen is dialog  # Esc skipped the evidence; it did not close
        assert "evidence skipped after" in squeezed_words(dialog)
        [entry] = audit.read_entries()
        assert entry["outcome"] == "ok" and "bundle" not in entry


def state_of(dialog: KillScreen) -> str:
    return dialog.state  # read afresh each time (mypy would narrow an attribute)


def squeezed_words(dialog: KillScreen) -> str:
    return " ".join(shown(dialog.query_one("#kill-status")).split())


async def test_k_on_the_strips_fix_stops_the_wedged_vllm_server(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    """``--scenario vllm`` at the wedge: the strip's fix is "K stop its API server (PID
    4312)" and K, wherever the cursor is (GPU 0, an SGLang server's), opens the kill of
    that API server inside CT 200 by its PID there; ``y`` stops it, the simulated machine
    shows the server gone (no engine core on GPU 6, which goes idle, no longer its row's
    owner; its port refuses) and the wedge's alert ends, no other page in its place.
    Before, K opened the kill of GPU 0's SGLang scheduler (the cursor's biggest), and the
    simulated ``kill`` knew no PID of CT 200's /proc: "kill: (4312) - No such process"."""

    from gpumon.backends.sim.scenario import vllm_api_pid

    monitor = demo_monitor(frozen=False, demo_time=200.0, scenario="vllm")
    vllm = monitor.host.vllm
    assert vllm is not None
    port = vllm.ports[0]  # GPU 6's server, the one that wedges
    api = vllm_api_pid(0)
    app = GpumonApp([monitor], bell=False)
    async with app.run_test(size=(130, 45)) as pilot:
        strip, sections = app.dashboard.strip, app.dashboard.sections

        def state() -> str:
            active = [a.message for a in monitor.alerts.active()]
            return f"the strip says {strip.plain!r}; active: {active}"

        fix = f"K stop its API server (PID {api})"
        await wait(pilot, lambda: fix in strip.plain, timeout=60, what=state)
        assert f"vllm :{port} wedged" in strip.plain, state()

        def on_gpu6() -> list[str | None]:
            sample = monitor.latest
            return [p.name for p in sample.processes_for(sample.gpus[GPU])] if sample else []

        def owns_gpu6() -> bool:  # by its engine core's command, from the host side's list
            return GPU in monitor.workloads.vllm_gpus(monitor.latest).get(port, ())

        # the fix names discovery's PID: the process list may come after it (a loaded machine)
        await wait(pilot, lambda: on_gpu6() == ["VLLM::EngineCore"], what=lambda: str(on_gpu6()))
        await wait(pilot, owns_gpu6, timeout=20, what="GPU 6's owner")
        app.dashboard.refresh_dashboard()
        await pilot.pause()
        assert f"vllm:{port}" in shown(sections[0].rows[GPU])

        await pilot.press("K")  # the cursor is on GPU 0, whose process is SGLang's
        await wait(pilot, lambda: isinstance(app.screen, KillScreen), what="the kill dialog")
        dialog = cast(KillScreen, app.screen)
        plan = dialog.plan
        assert plan.pid == api and not plan.on_host and plan.container == 200, plan
        command = plan.shell_line("TERM")
        assert command == f"pct exec 200 -- kill -s TERM {api}"
        what = shown(dialog.query_one("#kill-what"))
        assert f"stop its API server (PID {api})" in what and f"CT200 PID {api}" in what
        assert f"vllm serve meta-llama/Llama-3.1-8B-Instruct --port {port}" in what
        assert f"SIGTERM inside CT 200: {command}" in what
        # the API server holds no GPU memory: its engine core does (not "unknown")
        assert "holds no GPU memory itself" in what and "GPU memory unknown" not in what
        assert dialog.query_one("#kill-box").border_title == "Terminate a process on demo"
        await pilot.press("y")
        await wait(pilot, lambda: dialog.state == "done", timeout=30, what="the kill")
        status = squeezed_words(dialog)
        assert f"sent SIGTERM (kill -s TERM {api} inside CT 200)" in status, status
        assert f"PID {api} has ended" in status, status
        [entry] = audit.read_entries()
        assert entry["outcome"] == "ok" and entry["commands"] == [command], entry
        # its evidence is of the wedge's incident, which the kill answers
        [wedged] = [a for a in monitor.alerts.history() if a.kind == "vllm_wedged"]
        with tarfile.open(entry["bundle"]) as tar:
            member = next(m for m in tar.getmembers() if m.name.endswith("/incident.json"))
            file = tar.extractfile(member)
            assert file is not None and wedged.key in file.read().decode()
        await pilot.press("escape")

        server = monitor.workloads.vllm[port]

        def refused() -> bool:  # a scrape under way when it stopped may say otherwise first
            return server.up is False and "Connection refused" in (server.error or "")

        await wait(pilot, refused, timeout=20, what=lambda: f"refused: {server.error}")
        await wait(pilot, lambda: on_gpu6() == [], timeout=20, what="its engine core gone")

        def gpu6_used() -> int | None:
            sample = monitor.latest
            return sample.gpus[GPU].memory_used_mib if sample else None

        await wait(pilot, lambda: (gpu6_used() or 0) < 1024, timeout=20, what="GPU 6 idle")
        assert not owns_gpu6()
        app.dashboard.refresh_dashboard()
        await pilot.pause()
        assert f"vllm:{port}" not in shown(sections[0].rows[GPU])

        def wedged_active() -> bool:
            return any(a.kind == "vllm_wedged" for a in monitor.alerts.active())

        # a port that refuses ends it at once (a hung server's still listens)
        await wait(pilot, lambda: not wedged_active(), what=state)
        assert [a for a in monitor.alerts.active() if a.facts.port == port] == [], state()
        await wait(pilot, lambda: fix not in strip.plain, what=state)


async def test_k_on_a_hung_sglang_servers_fix_takes_its_scheduler_from_any_row(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    """``--scenario hang``: server 0 (GPU 0) hangs and the strip's fix is "K stop its
    scheduler (PID N)". With the cursor on GPU 3, K opens the kill of that scheduler, not
    GPU 3's own (the server that is fine), and its evidence is of the hang's incident.
    Before, K took the biggest process of the GPU under the cursor: the fix worked only
    from GPU 0's row."""
    monitor = demo_monitor(frozen=False, demo_time=130.0, scenario="hang")
    app = GpumonApp([monitor], bell=False)
    async with app.run_test(size=(130, 45)) as pilot:
        strip = app.dashboard.strip
        await wait(pilot, lambda: "K stop its scheduler (PID " in strip.plain, timeout=60)
        [hung] = [a for a in monitor.alerts.active() if a.kind == "sglang_hung"]
        first = hung.facts.schedulers[0]
        assert f"K stop its scheduler (PID {first})" in strip.plain, strip.plain
        sample = monitor.latest
        assert sample is not None
        [on_gpu0] = sample.processes_for(sample.gpus[0])
        [on_gpu3] = sample.processes_for(sample.gpus[3])
        assert first in (on_gpu0.pid, on_gpu0.host_pid)
        await pilot.press("3")
        assert app.dashboard.under_cursor() == ("gpu", 3)
        await pilot.press("K")
        await wait(pilot, lambda: isinstance(app.screen, KillScreen), what="the kill dialog")
        dialog = cast(KillScreen, app.screen)
        process = dialog.plan.process
        assert (process.pid, process.host_pid) == (on_gpu0.pid, on_gpu0.host_pid), process
        assert (process.pid, process.host_pid) != (on_gpu3.pid, on_gpu3.host_pid)
        assert f"stop its scheduler (PID {first})" in shown(dialog.query_one("#kill-what"))
        # its evidence is of the hang's incident
        assert kill_alert(monitor.alerts.history(), process, [0]) == hung.key
        await pilot.press("escape")
