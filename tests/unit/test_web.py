"""The incident page (``backends/web``) in process: who may read it, the HTML's escaping,
the routes over a monitor fed by the test, the link every notifier's message carries, and
the ``[watch]`` keys. ``tests/system/test_watch_page.py`` runs it in ``gpumon watch``."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpumon.backends.config import ConfigError, HostConfig
from gpumon.backends.config.notify import NotifySettings
from gpumon.backends.config.workloads import JobConfig
from gpumon.backends.exporter.metrics import (
    GpumonCollector,
    MetricsServer,
    Request,
    parse_request,
)
from gpumon.backends.model import GpuProcess, GpuSample, Health, HostSample
from gpumon.backends.monitor.state import HostMonitor
from gpumon.backends.notify.event import IncidentEvent, incident_link
from gpumon.backends.notify.hub import NotifyHub
from gpumon.backends.notify.notifiers import alertmanager_alert, render
from gpumon.backends.notify.outbox import Outbox
from gpumon.backends.web import IncidentSite, allowed, is_loopback
from gpumon.backends.web.plots import svg_plot
from gpumon.backends.web.site import CSP
from gpumon.backends.workloads import SglangTracker

from notify_events import OOM_OPEN, notifier
from quiet_source import Quiet
from stepped_clock import Wall
from waiting import FakeClock

HOSTILE = "<script>alert(1)</script>"


async def never(seconds: float) -> None:
    await asyncio.Event().wait()


def request(path: str = "/", headers: dict[str, str] | None = None, **query: str) -> Request:
    return Request("GET", path, query, headers or {})


# --- access ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.0.1", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.0.2.2", False),
        ("gpu-box.example.org", False),
    ],
)
def test_only_loopback_addresses_are_loopback(address: str, loopback: bool) -> None:
    assert is_loopback(address) is loopback


def test_beyond_loopback_the_page_needs_its_token() -> None:
    # Loopback: the reverse proxy in front decides who reaches it.
    assert allowed("127.0.0.1", None, request())
    assert allowed("127.0.0.1", "s3cret-token", request())
    # Beyond it: the token, as a bearer header or ?token=, and nothing without one set.
    assert not allowed("0.0.0.0", None, request())
    assert not allowed("0.0.0.0", None, request(token="anything"))
    assert not allowed("0.0.0.0", "s3cret-token", request())
    assert not allowed("0.0.0.0", "s3cret-token", request(token="s3cret-tokeN"))
    assert not allowed("0.0.0.0", "s3cret-token", request(headers={"authorization": "Basic x"}))
    assert allowed("0.0.0.0", "s3cret-token", request(token="s3cret-token"))
    bearer = {"authorization": "Bearer s3cret-token"}
    assert allowed("192.0.2.2", "s3cret-token", request(headers=bearer))


def test_a_request_is_read_with_its_query_and_headers() -> None:
    req = parse_request(
        b"GET /incident/demo/gpu6/drafter/memory?token=a%2Bb HTTP/1.1\r\n"
        b"Authorization: Bearer x\r\n\r\n"
    )
    assert req is not None
    assert req.path == "/incident/demo/gpu6/drafter/memory"
    assert req.query == {"token": "a+b"} and req.headers["authorization"] == "Bearer x"
    assert parse_request(b"nonsense\r\n\r\n") is None


# --- the pages over a fed monitor -------------------------------------------------------


def fed_monitor(process_name: str = HOSTILE) -> HostMonitor:
    host = HostConfig(name="box", kind="local", kernel_log=False)
    monitor = HostMonitor(host, Quiet(), sleep=never, record=False)
    now = monitor.clock()
    for i, used in enumerate((1000, 40000, 80000, 20000)):
        gpu = GpuSample(
            index=0,
            uuid="GPU-0",
            name="H100",
            memory_total_mib=81559,
            memory_used_mib=used,
            utilization_pct=50.0,
        )
        proc = GpuProcess(pid=42, name=process_name, memory_mib=used, gpu_uuid="GPU-0")
        monitor.ingest_sample(HostSample("box", now - 30 + i * 10, None, (gpu,), (proc,)))
    monitor.alerts.raise_alert(
        "cuda_oom", Health.CRITICAL, f"CUDA out of memory in {HOSTILE}", gpu=0, at=now - 5
    )
    return monitor


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[IncidentSite, HostMonitor]]:
    monitor = fed_monitor()
    settings = NotifySettings()
    yield IncidentSite(lambda: [monitor], None, lambda: settings, "127.0.0.1"), monitor


def answer(site: IncidentSite, path: str, **query: str) -> tuple[str, dict[str, str], bytes]:
    got = asyncio.run(site(Request("GET", path, query, {})))
    assert got is not None
    return got.status, dict(got.headers), got.body


def test_text_from_the_target_is_shown_as_text(site: tuple[IncidentSite, HostMonitor]) -> None:
    web, _ = site
    status, headers, body = answer(web, "/")
    assert status == "200 OK" and headers["Content-Security-Policy"] == CSP
    page = body.decode()
    assert "<script" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    [link] = re.findall(r'class="headline" href="([^"]+)"', page)
    assert link == "./incident/box/gpu0/-/cuda_oom"
    status, _, body = answer(web, "/incident/box/gpu0/-/cuda_oom")
    assert status == "200 OK"
    incident = body.decode()
    assert "<script" not in incident and "CUDA out of memory in &lt;script&gt;" in incident
    # Its links lead back up from where it is (a proxy may serve it under a path).
    assert 'href="../../../../"' in incident
    assert 'href="../../../../bundle/box/gpu0/-/cuda_oom"' in incident


def test_the_page_links_carry_the_token_it_came_with(
    site: tuple[IncidentSite, HostMonitor],
) -> None:
    web, _ = site
    _, _, body = answer(web, "/", token="t0k")
    assert 'href="./incident/box/gpu0/-/cuda_oom?token=t0k"' in body.decode()


def test_the_memory_plot_says_the_values_it_draws(site: tuple[IncidentSite, HostMonitor]) -> None:
    web, _ = site
    _, _, body = answer(web, "/incident/box/gpu0/-/cuda_oom")
    [svg] = re.findall(r'<svg class="plot gpu0 memory".*?</svg>', body.decode())
    assert "19.5 GiB now (0.977-78.1)" in svg
    [points] = re.findall(r'<polyline points="([^"]+)"', svg)
    ys = [float(p.split(",")[1]) for p in points.split()]
    assert len(ys) == 4 and ys[2] == min(ys)  # rises to 80000 MiB, then drops


def test_a_servers_incident_plots_its_throughput() -> None:
    """The server is its alert's fact (``port``), not words found in its message."""
    monitor = fed_monitor()
    now = monitor.clock()
    ticks = monitor.workloads.now()  # the trackers' clock
    server = monitor.workloads.sglang[30000] = SglangTracker(30000)
    server.history.extend([(ticks - 20, 410.0), (ticks - 10, 0.0)])
    monitor.workloads.sglang[30001] = SglangTracker(30001)  # another server: not plotted
    monitor.workloads.sglang[30001].history.append((ticks - 10, 90.0))
    text = "sglang :30000 drafter tokens rejected: accept length 1.02 for 120 s"
    monitor.alerts.on_spec_accept_low(30000, text, now)
    site = IncidentSite(lambda: [monitor], None, NotifySettings, "127.0.0.1")
    _, _, body = answer(site, "/incident/box/gpu-/-/spec_accept_low")
    assert re.findall(r'<svg class="plot rate".*?SGLang :(\d+)', body.decode()) == ["30000"]


def test_the_jobs_throughput_plot_draws_its_rates() -> None:
    """A job's rates are kept on the monitor's judging clock (monotonic: issue 34 point 5),
    the page's plots span the wall clock's last minutes: each rate is drawn as long ago as
    it was (taken as they were, every point fell outside the plot: 'not reported')."""
    ticks = FakeClock(5000.0)
    wall = Wall(ticks.time, at=1_800_000_000.0)
    job = JobConfig("train", gpus=(0,), log="/data/train.log")
    host = HostConfig(name="box", kind="local", kernel_log=False, jobs=(job,))
    monitor = HostMonitor(
        host, Quiet(), clock=wall, ticks=ticks.time, sleep=ticks.sleep, record=False
    )
    gpu = GpuSample(0, "GPU-0", "H100", memory_total_mib=81559, memory_used_mib=70000)
    for s in range(10):
        monitor.ingest_sample(HostSample("box", wall(), None, (gpu,), ()))
        line = f"step {s}/1000 | loss 2.3100 | tokens {s * 10000}"
        monitor.ingest_log("job:train", job.log or "", [line], backlog=False)
        ticks.advance(1.0)
    monitor.alerts.raise_alert(
        "cuda_oom", Health.CRITICAL, "CUDA out of memory", gpu=0, job="train"
    )
    web = IncidentSite(lambda: [monitor], None, NotifySettings, "127.0.0.1", clock=wall)
    _, _, body = answer(web, "/")
    [link] = re.findall(r'class="headline" href="\./([^"]+)"', body.decode())
    _, _, body = answer(web, "/" + link)
    [svg] = re.findall(r'<svg class="plot rate".*?</svg>', body.decode())
    assert "train throughput  10000 tok/s now" in svg
    [points] = re.findall(r'<polyline points="([^"]+)"', svg)
    assert len(points.split()) >= 5


def test_the_api_says_the_snapshot_shapes(site: tuple[IncidentSite, HostMonitor]) -> None:
    web, _ = site
    _, headers, body = answer(web, "/api/state")
    state = json.loads(body)
    assert headers["Content-Security-Policy"] == CSP
    assert [h["host"] for h in state["hosts"]] == ["box"]
    assert state["hosts"][0]["gpus"][0]["processes"][0]["name"] == HOSTILE
    [listed] = state["incidents"]
    assert listed["incident"] == "box/gpu0/-/cuda_oom" and listed["kind"] == "cuda_oom"
    _, _, body = answer(web, "/api/incident/box/gpu0/-/cuda_oom")
    one = json.loads(body)
    assert one["incident"] == "box/gpu0/-/cuda_oom" and one["active"] is True
    assert one["alerts"][0]["message"].endswith(HOSTILE)
    status, _, _ = answer(web, "/incident/box/gpu0/-/xid")
    assert status == "404 Not Found"
    assert asyncio.run(web(request("/elsewhere"))) is None


def test_a_listener_beyond_loopback_refuses_without_the_token() -> None:
    monitor = fed_monitor("python3")
    settings = NotifySettings(token_env="PAGE_TOKEN")
    env = {"PAGE_TOKEN": "s3cret-token"}
    web = IncidentSite(lambda: [monitor], None, lambda: settings, "0.0.0.0", env=env)
    status, headers, _ = answer(web, "/")
    assert status == "401 Unauthorized" and headers["WWW-Authenticate"].startswith("Bearer")
    assert answer(web, "/", token="s3cret-token")[0] == "200 OK"
    unset = IncidentSite(lambda: [monitor], None, lambda: settings, "0.0.0.0", env={})
    status, _, body = answer(unset, "/", token="")
    assert status == "401 Unauthorized" and b"set [watch] token_env" in body


async def test_metrics_keeps_its_own_setting_on_the_shared_listener() -> None:
    """/metrics answers without the token; the page beside it asks for it."""
    monitor = fed_monitor("python3")
    server = MetricsServer(GpumonCollector(lambda: [monitor]), 0, "127.0.0.1")
    settings = NotifySettings(token_env="PAGE_TOKEN")
    server.pages = IncidentSite(lambda: [monitor], None, lambda: settings, "0.0.0.0", env={})
    metrics = await server._answer(parse_request(b"GET /metrics HTTP/1.1\r\n\r\n"))
    assert metrics.status == "200 OK" and b"gpumon_gpu_memory_used_bytes" in metrics.body
    page = await server._answer(parse_request(b"GET / HTTP/1.1\r\n\r\n"))
    assert page.status == "401 Unauthorized"
    alone = MetricsServer(GpumonCollector(lambda: [monitor]), 0, "127.0.0.1")
    root = await alone._answer(parse_request(b"GET / HTTP/1.1\r\n\r\n"))
    assert b"gpumon_gpu_memory_used_bytes" in root.body  # without the page: as before


def test_a_plot_leaves_a_gap_for_values_not_reported() -> None:
    svg = svg_plot("GPU 1 memory", "GiB", [(0, 1.0), (1, 2.0), (2, None), (3, 4.0)], 0, 3, 8.0)
    assert svg.count("<polyline") == 1 and svg.count("<circle") == 1
    assert "not reported" in svg_plot("GPU 1 memory", "GiB", [(0, None)], 0, 3)


# --- the link in every message ----------------------------------------------------------

LINK = "https://gpu.example.org/gpumon/incident/demo/gpu6/drafter/memory"


def event(url: str | None = LINK) -> IncidentEvent:
    return dataclasses.replace(OOM_OPEN, key="demo/gpu6/drafter/memory", url=url)


def sent(kind: str, ev: IncidentEvent) -> Any:
    reqs = render(notifier(kind, routing_key="k"), [ev], 1000.0, {})
    [req] = [r for r in reqs if b"trigger" in r.body or kind != "pagerduty"]
    return req


def test_every_notifier_carries_the_incident_link() -> None:
    ev = event()
    pd = json.loads(sent("pagerduty", ev).body)
    assert pd["links"] == [{"href": LINK, "text": "gpumon incident page"}]
    ntfy = sent("ntfy", ev)
    assert ntfy.headers["Click"] == LINK
    slack = json.loads(sent("slack", ev).body)
    assert slack["blocks"][1]["accessory"]["url"] == LINK
    hook = json.loads(sent("webhook", ev).body)
    assert hook["events"][0]["url"] == LINK
    am = alertmanager_alert(ev, 1000.0, 60.0)
    assert am["annotations"]["gpumon_url"] == LINK and am["generatorURL"] == LINK
    # Without public_url: no link anywhere.
    bare = event(None)
    assert "links" not in json.loads(sent("pagerduty", bare).body)
    assert "Click" not in sent("ntfy", bare).headers
    assert "accessory" not in json.loads(sent("slack", bare).body)["blocks"][1]
    assert "gpumon_url" not in alertmanager_alert(bare, 1000.0, 60.0)["annotations"]


def test_the_link_carries_the_token_only_when_the_config_says_so(tmp_path: Path) -> None:
    env = {"PAGE_TOKEN": "s3cret+token"}

    def hub(**kw: Any) -> NotifyHub:
        settings = NotifySettings(public_url="https://gpu.example.org/gpumon", **kw)
        return NotifyHub(settings, Outbox(tmp_path / f"{len(kw)}.sqlite3"), env=env)

    plain = hub(token_env="PAGE_TOKEN")
    assert plain.linked(event(None), sending=True).url == LINK
    carried = hub(token_env="PAGE_TOKEN", link_token=True)
    assert carried.linked(event(None), sending=True).url == LINK + "?token=s3cret%2Btoken"
    # Stored (the outbox, the watch's log): never with the token.
    assert carried.linked(event(None)).url == LINK
    assert incident_link("https://x/", "a/gpu-/-/k") == "https://x/incident/a/gpu-/-/k"
    for h in (plain, carried):
        h.outbox.close()


def test_the_bundle_scrubs_the_page_token() -> None:
    from gpumon.backends.bundle.build import _scrubber

    env = {"GPUMON_PAGE": "page-T0kenOfTheIncidentPage"}
    said = "GET /?token=x page-T0kenOfTheIncidentPage"
    assert "T0ken" not in _scrubber(NotifySettings(token_env="GPUMON_PAGE"), env).text(said)
    assert "T0ken" in _scrubber(NotifySettings(), env).text(said)  # named by nothing else


# --- the [watch] keys -------------------------------------------------------------------


def load(tmp_path: Path, watch: str) -> NotifySettings:
    from gpumon.backends.config import load_config

    path = tmp_path / "config.toml"
    path.write_text(f"[watch]\n{watch}\n")
    return load_config(path).notify_settings()


def test_listen_and_its_older_name(tmp_path: Path) -> None:
    assert load(tmp_path, "").listen == "127.0.0.1"
    assert load(tmp_path, 'listen = "0.0.0.0"').listen == "0.0.0.0"
    assert load(tmp_path, 'metrics_host = "0.0.0.0"').listen == "0.0.0.0"
    with pytest.raises(ConfigError, match="one setting: keep listen"):
        load(tmp_path, 'listen = "0.0.0.0"\nmetrics_host = "127.0.0.1"')
    with pytest.raises(ConfigError, match="set token_env"):
        load(tmp_path, "link_token = true")
    got = load(tmp_path, 'public_url = "https://gpu.example.org/gpumon/"\ntoken_env = "T"')
    assert got.public_url == "https://gpu.example.org/gpumon" and got.token_env == "T"
