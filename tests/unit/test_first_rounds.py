"""Issue 23: a one-shot answer (snapshot, check) and watch's first report wait for every
source's first round, and only for sources that exist: the monitor says what it still
waits for, the Proxmox host's list is judged for foreign memory the moment it arrives,
SGLang discovery is on without a table, and a discovered server's port is read as SGLang
reads it (``--port``, ``--port=``, the ``--config`` YAML, else 30000)."""

from __future__ import annotations

from pathlib import Path

from gpumon.backends.config import HostConfig
from gpumon.backends.config.workloads import SglangConfig
from gpumon.backends.model import Health
from gpumon.backends.monitor import HostMonitor
from gpumon.backends.monitor.sources import AgentSource
from gpumon.backends.monitor.state import FIRST_ROUNDS_S
from gpumon.backends.notify.hub import SETTLE_SAMPLES, NotifyHub
from gpumon.backends.remote.agent import SGLANG_DEFAULT_PORT, server_port
from gpumon.backends.transport import LocalTransport
from gpumon.backends.workloads import Workloads
from gpumon.tui.cli import subcommands
from gpumon.tui.cli.options import build_parser

FIELDS = ("index", "uuid", "memory.used", "memory.total")
ROWS = ["0, GPU-0, 30000, 97887", "1, GPU-1, 22000, 97887"]
THEIRS = {  # a process of CT 201 on GPU 1, as the Proxmox host's collector sends it
    "host_pid": 29009,
    "pid": 43,
    "container": "201",
    "memory_mib": 16000,
    "gpu_uuid": "GPU-1",
    "command": "/usr/bin/python3 /usr/local/bin/jupyter-lab",
}


# CT 200 on its Proxmox host, SGLang discovery off (it has its own test)
CT200 = HostConfig(
    name="ct200", kind="local", container=200, kernel_log=False, sglang=SglangConfig(discover=False)
)


def monitor_for(host: HostConfig, now: list[float]) -> HostMonitor:
    return HostMonitor(host, AgentSource(LocalTransport(host)), clock=lambda: now[0], record=False)


def test_the_host_side_list_is_waited_for_and_judged_when_it_comes() -> None:
    now = [1000.0]
    host = CT200
    monitor = monitor_for(host, now)
    assert not monitor.first_rounds_done()  # no GPU sample yet
    monitor.ingest_gpu_rows(ROWS, FIELDS)
    monitor.ingest_processes((), now[0])  # the container's own list: nothing of CT 201
    assert monitor.waiting_for() == [("host processes", "no answer")]
    assert not monitor.first_rounds_done()
    monitor.ingest_proc_records("host", [THEIRS], now[0])
    assert monitor.waiting_for() == [("host processes", "no answer")]  # the feed says it
    monitor.source.host_feed.answered = True  # type: ignore[attr-defined]
    assert monitor.waiting_for() == [] and monitor.first_rounds_done()
    # judged on arrival, not at the next sample: a one-shot sees it at once
    [alert] = [a for a in monitor.alerts.active() if a.kind == "foreign_process"]
    assert (alert.gpu, alert.message) == (1, "GPU 1: 15.6 GiB held by CT 201 jupyter-lab")


def test_the_wait_is_bounded_from_the_first_sample() -> None:
    now = [1000.0]
    host = CT200
    monitor = monitor_for(host, now)
    monitor.ingest_gpu_rows(ROWS, FIELDS)
    monitor.ingest_processes((), now[0])
    now[0] += FIRST_ROUNDS_S - 0.5
    assert not monitor.first_rounds_done()
    now[0] += 0.5
    assert monitor.first_rounds_done()  # said as incomplete, never waited for forever
    assert monitor.waiting_for() == [("host processes", "no answer")]


def test_sources_that_do_not_exist_are_not_waited_for() -> None:
    """``local`` with discovery off, no logs, no container: the process list alone."""
    now = [1000.0]
    host = HostConfig(
        name="local", kind="local", kernel_log=False, sglang=SglangConfig(discover=False)
    )
    monitor = monitor_for(host, now)
    monitor.ingest_gpu_rows(ROWS, FIELDS)
    assert monitor.waiting_for() == [("processes", "no answer")]
    monitor.ingest_processes((), now[0])
    assert monitor.waiting_for() == [] and monitor.first_rounds_done()


def test_discovery_is_on_without_a_table_and_its_servers_need_two_observations() -> None:
    assert Workloads(HostConfig(name="h", kind="local")).discover()
    off = HostConfig(name="h", kind="local", sglang=SglangConfig(discover=False))
    assert not Workloads(off).discover()
    host = HostConfig(name="h", kind="local", watch_logs=("/var/log/app.log",))
    w = Workloads(host)
    assert w.waiting_for() == [("followed logs", "no answer"), ("SGLang discovery", "no answer")]
    w.on_first_round("logs", [])
    w.on_first_round("discover", [31613, 30000])
    assert w.waiting_for() == [("SGLang :30000", "no answer"), ("SGLang :31613", "no answer")]
    w.on_http("sglang:30000", None, "", "ConnectionRefusedError", 1.0)  # down: known
    w.on_http("sglang:31613", 404, "", None, 1.0)  # up, metrics off: no rate to wait for
    assert w.waiting_for() == []
    page = (Path(__file__).parents[1] / "fixtures" / "sglang" / "metrics_busy.prom").read_text()
    w.on_first_round("discover", [31000])
    w.on_http("sglang:31000", 200, page, None, 2.0)
    assert w.waiting_for() == [("SGLang :31000", "no second observation")]


def test_a_discovered_servers_port_is_read_as_sglang_reads_it(tmp_path: Path) -> None:
    serve = ["/venv/bin/python3", "/venv/bin/sglang", "serve", "--model-path", "M"]
    assert server_port([*serve, "--port", "31613"], str(tmp_path)) == 31613
    assert server_port([*serve, "--port=31614"], str(tmp_path)) == 31614
    assert server_port(serve, str(tmp_path)) == SGLANG_DEFAULT_PORT == 30000
    (tmp_path / "server.yaml").write_text(
        "model-path: Qwen/Qwen3-8B\n"
        "json-model-override-args:\n  port: 1\n"  # nested: not the server's
        'port: "31615"  # the API port\n'
    )
    assert server_port([*serve, "--config", "server.yaml"], str(tmp_path)) == 31615
    absolute = str(tmp_path / "server.yaml")
    assert server_port([*serve, "--config", absolute], "/nonexistent") == 31615
    # the command line's flag wins over the file's (SGLang merges the file's first)
    assert server_port([*serve, "--config", "server.yaml", "--port", "1234"], str(tmp_path)) == (
        1234
    )
    # a file this agent cannot read, and `--config=FILE` (SGLang does not read that
    # spelling either): SGLang's default
    assert server_port([*serve, "--config", "missing.yaml"], str(tmp_path)) == 30000
    assert server_port([*serve, "--config=server.yaml"], str(tmp_path)) == 30000


def test_watchs_first_report_waits_for_the_first_rounds(tmp_path: Path) -> None:
    """The hub publishes a host's alerts from its third sample and, now, once every
    source has answered (or FIRST_ROUNDS_S passed): the foreign-memory warning is the
    host-side list's, not a report made before it came."""
    from gpumon.backends.config.notify import NotifySettings
    from gpumon.backends.notify.outbox import Outbox

    now = [1000.0]
    host = CT200
    monitor = monitor_for(host, now)
    hub = NotifyHub(NotifySettings(), Outbox(tmp_path / "outbox.sqlite3"), clock=lambda: now[0])
    seen: list[str] = []
    hub.changes.add(lambda ev: seen.append(ev.kind))
    hub.attach(monitor)
    monitor.ingest_processes((), now[0])
    monitor.alerts.raise_alert("xid", Health.CRITICAL, "Xid 79 on GPU 0", gpu=0, key="xid:0")
    for _ in range(SETTLE_SAMPLES + 1):
        now[0] += 1.0
        monitor.ingest_gpu_rows(ROWS, FIELDS)
    assert seen == []  # the host side has not answered: nothing reported yet
    monitor.source.host_feed.answered = True  # type: ignore[attr-defined]
    monitor.ingest_proc_records("host", [THEIRS], now[0])
    assert sorted(seen) == ["foreign_process", "xid"]
    hub.outbox.close()


def test_help_says_the_bound_the_monitor_uses() -> None:
    assert subcommands.FIRST_ROUNDS_S == FIRST_ROUNDS_S
    for name in ("snapshot", "check"):
        command = subcommands.find(name)
        assert command is not None
        text = " ".join(build_parser(command).format_help().split())
        assert f"get {FIRST_ROUNDS_S:g} s in all" in text, text
