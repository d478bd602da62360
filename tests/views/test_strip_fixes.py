"""The incident's fixes on the screen (issue 26.1, 27.2): the strip, the toast and the
history say ``screen_fixes`` (another container's memory first: "K stop it, r restart
drafter"; an Xid's advice), and at 80 columns the strip shortens the fixes to their keys
before it gives up the headline."""

from __future__ import annotations

from gpumon.backends.alerts.incident import Fix, Incident, incidents
from gpumon.backends.alerts.store import Alert
from gpumon.backends.model import Health
from gpumon.themes import GPUMON_DARK
from gpumon.tui.views import Palette
from gpumon.tui.views.alert_cells import incident_notice, incident_text
from gpumon.tui.widgets import StripView, render_strip

PALETTE = Palette.from_theme(GPUMON_DARK)
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a "
    "total capacity of 94.97 GiB of which 90.00 MiB is free."
)
HEADLINE = (
    "drafter: CUDA OOM on GPU 6 (tried 2.00 GiB, 90 MiB free; 6.0 GiB held by CT 201 jupyter-lab)"
)


def oom_with_holder() -> Incident:
    oom = Alert("log:d:86", Health.CRITICAL, "cuda_oom", "demo", 6, "drafter", OOM, 60.0, 60.0)
    held = "GPU 6: 6.0 GiB held by CT 201 jupyter-lab"
    foreign = Alert(
        "foreign_process:6", Health.WARNING, "foreign_process", "demo", 6, "drafter", held,
        32.0, 61.0,
    )  # fmt: skip
    (incident,) = incidents([oom, foreign])
    return incident


def test_the_holder_and_k_stop_it_are_said_in_the_history_toast_and_strip() -> None:
    incident = oom_with_holder()
    assert incident.headline == HEADLINE
    assert incident_text(incident) == f"{HEADLINE} — K stop it, r restart drafter"
    # the toast (80 characters) cuts the headline, never the fixes
    notice = incident_notice(incident, 80)
    assert len(notice) <= 80 and notice.endswith("… — K stop it, r restart drafter")
    assert notice.startswith("drafter: CUDA OOM on GPU 6 (tried 2.00 GiB, 90 M")
    wide = render_strip(StripView(incident, 0, PALETTE), 160).plain
    assert f"{HEADLINE} — K stop it, r restart drafter" in wide
    # 80 columns: the keys with their verbs and the key numbers stay; the job's name, the
    # holder's clause (the fix and the GPU row say it) and the counts give way (issue 26.3)
    narrow = render_strip(StripView(incident, 0, PALETTE), 80).plain
    assert (
        narrow == " ✖  CUDA OOM on GPU 6 (tried 2.00 GiB, 90 MiB free) — K stop, r restart  a: list"
    )
    # 120 columns: the headline is cut, not its numbers; the holder's clause starts
    mid = render_strip(StripView(incident, 0, PALETTE), 120).plain
    assert len(mid) <= 120 and "(tried 2.00 GiB, 90 MiB free; 6.0 G" in mid
    assert "— K stop it, r restart drafter" in mid
    # only the keys that can act now (read-only: none) and the advice are offered
    offered = (Fix(None, "drain the node"),)
    plain = render_strip(StripView(incident, 0, PALETTE, fixes=offered), 160).plain
    assert "— drain the node" in plain and "K stop" not in plain and "r restart" not in plain
    bare = render_strip(StripView(incident, 0, PALETTE, fixes=()), 160).plain
    assert " — " not in bare


def test_an_xids_advice_goes_before_the_headline_is_cut() -> None:
    text = "Xid 79 on GPU 6: fallen off the bus — reboot the node (PCI 0000:ba:00)"
    xid = Alert("xid:ba:1", Health.CRITICAL, "xid", "demo", 6, None, text, 70.0, 70.0)
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
