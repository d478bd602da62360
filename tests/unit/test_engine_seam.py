"""The serving-engine seam (``workloads/engine.py``): the agent's answers reach each
engine's servers by their tag's engine alone, and each engine's GPUs are worked out once
per sample (issue 38 point 1's review)."""

from __future__ import annotations

import gzip

import pytest

from gpumon.backends.config.load import HostConfig
from gpumon.backends.model import GpuProcess, GpuSample, HostSample
from gpumon.backends.parsers.sglang import METRICS_LINE_FILTER
from gpumon.backends.remote.protocol import ServerInfo
from gpumon.backends.workloads import watch
from gpumon.backends.workloads.engine import ENGINES, ServingEngine
from gpumon.backends.workloads.trackers import SglangTracker
from gpumon.backends.workloads.watch import Workloads

from upstream_captures import UPSTREAM

# A third engine: one ServingEngine, here with SGLang's tracker for its page
TGI = ServingEngine(
    "tgi", "TGI", ("/info",), "/health", "tgi_hung", lambda: (METRICS_LINE_FILTER, SglangTracker)
)
SGLANG_PAGE = gzip.decompress((UPSTREAM / "sglang-0.5.23" / "pp2.prom.gz").read_bytes()).decode()


def test_a_third_engine_is_one_serving_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workloads routes and targets by ``ENGINES`` alone: a new entry's tags reach its
    own servers, SGLang's and vLLM's still reach theirs, a tag of no engine none."""
    monkeypatch.setattr(watch, "ENGINES", (*ENGINES, TGI))
    w = Workloads(HostConfig(name="box", kind="local"))
    w.on_http("tgi:8080", 200, SGLANG_PAGE, None, 1000.0)
    w.on_http("tgi-health:8080", 200, "", None, 1001.0)
    w.on_http("sglang:30000", 200, SGLANG_PAGE, None, 1000.0)
    w.on_http("vllm-health:8000", None, "", "refused", 1000.0)
    w.on_http("other:9000", 200, SGLANG_PAGE, None, 1000.0)  # not a tag gpumon gives
    server = w.servers["tgi"][8080]
    assert server.up is True and server.running is not None
    assert server.health is not None and server.health[1] == 200
    assert list(w.sglang) == [30000] and w.sglang[30000].up is True
    assert list(w.vllm) == [8000] and w.vllm[8000].health is not None
    assert sorted(w.servers) == ["sglang", "tgi", "vllm"]
    tags = [t["tag"] for t in w.http_targets()]
    assert tags == ["sglang:30000", "vllm:8000", "tgi:8080"]


def _sample(t: float) -> HostSample:
    gpus = tuple(
        GpuSample(i, minor=10 + i, uuid=f"GPU-{i}", utilization_pct=50.0) for i in range(4)
    )
    procs = (GpuProcess(1, "sglang::scheduler_TP0", 40_000, gpu_uuid="GPU-0"),)
    return HostSample("box", t, None, gpus, processes=procs)


def test_each_engines_gpus_are_worked_out_once_a_sample() -> None:
    """The judges, the pane's owner column and the fixes ask for a sample's servers'
    GPUs several times: the same answer object until the sample or the servers change."""
    w = Workloads(HostConfig(name="box", kind="local"))
    w.on_http("sglang:30000", 200, SGLANG_PAGE, None, 1000.0)
    w.on_server_info(ServerInfo("vllm", 8010, 0, tp=2, minors=[12, 13]))
    sample = _sample(1000.0)
    vllm = w.vllm_gpus(sample)
    assert vllm == {8010: (2, 3)} and w.vllm_gpus(sample) is vllm
    sglang = w.server_gpus(sample)
    assert sglang == {30000: (0,)} and w.server_gpus(sample) is sglang
    w.on_server_info(ServerInfo("vllm", 8011, 0, minors=[11]))  # found another: worked out again
    assert w.vllm_gpus(sample) == {8010: (2, 3), 8011: (1,)}
    w.on_server_info(ServerInfo("vllm", 8011, 0, minors=[10]))  # its process tree moved
    assert w.vllm_gpus(sample) == {8010: (2, 3), 8011: (0,)}
    later = _sample(1001.0)
    assert w.vllm_gpus(later) is not w.vllm_gpus(sample)  # a new sample: new answers
    assert w.server_gpus(later) == sglang and w.server_gpus(later) is not sglang
