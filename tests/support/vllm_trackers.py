"""vLLM trackers fed pages of the captures (tests/fixtures/upstream/vllm/, made from each
release's own metric declarations), for the pane's tests: a busy server and a wedged one."""

from __future__ import annotations

import re

from gpumon.backends.workloads.vllm import VllmTracker

from upstream_captures import UPSTREAM

_TOKENS = re.compile(r"^(vllm:(?:generation|prompt)_tokens_total\{[^}]*\}) (\S+)$", re.M)


def vllm_page(version: str, name: str = "metrics.prom") -> str:
    return (UPSTREAM / "vllm" / version / name).read_text()


def tokens_moved(text: str, thousands: int) -> str:
    """``text`` with its generation and prompt counters ``thousands`` thousand further."""
    return _TOKENS.sub(lambda m: f"{m[1]} {float(m[2]) + 1000 * thousands}", text)


def busy(port: int, now: float, version: str = "0.34.0") -> VllmTracker:
    """A server scraped every 5 s for the 65 s up to ``now``, making 200 tokens/s."""
    tracker = VllmTracker(port)
    for k in range(14):
        tracker.observe_text(tokens_moved(vllm_page(version), k), now - 65 + 5 * k)
    return tracker


def wedged(port: int, now: float, version: str = "0.6.6.post1") -> VllmTracker:
    """A server whose counters last moved 65 s before ``now``, requests running and
    waiting (the capture's 24 and 3 per engine), scraped every 5 s since."""
    tracker = VllmTracker(port)
    tracker.observe_text(vllm_page(version), now - 70)
    later = vllm_page(version, "metrics_later.prom")
    tracker.observe_text(later, now - 65)
    for k in range(14):
        tracker.observe_text(later, now - 60 + 5 * k)
    return tracker
