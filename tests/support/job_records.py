"""A job's PID record as the job-control script writes it on the target (``JOB.json``),
and the tests' cleanup of the jobs such records name."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path


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


def kill_recorded_jobs(folder: Path) -> None:
    """SIGKILL the process group of each job recorded in ``folder`` (``*.json``) whose
    leader is still the recorded process. PIDs wrap at 32,768 here, so a job that ended
    long ago may have left its number to another test's process, a session leader such
    as a test sshd: its start time (``proc_start``, field 22 of ``/proc/PID/stat``) tells
    them apart, as the job-control script's own ``read_record`` does."""
    for record in folder.glob("*.json"):
        with contextlib.suppress(ValueError, OSError, KeyError):
            data = json.loads(record.read_text())
            pid, pgid = int(data["pid"]), int(data["pgid"])
            stat = Path(f"/proc/{pid}/stat").read_text()
            start = stat.rsplit(")", 1)[1].split()[19]
            if start != str(data["proc_start"]) or pgid <= 1 or pgid == os.getpgid(0):
                continue  # ended, its PID taken by another process, or ours
            os.killpg(pgid, signal.SIGKILL)
