"""The agent's log follower: backlog at start, only new lines after, rotation, truncation,
globs, filters, partial lines."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpumon.backends.remote import LOG_BACKLOG_BYTES, LogTail
from gpumon.backends.remote.protocol import Log


def lines_of(msgs: list[Log]) -> list[str]:
    return [ln for m in msgs for ln in m.lines]


def test_backlog_then_only_new_lines(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("old 1\nold 2\n")
    tail = LogTail({"path": str(log), "tag": "train"})
    first = tail.poll()
    assert lines_of(first) == ["old 1", "old 2"] and first[0].backlog is True
    assert tail.poll() == []
    with log.open("a") as f:
        f.write("new 1\nnew 2 partial")
    msgs = tail.poll()
    assert lines_of(msgs) == ["new 1"] and msgs[0].backlog is False
    assert msgs[0].tag == "train" and msgs[0].path == str(log)
    with log.open("a") as f:
        f.write(" done\n")
    assert lines_of(tail.poll()) == ["new 2 partial done"]


def test_backlog_is_bounded_and_drops_the_cut_first_line(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    line = "x" * 99 + "\n"
    log.write_text(line * (2 * LOG_BACKLOG_BYTES // len(line)) + "the end\n")
    got = lines_of(LogTail({"path": str(log)}).poll())
    assert got[-1] == "the end"
    assert all(ln == "x" * 99 for ln in got[:-1])  # no half line at the start
    assert len(got) <= LOG_BACKLOG_BYTES // len(line) + 1


def test_rotation_and_truncation_are_followed(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text("before\n")
    tail = LogTail({"path": str(log)})
    tail.poll()
    os.rename(log, tmp_path / "job.log.1")  # logrotate: move, then a new file
    assert tail.poll() == []
    log.write_text("after rotation\n")
    assert lines_of(tail.poll()) == ["after rotation"]
    log.write_text("")  # truncated in place (copytruncate)
    assert tail.poll() == []
    with log.open("a") as f:
        f.write("after truncation\n")
    assert lines_of(tail.poll()) == ["after truncation"]


def test_glob_picks_up_new_files_from_their_start(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text("a old\n")
    tail = LogTail({"path": str(tmp_path / "*.log")})
    assert lines_of(tail.poll()) == ["a old"]
    (tmp_path / "b.log").write_text("b first\nb second\n")
    tail.last_glob = 0.0  # the next poll looks for new files
    msgs = tail.poll()
    assert lines_of(msgs) == ["b first", "b second"]
    assert msgs[0].backlog is False and msgs[0].path.endswith("b.log")


def test_filter_keeps_matches_and_the_newest_line(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("")
    tail = LogTail({"path": str(log), "filter": "out of memory"})
    tail.poll()
    with log.open("a") as f:
        f.write("step 1\nCUDA out of memory. Tried\nstep 2\nstep 3\n")
    assert lines_of(tail.poll()) == ["CUDA out of memory. Tried", "step 3"]


def test_missing_file_is_quiet_until_it_appears(tmp_path: Path) -> None:
    log = tmp_path / "later.log"
    tail = LogTail({"path": str(log)})
    assert tail.poll() == []
    log.write_text("hello\n")
    tail.last_glob = 0.0
    assert lines_of(tail.poll()) == ["hello"]


def test_a_flood_keeps_the_oom_line_and_the_newest(tmp_path: Path) -> None:
    import re

    from gpumon.backends.parsers import KEEP_PATTERN
    from gpumon.backends.remote import LOG_FLOOD_NEWEST, LOG_MAX_LINES

    log = tmp_path / "flood.log"
    log.write_text("")
    tail = LogTail({"path": str(log), "keep": KEEP_PATTERN})
    tail.poll()
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 6"
    body = [f"step {i} | loss 2.0" for i in range(50_000)]
    body[1000] = oom
    log.write_text("\n".join(body) + "\n")
    (msg,) = tail.poll()
    assert oom in msg.lines
    assert msg.lines[-1] == "step 49999 | loss 2.0"
    assert len(msg.lines) <= LOG_MAX_LINES and msg.dropped == 50_000 - len(msg.lines)
    assert msg.lines[-LOG_FLOOD_NEWEST:] == body[-LOG_FLOOD_NEWEST:]
    assert re.compile(KEEP_PATTERN)


def test_keep_pattern_agrees_with_the_scanner_prefilter() -> None:
    import re

    from gpumon.backends.parsers import oom

    fixtures = Path(__file__).parents[1] / "fixtures"
    lines = [
        ln
        for f in sorted(fixtures.rglob("*"))
        if f.is_file() and f.suffix in {".txt", ".log", ".prom"}
        for ln in f.read_text(errors="replace").splitlines()
    ]
    keep = re.compile(oom.KEEP_PATTERN)
    assert len(lines) > 500
    assert [bool(keep.search(ln)) for ln in lines] == [oom._interesting(ln) for ln in lines]


def test_a_log_replaced_by_a_directory_is_said_once_and_cleared_when_back(
    tmp_path: Path,
) -> None:
    log = tmp_path / "train.log"
    log.write_text("old\n")
    tail = LogTail({"path": str(log), "tag": "job:train"})
    tail.poll()
    assert tail.take_problems() == []
    log.unlink()
    log.mkdir()
    tail.poll()
    (said,) = tail.take_problems()
    assert (said.tag, said.path, said.problem) == ("job:train", str(log), "Is a directory")
    tail.poll()
    assert tail.take_problems() == []  # once, not every poll
    log.rmdir()
    log.write_text("new\n")
    assert lines_of(tail.poll()) == ["new"]
    (cleared,) = tail.take_problems()
    assert cleared.problem is None


def test_a_fifo_in_a_followed_glob_is_said_and_never_opened(tmp_path: Path) -> None:
    """A FIFO is no log: opening it for reading waits for a writer, which hung the
    agent's log thread. It is said as a problem once and the regular files go on."""
    (tmp_path / "a.log").write_text("a line\n")
    os.mkfifo(tmp_path / "b.log")
    tail = LogTail({"path": str(tmp_path / "*.log"), "tag": "watch"})
    assert lines_of(tail.poll()) == ["a line"]
    (said,) = tail.take_problems()
    assert (said.path, said.problem) == (str(tmp_path / "b.log"), "not a regular file")
    with (tmp_path / "a.log").open("a") as f:
        f.write("another\n")
    assert lines_of(tail.poll()) == ["another"]
    assert tail.take_problems() == []  # once, not every poll


def _flood_tail(tmp_path: Path) -> tuple[Path, LogTail]:
    from gpumon.backends.parsers import KEEP_PATTERN

    log = tmp_path / "flood.log"
    log.write_text("")
    tail = LogTail({"path": str(log), "keep": KEEP_PATTERN, "tag": "job:train"})
    tail.poll()
    return log, tail


OOM_LINE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 6 has a "
    "total capacity of 94.97 GiB of which 90.00 MiB is free."
)


def test_a_flood_of_many_chunks_keeps_every_keyword_line_and_counts_the_rest(
    tmp_path: Path,
) -> None:
    """A second of a 200,000 lines/s flood of ~100-byte lines (20 MB, five read chunks):
    the OOM lines anywhere in it (also across a chunk boundary), the traceback start and
    the newest lines are sent; every other line is counted as dropped, none invented."""
    from gpumon.backends.remote import LOG_FLOOD_NEWEST
    from gpumon.backends.remote.logtail import LOG_READ_BYTES

    log, tail = _flood_tail(tmp_path)
    body = [
        f"[rank0] step {i:>9} | loss 2.3100 | lr 1.0e-4 | 12.8 Ktok/s | mem 71.2G"
        for i in range(200_000)
    ]
    width = len(body[0]) + 1
    at_boundary = LOG_READ_BYTES // width  # the line that straddles the first chunk's end
    special = {10: "Traceback (most recent call last):", at_boundary: OOM_LINE, 150_000: OOM_LINE}
    for i, text in special.items():
        body[i] = text
    log.write_text("\n".join(body) + "\n")
    (msg,) = tail.poll()
    assert msg.lines[: len(special)] == list(special.values())
    assert msg.lines[len(special) :] == body[-LOG_FLOOD_NEWEST:]
    assert msg.dropped == len(body) - len(msg.lines) and msg.skipped_bytes == 0
    assert tail.poll() == []  # all of it was read: nothing is behind


def test_a_log_written_faster_than_it_can_be_scanned_is_skipped_ahead_and_said(
    tmp_path: Path,
) -> None:
    from gpumon.backends.remote.logtail import LOG_READ_BYTES, LOG_SCAN_BYTES

    log, tail = _flood_tail(tmp_path)
    line = b"x" * 99 + b"\n"
    size = LOG_SCAN_BYTES + 8 * LOG_READ_BYTES
    with log.open("wb") as f:
        f.write(line * (size // len(line)) + OOM_LINE.encode() + b"\nthe newest\n")
    (msg,) = tail.poll()
    total = log.stat().st_size
    assert msg.skipped_bytes == total - LOG_READ_BYTES
    assert OOM_LINE in msg.lines and msg.lines[-1] == "the newest"  # the newest bytes are read
    assert tail.poll() == []


def test_a_progress_bar_redraw_is_sent_once_it_sits_still(tmp_path: Path) -> None:
    """tqdm writes "\\r" + bar with no newline: the newest bar is sent when the file has
    not grown for one poll, once; a newer redraw replaces it, a newline ends it."""
    log = tmp_path / "bar.log"
    log.write_text("")
    tail = LogTail({"path": str(log)})
    tail.poll()
    with log.open("a") as f:
        f.write("\r 25%|##5       | 2500/10000 [00:10<00:30, 250.00it/s]")
    assert tail.poll() == []  # just written: it may still be growing
    assert lines_of(tail.poll()) == [" 25%|##5       | 2500/10000 [00:10<00:30, 250.00it/s]"]
    assert tail.poll() == []  # once
    with log.open("a") as f:
        f.write("\r 42%|####2     | 4200/10000 [00:17<00:23, 250.00it/s]")
    assert tail.poll() == []
    assert lines_of(tail.poll()) == [" 42%|####2     | 4200/10000 [00:17<00:23, 250.00it/s]"]
    with log.open("a") as f:
        f.write("\n")  # tqdm's close(): the bar's line ends; it was sent already
    assert tail.poll() == []
    with log.open("a") as f:
        f.write("\r 50%|#####     | 5000/10000 [00:20<00:20, 250.00it/s]\rdone 5001\n")
    assert lines_of(tail.poll()) == [
        "\r 50%|#####     | 5000/10000 [00:20<00:20, 250.00it/s]\rdone 5001"
    ]


def test_an_unterminated_plain_line_is_not_lost_after_a_quiet_poll(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("")
    tail = LogTail({"path": str(log)})
    tail.poll()
    with log.open("a") as f:
        f.write("Loading checkpoint shards")
    assert tail.poll() == [] and tail.poll() == []
    with log.open("a") as f:
        f.write(" ... done\n")
    assert lines_of(tail.poll()) == ["Loading checkpoint shards ... done"]


def test_keyword_lines_finds_every_matching_line_once() -> None:
    import re

    from gpumon.backends.parsers import KEEP_PATTERN
    from gpumon.backends.remote.logtail import keyword_lines, literal_alternatives

    words = literal_alternatives(KEEP_PATTERN)
    assert words is not None and b"Traceback" in words
    assert literal_alternatives(r"step \d+") is None
    data = b"a\nTraceback x Traceback\nb\nout of memory\nCUDA out of memory OutOfMemory"
    got = keyword_lines(data, words, re.compile(KEEP_PATTERN))
    assert got == [b"Traceback x Traceback", b"out of memory", b"CUDA out of memory OutOfMemory"]


def test_the_waker_sleeps_until_a_followed_directory_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No fixed short poll while idle: with every followed directory watched the loop sleeps
    (LOG_IDLE_S, here 60 s) until a write there wakes it."""
    import threading
    import time

    from gpumon.backends.remote import logtail

    monkeypatch.setattr(logtail, "LOG_IDLE_S", 60.0)
    waker = logtail.Waker(poll_s=0.25)
    assert waker.fd is not None  # Linux with libc: inotify is there
    log = tmp_path / "train.log"
    waker.watch_logs([str(log)])
    assert waker.complete
    timer = threading.Timer(0.3, lambda: log.write_text("step 1\n"))
    started = time.monotonic()
    timer.start()
    waker.wait(busy=False)
    timer.join()
    assert time.monotonic() - started < 30  # woken by the write, not by the 60 s timeout


def test_the_waker_polls_what_it_cannot_watch_and_watches_it_once_it_can(
    tmp_path: Path,
) -> None:
    from gpumon.backends.remote.logtail import Waker

    waker = Waker(poll_s=0.25)
    later = tmp_path / "later" / "job.log"
    waker.watch_logs([str(later), str(tmp_path / "runs-*" / "x.log")])
    assert not waker.complete and len(waker.unwatched) == 2
    later.parent.mkdir()
    waker.watch_logs([str(later)])
    assert waker.complete
    # The directory removed and made again: the kernel drops the watch; a new one is set.
    later.parent.rmdir()
    waker.wait(busy=True)  # reads the IN_IGNORED event
    assert str(later.parent) not in waker.watched
    later.parent.mkdir()
    waker.watch_logs([str(later)])
    assert waker.complete and waker.watched[str(later.parent)] >= 0


def test_a_log_tail_holding_a_redraw_says_so(tmp_path: Path) -> None:
    log = tmp_path / "bar.log"
    log.write_text("")
    tail = LogTail({"path": str(log)})
    tail.poll()
    assert not tail.holding()
    with log.open("a") as f:
        f.write("\r 10%|#         | 1/10")
    tail.poll()
    assert tail.holding()  # the loop must poll again soon to see it sit still
    tail.poll()
    assert not tail.holding()
