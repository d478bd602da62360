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
import glob
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpumon.backends import untrusted
from gpumon.backends.actions.run import JobTarget, Kept
from gpumon.backends.bundle.archive import BundleArchive
from gpumon.backends.bundle.build import BundleOptions, _archive, _finish
from gpumon.backends.bundle.collect import (
    _SERVER_PROCESS,
    Budget,
    _add_logs,
    _add_server_process,
    _command,
    _Deadlined,
    _python,
    _server_process,
    _within,
    add_environment,
    add_incident,
    add_monitor_state,
    add_sglang_page,
    add_smi,
    proxmox_container,
    py_spy_dumps,
)
from gpumon.backends.bundle.timeline import NoIncident, pick_incident
from gpumon.backends.config.workloads import JobConfig
from gpumon.backends.model import ProcessSource, iso_time
from gpumon.backends.monitor import HostMonitor, snapshot_json
from gpumon.backends.parsers.flight_recorder import FrReport, analyze
from gpumon.backends.parsers.processes import holder_text
from gpumon.backends.parsers.sglang_log import watchdog_dumps
from gpumon.backends.paths import bundles_dir
from gpumon.backends.remote.agent import SGLANG_DEFAULT_PORT, is_sglang_server
from gpumon.backends.torchenv.flight_recorder import FrSetup, ask_dumps, job_setups

__all__ = ["keep_evidence"]

PIDS_MAX = 16  # py-spy dumps per job (a torchrun of 8 ranks and its launcher fit)
DUMPS_MAX = 64  # flight-recorder files read per prefix, the newest first
# The files each glob pattern matches (argv[3:]), regular ones only, the newest argv[2] of
# each, as long as their bytes fit in argv[1] (base64); one line of JSON.
_DUMPS = """
import base64, glob, json, os, stat, sys
room, most, out, seen = int(sys.argv[1]), int(sys.argv[2]), [], set()
for pattern in sys.argv[3:]:
    paths = glob.glob(pattern)
    def mtime(p):
        try:
            return os.stat(p).st_mtime
        except OSError:
            return 0
    for path in sorted(paths, key=mtime, reverse=True)[:most]:
        if path in seen:
            continue
        seen.add(path)
        item = {"path": os.fsencode(path).hex(), "pattern": pattern}
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
    alert: str | None = None,
    folder: Path | None = None,
    host_pids: tuple[int, ...] = (),
) -> Kept:
    """The evidence of ``job`` (its processes ``pids``, running now) in a bundle written
    to ``folder`` (default ``$XDG_STATE_HOME/gpumon/bundles``) within ``seconds``; what it
    kept, and the bundle's path. The bundle is of the incident of the alert ``alert``
    (its key) where given and still in the history, else of the job's newest incident.
    ``host_pids``: processes known only by their Proxmox host's PID (another
    container's, the host's own: ``K`` of one), whose stacks are taken on that host; the
    rest is of ``pids`` only (the watched container's). Raises OSError (the bundle
    cannot be written)."""
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
    try:
        if alert is not None:
            incident = pick_incident(monitor.alerts.history(), alert)
        else:
            incident = pick_incident(a for a in monitor.alerts.history() if a.job == job.name)
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
        gone = f"the alert {alert} is" if alert else f"no alert of {job.name} is"
        archive.missing("incident.json", f"{gone} in this gpumon's history")
    add_monitor_state(archive, monitor, snapshot_json(monitor, time.time()))
    add_environment(archive, monitor.host, None, options.version)

    remote = await _Deadlined.of(target.transport, budget)
    each = max(min(budget.left(), 10.0), 0.1)
    shown = list(pids[:PIDS_MAX])
    if len(pids) > PIDS_MAX:
        archive.missing("py-spy", f"{len(pids) - PIDS_MAX} more processes of the job not dumped")
    step("py-spy stacks")
    container = proxmox_container(monitor.host)
    stacks = await py_spy_dumps(
        archive,
        remote,
        shown,
        each,
        f"a process of {job.name}, before its stop",
        step,
        container=container,
        host_pids=_on_the_host(archive, monitor, host_pids[:PIDS_MAX]),
    )
    step("flight-recorder dumps")
    found = _Dumps()
    dumps = await _add_dumps(archive, remote, _python(monitor.host, remote), pids, each, found)
    named = _name_rank(archive, job, found)
    if named is not None:
        monitor.workloads.name_collective(job.name, named, monitor.alerts, time.time())
    step("SGLang server")
    await _add_sglang(archive, monitor, remote, pids, each)
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


def _on_the_host(
    archive: BundleArchive, monitor: HostMonitor, host_pids: Sequence[int]
) -> dict[int, str]:
    """``host_pids`` whose stacks the Proxmox host's py-spy can take now, each with whose
    it is in words ("CT 201 jupyter-lab"); each other one said in the index: the host is
    not reachable (its process list is not current), or there is no Proxmox host (the
    demo's host PIDs are made up)."""
    # whose, as the host-side list says it (the container's own view knows no container)
    listed = {
        p.host_pid: holder_text(p)
        for p in monitor.processes
        if p.host_pid is not None and p.source == ProcessSource.HOST
    }
    if proxmox_container(monitor.host) is None:
        demo = monitor.host.kind == "demo"
        why = "the simulated machine's host PIDs are made up" if demo else "no Proxmox host"
    elif not monitor.host_side_fresh():
        why = "the Proxmox host is not reachable now (its process list is not current)"
    else:
        why = None
    reach: dict[int, str] = {}
    for pid in host_pids:
        whose = listed.get(pid, "another container's or the host's process")
        if why is None:
            reach[pid] = whose
        else:
            archive.missing(f"py-spy-{pid}.txt", f"{whose}, host PID {pid}: not dumped: {why}")
    return reach


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
    if not pids:  # K of another container's process, or the host's own
        why = "no PID in the watched container to read them by (they are read there only)"
        archive.missing("flight-recorder", f"not read (nor an SGLang server's parts): {why}")
        return 0
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
    prefix_of = {glob.escape(p) + "*": p for p in prefixes}
    patterns = list(prefix_of)
    found = await _read_files(archive, target, python, patterns, DUMPS_MAX, step, "flight-recorder")
    if found is None:
        return 0
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
        size, prefix = item.get("size"), prefix_of.get(item["pattern"], "")
        about = (
            f"{path} ({size} bytes, written {iso_time(float(item.get('mtime') or 0))}): a "
            f"flight-recorder dump (prefix {prefix}), as PyTorch wrote it"
        )
        data = base64.b64decode(item["data"])
        added = archive.add(name, data, about, binary=True)
        kept += added
        rank = path[len(prefix) :] if prefix else ""
        if added and rank.isdigit() and int(rank) not in into.data:  # the newest per rank
            into.data[int(rank)] = data
            into.at[int(rank)] = float(item.get("mtime") or 0) or time.time()
    return kept


async def _read_files(
    archive: BundleArchive,
    target: _Deadlined,
    python: str,
    patterns: Sequence[str],
    most: int,
    step: float,
    name: str,
) -> list[dict[str, Any]] | None:
    """The files the glob ``patterns`` match on the target (the newest ``most`` of each),
    each read whole where it fits the room left (``_DUMPS``); None with ``name`` said
    missing where they could not be listed."""
    room = archive.room()
    argv = [python, "-c", _DUMPS, str(room), str(most), *patterns]
    listing = target.run(argv, timeout=step, max_bytes=room * 4 // 3 + 65536)
    result = await _within(archive, target.budget, name, listing)
    if result is None:
        return None
    if result.exit_code != 0 or result.cut:
        said = (result.stderr or "").strip().splitlines()
        why = said[-1] if said else f"exit {result.exit_code}"
        archive.missing(name, f"the files could not be read: {why}")
        return None
    found: list[dict[str, Any]] = untrusted.loads(result.stdout)
    return found


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


SERVERS_MAX = 4  # SGLang servers whose evidence one step keeps
# Each PID's ancestors (argv[1:], the PID itself first, at most 16 up, to PID 1): their
# command lines, as JSON. A scheduler's (``sglang::scheduler_TP0``) server is its launcher.
_ANCESTORS = """
import json, sys
out = []
for pid in sys.argv[1:]:
    chain, pid = [], int(pid)
    while pid > 1 and len(chain) < 16:
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                argv = [w.decode("utf-8", "replace") for w in f.read().split(b"\\0") if w]
            with open("/proc/%d/stat" % pid, "rb") as f:
                parent = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        chain.append({"pid": pid, "argv": argv})
        pid = parent
    out.append(chain)
print(json.dumps(out))
"""


def _flag(argv: Sequence[str], flag: str) -> str | None:
    """The last value of ``flag`` in ``argv`` (``--flag VALUE`` or ``--flag=VALUE``), as
    argparse reads SGLang's command line."""
    value = None
    for i, word in enumerate(argv):
        if word == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif word.startswith(flag + "="):
            value = word[len(flag) + 1 :]
    return value


async def _add_sglang(
    archive: BundleArchive,
    monitor: HostMonitor,
    target: _Deadlined,
    pids: Sequence[int],
    step: float,
) -> None:
    """``sglang/PORT-*`` of each SGLang server among ``pids`` (or their parents): its
    ``/server_info``, command line and log tail, the watchdog's dumps in that log
    (``PORT-watchdog.txt``) and the newest crash dump of its ``--crash-dump-folder``."""
    if not pids:
        return
    python = _python(monitor.host, target)
    read = _command_json(target, [python, "-c", _ANCESTORS, *map(str, pids)], step)
    chains: list[list[dict[str, Any]]] | None = await _within(
        archive, target.budget, "sglang", read
    )
    servers: dict[int, list[str]] = {}
    for chain in chains or ():
        for proc in chain:
            argv = [str(w) for w in proc.get("argv", [])]
            if is_sglang_server(argv):
                servers.setdefault(int(proc["pid"]), argv)
                break
    known = sorted(monitor.workloads.sglang)
    for pid, argv in sorted(servers.items())[:SERVERS_MAX]:
        given = _flag(argv, "--port")
        port = (
            int(given)
            if given and given.isdigit()
            else (known[0] if len(known) == 1 else SGLANG_DEFAULT_PORT)
        )
        name = f"sglang/{port}"
        await add_sglang_page(archive, monitor.host, target, port, "server_info", "json", step)
        found = await _within(
            archive,
            target.budget,
            f"{name}-command.txt",
            _server_process(target, [python, "-c", _SERVER_PROCESS, str(pid)], step),
        )
        if found is not None:
            text = await _add_server_process(archive, target, python, name, pid, found)
            if text is not None:
                _add_watchdog(archive, name, text)
        folder = _flag(argv, "--crash-dump-folder")
        if folder:
            await _add_crash_dump(archive, target, python, name, pid, folder, step)


def _add_watchdog(archive: BundleArchive, name: str, log: str) -> None:
    dumps = watchdog_dumps(log)
    if not dumps:
        archive.missing(f"{name}-watchdog.txt", "no watchdog dump in the tail of its log")
        return
    text = "\n\n".join("\n".join(lines) for lines in dumps) + "\n"
    about = (
        f"the {len(dumps)} watchdog dump{'s' * (len(dumps) != 1)} in the tail of its log "
        f"({name}-log.txt): debug info, schedulers' stacks, the timeout line"
    )
    archive.add(f"{name}-watchdog.txt", text, about)


async def _add_crash_dump(
    archive: BundleArchive,
    target: _Deadlined,
    python: str,
    name: str,
    pid: int,
    folder: str,
    step: float,
) -> None:
    """The newest ``crash_dump_<time>.pkl`` SGLang wrote into ``--crash-dump-folder``
    (TokenizerManager.dump_requests_before_crash: ``FOLDER/HOSTNAME/crash_dump_%Y-%m-%d_
    %H-%M-%S.pkl``), byte for byte; a relative folder is the server's working directory's."""
    base = folder if folder.startswith("/") else f"/proc/{pid}/cwd/{folder}"
    root = glob.escape(base.rstrip("/") or "/")
    patterns = [f"{root}/*/crash_dump_*.pkl", f"{root}/crash_dump_*.pkl"]
    found = await _read_files(archive, target, python, patterns, 1, step, f"{name}-crash-dump")
    if found is None:
        return
    if not found:
        archive.missing(
            f"{name}-crash-dump",
            f"no crash_dump_*.pkl in {folder} (SGLang writes one when it crashes or is "
            "stopped with requests in flight)",
        )
        return
    item = max(found, key=lambda i: float(i.get("mtime") or 0))
    path = bytes.fromhex(item["path"]).decode("utf-8", "backslashreplace")
    kept = f"{name}-{os.path.basename(path)}"
    if "data" not in item:
        archive.missing(kept, f"left out: {path}: {item.get('error', 'not read')}")
        return
    about = (
        f"{path} ({item.get('size')} bytes, written {iso_time(float(item.get('mtime') or 0))}):"
        " the server's newest crash dump (--crash-dump-folder), as SGLang wrote it (a pickle:"
        " load it only where you trust it)"
    )
    archive.add(kept, base64.b64decode(item["data"]), about, binary=True)


async def _command_json(target: _Deadlined, argv: Sequence[str], step: float) -> Any:
    text, _ = await _command(target, argv, step)
    return untrusted.loads(text)
