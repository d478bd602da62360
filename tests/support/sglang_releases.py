"""What each SGLang release's fixture deployment means (tests/fixtures/sglang/<version>/):
the numbers a reader of that server should see, worked out from the scenario each
fixture README describes. Shared by the unit and the sshd tests."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Numbers:
    running: int
    queued: int
    token_usage: float
    gen_tokens_per_s: float


@dataclass(frozen=True)
class Case:
    page: Numbers
    source: str  # where the page's rate comes from
    log: Numbers
    parallel: str


# What each release's server means, worked out from its scenario (fixture READMEs):
CASES = {
    # single GPU; gauges merged by the server (multiprocess "sum"); no realtime counter
    "0.4.3": Case(Numbers(12, 3, 0.2, 456.78), "gauge", Numbers(12, 3, 0.2, 456.78), "TP 1"),
    # TP 2 page (one series); log: DP attention 4, the latest line of each leader summed
    "0.4.6": Case(Numbers(20, 0, 0.3, 812.5), "gauge", Numbers(26, 3, 0.205, 961.0), "TP 2"),
    # DP attention 4: tp_rank 0-3 are the 4 leaders; log: single GPU
    "0.5.3": Case(
        Numbers(40, 6, 0.275, 1300.0),
        "gauge",
        Numbers(40, 6, 0.28, 1300.0),
        "DP 4 (attention), TP 4",
    ),
    # TP 2 with every scheduler exporting: the follower repeats the batch; swa/mamba at 0.0
    # log: DP attention tp 8 dp 4, followers printing too: leaders TP0/2/4/6 summed
    "0.5.5": Case(Numbers(24, 5, 0.48, 1045.6), "gauge", Numbers(120, 7, 0.45, 5970.0), "TP 2"),
    # DP attention tp 8 dp 4: leaders tp_rank 0, 2, 4, 6; decode counters 1500+1400+1750+1350
    "0.5.9": Case(
        Numbers(120, 7, 0.45, 6000.0),
        "counter",
        Numbers(24, 5, 0.48, 1045.6),
        "DP 4 (attention), TP 8",
    ),
    # priority scheduling: the totals under priority=""; log: DP attention 4
    "0.5.10": Case(Numbers(16, 9, 0.35, 640.0), "counter", Numbers(40, 4, 0.4, 2000.0), "TP 1"),
    # DP attention 4 with priority scheduling; log: the same deployment
    "0.5.18": Case(
        Numbers(40, 4, 0.4, 2000.0),
        "counter",
        Numbers(40, 4, 0.4, 2000.0),
        "DP 4 (attention), TP 4",
    ),
    # PP 2 x TP 2, hybrid SWA: one stage's numbers, the SWA pool is the fuller one
    "0.5.23": Case(
        Numbers(18, 3, 0.6321, 720.0), "counter", Numbers(18, 3, 0.63, 720.0), "PP 2, TP 2"
    ),
}
