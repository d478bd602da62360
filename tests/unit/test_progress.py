"""Job progress: units, every preset against real-looking logs, user regexes, and the
JobTracker's rates, ETA and caller-driven states."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumon.backends.config import workloads as config_workloads
from gpumon.backends.parsers import (
    PRESETS,
    PROGRESS_GROUPS,
    ProgressParser,
    ProgressSpecError,
    ProgressUpdate,
    parse_duration,
    parse_number,
    parse_rate,
)
from gpumon.backends.workloads import (
    REVIVE_AFTER_S,
    JobState,
    JobTracker,
    StepBack,
    step_back_text,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "progress"
SNAPSHOT_KEYS = {
    "name",
    "state",
    "gpus",
    "step",
    "total_steps",
    "done",
    "total",
    "failed",
    "loss",
    "tokens_per_s",
    "eta_s",
    "last_update",
    "crash_reason",
    "elastic_restarts",
    "root_cause",
}


def read(name: str) -> str:
    """The fixture's text with its carriage returns (``read_text`` would turn them into
    newlines)."""
    return (FIXTURES / name).read_bytes().decode("utf-8")


def state(job: JobTracker) -> JobState:
    """``job.state`` read fresh (mypy would keep an earlier assert's narrowing)."""
    return job.state


def feed_file(
    job: JobTracker, name: str, every_s: float = 1.0, upto: int | None = None
) -> list[str]:
    """Feed the fixture's lines one per ``every_s`` seconds; returns the lines fed."""
    lines = read(name).split("\n")[:upto]
    for i, line in enumerate(lines):
        job.feed(line, 1000.0 + i * every_s)
    return lines


# ---------------------------------------------------------------------------- presets


def test_presets_and_groups_match_the_config_checks() -> None:
    assert PRESETS == config_workloads.PRESETS
    assert PROGRESS_GROUPS == config_workloads.PROGRESS_GROUPS


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "[2026-11-29 14:32:08] step 690/5000 | loss 2.3100 | lr 2.0e-04 | 12.8 Ktok/s "
            "| tokens 8.83M",
            ProgressUpdate(
                step=690, total_steps=5000, loss=2.31, tokens_per_s=12800.0, tokens=8.83e6
            ),
        ),
        (
            "step=690 loss=2.31 tok/s=12800",
            ProgressUpdate(step=690, loss=2.31, tokens_per_s=12800.0),
        ),
        (
            "Step: 690/5000, loss: 2.31, eta 1:02:03",
            ProgressUpdate(step=690, total_steps=5000, loss=2.31, eta_s=3723.0),
        ),
        (
            "iter 100 / 1000 train_loss=1.2 tokens_per_s: 12.8K",
            ProgressUpdate(step=100, total_steps=1000, loss=1.2, tokens_per_s=12800.0),
        ),
        (
            "global_step 1,200 of 5,000 loss 1.0e+00",
            ProgressUpdate(step=1200, total_steps=5000, loss=1.0),
        ),
        ("Training complete.", ProgressUpdate(finished=True)),
        ("    loss = train_step(model, batch, optimizer, scaler)", None),
        ("eval: step=40 val_loss=6.2113", ProgressUpdate(step=40)),
    ],
)
def test_kv_lines(line: str, expected: ProgressUpdate | None) -> None:
    assert ProgressParser("kv").parse(line) == expected


def test_kv_simulator_log_ending_in_oom_stays_running_until_the_caller_says() -> None:
    job = JobTracker("drafter", "kv", (5, 6, 7))
    lines = feed_file(job, "kv_drafter_oom.log")
    assert lines[-2].startswith("torch.OutOfMemoryError: CUDA out of memory.")
    assert job.state is JobState.RUNNING and job.crash_reason is None  # no OOM matcher here
    snap = job.snapshot_json()
    assert set(snap) == SNAPSHOT_KEYS
    assert (snap["step"], snap["total_steps"], snap["loss"]) == (709, 5000, 2.2999)
    assert snap["tokens_per_s"] == 12800.0  # as logged: "12.8 Ktok/s"
    assert snap["eta_s"] == pytest.approx(5000 - 709, rel=0.01)  # one step a second
    job.mark_crashed("CUDA OOM on GPU 6", t=2000.0)  # the lead's alert matcher decided
    snap = job.snapshot_json()
    assert (snap["state"], snap["eta_s"], snap["gpus"]) == ("crashed", None, [5, 6, 7])
    assert job.crash_reason == "CUDA OOM on GPU 6"
    job.feed("[2026-11-29 14:33:00] step 710/5000 | loss 2.29 | 12.8 Ktok/s", 2001.0)
    assert state(job) is JobState.CRASHED and job.step == 709  # another rank's last words


def test_kv_custom_logger_and_eval_lines() -> None:
    job = JobTracker("pretrain", "kv")
    feed_file(job, "kv_custom.log", every_s=30.0, upto=8)  # up to the eval line
    assert job.loss == 6.1028  # val_loss is not the training loss
    assert job.total_steps == 2000  # from "total_steps=2000" in the first line
    feed_file(job, "kv_custom.log", every_s=30.0)
    snap = job.snapshot_json()
    assert (snap["step"], snap["loss"], snap["tokens_per_s"]) == (50, 5.8801, 101100.0)
    assert snap["eta_s"] == 16 * 3600 + 7 * 60 + 30  # logged "eta=16:07:30"


def test_kv_megatron_lines_derive_rate_and_eta_from_steps() -> None:
    job = JobTracker("megatron", "kv")
    feed_file(job, "kv_megatron.log", every_s=100.0)
    assert (job.step, job.total_steps, job.loss) == (30, 5000, 8.660037)
    assert job.items_per_s == pytest.approx(0.1)  # 10 iterations per 100 s of arrivals
    assert job.eta_s == pytest.approx(4970 / 0.1)
    assert job.tokens_per_s is None and job.rate_unit == "steps/s"


def test_tqdm_real_capture_with_carriage_returns_finishes() -> None:
    job = JobTracker("train", "tqdm")
    text = read("tqdm_train.log")
    bar_line = text.split("\n")[1]
    assert bar_line.count("\r") > 100  # one physical line, many bar updates
    segment = bar_line.split("\r")[80]
    assert segment.endswith("| 474/1000 [01:27<01:37,  5.41it/s, loss=2.7500]")
    assert ProgressParser("tqdm").parse(segment) == ProgressUpdate(
        step=474, total_steps=1000, loss=2.75, eta_s=97.0, items_per_s=5.41
    )
    feed_file(job, "tqdm_train.log")
    assert (job.step, job.total_steps, job.loss, job.items_per_s) == (1000, 1000, 2.25, 5.41)
    assert job.state is JobState.FINISHED and job.eta_s is None


def test_per_epoch_bars_finish_only_at_the_last_one() -> None:
    job = JobTracker("epochs", "tqdm")
    job.feed("Epoch 1: 100%|##########| 500/500 [01:40<00:00,  5.00it/s]", 100.0)
    assert job.state is JobState.FINISHED  # as far as anyone can tell from the log
    job.feed("Epoch 2:  10%|#         | 50/500 [00:10<01:30,  5.00it/s]", 110.0)
    assert state(job) is JobState.RUNNING and job.eta_s == 90.0
    job.feed("{'train_runtime': 200.0, 'train_loss': 1.5}", 300.0)  # not an hf job: no effect
    assert state(job) is JobState.RUNNING


def test_tqdm_slow_bar_and_token_bar() -> None:
    job = JobTracker("prep", "tqdm")
    feed_file(job, "tqdm_slow.log")
    assert (job.step, job.total_steps) == (40, 120)  # the epoch bar stopped at 40/120
    assert job.items_per_s == pytest.approx(1 / 3.2)
    assert job.eta_s == 4 * 60 + 16  # the bar's own "<04:16"
    assert (job.tokens, job.tokens_per_s) == (320e3, 12800.0)  # the unit="tok" bar
    assert ProgressParser("tqdm").parse("450it [01:23, 5.41it/s]") == ProgressUpdate(
        step=450, items_per_s=5.41
    )


def test_hf_trainer_log_ignores_the_eval_bar_and_finishes_on_the_summary() -> None:
    job = JobTracker("sft", "hf")
    lines = read("hf_trainer.log").split("\n")
    eval_line = next(i for i, ln in enumerate(lines) if "24/25" in ln)
    for i, line in enumerate(lines[: eval_line + 1]):
        job.feed(line, 1000.0 + i)
    assert (job.step, job.total_steps) == (150, 300)  # not the 25-step evaluation bar
    assert job.loss == 2.39  # the dict printed at step 150, just before the evaluation
    feed_file(job, "hf_trainer.log")
    assert job.state is JobState.FINISHED and job.loss == 2.4821  # train_loss of the summary
    p = ProgressParser("hf")
    assert p.parse("{'eval_loss': 2.2, 'eval_runtime': 10.0, 'epoch': 1.0}") is None
    assert p.parse("{'loss': '2.315', 'grad_norm': '1.02', 'epoch': '0.5'}") == ProgressUpdate(
        loss=2.315
    )


def test_jsonl_metrics_log() -> None:
    job = JobTracker("run", "jsonl")
    feed_file(job, "metrics.jsonl", every_s=30.0, upto=6)
    assert (job.step, job.loss, job.tokens_per_s) == (40, 3.702, 51900.0)  # wandb-style keys
    assert job.total_steps == 1000
    feed_file(job, "metrics.jsonl", every_s=30.0)
    snap = job.snapshot_json()
    assert (snap["state"], snap["step"], snap["loss"]) == ("finished", 1000, 2.013)
    assert ProgressParser("jsonl").parse("not json {") is None


def test_batch_generation_log() -> None:
    job = JobTracker("gen", "batch", (0, 1, 2, 3, 4, 5, 6, 7))
    feed_file(job, "batch_generate.log", every_s=30.0, upto=3)
    snap = job.snapshot_json()
    assert (snap["done"], snap["total"], snap["failed"]) == (2410, 193010, 3)
    assert snap["tokens_per_s"] == 173900.0 and snap["eta_s"] == 3600 + 18 * 60 + 49
    feed_file(job, "batch_generate.log", every_s=30.0)
    snap = job.snapshot_json()
    assert (snap["state"], snap["done"], snap["failed"]) == ("finished", 193010, 41)
    assert job.tokens == pytest.approx(833.7e6)
    assert snap["tokens_per_s"] == 174000.0  # the last logged rate, not a derived 0


def test_batch_processed_lines_derive_rates_from_counts() -> None:
    job = JobTracker("offline", "batch")
    feed_file(job, "batch_processed.log", every_s=30.0)
    assert (job.done, job.total, job.failed) == (3600, 193010, 5)
    assert job.tokens == pytest.approx(15.7e6)
    assert job.items_per_s == pytest.approx(1200 / 30)  # prompts per second, from counts
    assert job.tokens_per_s == pytest.approx((15.7e6 - 10.4e6) / 30)
    assert job.eta_s == pytest.approx((193010 - 3600) / 40)
    assert job.rate_unit == "tok/s"


# ------------------------------------------------------------------------ user regex


def test_user_regex_with_units() -> None:
    p = ProgressParser(
        r"it (?P<step>\d+) of (?P<total_steps>\d+) .* "
        r"(?P<tokens_per_s>[\d.]+ ?Ktok/s) eta (?P<eta>\S+)"
    )
    assert p.preset is None
    assert p.parse("it 40 of 400 speed 12.8 Ktok/s eta 01:40") == ProgressUpdate(
        step=40, total_steps=400, tokens_per_s=12800.0, eta_s=100.0
    )
    assert p.parse("nothing here") is None
    q = ProgressParser(r"(?P<done>\S+)/(?P<total>\S+) rows, (?P<tokens>\S+) tok")
    assert q.parse("1.2K/1.9M rows, 5.2M tok") == ProgressUpdate(
        done=1200, total=1900000, tokens=5.2e6
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (r"step (?P<step>\d+", "not a valid regex"),
        (r"step (?P<steps>\d+)", "unknown: steps"),
        (r"step (\d+)", "it has none"),
    ],
)
def test_bad_user_regex_is_a_clear_error(spec: str, message: str) -> None:
    with pytest.raises(ProgressSpecError, match=message):
        JobTracker("x", spec)


# --------------------------------------------------------------------------- the tracker


def test_snapshot_before_any_progress_is_all_null() -> None:
    snap = JobTracker("idle", "kv").snapshot_json()
    known = {"name": "idle", "state": "running", "gpus": [], "elastic_restarts": 0}  # counted
    assert snap == known | dict.fromkeys(SNAPSHOT_KEYS - set(known))


def test_last_update_is_iso_time() -> None:
    job = JobTracker("j", "kv")
    job.feed("step 1/10", 1795962720.0)
    parsed = dt.datetime.fromisoformat(job.snapshot_json()["last_update"])
    assert parsed.timestamp() == 1795962720.0 and parsed.tzinfo is not None


def test_backlog_burst_does_not_inflate_the_rate() -> None:
    job = JobTracker("j", "kv")
    for step in range(1, 501):  # the backlog: 500 lines arrive at once
        job.feed(f"step {step}/1000", 50.0)
    assert job.items_per_s is None
    job.feed("step 502/1000", 52.0)
    assert job.items_per_s == pytest.approx(1.0)  # (502 - 500) / 2 s, not 501 / 2 s


def test_step_going_back_starts_the_rate_over() -> None:
    job = JobTracker("j", "kv")
    for i, step in enumerate((100, 110, 120)):
        job.feed(f"step {step}/1000", float(i))
    job.feed("step 50/1000", 3.0)  # resumed from an older checkpoint
    assert job.items_per_s == pytest.approx(10.0)  # kept, never negative
    job.feed("step 55/1000", 4.0)
    assert job.items_per_s == pytest.approx(5.0)


def said(job: JobTracker) -> str | None:
    return None if job.step_back is None else step_back_text(job.step_back)


def test_a_step_counter_going_back_is_explained_by_the_resume_line() -> None:
    """After a restart the counter goes back (709 -> 651): the tracker keeps it, with the
    checkpoint the log said it resumed from; without such a line, "an earlier one"."""
    job = JobTracker("drafter", "kv", (5, 6, 7))
    job.feed("[14:30:00] drafter: run 0 resumed from checkpoint step 650, world size 3", 0.0)
    job.feed("[14:30:01] step 651/5000 | loss 2.5", 1.0)
    assert said(job) is None  # the first run: nothing went back
    job.feed("[14:31:00] step 709/5000 | loss 2.3", 59.0)
    job.mark_crashed("CUDA OOM on GPU 6", t=60.0)
    job.restarted(80.0)
    job.feed("[14:31:20] drafter: run 1 resumed from checkpoint step 650, world size 3", 80.0)
    # the kv preset reads "step 650" in the resume line itself: the counter goes back there
    assert job.step_back == StepBack(709, 650, 80.0, 650)
    assert said(job) == (
        "the step counter went back from 709 to 650: resumed from the checkpoint at step 650"
    )
    job.feed("[14:31:21] step 651/5000 | loss 2.5", 81.0)
    job.feed("[14:31:22] step 652/5000 | loss 2.5", 82.0)
    job.feed("[14:31:23] step 600/5000 | loss 2.5", 83.0)  # no resume line before this one
    assert job.step_back == StepBack(652, 600, 83.0, None)
    assert said(job) == (
        "the step counter went back from 652 to 600: resumed from an earlier checkpoint"
    )
    hf = JobTracker("hf", "kv")
    hf.feed("step 900/1000", 0.0)
    hf.feed("  Continuing training from global step 800", 1.0)
    hf.feed("step 801/1000", 2.0)
    assert hf.step_back is not None and hf.step_back.checkpoint == 800


def test_states_follow_the_caller() -> None:
    job = JobTracker("j", "kv")
    job.feed("step 5/10", 0.0)
    job.mark_stopped(t=1.0)
    assert job.state is JobState.STOPPED and job.eta_s is None
    job.feed("step 6/10", 2.0)
    assert job.state is JobState.STOPPED and job.step == 5
    job.feed("step 1/10", 1.0 + REVIVE_AFTER_S + 1)  # making progress again: runs again
    assert state(job) is JobState.RUNNING and job.step == 1
    job.restarted()
    job.feed("step 10/10", 30.0)
    assert state(job) is JobState.FINISHED
    job.mark_stopped()
    assert state(job) is JobState.FINISHED  # exiting after finishing is not "stopped"
    job.mark_crashed("Segmentation fault")
    assert state(job) is JobState.CRASHED
    job.restarted()
    assert state(job) is JobState.RUNNING and job.crash_reason is None


def test_rate_history_is_bounded() -> None:
    job = JobTracker("j", "kv", history_len=50)
    for i in range(500):
        job.feed(f"step {i}/5000 | 12.{i % 10} Ktok/s", float(i))
    assert len(job.rate_history) == 50 and job.rate_history[-1] == (499.0, 12900.0)


# ------------------------------------------------------------------------- never raises


@settings(max_examples=200)
@given(st.sampled_from(PRESETS), st.text())
def test_presets_never_raise(preset: str, text: str) -> None:
    job = JobTracker("fuzz", preset)
    job.feed(text, 1.0)
    job.feed(text + "\r" + text, 2.0)
    assert job.snapshot_json()["name"] == "fuzz"


NEAR = st.sampled_from(
    [
        "step",
        " ",
        "/",
        "=",
        ":",
        "loss",
        "12.8",
        "K",
        "tok/s",
        "it/s",
        "s/it",
        "[",
        "]",
        "<",
        ",",
        "{",
        "}",
        "'",
        '"',
        "eta",
        "1e999",
        "-",
        "?",
        "%|",
        "|",
        "\r",
        "done",
        "failed",
        "(",
        ")",
    ]
)


@settings(max_examples=300)
@given(st.sampled_from(PRESETS), st.lists(NEAR, max_size=40))
def test_presets_never_raise_on_near_valid_lines(preset: str, parts: list[str]) -> None:
    update = ProgressParser(preset).parse("".join(parts))
    if update is not None:
        assert update != ProgressUpdate()


@settings(max_examples=300)
@given(st.text())
def test_units_never_raise(text: str) -> None:
    parse_number(text)
    parse_rate(text)
    parse_duration(text)


# ------------------------------------------------ issue 17 point 16: HF Trainer's end of run


@pytest.mark.parametrize(
    ("fixture", "final_loss"),
    [
        # transformers 4.57.0 trainer.py Trainer.log: logs.update(speed_metrics("train", ...))
        # on every periodic log (since 4.52.0; 4.47-4.51 computed it and threw it away);
        # trainer_callback.py ProgressCallback.on_log prints str(logs), epoch rounded.
        ("hf_trainer_tokens_seen_4.57.log", 2.3187),
        # transformers 5.23.0: the same keys, ProgressCallback prints floats as f"{v:.4g}".
        ("hf_trainer_tokens_seen_5.23.log", 2.319),
    ],
)
def test_hf_periodic_logs_with_tokens_seen_do_not_end_the_run(
    fixture: str, final_loss: float
) -> None:
    """include_num_input_tokens_seen: each periodic dict carries train_runtime and
    train_tokens_per_second beside its loss; only the final summary (train_loss, no loss:
    _inner_training_loop 4.x / _finalize_training 5.x) ends the run."""
    job = JobTracker("sft", "hf")
    lines = read(fixture).split("\n")
    periodic = [i for i, ln in enumerate(lines) if "'loss'" in ln]
    for i, line in enumerate(lines[: periodic[1] + 1]):
        job.feed(line, 1000.0 + i)
        assert state(job) is JobState.RUNNING, line
    assert job.loss == pytest.approx(2.352, abs=6e-4)
    assert job.tokens_per_s == pytest.approx(26770, rel=1e-3)  # train_tokens_per_second
    feed_file(job, fixture)
    assert state(job) is JobState.FINISHED and job.loss == final_loss
    p = ProgressParser("hf")
    summary = next(ln for ln in lines if "train_loss" in ln)
    parsed = p.parse(summary)
    assert parsed is not None and parsed.finished
    parsed = p.parse(lines[periodic[0]])
    assert parsed is not None and not parsed.finished


def test_a_progress_line_after_a_wrong_finish_means_it_runs() -> None:
    """A "finished" that was not the end (a line that only looked final) is taken back by
    the next progress line with another step; the same step again (a bar's closing redraw)
    leaves it finished."""
    job = JobTracker("train", "kv")
    job.feed("step 100/300 | loss 2.31", 1000.0)
    job.feed("step 100/300 | training is complete for this shard", 1001.0)
    assert state(job) is JobState.FINISHED
    job.feed("step 100/300 | loss 2.31", 1002.0)
    assert state(job) is JobState.FINISHED
    job.feed("step 102/300 | loss 2.29", 1003.0)
    assert state(job) is JobState.RUNNING and job.ended_at is None
    job.feed("step 300/300 | loss 2.01", 1100.0)
    job.feed("training complete", 1101.0)
    assert state(job) is JobState.FINISHED


# ------------------------------------------------------- issue 17 point 15: tqdm byte bars


def test_tqdm_byte_bar_with_binary_divisor() -> None:
    """tqdm_bytes_1024.log is tqdm 4.70.0's own tqdm.format_meter output (tqdm/std.py) for
    ``unit="B", unit_scale=True, unit_divisor=1024`` as tqdm writes it ("\\r" + bar): the
    counts are MiB (format_sizeof(n, divisor=unit_divisor)), the rate SI (format_sizeof(rate)
    has no divisor): 52.5M/100M at 10.5MB/s is 55050240 of 104857600 bytes, 10.5e6 B/s."""
    job = JobTracker("download", "tqdm")
    feed_file(job, "tqdm_bytes_1024.log")
    assert (job.step, job.total_steps) == (int(52.5 * 2**20), 100 * 2**20)
    assert job.items_per_s == pytest.approx(10.5e6)
    assert job.rate_unit == "B/s" and job.eta_s == 4.0


@pytest.mark.parametrize(
    ("bar", "update"),
    [
        # tqdm 4.70.0 format_meter, unit="B", unit_scale=True (divisor 1000): the bar's own
        # 50% rules out 1024 (512000 / 1048576 would print 49%)
        (
            " 50%|████████████████████                    | 500k/1.00M [00:01<00:01, 500kB/s]",
            ProgressUpdate(
                step=500_000, total_steps=1_000_000, items_per_s=500e3, eta_s=1.0, unit="B"
            ),
        ),
        # unit_divisor=1024, no total: "{n_fmt}{unit} [{elapsed}, {rate_fmt}]"
        (
            "5.00MB [00:02, 2.62MB/s]",
            ProgressUpdate(step=5 * 2**20, items_per_s=2.62e6, unit="B"),
        ),
        # slower than one per second: rate_fmt is "{1/rate}s/{unit}"
        (
            " 10%|███▉                                   | 100/0.98k [06:40<1:00:00, 4.00s/B]",
            ProgressUpdate(
                step=100, total_steps=int(0.98 * 1024), items_per_s=0.25, eta_s=3600.0, unit="B"
            ),
        ),
        # the first redraw: no rate yet
        (
            "  0%|                                               | 0.00/1.00M [00:00<?, ?B/s]",
            ProgressUpdate(step=0, total_steps=2**20, unit="B"),
        ),
        # a scaled bar that is not bytes: SI
        (
            "tokenizing: 25.6ktok [00:02, 12.8ktok/s]",
            ProgressUpdate(tokens=25600.0, tokens_per_s=12800.0),
        ),
        (
            "  3%|▎         | 1.20M/40.0M [00:10<05:23, 120kimg/s]",
            ProgressUpdate(
                step=1_200_000, total_steps=40_000_000, items_per_s=120e3, eta_s=323.0, unit="img"
            ),
        ),
    ],
)
def test_tqdm_scaled_bars(bar: str, update: ProgressUpdate) -> None:
    assert ProgressParser("tqdm").parse(bar) == update
