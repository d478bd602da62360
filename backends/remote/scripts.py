"""The job-control shell scripts that run on the target (``jobs/*.sh``, POSIX sh), as the
text gpumon passes to ``sh -c``.

A line that is exactly ``. ./NAME.sh`` is an include: the loader puts NAME.sh's text in its
place (the shared functions of ``funcs.sh``; the runner that ``launch.sh`` writes out on
the target). The files stay real scripts that ``sh -n`` and ``shellcheck -x`` check as they
are, and the target never needs gpumon's files.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

_PACKAGE = __name__.rpartition(".")[0]
_INCLUDE = re.compile(r"^\. \./([a-z_]+)\.sh$", re.MULTILINE)


@functools.cache
def job_script(name: str) -> str:
    """The text of ``jobs/NAME.sh`` with its includes in place (theirs too). Raises
    FileNotFoundError for a script the package does not ship."""
    text = (resources.files(_PACKAGE) / "jobs" / f"{name}.sh").read_text(encoding="utf-8")
    return _INCLUDE.sub(lambda m: job_script(m.group(1)).rstrip("\n"), text)


__all__ = ["job_script"]
