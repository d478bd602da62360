"""``gpumon``'s entry point: the agent of ``snapshot local`` / ``check local`` is started
before the rest of gpumon is imported (``transport.prestart``), so the agent's start and
gpumon's imports run at the same time; then ``command_line.main``.

A guess from the words alone, before the config is read: when the host turns out to be
another (a configured ``local`` in a container, another interpreter) or the command stops
early (a bad config, a typo), the early agent is not used and is ended on the way out.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["early_agent_wanted", "main"]

ONE_SHOTS = ("snapshot", "check")
# The options of those commands that take a value (the next word is not the host).
VALUE_OPTIONS = frozenset(
    (
        "--config",
        "--timeout",
        "--window",
        "--scenario",
        "--demo-speed",
        "--demo-time",
        "--demo-seed",
    )
)


def early_agent_wanted(argv: Sequence[str]) -> bool:
    """Whether ``argv`` reads as ``snapshot local`` or ``check local`` (options anywhere)."""
    words: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--":
            return False  # what follows is not for the guess
        elif arg.startswith("-"):
            skip = arg in VALUE_OPTIONS
        else:
            words.append(arg)
    return len(words) == 2 and words[0] in ONE_SHOTS and words[1] == "local"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``gpumon`` command line on ``argv`` (default ``sys.argv[1:]``); its exit
    status. No early agent outlives it."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not early_agent_wanted(args):
        from .command_line import main as run

        return run(args)
    from gpumon.backends.transport import prestart

    prestart.start_agent()
    try:
        from .command_line import main as run

        return run(args)
    finally:
        prestart.discard()
