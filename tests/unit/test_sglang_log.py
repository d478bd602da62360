"""SGLang scheduler stats lines of every version v0.5.3 - v0.5.18 (docs/formats.md 6.6-6.9)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumon.backends.parsers import parse_sglang_log_line

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "sglang"
STAMP = "[2026-08-25 14:21:16] "
V18_DECODE = (
    "Decode batch, #running-req: 72, #token: 298534, token usage: 0.87, "
    "cuda graph: True, gen throughput (token/s): 1183.46, #queue-req: 0"
)
V18_PREFILL = (
    "Prefill batch, #new-seq: 1, #new-token: 1843, #cached-token: 2048, token usage: 0.87, "
    "#running-req: 72, #queue-req: 8, #pending-token: 17890, cuda graph: True, "
    "input throughput (token/s): 5120.96"
)
V18_SPEC = (
    "Decode batch, #running-req: 9, #token: 5000, token usage: 0.20, accept len: 2.31, "
    "accept rate: 0.66, cuda graph: True, gen throughput (token/s): 900.10, #queue-req: 2, "
)

# line -> "kind running queued token-usage gen-throughput graph" ("-": None)
LOG_VARIANTS = {
    STAMP + V18_DECODE: "decode 72 0 0.87 1183.46 True",
    STAMP + V18_PREFILL: "prefill 72 8 0.87 - True",
    "[2026-08-25 14:21:16.123 TP0] " + V18_DECODE: "decode 72 0 0.87 1183.46 True",
    "[2025-11-03 14:31:10 DP6 TP6 EP6] " + V18_DECODE: "decode 72 0 0.87 1183.46 True",
    "(SGLangEngine pid=111711, ip=10.15.36.1) "
    + STAMP
    + V18_DECODE: "decode 72 0 0.87 1183.46 True",
    "(SGLangEngine pid=35555) " + STAMP + V18_PREFILL: "prefill 72 8 0.87 - True",
    V18_DECODE: "decode 72 0 0.87 1183.46 True",  # no prefix at all
    # v0.5.18 with SGLANG_LOG_FORWARD_ITERS, --enable-mfu-metrics and the device timer
    STAMP + "Decode batch [8812], #running-req: 5, #token: 900, token usage: 0.01, "
    "cuda graph: True, gen throughput (token/s): 410.20, #queue-req: 0, "
    "est. decode TFLOPS/s (per GPU): 12.10, est. read BW (GB/s per GPU): 800.00, "
    "est. write BW (GB/s per GPU): 3.10, fwd occupancy: 87.50%": "decode 5 0 0.01 410.2 True",
    # v0.5.10 prefill: no #pending-token
    STAMP + "Prefill batch, #new-seq: 2, #new-token: 100, #cached-token: 0, token usage: 0.10, "
    "#running-req: 3, #queue-req: 1, cuda graph: False, "
    "input throughput (token/s): 99.50": "prefill 3 1 0.10 - False",
    # v0.5.9: the graph flag last in prefill lines
    STAMP + "Prefill batch, #new-seq: 2, #new-token: 100, #cached-token: 0, token usage: 0.10, "
    "#running-req: 3, #queue-req: 1, input throughput (token/s): 99.50, "
    "cuda graph: True": "prefill 3 1 0.10 - True",
    # v0.5.5 - v0.5.8: trailing ", ", prefill without graph and throughput; speculative decode
    STAMP + "Prefill batch, #new-seq: 2, #new-token: 100, #cached-token: 0, token usage: 0.10, "
    "#running-req: 3, #queue-req: 1, ": "prefill 3 1 0.10 - -",
    STAMP + V18_SPEC: "decode 9 2 0.20 900.1 True",
    # v0.5.4: the forward counter always shown
    STAMP + "Decode batch [4410], #running-req: 9, #token: 5000, token usage: 0.20, "
    "cuda graph: True, gen throughput (token/s): 900.10, "
    "#queue-req: 2, ": "decode 9 2 0.20 900.1 True",
    # <= v0.5.3: a period after "batch"; cpu graph
    STAMP + "Decode batch. #running-req: 4, #token: 512, token usage: 0.05, cpu graph: False, "
    "gen throughput (token/s): 50.00, #queue-req: 0, ": "decode 4 0 0.05 50.0 False",
    STAMP + "Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, "
    "#running-req: 0, #queue-req: 0, ": "prefill 0 0 0.0 - -",
    # hybrid SWA (npu graph), hybrid mamba (musa graph), HiSparse with PD decode parts
    STAMP + "Decode batch, #running-req: 6, #full token: 700, full token usage: 0.31, "
    "#swa token: 300, swa token usage: 0.45, npu graph: True, "
    "gen throughput (token/s): 80.00, #queue-req: 1": "decode 6 1 0.45 80.0 True",
    STAMP + "Prefill batch, #new-seq: 1, #new-token: 64, #cached-token: 0, "
    "full token usage: 0.12, mamba usage: 0.30, #running-req: 1, #queue-req: 0, "
    "#pending-token: 0, musa graph: False, "
    "input throughput (token/s): 10.00": "prefill 1 0 0.30 - False",
    STAMP + "Decode batch, #running-req: 2, #gpu token: 10, gpu token usage: 0.02, "
    "#cpu token: 5, cpu token usage: 0.01, pre-allocated usage: 0.10, #prealloc-req: 0, "
    "#transfer-req: 1, #retracted-req: 0, cuda graph: True, "
    "gen throughput (token/s): 20.00, #queue-req: 0": "decode 2 0 0.02 20.0 True",
}


def expected(spec: str) -> tuple[str, int, int, float, float | None, bool | None]:
    kind, running, queued, usage, gen, graph = spec.split()
    return (
        kind,
        int(running),
        int(queued),
        float(usage),
        None if gen == "-" else float(gen),
        None if graph == "-" else graph == "True",
    )


@pytest.mark.parametrize(("line", "spec"), LOG_VARIANTS.items())
def test_every_log_line_variant(line: str, spec: str) -> None:
    s = parse_sglang_log_line(line)
    assert s is not None
    got = (s.kind, s.running, s.queued, s.token_usage, s.gen_throughput, s.cuda_graph)
    assert got == pytest.approx(expected(spec))


def test_log_line_details() -> None:
    d = parse_sglang_log_line("[2025-11-03 14:31:10 DP6 TP6 EP6] " + V18_DECODE)
    assert d is not None and d.ranks == "DP6 TP6 EP6" and d.time == "2025-11-03 14:31:10"
    assert d.tokens == 298534
    p = parse_sglang_log_line(STAMP + V18_PREFILL)
    assert p is not None and (p.new_seqs, p.new_tokens, p.cached_tokens) == (1, 1843, 2048)
    assert (p.pending_tokens, p.input_throughput) == (17890, 5120.96)
    spec = parse_sglang_log_line(STAMP + V18_SPEC)
    assert spec is not None and ("accept len", "2.31") in spec.extra
    bad = parse_sglang_log_line("Decode batch, #running-req: lots, gen throughput (token/s): 5.5")
    assert bad is not None and bad.running is None and bad.gen_throughput == 5.5


def test_decode_fixture_log_reads_the_stall_and_skips_other_lines() -> None:
    lines = (FIXTURES / "server_decode.log").read_text(encoding="utf-8").splitlines()
    stats = [s for s in map(parse_sglang_log_line, lines) if s is not None]
    decode = [s for s in stats if s.kind == "decode"]
    assert len(decode) == 13 and len(stats) == 25
    assert 98.41 in [s.gen_throughput for s in decode]  # the 37 s stall
    assert max(s.queued or 0 for s in stats) == 63
    for other in (
        "[2026-08-25 14:22:03] KV cache pool is full. Retract requests. #retracted_reqs: 3",
        '[2026-08-25 14:21:00] INFO:     10.0.4.17:51532 - "GET /metrics HTTP/1.1" 200 OK',
        "[2026-08-25 14:22:05] WARNING:  Invalid HTTP request received.",
    ):
        assert parse_sglang_log_line(other) is None


@settings(max_examples=300)
@given(st.text())
def test_log_parser_never_raises(text: str) -> None:
    parse_sglang_log_line(text)
    parse_sglang_log_line("Decode batch, " + text)


def test_watchdog_dumps_are_the_lines_from_debug_info_to_the_timeout() -> None:
    """SGLang 0.5.23's dump (python/sglang/srt/utils/watchdog.py, docs/formats.md 6.11),
    amid stats lines: its lines only; a dump the tail starts inside of (its timeout line
    alone) is one too; one the log has not finished runs to the end."""
    from sglang_watchdog import AFTER, BEFORE, WATCHDOG_DUMP

    from gpumon.backends.parsers.sglang_log import watchdog_dumps

    lone = "[2026-01-05 04:00:00 TP1] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=True)\n"  # noqa: E501
    unfinished = "[2026-01-05 05:00:00] TokenizerManager debug info:\nstate 1\n"
    text = BEFORE + WATCHDOG_DUMP + AFTER + BEFORE + lone + AFTER + unfinished
    assert watchdog_dumps(text) == [
        WATCHDOG_DUMP.splitlines(),
        lone.splitlines(),
        unfinished.splitlines(),
    ]
    assert watchdog_dumps(BEFORE + AFTER) == []
