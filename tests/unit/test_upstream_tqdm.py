"""tqdm's own bars (tests/fixtures/upstream/tqdm-<version>/, made by
``scripts/capture-upstream tqdm``) read through the tqdm preset, the JobTracker and the
agent's LogTail; each file's ``truth.json`` is tqdm's ``format_dict`` behind its last bar."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from gpumon.backends.parsers import ProgressParser
from gpumon.backends.remote import LogTail
from gpumon.backends.workloads import JobTracker

from upstream_captures import UPSTREAM, fed_tracker, read_log

VERSIONS = sorted(p.name for p in UPSTREAM.glob("tqdm-*"))
FILES = ("steps.log", "tokens.log", "bytes.log", "slow.log", "unknown_total.log", "midline.log")


def capture(version: str, name: str) -> tuple[str, dict[str, Any]]:
    """The file's text as tqdm wrote it (carriage returns kept) and its truth."""
    text = read_log(version, name)
    truth = json.loads((UPSTREAM / version / "truth.json").read_text())["files"][name]
    return text, truth


def shown(value: float, scaled: bool, divisor: int = 1000) -> float:
    """How far a count tqdm printed may be from the true one: exact without
    ``unit_scale``, else half a unit in the third significant digit of the scaled number
    (format_sizeof: "60.1M", "768k", "1.02M")."""
    if not scaled or value <= 0:
        return 0.0
    power = float(divisor) ** max(math.floor(math.log(value, divisor)), 0)
    digits = math.floor(math.log10(value / power))
    return 0.5 * 10.0 ** (digits - 2) * power


def test_two_versions_are_captured() -> None:
    assert len(VERSIONS) >= 2, VERSIONS


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", FILES)
def test_the_tracker_reads_what_tqdm_meant(version: str, name: str) -> None:
    text, truth = capture(version, name)
    job = fed_tracker("tqdm", text)
    scaled, divisor = truth["unit_scale"], truth["unit_divisor"]
    n, total, rate, unit = truth["n"], truth["total"], truth["rate"], truth["unit"]
    if unit == "tok":  # a token bar counts tokens, not steps
        assert job.step is None
        assert job.tokens == pytest.approx(n, abs=shown(n, scaled))
        assert job.tokens_per_s == pytest.approx(rate, rel=0.005)
        assert job.rate_unit == "tok/s"
        return
    assert job.step == pytest.approx(n, abs=shown(n, scaled, divisor))
    if total is None:
        assert job.total_steps is None and job.eta_s is None
    else:
        assert job.total_steps == pytest.approx(total, abs=shown(total, scaled, divisor))
        # tqdm prints the remaining time as whole seconds: (total - n) / rate, cut
        assert job.eta_s == pytest.approx((total - n) / rate, abs=1.0)
    # "5.23it/s" and "3.20s/it" are three significant digits; "10.5MB/s" too
    assert job.items_per_s == pytest.approx(rate, rel=0.005)
    assert job.rate_unit == ("steps/s" if unit == "it" else f"{unit}/s")


@pytest.mark.parametrize("version", VERSIONS)
def test_the_postfix_and_a_line_written_between_redraws(version: str) -> None:
    text, truth = capture(version, "steps.log")
    assert "saved checkpoint-24" in text.split("\n")[0]  # tqdm.write: cleared, wrote, redrew
    job = fed_tracker("tqdm", text)
    assert truth["postfix"].startswith("loss=")
    assert job.loss == float(truth["postfix"].removeprefix("loss="))


@pytest.mark.parametrize("version", VERSIONS)
def test_each_redraw_is_one_update(version: str) -> None:
    """Every ``\\r`` segment tqdm wrote parses on its own (none is lost as noise)."""
    text, _ = capture(version, "steps.log")
    parser = ProgressParser("tqdm")
    redraws = [s for line in text.split("\n") for s in line.split("\r") if "|" in s]
    assert len(redraws) >= 10
    assert all(parser.parse(s) is not None for s in redraws)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_bar_left_mid_line_reaches_the_tracker_through_the_agents_tail(
    version: str, tmp_path: Path
) -> None:
    text, truth = capture(version, "midline.log")
    assert not text.endswith("\n")  # tqdm has not closed it: no newline yet
    log = tmp_path / "job.log"
    log.write_bytes(b"")
    tail = LogTail({"path": str(log)})
    tail.poll()
    with log.open("ab") as f:  # the bar as it came, then nothing more
        f.write(text.encode("utf-8"))
    job = JobTracker("eval", "tqdm")
    for _ in range(3):  # the held redraw is sent once the file sits still for a poll
        for msg in tail.poll():
            job.feed_lines(list(msg.lines), 1000.0)
    assert (job.step, job.total_steps) == (truth["n"], truth["total"])
    assert job.rate_unit == f"{truth['unit']}/s"
