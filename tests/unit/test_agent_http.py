"""The agent's HTTP scrape (``agent.Scrape``) keeps each wanted line of a page with its
newline (tests/system/test_agent_http.py runs the HTTP thread against real servers)."""

from __future__ import annotations

from typing import Any

import pytest

from gpumon.backends.parsers.sglang import METRICS_LINE_FILTER
from gpumon.backends.remote import agent

PAGE = (
    "# HELP sglang:num_running_reqs x\nsglang:num_running_reqs 3.0\n"
    "other 1\nsglang:token_usage 0.5\n"
)


def target(port: int, **more: Any) -> dict[str, Any]:
    return {"url": f"http://127.0.0.1:{port}/metrics", "tag": f"sglang:{port}", **more}


@pytest.mark.parametrize(
    ("page", "pattern", "body"),
    [
        (PAGE, METRICS_LINE_FILTER, "sglang:num_running_reqs 3.0\nsglang:token_usage 0.5\n"),
        # CRLF, an empty line (kept by a pattern that matches it), no newline at the end
        ("a 1\r\n\nb 2\r\nsglang:x 3", r"sglang|b|$", "\nb 2\nsglang:x 3\n"),
        ("x\n\n", r"$", "\n"),  # only an empty line wanted: still its newline
        ("nothing wanted\n", METRICS_LINE_FILTER, ""),
    ],
)
def test_the_filter_keeps_each_wanted_line_with_its_newline(
    page: str, pattern: str, body: str
) -> None:
    scrape = agent.Scrape(target(1, filter=pattern))
    assert scrape.page_message((200, page.encode()), None).body == body
