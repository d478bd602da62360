"""The alert detail's rows (issue 26.3): everything the history's row cuts, with times."""

from __future__ import annotations

import dataclasses
import io
import time

from rich.console import Console

from gpumon.backends.alerts.incident import incidents
from gpumon.backends.alerts.store import Alert
from gpumon.backends.model import Health
from gpumon.themes import GPUMON_DARK
from gpumon.tui.views import Palette
from gpumon.tui.views.alert_cells import evidence_cells, incident_cells
from gpumon.tui.views.alert_detail import (
    DetailView,
    detail_plain,
    detail_renderable,
    detail_rows,
    since_text,
)

from alert_facts import log_facts

T0 = time.mktime((2026, 12, 2, 8, 53, 0, 0, 0, -1))
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a "
    "total capacity of 94.97 GiB of which 90.00 MiB is free. [process GPU 1 = GPU 6]"
)


def alert(key: str, kind: str, severity: Health, message: str, t: float, **kw: object) -> Alert:
    return Alert(key, severity, kind, "demo", 6, "drafter", message, t, t, **kw)  # type: ignore[arg-type]


def oom_incident() -> DetailView:
    memory = alert(
        "memory:6",
        "memory",
        Health.WARNING,
        "GPU 6 memory 0.0% used",
        T0,
        first_message="GPU 6 memory 95.4% used",
        peak_message="GPU 6 memory 98.6% used",
        peak_severity=Health.CRITICAL,
        peak_time=T0 + 3,
        active=False,
    )
    memory = dataclasses.replace(memory, last_seen=T0 + 5)
    facts = log_facts(OOM.removesuffix(" [process GPU 1 = GPU 6]"))  # the engine's note
    oom = alert("log:/d.log:9", "cuda_oom", Health.CRITICAL, OOM, T0 + 3, facts=facts)
    (incident,) = incidents([memory, oom])
    lines = ("Traceback (most recent call last):", "    main()", OOM)
    return DetailView(incident, T0 + 10, {oom.key: lines}, ("/rec/demo.jsonl.gz", True))


def test_the_detail_says_the_whole_story_with_times() -> None:
    rows = detail_rows(oom_incident())
    plain = detail_plain(rows)
    assert rows[0].heading and rows[0].text.startswith("drafter: CUDA OOM on GPU 6 (tried 2.00")
    assert "since 08:53:00 (first warning)" in rows[1].text  # dated by the memory warning
    assert ("fix", "r restart drafter") in [(r.label, r.text) for r in rows]
    assert "gpumon restart demo drafter" in plain
    labels = [(r.label, r.text) for r in rows if r.label]
    assert ("first", f"08:53:03  {OOM}") in labels  # whole, not cut to a column
    assert ("lines", "Traceback (most recent call last):") in labels
    assert ("first", "08:53:00  GPU 6 memory 95.4% used") in labels
    assert ("peak", "08:53:03  GPU 6 memory 98.6% used") in labels
    assert ("last", "08:53:05  GPU 6 memory 0.0% used") in labels  # ended: "last", not "now"
    assert plain.index("cause: CUDA out of memory") < plain.index("evidence: GPU memory")
    assert plain.rstrip().endswith("/rec/demo.jsonl.gz")


def test_since_names_the_first_warning_only_when_it_came_first() -> None:
    view = oom_incident()
    assert since_text(view.incident, view.now) == "since 08:53:00 (first warning)"
    (alone,) = incidents([view.incident.cause])
    assert since_text(alone, view.now) == "since 08:53:03"


def test_wrapped_lines_stay_beside_their_label_at_80_columns() -> None:
    console = Console(file=io.StringIO(), width=76, color_system=None)
    palette = Palette.from_theme(GPUMON_DARK)
    console.print(detail_renderable(detail_rows(oom_incident()), palette))
    out = console.file.getvalue().splitlines()  # type: ignore[attr-defined]
    assert max(len(line) for line in out) <= 76
    at = next(i for i, line in enumerate(out) if line.startswith("first") and "OutOfMemory" in line)
    assert out[at + 1].startswith(" " * 8) and out[at + 1].strip()  # indented, not flush left


def test_the_history_dates_an_incident_by_its_cause_not_its_first_warning() -> None:
    # issue 26.9: the row said 08:53:00 (the memory warning) beside the OOM's headline
    view = oom_incident()
    cells = incident_cells(view.incident, view.now)
    assert cells[1].text == "08:53:03"
    assert [evidence_cells(a, view.now)[1].text for a in view.incident.evidence] == ["08:53:00"]


def test_a_stall_the_flight_recorder_named_shows_each_ranks_collectives() -> None:
    """The per-rank table of the real dumps (torch 2.13.0's capture: rank 2 skipped
    all_reduce #17, and on the timeout only the others dumped)."""
    from gpumon.backends.alerts.facts import AlertFacts
    from gpumon.backends.parsers.flight_recorder import analyze

    from upstream_captures import UPSTREAM

    folder = UPSTREAM / "flight-recorder" / "torch-2.13.0" / "on-timeout"
    dumps = {int(p.name.rsplit("_", 1)[1]): p.read_bytes() for p in folder.glob("trace_rank_*")}
    report = analyze(dumps, pids={0: 900, 1: 901, 2: 902, 3: 903}, gpus={2: 6})
    text = report.words("drafter")
    stalled = alert(
        "job_stalled:drafter",
        "job_stalled",
        Health.CRITICAL,
        text,
        T0,
        facts=AlertFacts(collective=report),
    )
    (incident,) = incidents([stalled])
    rows = detail_rows(DetailView(incident, T0 + 10))
    said = [(r.label, r.text) for r in rows]
    assert ("group", "process group 0 (default_pg), inputs 65536 Float, timeout 8 s") in said
    start = said.index(("ranks", "rank  pid      gpu  last completed        last entered"))
    table = [t for _, t in said[start + 1 : start + 5]]
    assert table[0].split() == ["0", "900", "?", "all_reduce", "#17", "all_reduce", "#17"]
    assert table[2].split() == ["2", "902", "6", "no", "dump", "(missing)"]
    assert text == (
        "drafter stalled: no dump from rank 2 (GPU 6, PID 902); ranks 0, 1, 3 last entered "
        "all_reduce #17"
    )
