"""What a snapshot says of the servers a test started, on a machine others share.

Discovery reads this machine's ``/proc`` (the test sshd's sessions run here): a parallel
worker's stand-in SGLang or vLLM servers, or a user's own ``gpumon demo``, are found too,
and what they did not answer in time is in ``incomplete``. A test owns its ports only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

PORT = re.compile(r":(\d+)")


def own_incomplete(incomplete: Sequence[str], ports: Iterable[int]) -> list[str]:
    """The entries of a snapshot's ``incomplete`` that are this test's: those naming no
    port ("host processes: no answer in 10 s") and those naming one of ``ports``."""
    mine = {str(p) for p in ports}
    return [i for i in incomplete if not PORT.search(i) or set(PORT.findall(i)) & mine]
