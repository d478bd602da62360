"""Trainer's own logs (tests/fixtures/upstream/transformers-<version>/, made by
``scripts/capture-upstream transformers``: a tiny Llama trained on CPU, stdout and stderr in
one file) read through the hf preset and the JobTracker, against
``trainer.state.log_history`` of the same run (``log_history.json``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpumon.backends.parsers import ProgressParser
from gpumon.backends.workloads import JobState

from upstream_captures import UPSTREAM, fed_tracker, read_log

VERSIONS = sorted(p.name for p in UPSTREAM.glob("transformers-*"))
RUNS = ("train.log", "train_tokens_seen.log")


def capture(version: str, name: str) -> tuple[str, list[dict[str, Any]]]:
    text = read_log(version, name)
    history = json.loads((UPSTREAM / version / "log_history.json").read_text())
    return text, history[name]["log_history"]


def test_the_versions_are_captured() -> None:
    wanted = {"transformers-4.46.3", "transformers-4.52.4", "transformers-5.24.0"}
    assert wanted <= set(VERSIONS)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", RUNS)
def test_every_logged_dict_reads_as_trainer_meant(version: str, name: str) -> None:
    text, history = capture(version, name)
    parser = ProgressParser("hf")
    dicts = [s for line in text.split("\n") for s in line.split("\r") if s.startswith("{")]
    assert len(dicts) == len(history)  # one printed dict per log_history entry
    for printed, meant in zip(dicts, history, strict=True):
        update = parser.parse(printed)
        assert update is not None, printed
        final = "train_loss" in meant
        assert update.finished is final
        # 5.x prints each float rounded to 4 significant digits, as a string
        assert update.loss == pytest.approx(meant["train_loss" if final else "loss"], rel=1e-3)
        if "train_tokens_per_second" in meant:
            assert update.tokens_per_s == pytest.approx(meant["train_tokens_per_second"], rel=1e-3)
        else:
            assert update.tokens_per_s is None
        if "num_input_tokens_seen" in meant:
            assert update.tokens == meant["num_input_tokens_seen"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", RUNS)
def test_the_tracker_ends_where_the_run_ended(version: str, name: str) -> None:
    text, history = capture(version, name)
    job = fed_tracker("hf", text)
    summary = history[-1]
    assert job.state is JobState.FINISHED
    assert job.step == job.total_steps == summary["step"]  # from Trainer's tqdm bar
    assert job.loss == pytest.approx(summary["train_loss"], rel=1e-3)
    if "num_input_tokens_seen" in summary:
        assert job.tokens == summary["num_input_tokens_seen"]


@pytest.mark.parametrize("version", VERSIONS)
def test_periodic_speed_metrics_come_with_tokens_seen_only(version: str) -> None:
    """Which versions print train_runtime / train_tokens_per_second in every periodic log
    (include_num_input_tokens_seen): 4.52 on, not 4.51.3 or 4.46.3. The parse must not take
    those logs for the final summary (test above)."""
    _, plain = capture(version, "train.log")
    _, seen = capture(version, "train_tokens_seen.log")
    assert not any("train_runtime" in h for h in plain[:-1])
    periodic = [h for h in seen[:-1] if "loss" in h]
    assert periodic and all(h["num_input_tokens_seen"] > 0 for h in periodic)
    with_speed = all("train_tokens_per_second" in h for h in periodic)
    release = tuple(int(x) for x in version.removeprefix("transformers-").split("."))
    assert with_speed == (release >= (4, 52))
