"""``/bin/sh`` wrappers that put the simulator on a PATH like the real tools.

``write_wrapper`` writes ``nvidia-smi``; ``write_job_wrapper`` writes ``gpumon-sim-job``. Each
exports the settings' ``GPUMON_SIM_*`` variables and execs this Python with the simulator
module, so anything that runs ``nvidia-smi`` (the agent, a shell over SSH) gets the
simulated machine with exactly these settings.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from gpumon.backends.sim.scenario import ENV_VARS, SimSettings

SMI_NAME = "nvidia-smi"
JOB_NAME = "gpumon-sim-job"


def _write_script(path: Path, settings: SimSettings, python: str, module: str) -> Path:
    lines = ["#!/bin/sh", "# gpumon simulator wrapper (generated)"]
    env = settings.to_env()
    lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]
    # a variable these settings leave unset must not leak in from the caller's environment
    unset = [k for k in ENV_VARS if k not in env]
    if unset:
        lines.append("unset " + " ".join(unset))
    lines.append(f'exec {shlex.quote(python)} -m {module} "$@"')
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tmp.chmod(0o755)
    tmp.replace(path)  # atomic: a client running the old script never sees half a file
    return path


def write_wrapper(bin_dir: Path, settings: SimSettings, python: str = sys.executable) -> Path:
    """Write an executable ``bin_dir/nvidia-smi`` for ``settings``; returns its path.

    Creates ``bin_dir`` if needed; replaces an existing wrapper. Raises OSError when the
    directory cannot be written.
    """
    bin_dir.mkdir(parents=True, exist_ok=True)
    return _write_script(bin_dir / SMI_NAME, settings, python, "gpumon.backends.sim.smi")


def write_job_wrapper(bin_dir: Path, settings: SimSettings, python: str = sys.executable) -> Path:
    """Write an executable ``bin_dir/gpumon-sim-job`` (the simulated training job)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    return _write_script(bin_dir / JOB_NAME, settings, python, "gpumon.backends.sim.job")


KILL_NAME = "kill"


def write_kill_wrapper(bin_dir: Path, settings: SimSettings, python: str = sys.executable) -> Path:
    """Write an executable ``bin_dir/kill``: the simulated machine's (``sim.kill``)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    return _write_script(bin_dir / KILL_NAME, settings, python, "gpumon.backends.sim.kill")
