"""A job's PID record as the job-control script writes it on the target (``JOB.json``)."""

from __future__ import annotations

import json


def record_text(pid: int = 100, token: str = "t1") -> str:
    """The record of the drafter started by gpumon in tmux as ``pid`` (its own group and
    session), with run token ``token``, as JSON text."""
    return json.dumps(
        {
            "job": "drafter",
            "pid": pid,
            "pgid": pid,
            "sid": pid,
            "proc_start": "5",
            "started": 1,
            "method": "tmux",
            "session": "gpumon-drafter",
            "token": token,
            "log": "/l",
        }
    )
