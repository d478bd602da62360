"""What every transport must bound (issue 34): the checks of ``Transport.run`` and
``ProcessStream.readline`` against a machine that sends more than anyone should keep,
run on the local transport (tests/system) and over a real sshd (tests/integration)."""

from __future__ import annotations

import sys

from gpumon.backends.transport.base import LINE_MAX, Transport

# 10 MiB of one line (no newline), then a short one: more than a line may hold.
LONG_LINE = (
    "import sys; out = sys.stdout.buffer; out.write(b'x' * (10 << 20)); out.write(b'\\nok\\n')"
)
# 100 MiB of NULs, then a last line: more than a run may keep.
FLOOD = (
    "import sys; out = sys.stdout.buffer\n"
    "for _ in range(100): out.write(bytes(1 << 20))\n"
    "out.write(b'\\nlast line\\n')"
)


async def long_line_is_cut(transport: Transport) -> None:
    """A line longer than LINE_MAX comes cut to it (counted), and the next line after it."""
    stream = await transport.open_stream([sys.executable, "-c", LONG_LINE])
    try:
        first = await stream.readline()
        assert len(first) == LINE_MAX + 1 and first.endswith(b"x\n")
        assert stream.lines_cut == 1
        assert await stream.readline() == b"ok\n"
        assert await stream.readline() == b""
    finally:
        await stream.close(grace=0)


async def run_keeps_its_bound(transport: Transport) -> None:
    """``run`` keeps at most ``max_bytes`` of what is shown (a NUL shows as ``\\x00``):
    its start, the command ended there; or with ``keep_end`` its end, read through."""
    argv = [sys.executable, "-c", FLOOD]
    head = await transport.run(argv, timeout=60, max_bytes=1 << 20)
    assert head.cut and head.exit_code is None
    assert len(head.stdout) == 1 << 20 and set(head.stdout.split("\\x")) == {"", "00"}
    tail = await transport.run(argv, timeout=60, max_bytes=64 << 10, keep_end=True)
    assert tail.cut and tail.exit_code == 0
    assert len(tail.stdout) <= 64 << 10 and tail.stdout.endswith("\\x00\nlast line\n")
    small = await transport.run([sys.executable, "-c", "print('all of it')"], timeout=60)
    assert small == type(small)(0, "all of it\n", "", False)
