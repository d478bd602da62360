"""The action table is the one place keys, palette entries and help lines come from: every
entry has its action, no key is bound twice on a screen, and what each screen binds,
offers and lists is what the table says."""

from __future__ import annotations

from collections import Counter

from textual.binding import Binding

from gpumon.tui.app import GpumonApp
from gpumon.tui.dashboard import (
    ACTIONS,
    DashboardAction,
    DashboardDetailScreen,
    DashboardScreen,
    actions_on,
    bindings,
)
from gpumon.tui.dashboard.action_table import palette_entries
from gpumon.tui.screens import DetailScreen, help_rows, key_text


def keys_of(screen_bindings: list[Binding]) -> list[str]:
    return [k.strip() for b in screen_bindings for k in b.key.split(",")]


def test_every_action_has_a_handler_where_it_runs() -> None:
    for a in ACTIONS:
        owner = GpumonApp if a.app else DashboardScreen
        assert callable(getattr(owner, f"action_{a.name}", None)), a.action


def test_no_key_is_bound_twice_on_a_screen() -> None:
    app = keys_of([b for b in GpumonApp.BINDINGS if isinstance(b, Binding)])
    dashboard = keys_of(bindings("dashboard"))
    detail = keys_of([*DetailScreen.BINDINGS, *bindings("detail")])  # type: ignore[list-item]
    for keys in (app, dashboard, detail):
        assert [k for k, n in Counter(keys).items() if n > 1] == []


def test_each_screen_binds_what_the_table_gives_it() -> None:
    assert [b.action for b in bindings("app")] == ["quit", "help", "cycle_theme"]
    on_dashboard = [b.action for b in bindings("dashboard")]
    assert on_dashboard == [a.action_on("dashboard") for a in ACTIONS]
    assert "app.quit" in on_dashboard and "restart_job" in on_dashboard
    on_detail = {b.action for b in bindings("detail")}
    assert "dashboard('restart_job')" in on_detail and "dashboard('cursor(1)')" in on_detail
    assert not {"open_detail", "dashboard('open_detail')", "dashboard('toggle_spark')"} & on_detail
    assert bindings("dashboard") == DashboardScreen.BINDINGS
    assert bindings("detail") == DashboardDetailScreen.BINDINGS


def test_the_footer_shows_the_tables_labels_in_its_order() -> None:
    shown = [b for b in bindings("dashboard") if b.show]
    assert [b.description for b in shown] == [a.label for a in ACTIONS if a.footer]
    hidden = {a.keys for a in ACTIONS if not a.footer}
    navigation = {"g,home", "G,end", "pagedown", "pageup", "n", "N", *"0123456789"}
    assert {"s", "S", "K", "x", "u", "down,j", "up,k"} | navigation == hidden  # room for ten or so


def test_the_digits_share_one_help_row_and_stay_off_the_detail_view() -> None:
    rows = help_rows([("Dashboard", DashboardScreen.BINDINGS)])
    [digits] = [r for r in rows if r[2].startswith("Jump to that GPU")]
    assert digits[1] == "0 1 2 3 4 5 6 7 8 9"
    detail = keys_of([*DetailScreen.BINDINGS, *bindings("detail")])  # type: ignore[list-item]
    assert detail.count("1") == 1  # the window key, not a jump


def test_help_lists_every_action_with_its_help_line() -> None:
    rows = help_rows([("Dashboard", DashboardScreen.BINDINGS)])
    expected: list[tuple[str, str, str]] = []
    for a in ACTIONS:  # neighbours with the same help line share a row
        if expected and expected[-1][2] == a.help:
            expected[-1] = ("Dashboard", f"{expected[-1][1]} {key_text(a.keys)}", a.help)
        else:
            expected.append(("Dashboard", key_text(a.keys), a.help))
    assert rows == expected
    assert len(rows) == len(ACTIONS) - 9  # the ten digits on one row


def test_palette_entries_name_the_job_and_host_and_skip_job_actions_without_a_job() -> None:
    restart = next(a for a in ACTIONS if a.name == "restart_job")
    [entry] = palette_entries([restart], "dashboard", job="drafter", host="ct200")
    assert (entry.title, entry.help, entry.action) == (
        "Restart job drafter",
        "Stop drafter and start it again on ct200",
        "restart_job",
    )
    assert palette_entries([restart], "dashboard", job=None, host="ct200") == []
    [on_detail] = palette_entries([restart], "detail", job="drafter", host="ct200")
    assert on_detail.action == "dashboard('restart_job')"
    cursor = [a for a in ACTIONS if a.name == "cursor"]
    assert palette_entries(cursor, "dashboard", job=None, host="h") == []  # keys only


def test_read_only_concerns_exactly_the_actions_that_change_a_machine() -> None:
    dangerous = {a.name for a in ACTIONS if a.dangerous}
    assert dangerous == {"restart_job", "stop_job", "start_job", "swap_torch", "kill_process"}
    assert all(a.machine and a.needs_host for a in ACTIONS if a.dangerous)
    doctor = next(a for a in ACTIONS if a.name == "doctor")
    assert doctor.machine and not doctor.dangerous  # it only reads


def test_the_app_keys_are_the_same_entries_everywhere() -> None:
    app_entries: list[DashboardAction] = actions_on("app")
    assert all(a in actions_on("dashboard") and a in actions_on("detail") for a in app_entries)
    assert all(a.action_on("detail") == f"app.{a.action}" for a in app_entries)
