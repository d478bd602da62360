"""The agent's line bound on nvidia-smi's output (``LineSplitter``, ``shorten_row``): a
line over ``LINE_MAX_BYTES`` is never held whole; a GPU row whose name is what is long
is given back with the name cut (issue 28 point 7), anything else is dropped."""

from __future__ import annotations

from gpumon.backends.parsers import QUERY_FIELDS, parse_query_gpu
from gpumon.backends.remote.agent import (
    LINE_END_BYTES,
    LINE_MAX_BYTES,
    NAME_MAX_CHARS,
    LineSplitter,
    LongLine,
    shorten_row,
)


def row(index: int, name: str) -> str:
    values = {"index": str(index), "name": name, "memory.total": "97887", "power.draw": "80.5"}
    return ", ".join(values.get(f, "[N/A]") for f in QUERY_FIELDS)


def split(data: bytes, chunk: int = 65536) -> list[bytes | LongLine]:
    splitter = LineSplitter()
    out: list[bytes | LongLine] = []
    for at in range(0, len(data), chunk):
        out += splitter.feed(data[at : at + chunk])
        assert len(splitter.buf) <= LINE_MAX_BYTES  # never held whole
        if splitter.long is not None:
            assert len(splitter.long.head) + len(splitter.long.tail) <= 2 * LINE_END_BYTES
    return out


def test_a_row_with_a_long_name_comes_back_with_the_name_cut() -> None:
    name = "NVIDIA, " + "X" * 100_000  # a ", " in it too
    lines = [row(2, "NVIDIA RTX PRO 6000"), row(3, name), row(4, "NVIDIA RTX PRO 6000")]
    got = split(("\n".join(lines) + "\n").encode())
    assert [type(x) for x in got] == [bytes, LongLine, bytes]
    long = got[1]
    assert isinstance(long, LongLine) and long.size == len(lines[1])
    kept = shorten_row(long, QUERY_FIELDS)
    assert kept is not None and kept[1] == "3"
    assert kept[0] == row(3, name[:NAME_MAX_CHARS] + "...")
    (gpu,) = parse_query_gpu([kept[0]]).gpus
    assert (gpu.index, gpu.memory_total_mib, gpu.power_w) == (3, 97887, 80.5)


def test_a_long_line_that_is_no_row_is_not_given_back() -> None:
    (long,) = split(b"Xid " + b"y" * 200_000 + b"\n", chunk=4096)
    assert isinstance(long, LongLine) and shorten_row(long, QUERY_FIELDS) is None
    (index_long,) = split((row(0, "ok").replace("[N/A]", "9" * 70_000, 1) + "\n").encode())
    assert isinstance(index_long, LongLine) and shorten_row(index_long, QUERY_FIELDS) is None


def test_short_lines_pass_as_they_are() -> None:
    data = "".join(row(i, "NVIDIA RTX PRO 6000") + "\n" for i in range(8)).encode()
    assert split(data, chunk=7) == [row(i, "NVIDIA RTX PRO 6000").encode() for i in range(8)]
