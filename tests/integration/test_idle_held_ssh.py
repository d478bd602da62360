"""gpu_idle_held over the real sshd, the agent and the simulator's nvidia-smi in its
``idle`` scenario (GPUs 5-7 hold 84-86 GiB at 0-2 % from scenario time 30 s): with
``idle_held_after_s = 10`` the job's GPUs are one alert naming the job, a GPU of no job
its own, each naming the process nvidia-smi lists on it; the busy GPUs 0-4 are not."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gpumon.backends.config import load_config, resolve_host
from gpumon.backends.monitor import demo_settings, make_monitor, snapshot_json
from gpumon.backends.sim import write_wrapper
from gpumon.tui.views.workload_cells import sglang_cells

from sshd_server import SshServer
from waiting import until
from watch_faults import faulty_smi

pytestmark = pytest.mark.integration


@pytest.fixture
def idle_sshd(sshd: SshServer) -> Iterator[SshServer]:
    write_wrapper(sshd.bin, demo_settings("idle", demo_time=40.0))  # idle for 10 s already
    yield sshd


async def test_held_and_idle_gpus_are_named_with_their_holder(
    idle_sshd: SshServer, tmp_path: Path, state_home: Path
) -> None:
    config = tmp_path / "gpumon.toml"
    config.write_text(
        idle_sshd.config_toml("ct200", interval=0.5)
        + "[hosts.ct200.alerts]\nidle_held_after_s = 10\n"
        + "[hosts.ct200.jobs.drafter]\ngpus = [5, 6]\n"
    )
    monitor = make_monitor(resolve_host(load_config(config), "ct200"), record=False)
    monitor.start()
    started = time.monotonic()
    try:

        def idle() -> dict[str, str]:
            return {a.key: a.message for a in monitor.alerts.active() if a.kind == "gpu_idle_held"}

        await until(lambda: len(idle()) == 2, 60, lambda: f"two gpu_idle_held alerts: {idle()}")
        waited = time.monotonic() - started
        assert waited >= 10.0  # the agent's own samples: 10 s of them, not the scenario's
        by_key = idle()
        job = by_key["gpu_idle_held:job:drafter"]
        assert job.startswith("drafter's GPUs 5,6 idle (")
        assert "while holding 84-86 GiB each; held by PID 2418874 python3 (+1 more)" in job
        alone = by_key["gpu_idle_held:7"]
        assert alone.startswith("GPU 7 idle (") and "while holding 84 GiB; " in alone
        # then what its idle time drew so far (the stand-in's power)
        assert "; held by PID 2418875 python3; 1 GPU idle " in alone and alone.endswith(" kWh")
        alerts = snapshot_json(monitor, time.time())["alerts"]
        kinds = {(a["kind"], a["job"], a["gpu"]) for a in alerts}
        assert {k for k in kinds if k[0] == "gpu_idle_held"} == {
            ("gpu_idle_held", None, 7),
            ("gpu_idle_held", "drafter", 5),
        }
    finally:
        await monitor.stop()


IDLE_PAGE = (Path(__file__).parents[1] / "fixtures" / "sglang" / "metrics_idle.prom").read_bytes()


class IdleSglang(BaseHTTPRequestHandler):
    """An SGLang server up with no request: ``/metrics`` is a real idle server's page
    (tests/fixtures/sglang/metrics_idle.prom: 0 running, 0 queued)."""

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        found = self.path.split("?")[0] == "/metrics"
        body = IDLE_PAGE if found else b"not found\n"
        self.send_response(200 if found else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


async def test_an_sglang_server_without_traffic_is_no_gpu_idle_held_but_a_jupyter_is(
    sshd: SshServer, tmp_path: Path, state_home: Path
) -> None:
    """Issue 34 point 8, over the real sshd and agent: GPU 0 holds 69 GiB at 0 % for an
    SGLang server up and answering with no request, GPU 1 as much for a jupyter kernel.
    Both were gpu_idle_held (the server's paged every quiet night); now the server's GPU
    is its server_idle and the pane says idle, the kernel's stays gpu_idle_held."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), IdleSglang)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    smi = faulty_smi(sshd, "held:sglang::scheduler_TP0,jupyter-lab")
    config = tmp_path / "gpumon.toml"
    config.write_text(
        sshd.config_toml("box", interval=0.5, nvidia_smi=str(smi), kernel_log=False)
        + "[hosts.box.alerts]\nidle_held_after_s = 3\n"
        + f"[hosts.box.sglang]\nports = [{port}]\ndiscover = false\n"
    )
    monitor = make_monitor(resolve_host(load_config(config), "box"), record=False)
    monitor.start()
    try:

        def idle() -> dict[str, str]:
            kinds = ("gpu_idle_held", "server_idle")
            return {a.key: a.message for a in monitor.alerts.active() if a.kind in kinds}

        await until(lambda: len(idle()) == 2, 60, lambda: f"two idle alerts: {idle()}")
        assert set(idle()) == {f"server_idle:{port}", "gpu_idle_held:1"}, idle()
        assert "; held by PID 4243 jupyter-lab; 1 GPU idle " in idle()["gpu_idle_held:1"]
        assert idle()[f"server_idle:{port}"].startswith(f"sglang :{port} up, idle for ")
        tracker = monitor.workloads.sglang[port]
        assert tracker.idle is True and sglang_cells(tracker)["state"].text == "idle"
    finally:
        await monitor.stop()
        server.shutdown()
        server.server_close()
