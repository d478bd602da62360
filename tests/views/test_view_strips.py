"""``text_strip``: the dashboard's lines drawn as segments directly, cell for cell what
Rich's own rendering gives; and the lines it leaves to Textual's general path."""

from __future__ import annotations

from rich.console import Console
from rich.style import Style
from rich.text import Text

from gpumon.tui.widgets.view_widget import text_strip

BASE = Style(color="#d0d0d0", bgcolor="#101418")


def _cells(segments: list[tuple[str, Style | None]]) -> list[tuple[str, Style | None]]:
    return [(ch, style) for text, style in segments for ch in text]


def _rich_cells(line: Text) -> list[tuple[str, Style | None]]:
    """What Rich draws for ``line`` on ``BASE``: the reference."""
    console = Console(width=200, color_system="truecolor", legacy_windows=False)
    on_base = Text.assemble(line)
    on_base.stylize(BASE, 0, len(line))  # BASE under every span, as the widget's style is
    spans = [*on_base.spans[-1:], *on_base.spans[:-1]]  # the base first, then the spans
    on_base.spans = spans
    rendered = on_base.render(console)
    return _cells([(s.text, s.style) for s in rendered if s.text])


def test_a_row_line_is_drawn_cell_for_cell_as_rich_draws_it() -> None:
    line = Text("▶ 0  ")
    line.append("RTX PRO 6000", "bold")
    line.append(" " * 3)
    line.append("█████", Style(color="#3c8cdc"))
    line.append("  41.8/95.6GiB", "dim")
    line.append(" 95%", Style(color="#e06c75", bold=True))
    strip = text_strip(line, BASE, 60)
    assert strip is not None
    assert strip.cell_length == line.cell_len
    assert _cells([(s.text, s.style) for s in strip]) == _rich_cells(line)


def test_the_text_s_own_style_lies_under_its_spans() -> None:
    line = Text("stale 34s", style=Style(italic=True))
    line.stylize("bold", 0, 5)
    strip = text_strip(line, BASE, 20)
    assert strip is not None
    cells = _cells([(s.text, s.style) for s in strip])
    assert cells[0] == ("s", BASE + Style(italic=True) + Style(bold=True))
    assert cells[-1] == ("s", BASE + Style(italic=True))


def test_lines_it_cannot_take_go_to_textual_s_path() -> None:
    assert text_strip(Text("x" * 21), BASE, 20) is None  # wider than the widget: wrapped there
    assert text_strip(Text("a\tb"), BASE, 20) is None  # tabs are expanded there
    assert text_strip(Text("centred", justify="center"), BASE, 20) is None
    overlapping = Text("abcdef")
    overlapping.stylize("bold", 0, 4)
    overlapping.stylize("italic", 2, 6)  # combined styles: Rich's and Textual's business
    assert text_strip(overlapping, BASE, 20) is None


def test_wide_characters_count_by_cell() -> None:
    line = Text("GPU 6 ")
    line.append("日本", "bold")
    strip = text_strip(line, BASE, 10)
    assert strip is not None and strip.cell_length == 10
    assert text_strip(line, BASE, 9) is None
