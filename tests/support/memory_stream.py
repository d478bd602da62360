"""A ``ProcessStream`` with no process behind it, for the fast lane's in-memory
transports: the command's answer is made when gpumon closes its stdin (as a real
command reads its input to the end first)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from gpumon.backends.transport import ProcessStream

# what the command answers, from its stdin: (exit code, stdout)
Respond = Callable[[bytes], tuple[int, str]]


class _Stdin:
    def __init__(self, on_eof: Callable[[bytes], None]) -> None:
        self.data, self.on_eof, self.done = bytearray(), on_eof, False

    def write(self, data: bytes) -> None:
        self.data += data

    def write_eof(self) -> None:
        if not self.done:
            self.done = True
            self.on_eof(bytes(self.data))


def memory_stream(respond: Respond) -> ProcessStream:
    """A stream whose command exits with ``respond(stdin)``'s code, having printed its
    text; nothing on stderr."""
    out, err = asyncio.StreamReader(), asyncio.StreamReader()
    done: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def finish(data: bytes) -> None:
        code, text = respond(data)
        out.feed_data(text.encode())
        out.feed_eof()
        err.feed_eof()
        done.set_result(code)

    async def wait() -> int:
        return await done

    return ProcessStream(out, _Stdin(finish), err, wait, lambda: None, lambda: None)
