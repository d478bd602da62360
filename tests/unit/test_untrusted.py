"""Text from the target is made printable where it enters gpumon, and every path that
shows it renders it as text: the boundary functions, the agent's JSON, the config, and a
property over random text through the alert views (the transport and the CLI's outputs,
run for real: tests/system/test_untrusted_cli.py)."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import json
import os
import time
from pathlib import Path

import pytest
from hostile import CORPUS, forbidden_in
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from textual.content import Content

from gpumon.backends import untrusted
from gpumon.backends.alerts.incident import incidents
from gpumon.backends.alerts.store import Alert
from gpumon.backends.config import Config, ConfigError, load_config, resolve_host
from gpumon.backends.model import Health
from gpumon.backends.untrusted import printable, printable_text
from gpumon.themes import GPUMON_THEMES
from gpumon.tui.views import Palette, alert_message, alert_title, alert_where, history_cells
from gpumon.tui.views.alert_cells import incident_text
from gpumon.tui.widgets import StripView, render_strip

from source_trees import parsed

ROOT = Path(__file__).parents[2]
PALETTE = Palette.from_theme(GPUMON_THEMES[0])
ANY_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=300)


@pytest.mark.parametrize(("label", "text"), CORPUS, ids=[label for label, _ in CORPUS])
def test_every_corpus_string_becomes_printable_and_keeps_its_visible_characters(
    label: str, text: str
) -> None:
    for cleaned in (printable(text), printable_text(text)):
        assert forbidden_in(cleaned) == []
        assert all(ch.isprintable() or ch in "\n\t" for ch in cleaned)
    # nothing visible is lost: the printable characters appear in order, escapes between
    shown = iter(printable(text))
    assert all(ch in shown for ch in text if ch.isprintable()), label


def test_escapes_are_named_so_the_operator_can_read_them() -> None:
    assert printable("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert printable("\x9b2J") == "\\x9b2J"
    assert printable("evil\u202e") == "evil\\u202e"
    assert printable("two\nlines\ttab") == "two\\x0alines\\x09tab"
    assert printable_text("two\nlines\ttab") == "two\nlines\ttab"
    assert printable_text("50%\r60%\r\n") == "50%\n60%\n"
    assert printable("plain text [bold]") == "plain text [bold]"


@given(ANY_TEXT)
def test_printable_is_total_idempotent_and_single_line(text: str) -> None:
    once = printable(text)
    assert once.isprintable() and printable(once) == once
    multi = printable_text(text)
    assert all(ch.isprintable() or ch in "\n\t" for ch in multi)
    assert printable_text(multi) == multi


def _shown(text: str) -> str:
    """What ``printable_text`` makes of ``text``, one character at a time (its spec)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return "".join(ch if ch.isprintable() or ch in "\n\t" else printable(ch) for ch in text)


@given(ANY_TEXT, st.integers(min_value=0, max_value=400), st.booleans())
def test_a_bounded_text_is_the_start_or_the_end_of_what_printable_text_shows(
    text: str, limit: int, keep_end: bool
) -> None:
    """Made printable a slice at a time (7 characters here, 64 Ki in use), and cut to
    ``limit`` characters of what is shown: the same text as whole, escapes counted (a
    NUL is four characters), and cut only when there was more."""
    whole = _shown(text)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(untrusted, "_SLICE", 7)
        assert printable_text(text) == whole
        kept, cut = untrusted.printable_bounded(text, limit, keep_end=keep_end)
    if keep_end:
        assert kept == (whole[len(whole) - limit :] if limit < len(whole) else whole)
    else:
        assert kept == whole[:limit]
    assert cut == (len(whole) > limit)


def test_json_from_the_target_is_cleaned_after_decoding() -> None:
    raw = json.dumps({"name\u001b": ["\u001b]52;c;eA==\u0007", {"x": "\u009b2J"}], "n": 1.5})
    assert "\x1b" not in raw  # the escape is spelled as \u001b in the JSON text ...
    decoded = untrusted.loads(raw)
    assert decoded == {"name\\x1b": ["\\x1b]52;c;eA==\\x07", {"x": "\\x9b2J"}], "n": 1.5}
    with pytest.raises(ValueError):
        untrusted.loads(b'{"bad": "\xff"}')


def test_no_module_decodes_target_json_without_cleaning_it() -> None:
    """``json.loads`` of data from a target must go through ``untrusted.loads``: a JSON
    ``\\u001b`` decodes to a raw ESC. Only the agent (which runs on the target and sends
    JSON, never shows it) and the module itself may call ``json.loads``."""
    allowed = {ROOT / "backends" / "untrusted.py"}
    allowed |= set((ROOT / "backends" / "remote").glob("*.py"))  # runs on the target
    offenders = []
    for path in [*(ROOT / "backends").rglob("*.py"), *(ROOT / "tui").rglob("*.py")]:
        if path in allowed or "sim" in path.parts:
            continue
        for node in ast.walk(parsed(path)):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in {"loads", "load"}
                and isinstance(node.value, ast.Name)
                and node.value.id == "json"
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    # tui/state.py reads gpumon's own state file (written by gpumon, not by a target).
    assert [o for o in offenders if not o.startswith("tui/state.py")] == []


def test_textual_markup_is_never_switched_on_for_what_the_tui_shows() -> None:
    """Every Static/Label is built with markup off, nothing parses markup from strings,
    and the app's notify ignores ``markup=True``."""
    problems = []
    for path in (ROOT / "tui").rglob("*.py"):
        tree = parsed(path)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            if name in {"Static", "Label"}:
                markup = [k for k in node.keywords if k.arg == "markup"]
                if not markup or not isinstance(markup[0].value, ast.Constant):
                    problems.append(f"{where}: {name} without markup=False")
                elif markup[0].value.value is not False:
                    problems.append(f"{where}: {name} with markup on")
            if name in {"from_markup", "render_markup"}:
                problems.append(f"{where}: {name}")
    assert problems == []


def _alert(message: str, host: str = "ct200", job: str | None = "drafter") -> Alert:
    now = time.time()
    return Alert(
        key="k",
        severity=Health.CRITICAL,
        kind="cuda_oom",
        host=host,
        gpu=6,
        job=job,
        message=message,
        time=now,
        last_seen=now,
        active=True,
        acknowledged=False,
    )


@settings(max_examples=200, deadline=None)
@given(ANY_TEXT, ANY_TEXT)
def test_any_alert_text_renders_as_plain_text_everywhere(message: str, job: str) -> None:
    """Random text (markup, escapes, unbalanced tags) through the alert views: the toast's
    Content, the history row and the strip never parse it and never carry a control
    character to the terminal."""
    alert = _alert(message, job=job or None)
    toast = f"{alert_where(alert)}: {alert_message(alert)}"
    Content(toast)  # what the toast builds with markup off: never raises
    console = Console(width=120, color_system=None, file=open(os.devnull, "w"))  # noqa: SIM115
    with console.capture() as capture:
        console.print(Content(toast).plain, markup=False, highlight=False)
        for cell in history_cells(alert, alert.time):
            console.print(cell.text, markup=False, highlight=False)
        console.print(alert_title(alert), markup=False, highlight=False)
        (incident,) = incidents([alert])
        console.print(incident_text(incident), markup=False, highlight=False)
        for width in (40, 80, 200):
            console.print(render_strip(StripView(incident, 2, PALETTE), width))
    assert forbidden_in(capture.get().replace("\n", "")) == []


@pytest.mark.parametrize(
    "entry",
    [
        'watch_logs = ["/var/log/\\u001b[2Jx.log"]',
        'identity = "/k\\u009b2J"',
        'python = "/usr/bin/py\\u202e"',
        '[hosts.ev.sglang]\nlog = "/x\\u001b]0;t\\u0007.log"',
        '[hosts.ev.jobs.j]\nlog = "/j.log"\nstart = "run \\u001b[2J"',
        '[hosts.ev.jobs.j]\nlog = "/j.log"\nenv = { A = "\\u001b[31m" }',
    ],
)
def test_config_refuses_escape_characters_and_says_so_in_plain_text(
    entry: str, tmp_path: Path
) -> None:
    path = tmp_path / "config.toml"
    path.write_text(f'[hosts.ev]\nssh = "root@h"\n{entry}\n', encoding="utf-8")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert forbidden_in(str(e.value)) == [] and str(path) in str(e.value)


def test_a_multi_line_start_script_is_still_accepted(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        '[hosts.ev]\nssh = "root@h"\n[hosts.ev.jobs.j]\nlog = "/j.log"\n'
        'start = """cd /root\n\tpython train.py"""\n',
        encoding="utf-8",
    )
    job = load_config(path).hosts["ev"].job("j")
    assert job is not None and job.start == "cd /root\n\tpython train.py"


def test_an_agent_message_full_of_escapes_lands_cleaned_in_the_monitor() -> None:
    from gpumon.backends.monitor import make_monitor
    from gpumon.backends.monitor.sources.agent import dispatch, handlers

    host = dataclasses.replace(resolve_host(Config(path=None), "local"), kernel_log=False)
    monitor = make_monitor(host)
    row = "0, GPU-1, RTX\x1b]0;t\x07, 00000000:18:00.0, P0, 40, [N/A], 5, 1, 1000, 0, 10, 990"
    fields = ["index", "uuid", "name", "pci.bus_id", "pstate", "temperature.gpu"]
    fields += ["temperature.memory", "utilization.gpu", "utilization.memory", "memory.total"]
    fields += ["memory.reserved", "memory.used", "memory.free"]
    line = json.dumps({"type": "gpus", "t": 1.0, "fields": fields, "rows": [row]}).encode()
    assert dispatch(monitor, handlers(monitor, on_hello=lambda hello: False), line) is True
    assert monitor.latest is not None and monitor.latest.gpus[0].name == "RTX\\x1b]0;t\\x07"
    asyncio.run(monitor.transport.dispose())


@given(
    st.text(
        alphabet=st.sampled_from(
            ["a", " ", "\n", "\t", "\r", "\x1b", "\x07", "é", "\u202e", "\x00", "\ufeff"]
        )
    )
)
def test_printable_text_fast_path_agrees_with_the_character_by_character_rule(text: str) -> None:
    from gpumon.backends.untrusted import _KEEP_MULTILINE, _escape, printable_text

    ref = text.replace("\r\n", "\n").replace("\r", "\n")
    expected = "".join(
        ch if ch.isprintable() or ch in _KEEP_MULTILINE else _escape(ch) for ch in ref
    )
    assert printable_text(text) == expected
