"""The incident's fixes on the screen (issue 26.1, 27.2): the strip, the toast and the
history say ``screen_fixes`` (another container's memory first: "K stop jupyter-lab, r
restart drafter"; an Xid's advice), and at 80 columns the strip cuts the headline before
the fixes' keys and words (issue 36); ``K`` names its target (issue 36 point 3), so that
it is never taken for ``s`` (stop the job), down to the last resort of a line too narrow
for it."""

from __future__ import annotations

import dataclasses

from gpumon.backends.alerts.facts import AlertFacts, TorchSwap
from gpumon.backends.alerts.incident import Fix, Incident, incidents
from gpumon.backends.alerts.store import Alert
from gpumon.backends.model import Health
from gpumon.themes import GPUMON_DARK
from gpumon.tui.views import Cell, Palette
from gpumon.tui.views.alert_cells import (
    HISTORY_MESSAGE_MIN,
    evidence_cells,
    history_layout,
    incident_cells,
    incident_notice,
    incident_text,
    short_severity,
    toast_text_width,
    wrapped_lines,
)
from gpumon.tui.widgets import StripView, render_strip

from alert_facts import held_facts, log_facts, xid_facts

PALETTE = Palette.from_theme(GPUMON_DARK)
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a "
    "total capacity of 94.97 GiB of which 90.00 MiB is free."
)
HEADLINE = (
    "drafter: CUDA OOM on GPU 6 (tried 2.00 GiB, 90 MiB free; 6.0 GiB held by CT 201 jupyter-lab)"
)


def oom_with_holder() -> Incident:
    oom = Alert("log:d:86", Health.CRITICAL, "cuda_oom", "demo", 6, "drafter", OOM, 60.0, 60.0,
                facts=log_facts(OOM))  # fmt: skip
    held = "GPU 6: 6.0 GiB held by CT 201 jupyter-lab"
    foreign = Alert(
        "foreign_process:6", Health.WARNING, "foreign_process", "demo", 6, "drafter", held,
        32.0, 61.0, facts=held_facts(6.0),
    )  # fmt: skip
    (incident,) = incidents([oom, foreign])
    return incident


def test_the_holder_and_k_stop_its_name_are_said_in_the_history_toast_and_strip() -> None:
    incident = oom_with_holder()
    assert incident.headline == HEADLINE
    assert incident_text(incident) == f"{HEADLINE} — K stop jupyter-lab, r restart drafter"
    # a line of 80 characters cuts the headline, never the fixes; the job's name goes
    # first, the fix says it
    notice = incident_notice(incident, 80)
    assert len(notice) <= 80 and notice.endswith("… — K stop jupyter-lab, r restart drafter")
    assert notice.startswith("CUDA OOM on GPU 6 (tried 2.00 GiB, 90 M")
    wide = render_strip(StripView(incident, 0, PALETTE), 160).plain
    assert f"{HEADLINE} — K stop jupyter-lab, r restart drafter" in wide
    # 80 columns: the keys and their words stay whole, the headline is cut (issue 36
    # point 5; issue 26.3 kept the numbers and said only "K stop, r restart"); the job's
    # name, the holder's clause (the fix and the GPU row say it) and the counts go first
    narrow = render_strip(StripView(incident, 0, PALETTE), 80).plain
    assert narrow == (
        " ✖  CUDA OOM on GPU 6 (tried 2… — K stop jupyter-lab, r restart drafter  a: list"
    )
    # only where the words leave the headline fewer than 20 characters do the keys keep
    # just their verbs, K its target first (the headline then says the cause alone)
    tight = render_strip(StripView(incident, 0, PALETTE), 70).plain
    assert tight == " ✖  CUDA OOM on GPU 6 (tried… — K stop jupyter-lab, r restart  a: list"
    tighter = render_strip(StripView(incident, 0, PALETTE), 60).plain
    assert len(tighter) <= 60 and "… — K stop, r restart" in tighter and "CUDA OOM on" in tighter
    # 120 columns: the headline is cut, not its numbers; the holder's clause starts
    mid = render_strip(StripView(incident, 0, PALETTE), 120).plain
    assert len(mid) <= 120 and "(tried 2.00 GiB, 90 MiB free; 6.0 …" in mid
    assert "— K stop jupyter-lab, r restart drafter" in mid
    # only the keys that can act now (read-only: none) and the advice are offered
    offered = (Fix(None, "drain the node"),)
    plain = render_strip(StripView(incident, 0, PALETTE, fixes=offered), 160).plain
    assert "— drain the node" in plain and "K stop" not in plain and "r restart" not in plain
    bare = render_strip(StripView(incident, 0, PALETTE, fixes=()), 160).plain
    assert " — " not in bare


def test_an_xids_advice_goes_before_the_headline_is_cut() -> None:
    text = "Xid 79 on GPU 6: fallen off the bus — reboot the node (PCI 0000:ba:00)"
    xid = Alert("xid:ba:1", Health.CRITICAL, "xid", "demo", 6, None, text, 70.0, 70.0,
                facts=xid_facts(79))  # fmt: skip
    (incident,) = incidents([xid])
    assert incident_text(incident) == (
        "Xid 79 on GPU 6: fallen off the bus — reboot the node (the GPU cannot be reset in "
        "place), drain the node, gpumon bundle demo"
    )
    wide = render_strip(StripView(incident, 0, PALETTE), 160).plain
    assert incident_text(incident) in wide
    # 80 columns: the whole headline, the advice without its reason
    narrow = render_strip(StripView(incident, 0, PALETTE), 80).plain
    assert "Xid 79 on GPU 6: fallen off the bus — reboot the node  a: list" in narrow
    assert "drain" not in narrow and len(narrow) <= 80


def test_a_line_wraps_at_spaces_as_a_toast_wraps_it() -> None:
    assert wrapped_lines("", 10) == 1
    assert wrapped_lines("abc def", 7) == 1
    assert wrapped_lines("abc def", 6) == 2
    assert wrapped_lines("abcdefghij", 5) == 2  # a word wider than a line is folded
    assert wrapped_lines("ab abcdefghij", 5) == 3
    assert wrapped_lines("abcde fg", 5) == 2


def test_a_toast_says_the_whole_incident_where_its_width_holds_it() -> None:
    """At 200 columns the toast cut its numbers ("90 M…") at 80 characters though its
    three lines of 57 hold the whole line; at 80 columns it keeps the fix and the words."""
    incident = oom_with_holder()
    whole = incident_text(incident)
    assert toast_text_width(80) == 36 and toast_text_width(200) == 57
    wide = incident_notice(incident, toast_text_width(200), 3)
    assert wide == whole and "90 MiB free" in wide
    narrow = incident_notice(incident, toast_text_width(80), 3)
    assert narrow.endswith("… — K stop jupyter-lab, r restart drafter")
    assert wrapped_lines(narrow, 36) <= 3
    assert "tried 2.00 GiB, 90 MiB free" in narrow  # three lines of 36 hold the numbers
    # one line (the detail view's toast): the keys keep their verbs, the headline starts
    one = incident_notice(incident, 36)
    assert len(one) <= 36 and one.endswith("… — K stop, r restart") and "CUDA" in one


def history_rows(now: float) -> list[tuple[Cell, ...]]:
    incident = oom_with_holder()
    memory = Alert(
        "memory:6", Health.CRITICAL, "memory", "demo", 6, "drafter",
        "GPU 6 memory 6.3% used, 89.6 GiB free", 58.0, 61.0,
        first_message="GPU 6 memory 96.6% used, 2.7 GiB free",
        peak_message="GPU 6 memory 99.2% used, 0.1 GiB free",
    )  # fmt: skip
    (story,) = incidents([*incident.alerts, memory])
    return [incident_cells(story, now), *(evidence_cells(a, now) for a in story.evidence)]


def test_the_history_cuts_messages_with_an_ellipsis_and_keeps_now_on_screen() -> None:
    """At 80 columns the message column ran off the screen, cut without "…", and "now"
    was never seen (issue 36 point 5)."""
    rows = history_rows(62.0)
    wide = history_layout(rows, 400, hosts=1)
    assert not wide.short_severity and wide.host
    assert wide.message == max(len(r[6].text) for r in rows)  # whole: nothing is cut
    layout = history_layout(rows, 80, hosts=1)
    padding = 2 * len(layout.titles)
    fixed = sum(
        max([len(t), *(len(c.text) for c in cells)])
        for t, cells in zip(
            layout.titles,
            zip(*(layout.row(r)[0] for r in rows), strict=True),
            strict=True,
        )
    )
    assert fixed + padding <= 80  # every column on screen, "now" last
    assert layout.titles[-1] == "now" and layout.now >= 12
    head = oom_with_holder()
    cells, height = layout.row(rows[0], head)
    # the fix whole: K with its target, r with its verb (the headline names the job)
    assert cells[5].text.endswith("… — K stop jupyter-lab, r restart")
    assert height == 2 and wrapped_lines(cells[5].text, layout.message) == 2
    for row in rows[1:]:
        shown, one = layout.row(row)
        assert one == 1 and len(shown[5].text) <= layout.message
        if len(row[6].text) > layout.message:
            assert shown[5].text.endswith("…")
    memory = next(r for r in rows if r[7].text)
    now = layout.row(memory)[0][-1].text
    # "now" says what differs from the message first: the values, not "GPU 6 memory"
    assert now.startswith("6.3% used") and len(now) <= layout.now
    # narrow: the severity says its glyph, one host's column goes
    assert layout.short_severity and not layout.host and layout.message >= 20
    assert history_layout(rows, 80, hosts=2).host  # two hosts: it says which
    assert history_layout(rows, 160, hosts=1).message >= HISTORY_MESSAGE_MIN


def test_every_history_column_has_its_width_from_the_layout() -> None:
    """A column left to the DataTable's own measure is measured only when the app is idle:
    a busy app (ci, load 4 beside a CPU hog) drew the time as "17:2", the job as "dra",
    the state as "activ" and cut the fix apart. Every column's width is the layout's, wide
    enough for every cell it shows."""
    rows = history_rows(62.0)
    for width, hosts in ((80, 1), (80, 2), (160, 1), (400, 1)):
        layout = history_layout(rows, width, hosts=hosts)
        widths = layout.widths()
        assert None not in widths, (width, hosts, layout)
        shown = [layout.row(r)[0] for r in rows]
        for column, (title, w) in enumerate(zip(layout.titles, widths, strict=True)):
            if title in ("message", "now"):
                continue  # cut to fit (the test above)
            assert w is not None and w >= max(len(title), *(len(r[column].text) for r in shown))


def test_a_short_severity_keeps_its_glyph_and_the_evidence_mark() -> None:
    assert short_severity("✖ critical") == "✖"
    assert short_severity("▲ warning") == "▲"
    assert short_severity("└ warning") == "└▲"
    assert short_severity("└ critical") == "└✖"


def test_an_incident_row_never_wraps_where_it_fits() -> None:
    rows = history_rows(62.0)
    layout = history_layout(rows, 400, hosts=1)
    cells, height = layout.row(rows[0], oom_with_holder())
    assert height == 1 and cells[6].text == rows[0][6].text
    ended = dataclasses.replace(rows[0][6], text="x")
    assert layout.row((*rows[0][:6], ended, rows[0][7]))[1] == 1


def test_a_job_slow_after_a_torch_swap_says_it_and_offers_d_and_w() -> None:
    """Issue 36 point 2a: the strip names the swap from the alert's fact and offers d to
    check and w to swap back, whole at 80 columns (the headline is cut first)."""
    swap = TorchSwap("2.11.0+cu128", "2.11.0+cu130", 1_800_000_000.0 - 3600)
    at = swap.words(1_800_000_000.0)
    text = f"drafter at 4.6 Ktok/s, 23 % of its expected 20.0 Ktok/s; after {at}"
    slow = Alert("job_slow:drafter", Health.WARNING, "job_slow", "demo", None, "drafter", text,
                 1_800_000_000.0, 1_800_000_000.0, facts=AlertFacts(torch_swap=swap))  # fmt: skip
    (incident,) = incidents([slow])
    wide = render_strip(StripView(incident, 0, PALETTE), 200).plain
    assert f"after {at} — d check torch, w swap back to cu128" in wide, wide
    narrow = render_strip(StripView(incident, 0, PALETTE), 80).plain
    assert len(narrow) <= 80 and "… — d check torch, w swap back to cu128" in narrow, narrow
