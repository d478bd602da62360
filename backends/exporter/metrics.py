"""The Prometheus exporter of ``gpumon watch``: what the monitors know, at scrape time.

``GpumonCollector(monitors)`` reads the monitors when Prometheus scrapes (nothing is
copied between scrapes); ``OomCounter`` counts OOM alerts as they are raised (a counter
must only go up, so it cannot be derived from the alert list, which forgets);
``gpumon_xid_events_total`` counts the kernel's Xid events per GPU and code, labelled
with the Xid table's level and NVIDIA's action (``parsers/xid.py``, the table the alerts
and the fleet use) as each event's alert has them in its facts (Xid 154: the recovery
action its line names); ``MetricsServer`` answers ``GET /metrics`` on the event loop, from
its own registry (no process or Python metrics of gpumon itself mixed in), and hands every
other request to its ``pages`` (the incident page, ``backends/web``) when it has them.

Names follow the Prometheus conventions: the ``gpumon_`` prefix, base units (bytes,
watts, celsius, seconds, ratios 0..1), ``_total`` for counters. A value the GPU did not
report is left out (never exported as 0). A label value the target reports (a GPU's
``name`` and ``uuid``) is cut as the GPU row cuts a name (``cut_name``: 96 characters,
then ``...``): it is stored with every series of that GPU, scrape after scrape. The
docs/on-call.md lists every metric.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import urllib.parse
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpumon.backends.alerts.kinds import KINDS, NOTE_KINDS, Tag, tagged
from gpumon.backends.alerts.store import Alert
from gpumon.backends.model import Health, HostSample
from gpumon.backends.remote.agent import cut_name

if TYPE_CHECKING:
    from gpumon.backends.monitor.state import HostMonitor

__all__ = [
    "METRIC_NAMES",
    "GpumonCollector",
    "MetricsServer",
    "OomCounter",
    "Request",
    "Response",
    "UsageCounts",
]

MIB = 1024 * 1024
OOM_KINDS = tagged(Tag.OOM)
JOB_STATES = ("running", "finished", "crashed", "stopped")

_GPU = ("host", "gpu", "uuid", "name")
# Not "job": Prometheus sets that label to the scrape job (and renames ours exported_job).
_JOB = ("host", "job_name")
_SGLANG = ("host", "port")
_VLLM = _SGLANG  # a server of either engine is its host and port
_MIG = ("host", "gpu", "uuid", "gi", "profile")  # the parent GPU's index and UUID
# name -> (help, labels); every gauge the collector fills, and docs/on-call.md's table.
GAUGES: dict[str, tuple[str, tuple[str, ...]]] = {
    "gpumon_gpu_memory_used_bytes": ("GPU memory in use", _GPU),
    "gpumon_gpu_memory_total_bytes": ("GPU memory in total", _GPU),
    "gpumon_gpu_utilization_ratio": ("GPU utilisation, 0..1", _GPU),
    "gpumon_gpu_temperature_celsius": ("GPU temperature", _GPU),
    "gpumon_gpu_power_watts": ("GPU power draw", _GPU),
    # A GPU in MIG mode is its GPU instances: its own memory numbers are their sum, which
    # no instance fills (an instance runs out on its own); 0 instances: none could be read
    "gpumon_gpu_mig_instances": ("GPU instances of a GPU in MIG mode", _GPU),
    "gpumon_mig_memory_used_bytes": ("MIG GPU instance memory in use", _MIG),
    "gpumon_mig_memory_total_bytes": ("MIG GPU instance memory in total", _MIG),
    "gpumon_job_state": ("1 for the job's current state, 0 for the others", (*_JOB, "state")),
    "gpumon_job_step": ("the job's last logged step", _JOB),
    "gpumon_job_rate": ("the job's throughput, unit in the label", (*_JOB, "unit")),
    "gpumon_job_eta_seconds": ("time left until the job finishes", _JOB),
    "gpumon_sglang_up": ("1 while the SGLang server answers", _SGLANG),
    "gpumon_sglang_running_requests": ("requests running", _SGLANG),
    "gpumon_sglang_queued_requests": ("requests waiting", _SGLANG),
    "gpumon_sglang_kv_usage_ratio": ("KV cache tokens in use, 0..1", _SGLANG),
    "gpumon_sglang_generation_tokens_per_second": ("generation throughput", _SGLANG),
    "gpumon_sglang_spec_accept_length": ("a drafter's tokens per verify step", _SGLANG),
    # vLLM's beside SGLang's: the same name where the meaning is the same, vLLM's own
    # words (waiting, preemptions, mean acceptance length) where it has its own number
    "gpumon_vllm_up": ("1 while the vLLM server answers", _VLLM),
    "gpumon_vllm_running_requests": ("requests running", _VLLM),
    "gpumon_vllm_waiting_requests": ("requests waiting", _VLLM),
    "gpumon_vllm_kv_usage_ratio": ("KV cache in use, 0..1", _VLLM),
    "gpumon_vllm_generation_tokens_per_second": ("generation throughput", _VLLM),
    "gpumon_vllm_prompt_tokens_per_second": ("prompt throughput", _VLLM),
    "gpumon_vllm_preemptions_per_second": ("requests preempted per second", _VLLM),
    "gpumon_vllm_prefix_cache_hit_ratio": ("prompt tokens found in the prefix cache", _VLLM),
    "gpumon_vllm_spec_accept_length": ("a drafter's mean acceptance length", _VLLM),
    "gpumon_vllm_spec_accept_ratio": ("a drafter's tokens accepted, 0..1", _VLLM),
    "gpumon_alerts_active": ("active alerts", ("host", "severity", "kind")),
    "gpumon_agent_up": ("1 while gpumon receives fresh samples from the host", ("host",)),
    "gpumon_sample_age_seconds": ("age of the newest GPU sample", ("host",)),
}
# engine (``ServingEngine.name``) -> its servers' gauges beside ``gpumon_ENGINE_up``
SERVER_GAUGES: dict[str, tuple[tuple[str, Callable[[Any], float | None]], ...]] = {
    "sglang": (
        ("gpumon_sglang_running_requests", lambda s: s.running),
        ("gpumon_sglang_queued_requests", lambda s: s.queued),
        ("gpumon_sglang_kv_usage_ratio", lambda s: s.token_usage),
        ("gpumon_sglang_generation_tokens_per_second", lambda s: s.gen_tokens_per_s),
        ("gpumon_sglang_spec_accept_length", lambda s: s.spec_accept_length),
    ),
    "vllm": (
        ("gpumon_vllm_running_requests", lambda s: s.running),
        ("gpumon_vllm_waiting_requests", lambda s: s.queued),
        ("gpumon_vllm_kv_usage_ratio", lambda s: s.token_usage),
        ("gpumon_vllm_generation_tokens_per_second", lambda s: s.gen_tokens_per_s),
        ("gpumon_vllm_prompt_tokens_per_second", lambda s: s.prompt_tokens_per_s),
        ("gpumon_vllm_preemptions_per_second", lambda s: s.preemptions_per_s),
        ("gpumon_vllm_prefix_cache_hit_ratio", lambda s: s.cache_hit_rate),
        ("gpumon_vllm_spec_accept_length", lambda s: s.spec_accept_length),
        ("gpumon_vllm_spec_accept_ratio", lambda s: s.spec_accept_rate),
    ),
}
OOM_COUNTER = "gpumon_oom_events"  # exposed as gpumon_oom_events_total
XID_COUNTER = "gpumon_xid_events"  # exposed as gpumon_xid_events_total
# The accounting's counters (backends/usage), since gpumon's start
ENERGY_COUNTER = "gpumon_gpu_energy_joules"
USED_COUNTER = "gpumon_owner_gpu_used_seconds"
IDLE_COUNTER = "gpumon_owner_gpu_idle_held_seconds"
METRIC_NAMES = (
    *GAUGES,
    f"{OOM_COUNTER}_total",
    f"{XID_COUNTER}_total",
    f"{ENERGY_COUNTER}_total",
    f"{USED_COUNTER}_total",
    f"{IDLE_COUNTER}_total",
)


@dataclass(frozen=True, slots=True)
class UsageCounts:
    """One host's accounting since gpumon started (``usage.Tally``): joules per GPU and
    method (``energy_counter``: NVML's energy counter; ``power_x_time``: an estimate), and
    per owner (container, user, job) the GPU-seconds used and held idle."""

    host: str
    joules: Mapping[tuple[int, str], float]
    owners: Mapping[tuple[str, str, str], Sequence[float]]


class OomCounter:
    """OOM alerts seen per (host, gpu, job, kind), from the alert listeners."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str, str, str]] = Counter()
        self._lock = threading.Lock()  # cheap insurance should a scrape ever run elsewhere

    def listener(self, alert: Alert) -> None:
        if alert.kind in OOM_KINDS and alert.severity is Health.CRITICAL:
            key = (alert.host, _gpu(alert.gpu), alert.job or "", alert.kind)
            with self._lock:
                self.counts[key] += 1

    def attach(self, monitor: HostMonitor) -> None:
        monitor.alerts.add_listener(self.listener)

    def items(self) -> list[tuple[tuple[str, str, str, str], int]]:
        with self._lock:
            return list(self.counts.items())


def _alert_counts(active: Iterable[Alert]) -> list[tuple[str, str, int]]:
    """``gpumon_alerts_active``'s (severity, kind, count): every declared kind at its
    levels, 0 when quiet (a note's info, another kind's warning and critical), and any
    other pair active now (a kind of a recording of another version): an active alert is
    never left out."""
    counts = Counter((a.severity, a.kind) for a in active)
    quiet = {
        (level, kind)
        for kind in KINDS
        for level in ((Health.INFO,) if kind in NOTE_KINDS else (Health.WARNING, Health.CRITICAL))
    }
    kinds = (*KINDS, *sorted({kind for _, kind in counts} - set(KINDS)))
    return [
        (level.value, kind, counts[(level, kind)])
        for level in (Health.INFO, Health.WARNING, Health.CRITICAL)
        for kind in kinds
        if (level, kind) in quiet or counts[(level, kind)]
    ]


def _put_gpus(
    put: Callable[[str, list[str], float | None], None], host: str, sample: HostSample
) -> None:
    """Each GPU's gauges; a GPU in MIG mode's also its GPU instances'."""
    for gpu in sample.gpus:
        labels = [host, str(gpu.index), cut_name(gpu.uuid or ""), cut_name(gpu.name or "")]
        util = gpu.utilization_pct
        put("gpumon_gpu_memory_used_bytes", labels, _bytes(gpu.memory_used_mib))
        put("gpumon_gpu_memory_total_bytes", labels, _bytes(gpu.memory_total_mib))
        put("gpumon_gpu_utilization_ratio", labels, None if util is None else util / 100)
        put("gpumon_gpu_temperature_celsius", labels, gpu.temperature_c)
        put("gpumon_gpu_power_watts", labels, gpu.power_w)
        instances = sample.mig_instances(gpu)
        if instances is not None:
            put("gpumon_gpu_mig_instances", labels, float(len(instances)))
        for inst in instances or ():
            mig = [*labels[:3], str(inst.gpu_instance_id), cut_name(inst.profile or "")]
            put("gpumon_mig_memory_used_bytes", mig, _bytes(inst.memory_used_mib))
            put("gpumon_mig_memory_total_bytes", mig, _bytes(inst.memory_total_mib))


def _bytes(mib: float | None) -> float | None:
    return None if mib is None else mib * MIB


def _gpu(index: int | None) -> str:
    return "" if index is None else str(index)


class GpumonCollector(Collector):
    """Reads ``monitors()`` at every scrape (a callable, so a reload's new hosts count)."""

    def __init__(
        self,
        monitors: Callable[[], Sequence[HostMonitor]],
        ooms: OomCounter | None = None,
        usage: Callable[[], Iterable[UsageCounts]] | None = None,
    ) -> None:
        self.monitors = monitors
        self.ooms = ooms or OomCounter()
        self.usage = usage

    def collect(self) -> Iterable[Metric]:
        g = {
            name: GaugeMetricFamily(name, text, labels=labels)
            for name, (text, labels) in GAUGES.items()
        }

        xids = CounterMetricFamily(
            XID_COUNTER,
            "Xid events in the kernel log, with the Xid table's level and NVIDIA's action",
            labels=["host", "gpu", "xid", "severity", "action"],
        )

        def put(name: str, labels: list[str], value: float | None) -> None:
            if value is not None:  # not reported: left out, never 0
                g[name].add_metric(labels, value)

        for m in list(self.monitors()):
            host = m.name
            put("gpumon_agent_up", [host], 0.0 if m.is_stale() or m.no_data() else 1.0)
            put("gpumon_sample_age_seconds", [host], m.stale_s())
            if m.latest is not None:  # no sample yet: no GPU's series
                _put_gpus(put, host, m.latest)
            for name, job in m.workloads.jobs.items():
                state = job.state.value
                for s in JOB_STATES if state in JOB_STATES else (*JOB_STATES, state):
                    put("gpumon_job_state", [host, name, s], 1.0 if s == state else 0.0)
                put("gpumon_job_step", [host, name], job.step)
                put("gpumon_job_rate", [host, name, "tokens_per_second"], job.tokens_per_s)
                put("gpumon_job_rate", [host, name, "items_per_second"], job.items_per_s)
                put("gpumon_job_eta_seconds", [host, name], job.eta_s)
            for engine, gauges in SERVER_GAUGES.items():
                for port, srv in m.workloads.servers.get(engine, {}).items():
                    labels = [host, str(port)]
                    put(f"gpumon_{engine}_up", labels, None if srv.up is None else float(srv.up))
                    for name, value in gauges:
                        put(name, labels, value(srv))
            for (gpu_index, code, level, action), n in sorted(m.alerts.xid_counts.items(), key=str):
                labels = [host, _gpu(gpu_index), str(code), level.value, action or ""]
                xids.add_metric(labels, n)
            for severity, kind, count in _alert_counts(m.alerts.active()):
                put("gpumon_alerts_active", [host, severity, kind], count)
        ooms = CounterMetricFamily(
            OOM_COUNTER,
            "OOM events seen (critical alerts)",
            labels=["host", "gpu", "job_name", "kind"],
        )
        for key, count in self.ooms.items():
            ooms.add_metric(list(key), count)
        yield from g.values()
        yield ooms
        yield xids
        if self.usage is not None:  # a collector without the accounting has none
            yield from self._usage(self.usage)

    def _usage(self, usage: Callable[[], Iterable[UsageCounts]]) -> Iterable[Metric]:
        energy = CounterMetricFamily(
            ENERGY_COUNTER,
            "energy the GPU drew while gpumon watched (method: energy_counter, NVML's "
            "counter; power_x_time, an estimate)",
            labels=["host", "gpu", "method"],
        )
        owner = ["host", "container", "user", "job_name"]
        used = CounterMetricFamily(
            USED_COUNTER, "GPU-seconds the owner held a GPU at work (docs/usage.md)", labels=owner
        )
        idle = CounterMetricFamily(
            IDLE_COUNTER,
            "GPU-seconds the owner held a GPU idle (gpu_idle_held's test, docs/usage.md)",
            labels=owner,
        )
        for counts in usage():
            for (index, method), joules in sorted(counts.joules.items()):
                energy.add_metric([counts.host, str(index), method], joules)
            for (container, user, job), (used_s, idle_s) in sorted(counts.owners.items()):
                labels = [counts.host, cut_name(container), cut_name(user), cut_name(job)]
                used.add_metric(labels, used_s)
                idle.add_metric(labels, idle_s)
        return (energy, used, idle)


@dataclass(frozen=True, slots=True)
class Request:
    """A GET or HEAD as the listener read it: the path (percent-decoded), the query's
    parameters (each one's first value), the headers by lower-case name."""

    method: str
    path: str
    query: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Response:
    status: str  # "200 OK"
    content_type: str
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)


# What answers the requests that are not for /metrics (None: 404).
Pages = Callable[[Request], Awaitable[Response | None]]


def parse_request(head: bytes) -> Request | None:
    """The request line and headers of ``head`` (up to the blank line); None when the
    request line is not ``METHOD TARGET VERSION``."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split()
    if len(parts) != 3:
        return None
    target = urllib.parse.urlsplit(parts[1])
    query = {k: v[0] for k, v in urllib.parse.parse_qs(target.query).items()}
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return Request(parts[0], urllib.parse.unquote(target.path), query, headers)


def registry_for(collector: GpumonCollector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


class MetricsServer:
    """``GET /metrics`` on ``host:port``, answered on the event loop: the collector reads
    the monitors on the thread that changes them (prometheus_client's own server would
    read them from another thread while they change)."""

    def __init__(self, collector: GpumonCollector, port: int, host: str = "127.0.0.1") -> None:
        self.registry = registry_for(collector)
        self.port, self.host = port, host
        self._server: asyncio.Server | None = None
        self.pages: Pages | None = None  # the rest of the site (``/`` is theirs then)

    async def start(self) -> None:
        """Listen; raises OSError when the port is taken. ``port`` 0 picks a free one."""
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(10):
                head = await reader.readuntil(b"\r\n\r\n")
            request = parse_request(head)
            answer = await self._answer(request)
            body_out = b"" if request is not None and request.method == "HEAD" else answer.body
            lines = [
                f"HTTP/1.1 {answer.status}",
                f"Content-Type: {answer.content_type}",
                f"Content-Length: {len(answer.body)}",
                *(f"{name}: {value}" for name, value in answer.headers.items()),
                "Connection: close",
            ]
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body_out)
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _answer(self, request: Request | None) -> Response:
        if request is None or request.method not in ("GET", "HEAD"):
            return Response("405 Method Not Allowed", "text/plain", b"GET only\n")
        if request.path == "/metrics" or (request.path == "/" and self.pages is None):
            return Response("200 OK", CONTENT_TYPE, generate_latest(self.registry))
        answer = None if self.pages is None else await self.pages(request)
        return answer or Response("404 Not Found", "text/plain", b"see /metrics\n")
