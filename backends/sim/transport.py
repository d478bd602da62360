"""``SimTransport``: the built-in simulated CT200 behind the ``demo`` host."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from gpumon.backends.config.load import HostConfig
from gpumon.backends.config.workloads import JobConfig, SglangConfig, VllmConfig
from gpumon.backends.transport.base import RUN_MAX_BYTES, RunResult, TransportError
from gpumon.backends.transport.local import LocalTransport, kill_group

# remote.bootstrap.program_tag("doctor_probe"), spelled out: importing remote here would
# slow every demo start (a unit test holds them equal)
PROBE_TAG = "gpumon-doctor_probe"
SERVERS_START_S = 30.0  # the simulated SGLang servers' (and drafter's) start-up, loaded


class SimTransport(LocalTransport):
    """The simulated CT200: a local transport with the simulator's nvidia-smi on PATH.

    In the ``training-oom`` scenario it also runs the simulated drafter job, which writes
    its progress log (``job_log``) and dies of CUDA OOM at the scenario's OOM time. The job
    is started like any gpumon job (``jobs.launch_job``, detached, PID record in
    ``job_state_dir``), so ``drafter_job()`` can be restarted; a restarted run records its
    restart in the simulator's state dir and the simulated GPUs fill up again.
    """

    job_launch_method = "setsid"  # never a tmux session on the user's own tmux server

    def __init__(self, host: HostConfig, settings: Any) -> None:
        from gpumon.backends.sim.host_proc import write_ct_proc_tree, write_proc_tree
        from gpumon.backends.sim.wrapper import write_job_wrapper, write_kill_wrapper, write_wrapper

        self.root = Path(tempfile.mkdtemp(prefix="gpumon-sim-"))
        bin_dir, state = self.root / "bin", self.root / "state"
        bin_dir.mkdir()
        state.mkdir()
        if settings.state_dir is None:
            settings = dataclasses.replace(settings, state_dir=str(state))
        self.settings = settings
        self.job_log = Path(settings.state_dir) / "drafter.log"
        self.job_state_dir = str(self.root / "jobs")
        write_wrapper(bin_dir, settings)
        write_kill_wrapper(bin_dir, settings)  # K on a simulated PID never reaches a real one
        self._job_wrapper = write_job_wrapper(bin_dir, settings)
        self._job_started = False
        self._servers: asyncio.subprocess.Process | None = None
        from gpumon.backends.sim.scenario import SGLANG_SCENARIOS

        sglang = settings.scenario in SGLANG_SCENARIOS
        self._ports_claim: int | None = None  # the flock on the usual ports, while held
        self.vllm_ports: tuple[int, ...] = ()
        if sglang:
            self.sglang_ports, self._ports_claim = _sglang_ports()
        else:
            self.sglang_ports = ()
        if settings.scenario == "vllm":  # GPUs VLLM_GPUS serve vLLM instead of SGLang
            from gpumon.backends.sim.scenario import VLLM_GPUS

            first = VLLM_GPUS[0]
            self.sglang_ports = self.sglang_ports[:first]
            self.vllm_ports = _free_ports(len(VLLM_GPUS), avoid=self.sglang_ports)
        # The simulated Proxmox host's /proc for its GPU PIDs, read by the host-side
        # collector: the servers' commands name the ports this demo got
        proc_root = write_proc_tree(
            self.root / "proc", settings.t0 - 86400.0, self.sglang_ports, self.vllm_ports
        )
        env = dict(os.environ)
        env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
        if host.python == sys.executable:  # no python of the user's: the simulated venv's
            from gpumon.backends.sim.venv import make_venv

            python, index = make_venv(self.root)  # d reads it, w swaps torch in it
            host = dataclasses.replace(host, python=python, torch_index=index)
        super().__init__(host, env)
        self.host_proc_root = str(proc_root)
        # CT200's own /proc, where the agent's discovery finds the vLLM servers' processes
        # (in the state dir: the simulated kill takes a stopped server's out of it)
        from gpumon.backends.sim.scenario import scenario_time, stopped_vllm_servers
        from gpumon.backends.sim.state import (
            ct_proc_path,
            kernel_log_path,
            with_state,
            write_kernel_log,
        )

        now = scenario_time(settings, time.time())
        stopped = stopped_vllm_servers(with_state(settings), now)
        ct_proc = ct_proc_path(settings)
        assert ct_proc is not None  # the state dir is set above
        self.proc_root = str(write_ct_proc_tree(ct_proc, self.vllm_ports, stopped))
        # The machine the simulator runs on may be a container (a CI runner) whose other
        # processes hold /dev/nvidiaN (a real GPU job, a test's Proxmox stand-in): none of
        # them is the simulated CT200's.
        self.device_files = False
        # The simulated kernel log, its past written now (the agent reads from its end, as
        # from /dev/kmsg): never this machine's kernel log, whose Xids name other buses.
        write_kernel_log(settings, now)
        self.kernel_log_path = str(kernel_log_path(settings))

    @property
    def label(self) -> str:
        return f"simulator ({self.settings.scenario})"

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """The simulated CT 200 and its host are this machine: no ``pct exec``."""
        return list(argv)

    async def run(
        self,
        argv: Sequence[str],
        *,
        input: bytes | None = None,
        timeout: float = 30.0,
        on_host: bool = False,
        max_bytes: int = RUN_MAX_BYTES,
        keep_end: bool = False,
    ) -> RunResult:
        """As any transport; the doctor's probe answers for the simulated CT200, not for
        this machine (``sim.doctor``: its nvcc, libnvrtc, driver files, caches, disk)."""
        res = await super().run(
            argv,
            input=input,
            timeout=timeout,
            on_host=on_host,
            max_bytes=max_bytes,
            keep_end=keep_end,
        )
        if PROBE_TAG not in argv or res.exit_code != 0:
            return res
        from gpumon.backends.sim.doctor import simulated_probe_output

        return RunResult(res.exit_code, simulated_probe_output(res.stdout), res.stderr, res.cut)

    def drafter_job(self) -> JobConfig | None:
        """The simulated drafter as a restartable job (None outside ``TRAINING_SCENARIOS``)."""
        from gpumon.backends.sim.job import TOKENS_PER_STEP
        from gpumon.backends.sim.scenario import DRAFTER_GPUS, TRAINING_SCENARIOS

        if self.settings.scenario not in TRAINING_SCENARIOS:
            return None

        return JobConfig(
            name="drafter",
            gpus=DRAFTER_GPUS,
            log=str(self.job_log),
            start=self._drafter_command("--restarted"),
            stop_timeout=5.0,
            verify_s=3.0,
            # slow: its usual rate, and short enough for a 5-s check window to see it
            expect_tokens_per_s=TOKENS_PER_STEP if self.settings.scenario == "slow" else None,
            slow_for_s=3.0 if self.settings.scenario == "slow" else 300.0,
            env=self._drafter_env(),
        )

    def _drafter_env(self) -> Mapping[str, str]:
        """The stall's drafter records to the flight recorder and dumps on its timeout
        (``sim.job.write_dumps``) where the evidence step of ``r`` looks for them."""
        if self.settings.scenario != "stall":
            return MappingProxyType({})
        prefix = Path(self.settings.state_dir or self.root) / "flight-recorder" / "drafter_rank_"
        return MappingProxyType(
            {
                "TORCH_FR_BUFFER_SIZE": "2000",
                "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
                "TORCH_FR_DUMP_TEMP_FILE": str(prefix),
            }
        )

    def sglang_config(self) -> SglangConfig | None:
        """The simulated SGLang servers (``sglang`` scenario): one per GPU."""
        if not self.sglang_ports:
            return None
        log = str(Path(self.settings.state_dir) / "sglang-*.log")
        return SglangConfig(ports=self.sglang_ports, log=log, discover=False)

    def vllm_config(self) -> VllmConfig | None:
        """The simulated vLLM servers (``vllm`` scenario), their logs beside SGLang's;
        discovered too, as a real host's are (CT200's /proc, ``proc_root``): their API
        servers' PIDs and command lines are what a wedged engine's fixes say."""
        if not self.vllm_ports:
            return None
        log = str(Path(self.settings.state_dir) / "vllm-*.log")
        return VllmConfig(ports=self.vllm_ports, log=log)

    def _drafter_command(self, *flags: str) -> str:
        return shlex.join([str(self._job_wrapper), "--log", str(self.job_log), *flags])

    async def connect(self) -> None:
        if self.sglang_ports and self._servers is None:
            self._servers = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "gpumon.backends.sim.sglang_server",
                "--ports",
                ",".join(map(str, self.sglang_ports)),
                "--log",
                str(self.settings.state_dir),
                *(["--vllm-ports", ",".join(map(str, self.vllm_ports))] if self.vllm_ports else []),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
                env={**(self.env or {}), **self.settings.to_env()},
                start_new_session=True,
            )
            try:
                await self._servers_listening(self._servers)
            except TransportError:
                servers, self._servers = self._servers, None
                kill_group(servers.pid)
                await servers.wait()
                raise
        job = self.drafter_job()
        if job is not None and not self._job_started:
            from gpumon.backends.actions.jobs import JobError, launch_job

            self._job_started = True  # before the await: a second connect must not launch
            from gpumon.backends.sim.job import missed_bytes
            from gpumon.backends.sim.scenario import scenario_time

            now = scenario_time(self.settings, time.time())
            missed = missed_bytes(self.settings, job.name, now)
            try:
                await launch_job(self, job, self._drafter_command())
            except JobError as e:
                raise TransportError(f"the simulated drafter did not start: {e}") from e
            await self._drafter_caught_up(missed)

    async def _drafter_caught_up(self, missed: int) -> None:
        """Wait for the drafter's log to hold the ``missed`` bytes it writes at its start
        (what it logged before gpumon came): gpumon's first read must find them as the
        log's backlog. On a loaded machine its interpreter takes seconds to start, and a
        CUDA OOM of the past read after that first read is a live one: a fresh incident."""
        deadline = time.monotonic() + SERVERS_START_S
        while not self.job_log.exists() or self.job_log.stat().st_size < missed:
            if time.monotonic() > deadline:
                raise TransportError(
                    f"the simulated drafter did not write its past to {self.job_log} in "
                    f"{SERVERS_START_S:.0f} s"
                )
            await asyncio.sleep(0.05)

    async def _servers_listening(self, servers: asyncio.subprocess.Process) -> None:
        """Wait for the simulated servers' one start-up line: they listen once it is
        printed. The first poll must find them up (on a loaded machine the interpreter
        takes seconds to start, and a refused connection reads as a server that is
        down), and a server that cannot listen is said, not left to look dead."""
        assert servers.stdout is not None
        try:
            line = await asyncio.wait_for(servers.stdout.readline(), SERVERS_START_S)
        except TimeoutError:
            line = b""
        text = line.decode(errors="replace").strip()
        if not text.startswith("gpumon-sim-sglang: serving"):
            why = text.removeprefix("gpumon-sim-sglang: ") or (
                f"no answer in {SERVERS_START_S:.0f} s"
            )
            raise TransportError(f"the simulated SGLang servers did not start: {why}")

    async def dispose(self) -> None:
        """Stop the simulated servers and drafter and remove the simulator's files.

        (``close`` between reconnects keeps them: the machine does not vanish when a
        session ends.)"""
        servers, self._servers = self._servers, None
        if servers is not None and servers.returncode is None:
            kill_group(servers.pid)
            await servers.wait()
        job = self.drafter_job()
        if job is not None and self._job_started:
            from gpumon.backends.actions.jobs import JobError, signal_job

            with contextlib.suppress(JobError, OSError):
                await signal_job(self, job, "KILL")
        claim, self._ports_claim = self._ports_claim, None
        if claim is not None:
            os.close(claim)  # the usual ports are free for the next demo
        shutil.rmtree(self.root, ignore_errors=True)


PORTS_CLAIM_DIR = "/tmp"  # fixed: every demo on the machine must see the same claim
USUAL_SGLANG_PORT = 30000  # SGLang's default --port: the demo's servers take 30000-30007


def _sglang_ports(count: int = 8) -> tuple[tuple[int, ...], int | None]:
    """SGLang's usual 30000-30007 when they are free here and no other demo claimed them,
    else any free ports; with the claim (an open file holding ``flock``, None without).

    Two demos that start at the same moment (two test workers, two terminals) both found
    the usual ports free before either listened, and the second one's servers could not
    listen; the claim, held for the demo's life (released by ``dispose`` or the exit),
    gives them to one."""
    import fcntl
    import socket

    base = USUAL_SGLANG_PORT

    def free(port: int) -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) != 0

    claim: int | None = None
    with contextlib.suppress(OSError):
        path = os.path.join(PORTS_CLAIM_DIR, f"gpumon-sim-ports-{base}.lock")
        claim = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(claim, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(claim)
            claim = None
    if claim is not None and all(free(p) for p in range(base, base + count)):
        return tuple(range(base, base + count)), claim
    if claim is not None:
        os.close(claim)
    return _free_ports(count), None


def _free_ports(count: int, avoid: Sequence[int] = ()) -> tuple[int, ...]:
    """``count`` ports free here now (the kernel's picks), none of ``avoid``."""
    import socket

    socks: list[socket.socket] = []
    try:
        while len(socks) < count:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            if s.getsockname()[1] in avoid:
                s.close()
                continue
            socks.append(s)
        return tuple(sorted(s.getsockname()[1] for s in socks))
    finally:
        for s in socks:
            s.close()
