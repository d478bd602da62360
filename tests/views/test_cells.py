"""The pure parts of the dashboard: names, cells and roles, header parts, sparklines, bars,
row layout, plot series, theme choice and the remembered state."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.color import Color as RichColor
from rich.color import ColorSystem
from rich.style import Style
from textual.theme import BUILTIN_THEMES, Theme

from gpumon.backends import paths
from gpumon.backends.alerts import AlertEngine
from gpumon.backends.alerts.rules import AlertRules
from gpumon.backends.alerts.store import Alert
from gpumon.backends.model import (
    ConnState,
    GpuProcess,
    GpuSample,
    Health,
    HostSample,
    HostStatus,
    Source,
)
from gpumon.themes import GPUMON_THEMES, choose_theme, severity_variables, theme_order
from gpumon.tui import state
from gpumon.tui.dashboard import ConnectionWatch
from gpumon.tui.views import Palette, alert_count
from gpumon.tui.views.gpu_cells import (
    NA,
    Cell,
    HeaderInput,
    Role,
    duration,
    fit_parts,
    gpu_cells,
    header_error,
    header_parts,
    memory_role,
    percent,
    power_cell,
    process_name,
    process_summary,
    reported_details,
    short_name,
    temperature_role,
)
from gpumon.tui.views.sparkline import bin_series, spark_rows, spark_string
from gpumon.tui.widgets import (
    PlotSpec,
    RowLayout,
    RowView,
    bar_text,
    build_plot,
    render_row,
    row_layout,
    series,
    window_ticks,
)

FULL = GpuSample(
    index=6,
    uuid="GPU-2e94",
    name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
    bus_id="00000000:BA:00.0",
    pstate="P0",
    temperature_c=65.0,
    utilization_pct=74.0,
    memory_total_mib=97887,
    memory_used_mib=96630,
    power_w=427.4,
    power_limit_w=600.0,
    sm_clock_mhz=2667,
)
LOST = GpuSample(
    index=4, name="NVIDIA RTX PRO 6000 Blackwell Server Edition", health=Health.CRITICAL,
    problems=("GPU is lost",),
)  # fmt: skip
PALETTE = Palette.from_theme(GPUMON_THEMES[0])


@pytest.mark.parametrize(
    ("name", "short"),
    [
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX PRO 6000 Bw"),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "RTX PRO 6000 B…"),
        ("NVIDIA GeForce RTX 4080 SUPER", "RTX 4080 SUPER"),
        ("NVIDIA H100 80GB HBM3", "H100 80GB HBM3"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA L40S", "L40S"),
        ("Tesla V100-SXM2-16GB", "V100-SXM2-16GB"),
        ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada"),
        ("  NVIDIA   A100 ", "A100"),
        (None, "n/a"),
        ("", "n/a"),
        ("Evil\x1b[31mGPU", "Evil\\x1b[31mGPU"),
    ],
)
def test_short_name(name: str | None, short: str) -> None:
    assert short_name(name) == short
    assert len(short_name(name)) <= 15


def test_short_name_honours_width() -> None:
    assert short_name("NVIDIA RTX PRO 6000 Blackwell Server Edition", width=8) == "RTX PRO…"


def level_of(gpu: GpuSample) -> Health | None:
    """The memory level a host with the default alert rules gives ``gpu``."""
    return AlertEngine("test", AlertRules()).memory_level(gpu, 0.0)


def test_cells_of_a_full_sample() -> None:
    c = gpu_cells(FULL, level_of(FULL))  # 98.7 %: over the default 98.5 % critical line
    assert c.memory == Cell("94.4/95.6GiB", Role.CRITICAL)
    assert c.memory_pct == Cell("98%", Role.CRITICAL)
    assert c.memory_role == Role.CRITICAL
    assert c.util == Cell("74%")
    assert c.temp == Cell("65°C", Role.OK)
    assert c.power == Cell("427/600W")
    assert c.name.text == "RTX PRO 6000 Bw"
    assert c.marker.text == " " and c.health == Role.OK
    assert c.problems.text == ""


def test_memory_cells_take_the_level_they_are_given() -> None:
    """The views hold no memory thresholds: the host's alert engine decides the level."""
    c = gpu_cells(FULL, Health.WARNING)
    assert c.memory.role == c.memory_pct.role == c.memory_role == Role.WARNING
    assert gpu_cells(FULL, None).memory_role == Role.NA
    assert gpu_cells(LOST, Health.CRITICAL).memory_role == Role.NA  # nothing reported


def test_cells_of_a_lost_gpu_are_na_not_zero() -> None:
    c = gpu_cells(LOST, level_of(LOST))
    for cell in (c.memory, c.memory_pct, c.util, c.temp, c.power, c.pstate, c.sm_clock):
        assert cell == NA
    assert c.fraction is None
    assert c.marker == Cell("✖", Role.CRITICAL)
    assert c.problems == Cell("GPU is lost", Role.CRITICAL)
    assert "n/a" in c.details.text and " 0" not in c.details.text


def test_sick_gpu_without_problem_text_still_says_why() -> None:
    c = gpu_cells(GpuSample(index=0, health=Health.WARNING), None)
    assert c.problems == Cell("warning", Role.WARNING)
    assert c.marker.role == Role.WARNING


@pytest.mark.parametrize(
    ("level", "role"),
    [(None, Role.NA), (Health.OK, Role.OK), (Health.WARNING, Role.WARNING),
     (Health.CRITICAL, Role.CRITICAL)],
)  # fmt: skip
def test_memory_role(level: Health | None, role: Role) -> None:
    assert memory_role(level) == role


def test_temperature_and_power_roles() -> None:
    assert temperature_role(None) == Role.NA
    assert temperature_role(79.9) == Role.OK
    assert temperature_role(80) == Role.WARNING
    assert temperature_role(95) == Role.CRITICAL
    assert power_cell(None, 600) == NA
    assert power_cell(250.4, None) == Cell("250W")
    assert power_cell(700, 600).role == Role.WARNING


def test_percent_never_claims_full_early_and_durations_read_well() -> None:
    assert percent(99.6) == "99%"
    assert percent(100.0) == "100%"
    assert [duration(s) for s in (0.2, 12.4, 245, 7800)] == ["<1s", "12s", "4m05s", "2h10m"]


def _alert(severity: Health, active: bool = True, acknowledged: bool = False) -> Alert:
    return Alert(
        "k", severity, "memory", "h", 6, None, "GPU 6 memory", 0.0, 0.0, active, acknowledged
    )


def test_alert_count_counts_active_alerts_new_ones_and_the_worst_new_role() -> None:
    assert alert_count([]) == (0, 0, Role.MUTED)
    assert alert_count([]).text == "0 alerts"
    assert alert_count([_alert(Health.WARNING)]) == (1, 1, Role.WARNING)
    assert alert_count([_alert(Health.WARNING)]).text == "1 alert"
    both = [_alert(Health.WARNING), _alert(Health.CRITICAL), _alert(Health.CRITICAL, False)]
    assert alert_count(both) == (2, 2, Role.CRITICAL)
    seen = [_alert(Health.WARNING), _alert(Health.CRITICAL, acknowledged=True)]
    assert alert_count(seen) == (2, 1, Role.WARNING)  # the acknowledged one no longer colours
    assert alert_count(seen).text == "2 alerts (1 new)"
    all_seen = [_alert(Health.CRITICAL, acknowledged=True)]
    assert alert_count(all_seen) == (1, 0, Role.MUTED)
    assert alert_count(all_seen).text == "1 alert (seen)"


def test_process_names_are_printable_and_say_when_hidden() -> None:
    assert process_name(GpuProcess(1, "py\x1b[2Jthon", 10), False) == "py\\x1b[2Jthon"
    assert process_name(GpuProcess(1, None, 10), True) == "[not visible in container]"
    assert process_name(GpuProcess(1, None, 10), False) == "[name not reported]"
    gpu = GpuSample(index=0, uuid="U")
    sample = HostSample("h", 0.0, None, (gpu,), processes=(GpuProcess(7, None, 2048, "U"),))
    assert process_summary(sample, gpu, True).text == "procs: 7 [not visible in container] 2.0GiB"


@pytest.mark.parametrize(
    ("name", "command", "shown"),
    [
        ("a[/]b", None, "a[/]b"),  # issue 28: shown as "]b"
        ("/usr/bin/python3", None, "python3"),
        (None, "/opt/conda/bin/python -u /srv/train.py --lr 1", "train.py"),
        (None, "venv/bin/python -m jupyter lab", "jupyter"),
        (None, "[kworker/0:1]", "[kworker/0:1]"),  # no command line: the kernel's name
        (None, "./bin/serve --port 1", "serve"),
    ],
)
def test_a_process_shows_its_program_name_not_a_path_split_of_a_name(
    name: str | None, command: str | None, shown: str
) -> None:
    gpu = GpuSample(index=0, uuid="U")
    proc = GpuProcess(7, name, 2048, "U", command=command)
    sample = HostSample("h", 0.0, None, (gpu,), processes=(proc,))
    assert process_summary(sample, gpu, False).text == f"procs: 7 {shown} 2.0GiB"


def _header(**kw: object) -> HeaderInput:
    base: dict[str, object] = dict(
        name="ct200",
        status=HostStatus(ConnState.CONNECTED, 0.0, source=Source.AGENT_NVML, transport="ssh x"),
        age=0.4,
        now=100.4,
        stale=False,
        interval=1.0,
        alerts=0,
        paused=False,
    )
    base.update(kw)
    return HeaderInput(**base)  # type: ignore[arg-type]


def test_header_connected() -> None:
    text = "  ".join(p.text for p in header_parts(_header()))
    assert text == "ct200  ● connected  age <1s  0 alerts  every 1s  agent/nvml  ssh x"


def test_header_reconnecting_stale_paused() -> None:
    status = HostStatus(
        ConnState.RECONNECTING, 0.0, error="connection refused", attempt=3, next_retry_at=104.0
    )
    parts = header_parts(
        _header(status=status, age=12.0, now=112.0, stale=True, paused=True, alerts=2)
    )
    texts = [p.text for p in parts]
    assert "◌ reconnecting #3" in texts
    assert "retry in 4s" not in texts and "retry in <1s" in texts  # retry time has passed
    assert "stale 12s" in texts and "PAUSED" in texts and "2 alerts" in texts
    assert header_error(status) == Cell("connection refused", Role.CRITICAL)
    assert header_error(HostStatus(ConnState.CONNECTED, 0.0)) is None


def test_fit_parts_drops_the_least_important_first() -> None:
    parts = header_parts(_header(stale=True, paused=True))
    kept = [p.text for p in fit_parts(parts, 45)]
    assert kept[:2] == ["ct200", "● connected"]
    assert "PAUSED" in kept and "stale <1s" in kept
    assert "ssh x" not in kept
    assert sum(len(t) for t in kept) <= 45


def test_bin_series_by_time_slices() -> None:
    times = [100.0, 101.0, 102.0, 110.0, 111.0, 125.0]
    values: list[float | None] = [1.0, 5.0, 3.0, None, 2.0, 9.0]
    assert bin_series(times, values, end=125.0, span=5.0, count=6) == [
        5.0, None, 2.0, None, None, 9.0,
    ]  # fmt: skip
    assert bin_series(times, values, end=111.0, span=5.0, count=3, mean=True) == [3.0, None, 2.0]
    assert bin_series(times, values, end=125.0, span=5.0, count=0) == []


def test_sparkline_shows_gaps_as_blanks_and_zero_as_a_line() -> None:
    assert spark_string([None, 0.0, 50.0, 100.0], 0.0, 100.0) == " ▁▄█"
    tall = spark_rows([0.0, 50.0, 100.0], 0.0, 100.0, 2)
    assert [t.plain for t in tall] == ["  █", "▁██"]


def test_bar_text_resolution_and_width() -> None:
    fill, track = Style(color="green"), Style(bgcolor="grey0")
    assert bar_text(0.5, 10, fill, track).plain == "█████     "
    assert bar_text(0.55, 10, fill, track).plain == "█████▌    "
    assert bar_text(None, 6, fill, track).plain == "      "
    assert len(bar_text(1.0, 7, fill, track).plain) == 7


def test_row_layout_uses_the_width() -> None:
    narrow, wide = row_layout(80), row_layout(200)
    assert narrow.fixed + narrow.bar + narrow.spark + 2 == 80
    assert not narrow.extras and wide.extras
    assert wide.bar > narrow.bar and wide.spark > narrow.spark
    assert row_layout(40).spark == 0  # too narrow: the bar keeps what there is


def _view(cells_of: GpuSample, height: int = 1, stale: bool = False) -> RowView:
    return RowView(
        cells=gpu_cells(cells_of, level_of(cells_of)),
        spark=(50000.0, None, 97000.0),
        spark_max=97887.0,
        spark_is_memory=True,
        stale=stale,
        cursor=True,
        height=height,
        processes=Cell("procs: 1 python 2.0GiB", Role.MUTED),
        palette=PALETTE,
        memory_rules=AlertRules(),
    )


def test_render_row_fits_the_width_and_draws_every_part() -> None:
    for width in (80, 120, 200):
        text = render_row(_view(FULL), row_layout(width))
        assert len(text.plain) == width
        assert text.plain.startswith("▶ 6")
        assert "94.4/95.6GiB" in text.plain and text.plain.endswith("▄ █")
    tall = render_row(_view(FULL, height=3), row_layout(200)).plain.split("\n")
    assert len(tall) == 3 and "procs: 1 python" in tall[2]
    assert "P0" not in tall[1]  # P-state has its own column at this width


def test_render_row_of_a_sick_gpu_adds_the_reason() -> None:
    lines = render_row(_view(LOST), row_layout(80)).plain.split("\n")
    assert len(lines) == 2
    assert lines[1].strip() == "✖ GPU is lost"


def test_stale_rows_are_dimmed() -> None:
    fresh = render_row(_view(FULL), row_layout(80))
    stale = render_row(_view(FULL, stale=True), row_layout(80))
    assert fresh.plain == stale.plain
    assert any(s.style == PALETTE.text(Role.CRITICAL, stale=True) for s in stale.spans)
    assert not any(s.style == PALETTE.text(Role.CRITICAL) for s in stale.spans)


def test_series_raw_and_binned() -> None:
    times = [float(t) for t in range(0, 100)]
    values: list[float | None] = [float(t) for t in range(100)]
    values[50] = None
    xs, ys, gap = series(times, values, end=99.0, window=60, max_points=100, interval=1.0)
    assert xs[0] == -60.0 and xs[-1] == 0.0 and len(xs) == 61
    assert None in ys and gap == 3.0
    bx, by, bgap = series(times, values, end=99.0, window=60, max_points=10, interval=1.0)
    assert len(bx) == 11 and all(-66 <= x <= 0 for x in bx)
    assert max(y for y in by if y is not None) == 99.0 and bgap >= 15.0
    # 61 points: raw up to 61 allowed (or no limit), binned from one fewer on
    assert series(times, values, end=99.0, window=60, max_points=61, interval=1.0) == (xs, ys, gap)
    assert series(times, values, end=99.0, window=60, max_points=0, interval=1.0) == (xs, ys, gap)
    cx, _, _ = series(times, values, end=99.0, window=60, max_points=60, interval=1.0)
    assert len(cx) == 61 and cx != xs  # 61 bin centres, not the samples


def test_build_plot_draws_title_ticks_and_no_backgrounds() -> None:
    spec = PlotSpec(
        title="memory GiB",
        xs=(-50.0, -40.0, -1.0, 0.0),
        ys=(10.0, None, 40.0, 45.0),
        window=60.0,
        y_max=96.0,
        colour=(230, 160, 10),
        frame=(120, 120, 120),
        gap_s=3.0,
    )
    text = build_plot(spec, 40, 10)
    plain = text.plain
    assert "memory GiB" in plain
    assert "-1m" in plain and "-30s" in plain and "now" in plain
    assert "96" in plain and "48" in plain
    assert len(plain.split("\n")) == 10
    assert not any(getattr(s.style, "bgcolor", None) for s in text.spans)
    assert window_ticks(3600)[1] == ["-1h", "-30m", "now"]
    assert build_plot(spec, 5, 2).plain == "memor"  # too small to plot: just the title


def test_every_theme_shows_three_distinct_severities() -> None:
    for theme in [*GPUMON_THEMES, *BUILTIN_THEMES.values()]:
        sev = severity_variables(theme)
        colours = {sev["gpumon-ok"], sev["gpumon-warning"], sev["gpumon-critical"]}
        assert len(colours) == 3, theme.name
        for colour in sev.values():
            assert (len(colour) == 7 and colour.startswith("#")) or colour.startswith("ansi_")
        palette = Palette.from_theme(theme)  # every theme gives Rich-usable colours
        for role in (Role.OK, Role.WARNING, Role.CRITICAL, Role.NA):
            Style(color=palette.colour(role))
            assert len(palette.rgb(role)) == 3


@pytest.mark.parametrize("theme", GPUMON_THEMES, ids=lambda t: t.name)
def test_severities_stay_apart_in_256_colours(theme: Theme) -> None:
    sev = severity_variables(theme)
    eight_bit = {
        key: RichColor.parse(sev[key]).downgrade(ColorSystem.EIGHT_BIT).number
        for key in ("gpumon-ok", "gpumon-warning", "gpumon-critical")
    }
    assert len(set(eight_bit.values())) == 3, eight_bit
    background = RichColor.parse(theme.background or "#000000")
    assert background.downgrade(ColorSystem.EIGHT_BIT).number not in eight_bit.values()


def test_contrast_theme_avoids_red_green() -> None:
    contrast = next(t for t in GPUMON_THEMES if t.name == "gpumon-contrast")
    sev = severity_variables(contrast)
    assert sev["gpumon-ok"] == "#56B4E9" and sev["gpumon-critical"] == "#D55E00"


def test_theme_order_and_choice() -> None:
    nord = BUILTIN_THEMES["nord"]
    names = theme_order({t: nord for t in ("nord", "gpumon-light", "gpumon-dark")})
    assert names == ["gpumon-dark", "gpumon-light", "nord"]
    available = ["gpumon-dark", "gpumon-light", "nord"]
    assert choose_theme("nord", "gpumon-light", available) == ("nord", None)
    assert choose_theme(None, "gpumon-light", available) == ("gpumon-light", None)
    assert choose_theme(None, "gone-theme", available) == ("gpumon-dark", None)
    name, problem = choose_theme("nope", "gpumon-light", available)
    assert name == "gpumon-dark" and problem is not None and "'nope'" in problem


def test_state_file_round_trip_and_bad_files(state_home: Path) -> None:
    path = paths.ui_state_file()
    assert path == state_home / "gpumon" / "state.json"
    assert state.remembered_theme() is None
    state.remember_theme("gpumon-light")
    assert state.remembered_theme() == "gpumon-light"
    state.update_state(other=1)
    assert json.loads(path.read_text()) == {"other": 1, "theme": "gpumon-light"}
    path.write_text("{not json")
    assert state.remembered_theme() is None
    path.write_text('["a list"]')
    assert state.load_state() == {}


def test_state_dir_defaults_to_local_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert paths.ui_state_file() == tmp_path / ".local" / "state" / "gpumon" / "state.json"
    monkeypatch.setenv("XDG_STATE_HOME", "relative/dir")  # not absolute: ignored (XDG spec)
    assert paths.ui_state_file() == tmp_path / ".local" / "state" / "gpumon" / "state.json"


def test_unwritable_state_dir_is_not_fatal(state_home: Path) -> None:
    state_home.mkdir(parents=True)
    (state_home / "gpumon").write_text("a file where the directory should be")
    state.remember_theme("gpumon-light")  # logs, does not raise
    assert state.remembered_theme() is None


def test_row_layout_dataclass_is_consistent() -> None:
    assert RowLayout(80, 10, 10, False).fixed == row_layout(80).fixed


def test_connection_watch_announces_transitions_only() -> None:
    watch = ConnectionWatch("ct200", ConnState.CONNECTING)
    assert watch.change(ConnState.CONNECTED, None) is None  # the first connect is no news
    lost = watch.change(ConnState.RECONNECTING, "stream ended")
    assert lost is not None and lost.severity == "error"
    assert lost.message == "ct200: connection lost: stream ended"
    assert watch.change(ConnState.RECONNECTING, "again") is None  # retries: header only
    back = watch.change(ConnState.CONNECTED, None)
    assert back is not None and back.message == "ct200: connection restored"

    never = ConnectionWatch("gpu2", ConnState.CONNECTING)
    first = never.change(ConnState.RECONNECTING, "refused")
    assert first is not None and first.message == "gpu2: cannot connect: refused"
    never.change(ConnState.CONNECTING, None)
    assert never.change(ConnState.RECONNECTING, "refused") is None  # said once
    other = ConnectionWatch("ct200", ConnState.CONNECTING)
    said = other.change(ConnState.FAILED, "cannot connect to pve1 port 22: connection refused")
    assert said is not None  # one sentence, "cannot connect" once
    assert said.message == "ct200: cannot connect to pve1 port 22: connection refused"


def test_os_errors_read_as_one_sentence() -> None:
    from gpumon.backends.transport.ssh import os_reason

    refused = ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 22)")
    assert os_reason(refused) == "connection refused"
    both = OSError("Multiple exceptions: [Errno 111] Connect call failed ('127.0.0.1', 22), "
                   "[Errno 99] Cannot assign requested address")  # fmt: skip
    assert os_reason(both) == "connection refused"
    assert os_reason(OSError("Network is down")) == "network is down"


@pytest.mark.parametrize("theme", [*GPUMON_THEMES, *BUILTIN_THEMES.values()], ids=lambda t: t.name)
def test_the_bar_track_stays_grey_in_256_colours_never_the_cursors_colour(theme: Theme) -> None:
    """tmux without truecolor: a bluish track (#26303B) became the cube's #005F5F, the
    cursor row's colour too, and an empty bar looked full."""
    pal = Palette.from_theme(theme)

    def eight_bit(colour: str) -> int | None:
        return RichColor.parse(colour).downgrade(ColorSystem.EIGHT_BIT).number

    track = eight_bit(pal.track)
    if RichColor.parse(pal.track).triplet is None:
        return  # an ANSI theme: the terminal's own palette
    assert track is not None and (232 <= track <= 255 or track in (16, 59, 102, 145, 188, 231))
    if pal.cursor is not None:
        assert track != eight_bit(pal.cursor)


def test_details_a_host_never_reports_are_left_out_not_na_on_every_row() -> None:
    """An RTX PRO 6000 reports no memory temperature and no fan: those stay out of every
    tall row; a value one GPU has and another lacks is n/a on the one that lacks it."""
    a = GpuSample(index=0, uuid="A", pstate="P0", sm_clock_mhz=2400, ecc_uncorrected=0)
    b = GpuSample(index=1, uuid="B", pstate="P0", sm_clock_mhz=None, ecc_uncorrected=0)
    reported = reported_details([a, b])
    assert reported == {"pstate", "sm_clock_mhz", "ecc_uncorrected"}
    text = gpu_cells(b, None, reported=reported).details.text
    assert text == "P0  SM n/a  ECC 0"
    assert "fan" not in text and "mem temp" not in text
    assert "fan n/a" in gpu_cells(b, None).details.text  # nothing said: everything shown
