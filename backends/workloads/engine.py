"""The serving-engine seam: what differs between SGLang and vLLM as gpumon watches them.

One ``ServingEngine`` per engine says its tags (``NAME:PORT`` for ``/metrics``,
``NAME-info:PORT`` for its info page, ``NAME-health:PORT`` for the probe asked once it
hangs), the lines of its page the agent keeps, the info and probe paths, and its tracker
class (both imported with the engine's parser on the first ask: a host with no server of
the engine never imports them); the tracker (``SglangTracker`` and its subclass
``VllmTracker``) does the scrape, rate, quantile, log and hang work for both.
``Workloads`` routes the agent's answers by the tag's engine and judges each engine's
servers with the same rules. The agent finds both from their command lines
(``remote/agent.py``: ``sglang_ports``, ``vllm_ports``). A third engine is one
``ServingEngine`` in ``ENGINES`` (its ``parts``), a tracker subclass and its parser:
``Workloads`` keeps its servers in ``servers[NAME]``, from ``[hosts.HOST.NAME]`` ports.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpumon.backends.workloads.sglang import SglangTracker


# Two constants (SGLANG, VLLM), compared by name or identity, never printed whole: no
# generated __eq__, __hash__ or __repr__, each compiled at import on the one-shot's path
# (issue 41).
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class ServingEngine:
    name: str  # tag prefix, snapshot JSON key, ``[hosts.NAME.<name>]``
    title: str  # in the user's words: "SGLang", "vLLM"
    info_paths: tuple[str, ...]  # fetched once per server start
    probe_path: str  # asked once a server hangs (evidence)
    hung_kind: str  # the alert kind of a hang
    # its /metrics line filter and tracker class, imported on the first ask
    parts: Callable[[], tuple[str, type[SglangTracker]]]

    @property
    def metrics_filter(self) -> str:
        """The agent keeps the lines of /metrics this matches."""
        return self.parts()[0]

    @property
    def tracker(self) -> type[SglangTracker]:
        return self.parts()[1]

    def tag(self, port: int) -> str:
        return f"{self.name}:{port}"

    def parse_tag(self, tag: str) -> tuple[str, int] | None:
        """``("metrics" | "info" | "health", port)`` for a tag of this engine, else None."""
        kind, sep, number = tag.partition(":")
        part = {self.name: "metrics", f"{self.name}-info": "info"}.get(kind)
        if kind == f"{self.name}-health":
            part = "health"
        if part is None or not sep or not number.isdigit():
            return None
        return part, int(number)

    def target(self, port: int) -> dict[str, object]:
        """What the agent fetches for a server on ``port``."""
        return {
            "url": f"http://127.0.0.1:{port}/metrics",
            "tag": self.tag(port),
            "filter": self.metrics_filter,
            "info": list(self.info_paths),
            "info_tag": f"{self.name}-info:{port}",
        }

    def probe(self, port: int) -> tuple[str, str]:
        return f"http://127.0.0.1:{port}{self.probe_path}", f"{self.name}-health:{port}"


# Fetched once per server start, for the model and parallelism: ``/server_info`` since
# 0.5.6; ``/get_server_info`` (all versions, deprecated and logged as such where both exist).
SERVER_INFO_PATHS = ("/server_info", "/get_server_info")


def _sglang_parts() -> tuple[str, type[SglangTracker]]:
    from gpumon.backends.parsers.sglang import METRICS_LINE_FILTER
    from gpumon.backends.workloads.sglang import SglangTracker

    return METRICS_LINE_FILTER, SglangTracker


def _vllm_parts() -> tuple[str, type[SglangTracker]]:
    from gpumon.backends.parsers.vllm import VLLM_METRICS_LINE_FILTER
    from gpumon.backends.workloads.vllm import VllmTracker

    return VLLM_METRICS_LINE_FILTER, VllmTracker


SGLANG = ServingEngine(
    "sglang", "SGLang", SERVER_INFO_PATHS, "/health_generate", "sglang_hung", _sglang_parts
)
# vLLM's /version answers {"version": "0.8.5"}; the model is the page's model_name label
VLLM = ServingEngine("vllm", "vLLM", ("/version",), "/health", "vllm_wedged", _vllm_parts)
ENGINES = (SGLANG, VLLM)
