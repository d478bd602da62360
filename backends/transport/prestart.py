"""gpumon's programs on the machine gpumon itself runs on: run from the installed modules,
and the agent started before the rest of gpumon is imported.

Over SSH the agent's source is shipped and compiled on every start (``remote.bootstrap``).
On the local machine with gpumon's own interpreter the modules are already here, with
their compiled ``.pyc``: ``LOADER`` imports them from gpumon's ``backends/remote``
folder as the package ``gpumon_remote`` (the names the shipped modules get), and reads
the program's arguments as one JSON line from stdin, so the argv (``installed_argv``) does
not depend on the config and the process can start before the config is read.

``start_agent`` is what ``gpumon check local`` calls first thing
(``tui.cli.launch``): the agent's interpreter starts and imports its modules while gpumon
imports its own, on the other core. ``LocalTransport`` adopts it (``take``) when it is
about to start exactly that argv; ``discard`` ends one nobody adopted.

Light at import time on purpose (no asyncio, no ``gpumon.backends.remote``): it runs
before everything else. Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence

__all__ = [
    "AGENT_FLAGS",
    "LOADER",
    "REMOTE_DIR",
    "discard",
    "installed_argv",
    "start_agent",
    "take",
]

# The interpreter flags the agent runs with: -u, its lines leave at once; -S, no site
# processing at start-up (a venv's .pth files import much the agent never uses: 2-5 MiB
# of RSS); the agent finds pynvml itself (``remote.agent.import_nvml``).
AGENT_FLAGS = ("-u", "-S")
# gpumon's ``backends/remote`` folder (``gpumon.backends.remote``; not imported here:
# its ``__init__`` loads the agent's modules, 20 ms).
REMOTE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "remote")
# Python 3.8 syntax, like what ``remote.bootstrap`` runs. The package is named as the
# bootstrap names it (the doctor tells gpumon's programs by "gpumon_remote" before the
# tag, ``doctor_probe_fs.is_gpumon_program``); its ``__init__`` is not run. A program's
# ``prepare()`` (the agent's: NVML opened) runs before the arguments are read, so a
# prestarted agent does that while gpumon imports. Stdin closed before the arguments
# came: the client is gone, nothing to do.
LOADER = "\n".join(
    [
        "import sys, types",
        "tag, where, name = sys.argv[1], sys.argv[2], sys.argv[3]",
        "pkg = types.ModuleType('gpumon_remote')",
        "pkg.__path__ = [where]",
        "sys.modules[pkg.__name__] = pkg",
        "__import__(pkg.__name__ + '.' + name)",
        "mod = sys.modules[pkg.__name__ + '.' + name]",
        "prepare = getattr(mod, 'prepare', None)",
        "if prepare is not None:",
        "    prepare()",
        "import json",
        "line = sys.stdin.buffer.readline()",
        "if not line:",
        "    sys.exit(0)",
        "sys.argv = [tag] + json.loads(line)",
        "mod.main(sys.argv)",
    ]
)


def installed_argv(python: str, main: str, flags: Sequence[str] = ()) -> list[str]:
    """The argv that runs the installed module ``main`` of ``backends/remote`` with
    ``python`` and ``flags``; its arguments go to its stdin as one JSON list and a newline
    (``json.dumps(args)``). Its argv[0] inside is ``gpumon-MAIN``, as shipped
    (``remote.bootstrap.program_tag``)."""
    return [python, *flags, "-c", LOADER, f"gpumon-{main}", REMOTE_DIR, main]


class _Started:
    """A child started before the event loop: its argv and its process."""

    def __init__(self, argv: list[str], proc: subprocess.Popen[bytes]) -> None:
        self.argv = argv
        self.proc = proc


_started: list[_Started] = []
_lock = threading.Lock()


def start_agent() -> list[str] | None:
    """Start the agent as ``LocalTransport`` would start it on gpumon's own interpreter
    (same argv, pipes, own session) and keep it for ``take``; returns its argv, or None
    when it could not start (the normal start then runs and reports why)."""
    argv = installed_argv(sys.executable, "agent", AGENT_FLAGS)
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError:
        return None
    with _lock:
        _started.append(_Started(argv, proc))
    return argv


def take(argv: Sequence[str]) -> subprocess.Popen[bytes] | None:
    """The started child whose argv is exactly ``argv`` (it is then the caller's to
    end), or None."""
    wanted = list(argv)
    with _lock:
        for i, started in enumerate(_started):
            if started.argv == wanted and started.proc.poll() is None:
                return _started.pop(i).proc
    return None


def discard() -> int:
    """End every started child nobody took (its stdin closed, its process group killed,
    reaped); returns how many there were."""
    with _lock:
        left = list(_started)
        _started.clear()
    for started in left:
        proc = started.proc
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            with contextlib.suppress(OSError):
                if pipe is not None:
                    pipe.close()
        if proc.poll() is None:  # reaped already: its PID may be another's by now
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return len(left)
