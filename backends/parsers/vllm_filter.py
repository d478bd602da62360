"""The lines of vLLM's ``/metrics`` page the agent keeps (``parsers/vllm.py`` reads
them): a module of its own because every agent is told it, for vLLM discovery, while the
parser and its tracker are imported only with a vLLM server (``workloads/engine.py``)."""

from __future__ import annotations

__all__ = ["VLLM_METRICS_LINE_FILTER"]

_FAMILIES = (
    "num_requests_running",
    "num_requests_waiting",
    "kv_cache_usage_perc",
    "gpu_cache_usage_perc",
    "generation_tokens_total",
    "prompt_tokens_total",
    "num_preemptions_total",
    "prefix_cache_hits_total",
    "prefix_cache_queries_total",
    "gpu_prefix_cache_hits_total",
    "gpu_prefix_cache_queries_total",
    "request_success_total",
    "spec_decode_num_accepted_tokens_total",
    "spec_decode_num_draft_tokens_total",
    "spec_decode_num_drafts_total",
    "spec_decode_draft_acceptance_rate",
)
_LATENCY = (
    "time_to_first_token_seconds",
    "inter_token_latency_seconds",
    "time_per_output_token_seconds",
)
VLLM_METRICS_LINE_FILTER = (
    rf"vllm[:_](?:{'|'.join(_FAMILIES)}|(?:{'|'.join(_LATENCY)})_(?:bucket|sum|count))[{{ ]"
)
