"""The doctor's process-attribution verdicts: whether gpumon can see GPU processes from
the Proxmox host (host access), and whether the driver inside the container reports the
container's own PIDs (new drivers translate them) or the host's (old ones).

Both run ``remote.host_procs.SHELL_LOOP`` once (``once``): on the host outside ``pct`` for
the first, inside the container for the driver's own view.
"""

from __future__ import annotations

from typing import Any

from gpumon.backends.config.load import HostConfig
from gpumon.backends.remote.host_procs import SHELL_LOOP, ShellRound
from gpumon.backends.torchenv.checks import Check
from gpumon.backends.transport.base import Transport, TransportError

__all__ = ["process_checks"]

HOST_CHECK = "host processes"
PID_CHECK = "container PIDs"


async def _round(
    transport: Transport, host: HostConfig, *, on_host: bool
) -> tuple[list[dict[str, Any]], str | None]:
    proc = transport.host_proc_root if on_host else "/proc"
    argv = ["sh", "-c", SHELL_LOOP, "gpumon-host-procs", "1", host.nvidia_smi, proc, "once"]
    res = await transport.run(argv, timeout=60.0, on_host=on_host)
    rounds = ShellRound()
    for line in res.stdout.splitlines():
        done = rounds.feed(line)
        if done is not None:
            return done
    tail = (res.stderr or res.stdout).strip().splitlines()
    return [], f"no answer (exit {res.exit_code}): {tail[-1] if tail else 'no output'}"


async def process_checks(transport: Transport, host: HostConfig) -> list[Check]:
    """The two verdicts, never raising: an unreachable side is the verdict's evidence."""
    if host.container is None:
        return [Check(HOST_CHECK, "n/a", "no container configured: the processes are the host's")]
    host_records: list[dict[str, Any]] | None = None
    if host.host_processes is False:
        out = [Check(HOST_CHECK, "n/a", "host_processes = false in the config")]
    else:
        try:
            records, error = await _round(transport, host, on_host=True)
        except TransportError as e:
            records, error = [], str(e)
        if error is not None and not any(not r.get("error") for r in records):
            out = [
                Check(
                    HOST_CHECK,
                    "warning",
                    f"no host access: {error}; processes are listed from inside CT "
                    f"{host.container} (device files, memory per process unknown)",
                    "let gpumon's SSH user read every /proc on the Proxmox host (root, or "
                    "/proc mounted without hidepid) and reach nvidia-smi there",
                )
            ]
        else:
            host_records = records
            where = sorted({str(r.get("container") or "host") for r in records})
            out = [
                Check(
                    HOST_CHECK,
                    "ok",
                    f"host access: yes; {len(records)} GPU process(es) seen on the host"
                    + (f" (containers: {', '.join(where)})" if where else ""),
                )
            ]
    out.append(await _pid_check(transport, host, host_records))
    return out


async def _pid_check(
    transport: Transport, host: HostConfig, host_records: list[dict[str, Any]] | None
) -> Check:
    try:
        inside, error = await _round(transport, host, on_host=False)
    except TransportError as e:
        return Check(PID_CHECK, "n/a", f"the container did not answer: {e}")
    if not inside:
        why = error or "no GPU compute process runs now"
        return Check(PID_CHECK, "n/a", f"cannot tell: {why}")
    driver = {r["host_pid"] for r in inside}  # the driver's numbers, as seen inside
    resolve = {r["host_pid"] for r in inside if not r.get("error")}
    if host_records:
        ours = [r for r in host_records if r.get("container") == str(host.container)]
        inner = {r.get("pid") for r in ours}
        outer = {r.get("host_pid") for r in ours}
        if driver and driver <= inner and not driver & outer - inner:
            return Check(PID_CHECK, "ok", "driver translates PIDs into the container: yes")
        if driver & outer:
            return Check(
                PID_CHECK,
                "warning",
                "driver translates PIDs into the container: no (it reports host PIDs); "
                "gpumon maps them with the host-side list",
            )
    if resolve == driver:
        return Check(
            PID_CHECK,
            "ok",
            f"driver translates PIDs into the container: yes ({len(driver)} of "
            f"{len(driver)} resolve here)",
        )
    return Check(
        PID_CHECK,
        "warning",
        f"driver translates PIDs into the container: no ({len(driver) - len(resolve)} of "
        f"{len(driver)} PIDs are not processes here): without host access gpumon lists "
        "the holders of /dev/nvidiaN instead",
    )
