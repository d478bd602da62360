"""``Line`` builds the same Text as appending its pieces one by one with Rich."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from rich.style import Style
from rich.text import Span, Text

from gpumon.tui.widgets.text_line import Line

STYLES = [None, Style(), Style(bold=True), Style(color="red"), Style(color="red", bold=True)]
pieces = st.lists(
    st.tuples(
        st.booleans(),  # a Text piece (append_text) or a string (append)
        st.text(alphabet=st.sampled_from("ab █▁\r\x07\x08\x0b\x0c\t\u00e9"), max_size=6),
        st.sampled_from(STYLES),
        st.sampled_from(STYLES),
    ),
    max_size=12,
)


@given(pieces)
def test_line_equals_text_append(parts: list[tuple[bool, str, Style | None, Style | None]]) -> None:
    expected, line = Text(), Line()
    for as_text, text, style, inner in parts:
        if as_text:
            piece = Text(text, style or "")
            if inner is not None and text:
                piece.stylize(inner, 0, 1)
            expected.append_text(piece)
            line.add_text(piece)
        else:
            expected.append(text, style)
            line.add(text, style)
    got = line.text()
    assert got.plain == expected.plain
    assert got.spans == expected.spans
    assert len(line) == len(expected)


def test_first_piece_in_the_constructor() -> None:
    line = Line("▶", Style(bold=True))
    line.add(" x")
    assert line.text().plain == "▶ x"
    assert line.text().spans == Text.assemble(("▶", Style(bold=True)), " x").spans


@given(pieces, st.integers(min_value=0, max_value=30))
def test_a_line_reads_as_its_text_and_on_a_background_as_the_text_would(
    parts: list[tuple[bool, str, Style | None, Style | None]], width: int
) -> None:
    """What the drawer reads of a Line (``plain``, ``spans``, ``style``) is its Text's,
    and ``on`` is a Text copied onto the background and padded with spaces."""
    line = Line()
    for as_text, piece, style, _ in parts:
        if as_text:
            line.add_text(Text(piece, style or ""))
        else:
            line.add(piece, style)
    text = line.text()
    assert (line.plain, line.spans, line.cell_len) == (text.plain, text.spans, text.cell_len)
    background = Style(bgcolor="blue")
    on = line.on(background, width).text()
    expected = text.copy()
    expected.style = background + Style.parse("")
    if width > expected.cell_len:
        expected.append(" " * (width - expected.cell_len))
    assert (on.plain, on.spans, on.style) == (expected.plain, expected.spans, expected.style)
    assert line.text().plain == text.plain  # the original is left alone


def test_add_spans_equals_add_text_of_the_same_text() -> None:
    spans = [Span(0, 2, Style(color="red")), Span(2, 3, Style(bold=True))]
    a, b = Line("x"), Line("x")
    a.add_spans("▁▂▃", spans)
    b.add_text(Text("▁▂▃", spans=spans))
    assert (a.plain, a.spans) == (b.plain, b.spans) == (b.text().plain, b.text().spans)
