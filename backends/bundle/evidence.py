"""Keeping the evidence before an action ends a job (``keep_evidence``, the restart's
evidence step): what only the running processes know goes first, then what the stop
changes, into a bundle of the job's incident (``gpumon bundle``'s scrubbing and bounds):

1. ``py-spy-PID.txt``: the Python stacks of every process of the job, where ``py-spy`` is
   on the target (never installed);
2. ``flight-recorder/NAME``: the collective flight recorder's dump files the job already
   wrote (their prefix from each process's environment, else PyTorch's defaults:
   ``torchenv.flight_recorder``), byte for byte, and ``flight-recorder/analysis.txt``: the
   rank that never arrived, read from them (``parsers.flight_recorder``), which the job's
   ``job_stalled`` then names;
3. ``nvidia-smi-q.txt`` and ``logs/*``: the GPUs' health sections and the followed logs'
   tails, as ``gpumon bundle`` reads them.

Before 2 reads the files, each rank whose job set a debug pipe is asked for a dump now
through it, and the new files are waited for (half the time left at most): a hung job
that never timed out still leaves its record.

All within the seconds given, less the time to write the file; a step the time cuts is
said in the index, and the bundle written with what came.
"""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpumon.backends import untrusted
from gpumon.backends.actions.run import JobTarget, Kept
from gpumon.backends.bundle.archive import BundleArchive
from gpumon.backends.bundle.build import BundleOptions, _archive, _finish
from gpumon.backends.bundle.collect import (
    Budget,
    _add_logs,
    _Deadlined,
    _python,
    _within,
    add_environment,
    add_incident,
    add_monitor_state,
    add_smi,
    py_spy_dumps,
)
from gpumon.backends.bundle.timeline import NoIncident, pick_incident
from gpumon.backends.config.workloads import JobConfig
from gpumon.backends.model import iso_time
from gpumon.backends.monitor import snapshot_json
from gpumon.backends.parsers.flight_recorder import FrReport, analyze
from gpumon.backends.paths import bundles_dir
from gpumon.backends.torchenv.flight_recorder import FrSetup, ask_dumps, job_setups

__all__ = ["keep_evidence"]

PIDS_MAX = 16  # py-spy dumps per job (a torchrun of 8 ranks and its launcher fit)
DUMPS_MAX = 64  # flight-recorder files read per prefix, the newest first
# The files each prefix names (argv[3:], each a prefix: PREFIX*), regular ones only, the
# newest argv[2] of each, as long as their bytes fit in argv[1] (base64); one line of JSON.
_DUMPS = """
import base64, glob, json, os, stat, sys
room, most, out, seen = int(sys.argv[1]), int(sys.argv[2]), [], set()
for prefix in sys.argv[3:]:
    paths = glob.glob(glob.escape(prefix) + "*")
    def mtime(p):
        try:
            return os.stat(p).st_mtime
        except OSError:
            return 0
    for path in sorted(paths, key=mtime, reverse=True)[:most]:
        if path in seen:
            continue
        seen.add(path)
        item = {"path": os.fsencode(path).hex(), "prefix": prefix}
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        except OSError as e:
            item["error"] = e.strerror or type(e).__name__
            out.append(item)
            continue
        try:
            st = os.fstat(fd)
            item["size"], item["mtime"] = st.st_size, st.st_mtime
            if not stat.S_ISREG(st.st_mode):
                item["error"] = "not a regular file"
            elif st.st_size > room:
                item["error"] = "too large for what is left of the bundle"
            else:
                data = b""
                while len(data) < st.st_size:
                    chunk = os.read(fd, st.st_size - len(data))
                    if not chunk:
                        break
                    data += chunk
                room -= len(data)
                item["data"] = base64.b64encode(data).decode()
        finally:
            os.close(fd)
        out.append(item)
print(json.dumps(out))
"""


async def keep_evidence(
    target: JobTarget,
    job: JobConfig,
    pids: tuple[int, ...],
    seconds: float,
    say: Callable[[str], None],
    *,
    folder: Path | None = None,
) -> Kept:
    """The evidence of ``job`` (its processes ``pids``, running now) in a bundle written
    to ``folder`` (default ``$XDG_STATE_HOME/gpumon/bundles``) within ``seconds``; what it
    kept, and the bundle's path. Raises OSError (the bundle cannot be written)."""
    monitor = target.monitor
    assert monitor is not None  # the run keeps no evidence without one
    t0 = time.monotonic()

    def step(what: str) -> None:
        say(f"{what} ({time.monotonic() - t0:.0f}/{seconds:g} s)")

    folder = folder or bundles_dir()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in f"{monitor.name}-{job.name}")
    options = BundleOptions(folder / f"gpumon-evidence-{safe[:80]}-{stamp}.tar.gz")
    # The file is written in the time left: a quarter of it, at most 3 s, is kept for that.
    budget = Budget.of(seconds - min(3.0, seconds / 4))
    alerts = [a for a in monitor.alerts.history() if a.job == job.name]
    try:
        incident = pick_incident(alerts)
        headline = incident.headline
    except NoIncident:
        incident, headline = None, f"{job.name} before a restart (no incident of it)"
    archive = _archive(
        f"gpumon evidence of {job.name} on {monitor.name}, kept before it was stopped, "
        f"{iso_time(time.time())}: {headline}",
        None,
        options,
    )
    if incident is not None:
        add_incident(archive, incident, [], None)
    else:
        archive.missing("incident.json", f"no alert of {job.name} in this gpumon's history")
    add_monitor_state(archive, monitor, snapshot_json(monitor, time.time()))
    add_environment(archive, monitor.host, None, options.version)

    remote = await _Deadlined.of(target.transport, budget)
    each = max(min(budget.left(), 10.0), 0.1)
    shown = list(pids[:PIDS_MAX])
    if len(pids) > PIDS_MAX:
        archive.missing("py-spy", f"{len(pids) - PIDS_MAX} more processes of the job not dumped")
    step("py-spy stacks")
    stacks = await py_spy_dumps(
        archive, remote, shown, each, f"a process of {job.name}, before its stop", step
    )
    step("flight-recorder dumps")
    found = _Dumps()
    dumps = await _add_dumps(archive, remote, _python(monitor.host, remote), pids, each, found)
    named = _name_rank(archive, job, found)
    if named is not None:
        monitor.workloads.name_collective(job.name, named, monitor.alerts, time.time())
    step("nvidia-smi -q")
    await add_smi(archive, monitor.host, remote, each)
    step("log tails")
    await _add_logs(archive, monitor, remote, each)
    result = _finish(archive, options, headline)
    lacks = sorted({name.split(" ")[0] for name, _ in result.missing})
    summary = (
        f"{stacks} py-spy stack{'s' * (stacks != 1)}, {dumps} flight-recorder "
        f"dump{'s' * (dumps != 1)}, {len(result.files)} files"
        + (f"; not kept: {', '.join(lacks)} (see its index.txt)" if lacks else "")
    )
    verdict = named.words(job.name) if named is not None and named.stuck is not None else None
    return Kept(str(result.path), summary, verdict)


@dataclass
class _Dumps:
    """The dumps read for the analysis: rank -> bytes and when each was written, and the
    job's processes' setups (their RANK -> PID)."""

    data: dict[int, bytes] = field(default_factory=dict)
    at: dict[int, float] = field(default_factory=dict)
    setups: list[FrSetup] = field(default_factory=list)


def _name_rank(archive: BundleArchive, job: JobConfig, found: _Dumps) -> FrReport | None:
    """``flight-recorder/analysis.txt``: the rank that never arrived, from the dumps kept
    (gpumon's own reading: PyTorch's analyzer fails on Gloo's dumps, docs/formats.md 8.1);
    None where no dump came."""
    if not found.data:
        return None
    pids: dict[int, int] = {}
    for s in found.setups:
        rank = s.env.get("RANK", "")
        if rank.isdigit():
            pids.setdefault(int(rank), s.pid)
    # a rank's own GPU: local rank k on the k-th of the job's GPUs (one host's ranks)
    gpus = {r: job.gpus[r] for r in set(pids) | set(found.data) if r < len(job.gpus)}
    world = sorted(set(pids) | set(found.data)) or None
    report = analyze(found.data, world=world, pids=pids, gpus=gpus, at=found.at)
    lines = [report.words(job.name)]
    if report.detail():
        lines.append(report.detail())
    lines += ["", *report.table()]
    about = "which rank never arrived, read from the flight-recorder dumps by gpumon"
    archive.add("flight-recorder/analysis.txt", "\n".join(lines) + "\n", about)
    return report


async def _add_dumps(
    archive: BundleArchive,
    target: _Deadlined,
    python: str,
    pids: Sequence[int],
    step: float,
    into: _Dumps,
) -> int:
    """``flight-recorder/NAME``: the dump files of every prefix the job's processes name
    (or PyTorch's defaults where they name none); how many were kept. ``into`` gets
    each kept dump by its rank (the digits after its prefix) and the setups read."""
    read = job_setups(target, python, pids, step)
    setups: list[FrSetup] | None = await _within(archive, target.budget, "flight-recorder", read)
    if setups is None:
        return 0
    into.setups = setups
    prefixes = list(dict.fromkeys(p for s in setups if s.error is None for p in s.prefixes()))
    if not prefixes:
        why = "; ".join(f"PID {s.pid}: {s.error}" for s in setups)
        archive.missing("flight-recorder", f"the job's environment is unreadable: {why}")
        return 0
    await _ask_dumps(archive, target, python, setups, step)
    room = archive.room()
    argv = [python, "-c", _DUMPS, str(room), str(DUMPS_MAX), *prefixes]
    listing = target.run(argv, timeout=step, max_bytes=room * 4 // 3 + 65536)
    result = await _within(archive, target.budget, "flight-recorder", listing)
    if result is None:
        return 0
    if result.exit_code != 0 or result.cut:
        said = (result.stderr or "").strip().splitlines()
        why = said[-1] if said else f"exit {result.exit_code}"
        archive.missing("flight-recorder", f"the dumps could not be read: {why}")
        return 0
    found = untrusted.loads(result.stdout)
    if not found:
        archive.missing(
            "flight-recorder",
            f"no dump file: none at {', '.join(p + '*' for p in prefixes)} (the job wrote "
            "none: its flight recorder is off, or nothing timed out; `gpumon doctor` says)",
        )
        return 0
    kept = 0
    for item in found:
        path = bytes.fromhex(item["path"]).decode("utf-8", "backslashreplace")
        name = f"flight-recorder/{os.path.basename(path)}"
        if "data" not in item:
            archive.missing(name, f"left out: {path}: {item.get('error', 'not read')}")
            continue
        size = item.get("size")
        about = (
            f"{path} ({size} bytes, written {iso_time(float(item.get('mtime') or 0))}): a "
            f"flight-recorder dump (prefix {item['prefix']}), as PyTorch wrote it"
        )
        data = base64.b64decode(item["data"])
        added = archive.add(name, data, about, binary=True)
        kept += added
        rank = path[len(item["prefix"]) :]
        if added and rank.isdigit() and int(rank) not in into.data:  # the newest per rank
            into.data[int(rank)] = data
            into.at[int(rank)] = float(item.get("mtime") or 0) or time.time()
    return kept


async def _ask_dumps(
    archive: BundleArchive,
    target: _Deadlined,
    python: str,
    setups: Sequence[FrSetup],
    step: float,
) -> None:
    """The on-demand dump through each rank's debug pipe, within half the time left (the
    files are read after it); a rank that wrote none is said in the index."""
    wait = min(step, target.budget.left() / 2)
    ask = ask_dumps(target, python, setups, wait)
    answers = await _within(archive, target.budget, "flight-recorder pipes", ask)
    for answer in answers or ():
        if answer.error is not None:
            archive.missing(
                f"flight-recorder rank {answer.rank}",
                f"no dump on demand through {answer.pipe}: {answer.error}",
            )
