"""``Line`` builds the same Text as appending its pieces one by one with Rich."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from rich.style import Style
from rich.text import Text

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
