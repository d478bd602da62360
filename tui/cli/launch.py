"""``gpumon``'s one entry point (``main``): the agent of ``check local`` (the table's
``early_agent`` commands; ``snapshot local`` runs the agent's round in process) is
started before the rest of gpumon is imported (``transport.prestart``), so the agent's
start and gpumon's imports run at the same time; then ``command_line.run``.

A guess from the words alone, before the config is read: when the host turns out to be
another (a configured ``local`` in a container, another interpreter) or the command stops
early (a bad config, a typo), the early agent is not used and is ended on the way out.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

__all__ = ["EXIT_CLOSED_PIPE", "early_agent_wanted", "main"]

# The exit status when the reader closed stdout early (``gpumon snapshot demo --json |
# head``): 128 + SIGPIPE, what a shell reports for ``git log | head``'s git (git lets
# SIGPIPE end it, or raises it itself on EPIPE), so ``set -o pipefail`` sees the same.
EXIT_CLOSED_PIPE = 141


def early_agent_wanted(argv: Sequence[str]) -> bool:
    """Whether ``argv`` reads as ``check local`` (options anywhere;
    the table's ``early_agent`` commands and ``value_options``, the options whose next
    word is their value, not the host)."""
    if "local" not in argv:  # most command lines: the table is not even read
        return False
    from .subcommands import early_agent, value_options

    commands, valued = early_agent(), value_options()

    words: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--":
            return False  # what follows is not for the guess
        elif arg.startswith("-"):
            skip = arg in valued
        else:
            words.append(arg)
    return len(words) == 2 and words[0] in commands and words[1] == "local"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``gpumon`` command line on ``argv`` (default ``sys.argv[1:]``); its exit
    status. No early agent outlives it. A reader that closes stdout early (``| head``)
    ends it quietly with ``EXIT_CLOSED_PIPE``: no traceback, whatever the command."""
    try:
        code = _run(list(sys.argv[1:] if argv is None else argv))
        sys.stdout.flush()  # a pipe is block-buffered: the last write may fail only here
    except BrokenPipeError:
        return _closed_pipe()
    return code


def _closed_pipe() -> int:
    """The Python docs' recipe (library/signal, "Note on SIGPIPE"): stdout goes to
    /dev/null, so the interpreter's own flush at exit finds nothing to write and prints
    no second error; ``EXIT_CLOSED_PIPE``."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_CLOSED_PIPE


def _run(args: list[str]) -> int:
    if not early_agent_wanted(args):
        from .command_line import run

        return run(args)
    from gpumon.backends.transport import prestart

    prestart.start_agent()
    try:
        from .command_line import run

        return run(args)
    finally:
        prestart.discard()
