"""The simulated machine's GPUs as a pure, deterministic function of scenario time.

The machine is CT200: 8 x RTX PRO 6000 Blackwell Server Edition. Eight scenarios (``SCENARIOS``):

- ``training-oom`` (default): GPUs 0-4 run the target side of a training job at full load;
  GPUs 5-7 run the drafter job (one process per GPU). GPU 6's memory ramps towards full
  and at ``OOM_AT`` the drafter dies of CUDA OOM: GPUs 5-7 release their memory, go idle
  (P8 a few seconds later) and the drafter processes disappear. A restart recorded at
  scenario time R (``restarts.json`` in the state dir, see ``state``) brings the drafter
  back: memory refills over ``REFILL_S`` to a steady level that does not OOM again.
  From ``JUPYTER_AT`` a "jupyter" in another container (CT 201) holds ``JUPYTER_MIB`` of
  GPU 6, taken out of what the drafter has there (so the drafter OOMs because someone
  else took memory); it holds it until it is killed (``kills`` in the state dir, the
  ``K`` key through ``sim.kill``): it is another container's process, so the drafter's
  death leaves it (and its 6 GiB) on GPU 6. A drafter restarted beside it settles at the
  same GPU total as without it (it fits). ``host_process`` is what the Proxmox host's
  /proc says of a simulated PID.
- ``sglang``: eight SGLang servers, one per GPU, steady and busy. At ``XID_AT`` the
  kernel log (``kernel_lines``) gets an Xid 63 on GPU ``XID_GPU``'s bus: a row of its
  memory marked for remapping at the next reset (the GPU goes on working), and from then
  on that GPU reports its row remapping pending (``remapped_rows.pending`` Yes).
- ``idle``: the reference machine after a torch swap: the target side busy on GPUs 0-4
  and the drafter's processes alive on GPUs 5-7, holding their memory, but from
  ``IDLE_AT`` at 0-2 % utilisation (GPUs held and idle: ``gpu_idle_held``).
- ``stall``: the training-oom machine without the OOM and the jupyter: at ``STALL_AT`` the
  drafter's ranks hang in an all-reduce (its GPUs keep their memory and spin at 100 %
  utilisation at low power, NCCL's busy-wait) and its log stops; at ``STALL_TIMEOUT_AT``
  rank 1's NCCL watchdog prints its collective timeout (``sim.job``), and the hung
  processes stay. A restart brings a drafter that trains again.
- ``slow``: the reference machine's story after a torch swap: the drafter trains at
  ``SLOW_TOKENS_PER_S`` instead of its usual rate, its GPUs holding their memory at near
  0 % utilisation. A restart brings a drafter at its usual rate.
- ``hang``: the ``sglang`` machine, where at ``HANG_AT`` server 0 (port 30000, GPU 0)
  hangs in a collective: its decode counter and log stop with 37 requests running and
  the queue growing, and GPU 0 spins at 100 % utilisation on little power (an NCCL
  spin). At the same moment server 1 starts one long chunked prefill: its decode counter
  stands still too, but its prefill counter and ``Prefill batch`` lines move (not hung).
- ``vllm``: the ``sglang`` machine with vLLM servers on GPUs ``VLLM_GPUS`` (6 and 7)
  instead of SGLang's. At ``WEDGE_AT`` the first one's engine wedges behind a healthy
  API server: its generation counter stands still with its requests running and the
  queue growing, ``/health`` answers 200, and GPU 6 spins (``sim.vllm_model``). A vLLM
  server whose API server is killed (``kills`` in the state dir: the ``K`` its wedge's fix
  offers, through ``sim.kill``) is gone from then on (``vllm_stopped_at``): its API server
  and engine core leave CT 200's /proc, its engine core leaves its GPU, which goes idle,
  and its port refuses connections (``sim.sglang_server``).
- ``mig``: the target side busy on GPUs 0-4, GPUs 5-6 idle, and GPU ``MIG_GPU`` in MIG mode,
  split into three GPU instances (``MIG_INSTANCES``): a ``2g.48gb`` serving a model,
  steady; a ``1g.24gb`` whose fine-tuning job fills its 23.4 GiB from ``MIG_RAMP_AT``
  (its own time to full; the whole GPU stays half empty); an idle ``1g.24gb``. The GPU
  reports no utilisation (``[N/A]``, as real MIG GPUs do) and its used memory is the sum
  of its instances'.

Scenario time is ``(now - t0) * speed`` seconds, or ``frozen_at`` when set. A held clock
(``hold_file``, ``--demo-hold``) reads ``hold_at`` until that file exists and runs on from
there at its modification time: every part of the simulator (separate processes) reads the
same file, so they pause and resume together. Noise comes from
``random.Random(f"{seed}:{gpu}:{tick}")`` with ``tick`` the sample tick of scenario time, so
the same settings and time always give the same values. Standard library only.
"""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

SCENARIOS = (
    "training-oom",
    "sglang",
    "idle",
    "stall",
    "slow",
    "hang",
    "vllm",
    "mig",
)
TRAINING_SCENARIOS = ("training-oom", "stall", "slow")  # the ones that run the drafter job
# the machines of SGLang servers, one per GPU (vllm: GPUs VLLM_GPUS serve vLLM instead)
SGLANG_SCENARIOS = ("sglang", "hang", "vllm")
HANG_AT = 60.0  # scenario seconds at which server 0 of ``hang`` stops making tokens
VLLM_GPUS = (6, 7)  # vllm: one vLLM server on each
WEDGE_AT = 90.0  # vllm: the first vLLM server's engine wedges here (``sim.vllm_model``)
INIT_FAULTS = (  # nvidia-smi fails before printing anything (texts and codes live in smi.py)
    "driver_not_loaded",
    "version_mismatch",
    "nvml_unknown_error",
    "no_devices",
    "device_handle",
    "library_not_found",
)

ENV_VARS = tuple(
    f"GPUMON_SIM_{name}"
    for name in ("SCENARIO", "SEED", "SPEED", "T0", "FROZEN", "DIR", "FAULT", "HOLD", "HOLD_AT")
)

GPU_COUNT = 8
GPU_NAME = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
_BOARDS = (  # (uuid, PCI bus id) by index, as in fixtures query_gpu_8x_rtxpro6000.csv
    ("GPU-6a1f0c3e-2b9d-4c57-8e14-93d0a7b2c5f1", "00000000:18:00.0"),
    ("GPU-0d7e4b91-58a2-4f3c-b6e0-1c9a2f8d7e34", "00000000:2A:00.0"),
    ("GPU-b2c85f17-93e4-4a6d-a0f2-7e5c1d49b8a6", "00000000:3A:00.0"),
    ("GPU-41e9d3a8-6c0b-47f2-9d15-28ab6e0c3f97", "00000000:5D:00.0"),
    ("GPU-f37a2c60-0e1d-4b98-85c3-d46e9b17a2f0", "00000000:9A:00.0"),
    ("GPU-8c05e9d2-7a43-4e1b-9f6c-5b2d08e4a731", "00000000:AB:00.0"),
    ("GPU-2e94b7f1-c358-40da-8a67-e1f03c95d2b8", "00000000:BA:00.0"),
    ("GPU-95d3a06c-4f21-4c8e-b7a9-0a6e2f81c4d5", "00000000:DB:00.0"),
)
UUIDS = tuple(uuid for uuid, _ in _BOARDS)
BUS_IDS = tuple(bus_id for _, bus_id in _BOARDS)
MEMORY_TOTAL_MIB = 97887
MEMORY_RESERVED_MIB = 637
MEMORY_USABLE_MIB = MEMORY_TOTAL_MIB - MEMORY_RESERVED_MIB  # used + free on this board
POWER_LIMIT_W = 600.0
MAX_SM_CLOCK_MHZ = 3090
MEMORY_CLOCK_MHZ = 14001
IDLE_SM_CLOCK_MHZ = 180
IDLE_MEMORY_CLOCK_MHZ = 405
IDLE_TEMPERATURE_C = 34

DEFAULT_T0 = 1795962720.0  # 2026-11-29 14:32:00 UTC: used when GPUMON_SIM_T0 is not set
SAMPLE_PERIOD_S = 0.5  # noise changes once per sample tick of scenario time

TARGET_GPUS = (0, 1, 2, 3, 4)
DRAFTER_GPUS = (5, 6, 7)
OOM_GPU = 6
OOM_AT = 60.0  # scenario seconds at which the drafter dies of CUDA OOM
P8_AFTER_S = 5.0  # an idle GPU drops from P0 to P8 this long after its work ends
REFILL_S = 20.0  # a restarted drafter takes this long to fill its memory again
PROCESS_NAME = "/root/venv/bin/python3"
SGLANG_PROCESS_NAME = "sglang::scheduler_TP0"
# vLLM's engine core as set_process_title names it (vllm/v1/engine/core.py, 0.34.0:
# "EngineCore" after VLLM_PROCESS_NAME_PREFIX "VLLM"); with one GPU it holds the model
VLLM_PROCESS_NAME = "VLLM::EngineCore"
VLLM_MODEL = "meta-llama/Llama-3.1-8B-Instruct"  # what the vllm scenario's servers serve

_TARGET_MEMORY = (84522, 84518, 84530, 84526, 84520)
_TARGET_TEMPERATURE = (76, 78, 74, 79, 73)
_TARGET_PIDS = (2418861, 2418862, 2418863, 2418864, 2418865)
_DRAFTER_PID = 2418873  # + (gpu - 5) for run 0; restarted runs get fresh PIDs
_RESTART_PID = 2433100  # + 100 * run + (gpu - 5)
_SGLANG_PID = 2419020  # + 168 * gpu
_VLLM_PID = 2421310  # + 168 * gpu (vllm: the engine cores of GPUs VLLM_GPUS)
# ... and their API servers, started first (the engine core is their child, spawned later)
VLLM_API_SERVER_BEFORE = 6
_DRAFTER_STEADY = {5: 86214, 6: 88100, 7: 86198}  # after a restart; 6 no longer OOMs
_RAMP_FROM, _RAMP_TO, _RAMP_POWER = 84500.0, 97160.0, 1.0  # GPU 6: 95% at ~40 s, 96% at 45 s
SLOW_TOKENS_PER_S = 4600.0  # slow: the drafter's rate after the swap
STALL_AT = 30.0  # stall: the drafter's last step
STALL_TIMEOUT_S = 60.0  # ... its NCCL timeout (TORCH_NCCL timeout=60 s in this story)
STALL_TIMEOUT_AT = STALL_AT + STALL_TIMEOUT_S
JUPYTER_AT = 32.0  # scenario seconds: someone starts a notebook on GPU 6 from CT 201
JUPYTER_GPU = 6
JUPYTER_MIB = 6144
JUPYTER_PID = 3187442  # the host's PID; 88 inside CT 201
JUPYTER_CONTAINER = 201
CONTAINER = 200  # the simulated machine is CT 200; its PIDs inside are the host's - 2418000
JUPYTER_COMMAND = "/usr/bin/python3 /usr/local/bin/jupyter-lab --no-browser --port 8888"
_SGLANG_MEMORY = (86870, 87120, 86940, 87310, 86650, 87480, 86990, 87240)
IDLE_AT = 30.0  # idle scenario: the drafter's GPUs go idle (memory still held) here
XID_AT = 90.0  # sglang: GPU 3's driver marks a row for remapping (Xid 63) here
XID_GPU = 3
DEMO_IDLE_HELD_AFTER_S = 60.0  # ... and the demo host says so after this (not 600 s)
MIG_GPU = 7
MIG_RAMP_AT = 20.0  # mig: the 1g.24gb instance's job starts filling it


class MigSlice(NamedTuple):
    """One simulated GPU instance (one compute instance each): ids, -L's profile, its
    MIG device UUID, memory, SMs (the RTX PRO 6000's 188 in four slices of 47), the
    process on it (None: idle), its steady used memory."""

    gi: int
    device: int  # the MIG device index
    profile: str
    uuid: str
    total_mib: int
    sm: int
    pid: int | None
    steady_mib: int


# The RTX PRO 6000 Blackwell Server Edition's MIG profiles (NVIDIA's MIG user guide,
# "Supported MIG Profiles": 1g.24gb, 2g.48gb, 4g.96gb; up to 4 instances)
MIG_INSTANCES = (
    MigSlice(
        1, 0, "2g.48gb", "MIG-5d1e27a4-8b3c-5f09-9e12-4a7b6c0d3e81", 47872, 94, 2419510, 40960
    ),
    MigSlice(5, 1, "1g.24gb", "MIG-a0c4e913-27d6-5b48-8f31-6e9d2b7c1a05", 23936, 47, 2419511, 9216),
    MigSlice(6, 2, "1g.24gb", "MIG-3f8b61c2-d9a7-5e04-b6c3-17e0f45a8d92", 23936, 47, None, 13),
)
MIG_COMMANDS = {
    2419510: f"{PROCESS_NAME} -m vllm.entrypoints.openai.api_server --port 8100",
    2419511: f"{PROCESS_NAME} finetune.py --lora --rank 0",
}


class Kill(NamedTuple):
    """A simulated process killed (``sim.kill``): the PID its ``kill`` named (the
    jupyter's host PID, a vLLM API server's PID inside CT 200) at scenario time ``at``."""

    pid: int
    at: float


@dataclass(frozen=True, slots=True)
class SimSettings:
    """Everything that determines what the simulated machine prints.

    ``t0`` is the local epoch second at which scenario time is 0; ``frozen_at`` (scenario
    seconds) stops the clock. ``hold_file`` holds it at ``hold_at`` (scenario seconds,
    reached at ``t0 + hold_at / speed``) until that file exists (``scenario_time``).
    ``restarts`` (scenario seconds) are read from ``state_dir`` by ``state.with_state``;
    they are not carried in the environment.
    Raises ValueError for an unknown scenario or fault, a speed that is not > 0, or a hold
    file without its time (or a time without its file).
    """

    scenario: str = "training-oom"
    seed: int = 0
    speed: float = 1.0
    t0: float = DEFAULT_T0
    frozen_at: float | None = None
    state_dir: str | None = None
    fault: str | None = None
    restarts: tuple[float, ...] = ()
    stops: tuple[float, ...] = ()  # the drafter was stopped (SIGTERM) at these times
    kills: tuple[Kill, ...] = ()  # the simulated processes killed, and when
    hold_file: str | None = None
    hold_at: float | None = None

    def __post_init__(self) -> None:
        if self.scenario not in SCENARIOS:
            raise ValueError(f"unknown simulator scenario {self.scenario!r}; known: {SCENARIOS}")
        if not (math.isfinite(self.speed) and self.speed > 0):
            raise ValueError(f"simulator speed must be > 0, got {self.speed!r}")
        if (self.hold_file is None) != (self.hold_at is None):
            raise ValueError("a held simulator clock needs both its file and its time")
        parse_fault(self.fault)

    def to_env(self) -> dict[str, str]:
        """The ``GPUMON_SIM_*`` variables that make ``from_env`` rebuild these settings."""
        env = {
            "GPUMON_SIM_SCENARIO": self.scenario,
            "GPUMON_SIM_SEED": str(self.seed),
            "GPUMON_SIM_SPEED": repr(self.speed),
            "GPUMON_SIM_T0": repr(self.t0),
        }
        if self.frozen_at is not None:
            env["GPUMON_SIM_FROZEN"] = repr(self.frozen_at)
        if self.state_dir is not None:
            env["GPUMON_SIM_DIR"] = self.state_dir
        if self.fault:
            env["GPUMON_SIM_FAULT"] = self.fault
        if self.hold_file is not None and self.hold_at is not None:
            env["GPUMON_SIM_HOLD"] = self.hold_file
            env["GPUMON_SIM_HOLD_AT"] = repr(self.hold_at)
        return env

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> SimSettings:
        """Settings from ``GPUMON_SIM_*`` variables; unset or empty ones take the defaults.

        A missing ``GPUMON_SIM_T0`` means ``DEFAULT_T0``, so output still depends only on
        the clock. Raises ValueError naming the variable when a value does not parse.
        """

        def get(name: str) -> str | None:
            return env.get(name, "").strip() or None

        def number(name: str, kind: type[int] | type[float] = float) -> float | None:
            text = get(name)
            try:
                value = None if text is None else kind(text)
            except ValueError:
                raise ValueError(f"{name}={text!r} is not {kind.__name__}") from None
            if value is not None and not math.isfinite(value):
                raise ValueError(f"{name}={text!r} is not a finite number")
            return value

        t0, speed, seed = (
            number("GPUMON_SIM_T0"),
            number("GPUMON_SIM_SPEED"),
            number("GPUMON_SIM_SEED", int),
        )
        return cls(
            scenario=get("GPUMON_SIM_SCENARIO") or "training-oom",
            seed=0 if seed is None else int(seed),
            speed=1.0 if speed is None else speed,
            t0=DEFAULT_T0 if t0 is None else t0,
            frozen_at=number("GPUMON_SIM_FROZEN"),
            state_dir=get("GPUMON_SIM_DIR"),
            fault=get("GPUMON_SIM_FAULT"),
            hold_file=get("GPUMON_SIM_HOLD"),
            hold_at=number("GPUMON_SIM_HOLD_AT"),
        )


# Stand-in health states (``GPUMON_SIM_FAULT`` tokens ``NAME:GPU``): what each makes the
# GPU report. The simulated GPUs are healthy without them.
HEALTH_FAULTS = (
    "pcie_x4",  # pcie.link.width.current 4 of pcie.link.width.max 16 (downtrained)
    "hw_slowdown",  # clocks_event_reasons.active has HwSlowdown (0x8)
    "thermal_slowdown",  # ... HwThermalSlowdown (0x40) and SwThermalSlowdown (0x20)
    "ecc_uncorrected",  # ecc.errors.uncorrected.volatile.total 2
    "ecc_corrected",  # ecc.errors.corrected.volatile.total grows 2 a second
    "row_pending",  # remapped_rows.pending Yes (a row waits for the next reset)
    "row_failure",  # remapped_rows.failure Yes
    "recovery_reset",  # gpu_recovery_action Reset
)


class FaultSpec(NamedTuple):
    init: str | None  # one of INIT_FAULTS: nvidia-smi prints its failure text and exits
    lost: frozenset[int]  # GPUs whose cells read [GPU is lost]
    xid_noise: bool  # loop output carries a kernel-style Xid line now and then
    health: frozenset[tuple[str, int]] = frozenset()  # (one of HEALTH_FAULTS, GPU)
    # GPUs whose row is nvidia-smi's "Unable to determine the device handle ..." instead
    no_handle: frozenset[int] = frozenset()


def parse_fault(fault: str | None) -> FaultSpec:
    """``GPUMON_SIM_FAULT`` (comma-separated: an init fault, ``gpu_lost:N``, ``no_handle:N``
    (GPU N's device handle cannot be had: its row is nvidia-smi's failure line),
    ``xid_noise``, a health state ``NAME:N`` of ``HEALTH_FAULTS``).

    Raises ValueError for an unknown token, a bad GPU number or two init faults.
    """
    init: str | None = None
    lost: set[int] = set()
    xid = False
    health: set[tuple[str, int]] = set()
    no_handle: set[int] = set()
    for token in (fault or "").split(","):
        token = token.strip()
        if not token:
            continue
        name, _, number = token.partition(":")
        per_gpu = number and (name in ("gpu_lost", "no_handle") or name in HEALTH_FAULTS)
        if per_gpu and (not number.isdigit() or int(number) >= GPU_COUNT):
            raise ValueError(f"bad simulator fault {token!r}: GPU 0..{GPU_COUNT - 1}")
        if token == "xid_noise":
            xid = True
        elif name == "gpu_lost" and number:
            lost.add(int(number))
        elif name == "no_handle" and number:
            no_handle.add(int(number))
        elif name in HEALTH_FAULTS and number:
            health.add((name, int(number)))
        elif token in INIT_FAULTS and init is None:
            init = token
        else:
            known = (
                *INIT_FAULTS,
                "gpu_lost:N",
                "no_handle:N",
                "xid_noise",
                *(f"{h}:N" for h in HEALTH_FAULTS),
            )
            raise ValueError(f"bad simulator fault {token!r}; known (one init fault): {known}")
    return FaultSpec(init, frozenset(lost), xid, frozenset(health), frozenset(no_handle))


@dataclass(frozen=True, slots=True)
class SimGpu:
    """One simulated GPU at one moment, in nvidia-smi's units (MiB, W, MHz, %, C)."""

    index: int
    pstate: str
    temperature_c: int
    utilization_pct: int
    memory_utilization_pct: int
    memory_used_mib: int
    power_w: float
    power_instant_w: float
    sm_clock_mhz: int
    memory_clock_mhz: int
    clocks_event_reasons: int
    # Health facts: a healthy GPU's unless a test sets a stand-in state (HEALTH_FAULTS).
    pcie_width: int = 16
    ecc_uncorrected: int = 0
    ecc_corrected: int = 0
    rows_pending: bool = False
    rows_failure: bool = False
    recovery_action: str = "None"
    mig: bool = False  # in MIG mode: no utilisation reported; memory is its slices'

    @property
    def uuid(self) -> str:
        return UUIDS[self.index]

    @property
    def bus_id(self) -> str:
        return BUS_IDS[self.index]

    @property
    def memory_free_mib(self) -> int:
        return MEMORY_USABLE_MIB - self.memory_used_mib


@dataclass(frozen=True, slots=True)
class SimProcess:
    """One compute process as nvidia-smi lists it (host PID, name, memory on one GPU)."""

    pid: int
    name: str
    used_memory_mib: int
    gpu_index: int

    @property
    def gpu_uuid(self) -> str:
        return UUIDS[self.gpu_index]

    @property
    def gpu_bus_id(self) -> str:
        return BUS_IDS[self.gpu_index]


def scenario_time(settings: SimSettings, now: float) -> float:
    """Scenario seconds at local epoch time ``now`` (``frozen_at`` when the clock is frozen;
    ``hold_at`` while it is held, and from its release on, on from there)."""
    if settings.frozen_at is not None:
        return settings.frozen_at
    t = (now - settings.t0) * settings.speed
    if settings.hold_at is None or t <= settings.hold_at:
        return t
    released = released_at(settings)
    if released is None:
        return settings.hold_at
    return settings.hold_at + max(now - released, 0.0) * settings.speed


def wall_time(settings: SimSettings, t: float) -> float:
    """The local epoch time at which scenario time ``t`` happens (inverse of scenario_time).
    A time after a hold that is not released yet has no wall time: the soonest it can
    come (were the clock let go now) stands in for it."""
    if settings.hold_at is None or t <= settings.hold_at:
        return settings.t0 + t / settings.speed
    released = released_at(settings)
    return (time.time() if released is None else released) + (t - settings.hold_at) / settings.speed


def released_at(settings: SimSettings) -> float | None:
    """When a held clock was let go: its hold file's modification time, not before the hold
    began (a file that was there already holds nothing); None while the file is missing
    (or without a hold)."""
    if settings.hold_file is None or settings.hold_at is None:
        return None
    try:
        made = os.stat(settings.hold_file).st_mtime
    except OSError:
        return None
    return max(made, settings.t0 + settings.hold_at / settings.speed)


def held(settings: SimSettings) -> bool:
    """Whether the scenario clock waits for its hold file now."""
    return settings.hold_file is not None and released_at(settings) is None


def sample_tick(t: float) -> int:
    """The integer noise tick of scenario time ``t``."""
    return math.floor(t / SAMPLE_PERIOD_S)


class DrafterRun(NamedTuple):
    number: int  # 0: the run that was going at t=0; n: started by the n-th restart
    start: float  # scenario time it started (-inf for run 0)


def drafter_run(settings: SimSettings, t: float) -> DrafterRun | None:
    """The drafter run alive at scenario time ``t``, or None when it is dead (after the
    OOM, or stopped and not started again)."""
    if settings.scenario not in TRAINING_SCENARIOS:
        return None
    started = [r for r in sorted(settings.restarts) if r <= t]
    stopped = max((s for s in settings.stops if s <= t), default=-math.inf)
    if started and started[-1] >= stopped:
        return DrafterRun(len(started), started[-1])
    if started or stopped > -math.inf:
        return None
    alive = t < OOM_AT or settings.scenario != "training-oom"  # only training-oom OOMs
    return DrafterRun(0, -math.inf) if alive else None


def stalled(settings: SimSettings, t: float, run: DrafterRun | None) -> bool:
    """Whether the drafter's ranks hang in a collective at ``t`` (``stall``, run 0)."""
    return settings.scenario == "stall" and run is not None and run.number == 0 and t >= STALL_AT


def jupyter_alive(settings: SimSettings, t: float) -> bool:
    """Whether the foreign jupyter holds GPU 6 at scenario time ``t`` (training-oom only:
    from ``JUPYTER_AT`` until it is killed; the drafter's death does not end it)."""
    if settings.scenario != "training-oom" or t < JUPYTER_AT:
        return False
    return not jupyter_killed(settings, t)


def jupyter_killed(settings: SimSettings, t: float) -> bool:
    """The jupyter was killed by ``t`` (what it held of GPU 6 is free again)."""
    return settings.scenario == "training-oom" and any(
        k.pid == JUPYTER_PID and JUPYTER_AT <= k.at <= t for k in settings.kills
    )


def vllm_stopped_at(settings: SimSettings, index: int, t: float) -> float | None:
    """When vLLM server ``index`` (on GPU ``VLLM_GPUS[index]``) was stopped, by ``t``: the
    first kill of its API server (``vllm_api_pid``); None while it runs (scenario
    ``vllm`` only)."""
    if settings.scenario != "vllm" or not 0 <= index < len(VLLM_GPUS):
        return None
    api = vllm_api_pid(index)
    return min((k.at for k in settings.kills if k.pid == api and k.at <= t), default=None)


def drafter_died_at(settings: SimSettings, t: float) -> float:
    """When the drafter's current dead spell began: its OOM, or the last stop before ``t``."""
    return max((s for s in settings.stops if s <= t), default=OOM_AT)


class _Load(NamedTuple):
    util: tuple[int, int]
    mem_util: tuple[int, int]
    power: tuple[float, float]
    temperature: tuple[int, int]
    sm_clock: tuple[int, int]


_TARGET_LOAD = _Load((97, 100), (40, 48), (570.0, 600.0), (72, 79), (2480, 2610))
_DRAFTER_LOAD = {
    5: _Load((28, 45), (10, 14), (230.0, 262.0), (57, 59), (2700, 2760)),
    6: _Load((65, 78), (27, 31), (400.0, 440.0), (65, 67), (2640, 2680)),
    7: _Load((18, 35), (6, 9), (185.0, 215.0), (54, 56), (2720, 2770)),
}
_STARVED_LOAD = _Load((0, 3), (0, 1), (58.0, 66.0), (40, 42), (2700, 2760))
_NCCL_SPIN_LOAD = _Load((100, 100), (0, 1), (105.0, 125.0), (48, 50), (2700, 2760))
_SGLANG_LOAD = _Load((90, 100), (55, 70), (450.0, 590.0), (65, 78), (2520, 2700))
# A rank spinning in an NCCL kernel that waits for a peer: 100 % "utilisation" (a kernel
# is resident), almost no memory traffic, a fraction of the power of real work.
_NCCL_SPIN = _Load((100, 100), (0, 1), (105.0, 125.0), (48, 52), (2520, 2700))
_IDLE_POWER = (30.0, 40.0)
# Held and idle: the drafter's memory stays, its kernels do not run (a process blocked on
# the CPU side: a data loader, a lock, a mis-built torch falling back to slow paths).
_MIG_LOAD = _Load((0, 0), (0, 0), (210.0, 240.0), (48, 52), (2400, 2500))  # util not reported
_HELD_IDLE_LOAD = _Load((0, 2), (0, 1), (72.0, 80.0), (40, 42), (2700, 2760))


def _rng(seed: int, gpu: int, tick: int) -> random.Random:
    return random.Random(f"{seed}:{gpu}:{tick}")


def _busy(index: int, rng: random.Random, used: float, load: _Load, scale: float = 1.0) -> SimGpu:
    """A GPU under ``load``; ``scale`` < 1 while a job is still starting up."""
    power = rng.uniform(*load.power)
    power = _IDLE_POWER[0] + (power - _IDLE_POWER[0]) * scale
    lo, hi = load.temperature
    temperature = IDLE_TEMPERATURE_C + (rng.randint(lo, hi) - IDLE_TEMPERATURE_C) * scale
    return SimGpu(
        index=index,
        pstate="P0",
        temperature_c=round(temperature),
        utilization_pct=round(rng.randint(*load.util) * scale),
        memory_utilization_pct=round(rng.randint(*load.mem_util) * scale),
        memory_used_mib=min(max(round(used), 0), MEMORY_USABLE_MIB),
        power_w=round(power, 2),
        power_instant_w=round(max(power + rng.uniform(-12.0, 8.0), 5.0), 2),
        sm_clock_mhz=rng.randint(*load.sm_clock),
        memory_clock_mhz=MEMORY_CLOCK_MHZ,
        clocks_event_reasons=0x4 if power > 590.0 else 0x0,  # SwPowerCap near the cap
    )


def _idle(index: int, rng: random.Random, idle_for: float, was: _Load) -> SimGpu:
    """A GPU whose work ended ``idle_for`` seconds ago: memory released, cooling down."""
    p0 = idle_for < P8_AFTER_S
    warm = sum(was.temperature) / 2 - IDLE_TEMPERATURE_C
    power = rng.uniform(*_IDLE_POWER)
    return SimGpu(
        index=index,
        pstate="P0" if p0 else "P8",
        temperature_c=round(IDLE_TEMPERATURE_C + warm * math.exp(-idle_for / 25.0)),
        utilization_pct=0,
        memory_utilization_pct=0,
        memory_used_mib=rng.randint(0, 3),
        power_w=round(power, 2),
        power_instant_w=round(power + rng.uniform(-3.0, 3.0), 2),
        sm_clock_mhz=rng.randint(2700, 2760) if p0 else IDLE_SM_CLOCK_MHZ,
        memory_clock_mhz=MEMORY_CLOCK_MHZ if p0 else IDLE_MEMORY_CLOCK_MHZ,
        clocks_event_reasons=0x1,  # GpuIdle
    )


def oom_gpu_memory(t: float) -> float:
    """GPU 6's memory (MiB, before noise) in run 0: smooth, slightly accelerating ramp."""
    x = min(max(t, 0.0), OOM_AT) / OOM_AT
    return _RAMP_FROM + (_RAMP_TO - _RAMP_FROM) * math.pow(x, _RAMP_POWER)


def _drafter_gpu(
    index: int,
    rng: random.Random,
    t: float,
    run: DrafterRun | None,
    died_at: float,
    settings: SimSettings,
) -> SimGpu:
    load = _DRAFTER_LOAD[index]
    if run is None:
        return _idle(index, rng, t - died_at, load)
    if run.number == 0 and settings.scenario == "stall":  # steady memory, no OOM ramp
        spin = stalled(settings, t, run)
        return _busy(index, rng, _DRAFTER_STEADY[index], _NCCL_SPIN_LOAD if spin else load)
    if run.number == 0 and settings.scenario == "slow":  # memory held, the GPUs starved
        return _busy(index, rng, _DRAFTER_STEADY[index], _STARVED_LOAD)
    if run.number == 0:
        if index == OOM_GPU:
            used = min(oom_gpu_memory(t) + rng.randint(-12, 12), MEMORY_USABLE_MIB - 60)
        else:
            used = _DRAFTER_STEADY[index] + rng.randint(-3, 3)
        return _busy(index, rng, used, load)
    x = min((t - run.start) / REFILL_S, 1.0)
    fill = x * x * (3.0 - 2.0 * x)  # smoothstep: loads weights, then the allocator settles
    used = 520 + (_DRAFTER_STEADY[index] - 520) * fill + (rng.randint(-3, 3) if x >= 1 else 0)
    return _busy(index, rng, used, load, scale=0.2 + 0.8 * fill)


def _with_jupyter(gpu: SimGpu, settings: SimSettings, t: float, run: DrafterRun | None) -> SimGpu:
    """GPU 6 with the jupyter's share. In the drafter's first run the ramp includes it
    (taken from the drafter's), so a kill frees it; a restarted drafter settles at the
    same total beside it. While the drafter is dead, the jupyter's memory stays."""
    if gpu.index != JUPYTER_GPU:
        return gpu
    if run is None:
        held = JUPYTER_MIB if jupyter_alive(settings, t) else 0
        return replace(gpu, memory_used_mib=gpu.memory_used_mib + held)
    if run.number == 0:
        if jupyter_killed(settings, t):
            return replace(gpu, memory_used_mib=max(gpu.memory_used_mib - JUPYTER_MIB, 0))
        return gpu
    if not jupyter_alive(settings, t):
        return gpu
    # A restarted drafter fills what the jupyter leaves, to the same total as without it.
    steady = _DRAFTER_STEADY[JUPYTER_GPU]
    used = JUPYTER_MIB + gpu.memory_used_mib * (steady - JUPYTER_MIB) / steady
    return replace(gpu, memory_used_mib=round(used))


def gpu_states(settings: SimSettings, t: float) -> list[SimGpu]:
    """All 8 GPUs at scenario time ``t`` (negative times read as 0), in index order."""
    t = max(t, 0.0)
    tick = sample_tick(t)
    seed = settings.seed
    run = drafter_run(settings, t)
    gpus = []
    for i in range(GPU_COUNT):
        rng = _rng(seed, i, tick)
        if settings.scenario in SGLANG_SCENARIOS:
            load = _NCCL_SPIN if settings.scenario == "hang" and i == 0 and t >= HANG_AT else None
            wedged = settings.scenario == "vllm" and i == VLLM_GPUS[0] and t >= WEDGE_AT
            load = _NCCL_SPIN if wedged else load
            stopped = vllm_stopped_at(settings, VLLM_GPUS.index(i), t) if i in VLLM_GPUS else None
            if stopped is not None:  # its engine core went with its API server
                gpus.append(_idle(i, rng, t - stopped, load or _SGLANG_LOAD))
                continue
            used = _SGLANG_MEMORY[i] + rng.randint(-4, 4)
            gpus.append(_busy(i, rng, used, load or _SGLANG_LOAD))
        elif settings.scenario == "mig" and i == MIG_GPU:
            used = sum(mig_used_mib(settings, t, m) for m in MIG_INSTANCES)
            gpus.append(replace(_busy(i, rng, used, _MIG_LOAD), mig=True))
        elif settings.scenario == "mig" and i in DRAFTER_GPUS:  # idle long before
            gpus.append(_idle(i, rng, 3600.0, _DRAFTER_LOAD[i]))
        elif settings.scenario == "idle" and i in DRAFTER_GPUS:
            load = _DRAFTER_LOAD[i] if t < IDLE_AT else _HELD_IDLE_LOAD
            gpus.append(_busy(i, rng, _DRAFTER_STEADY[i] + rng.randint(-3, 3), load))
        elif i in TARGET_GPUS:
            load = _TARGET_LOAD._replace(temperature=_clamp_range(_TARGET_TEMPERATURE[i]))
            gpus.append(_busy(i, rng, _TARGET_MEMORY[i] + rng.randint(-3, 3), load))
        else:
            gpu = _drafter_gpu(i, rng, t, run, drafter_died_at(settings, t), settings)
            gpus.append(_with_jupyter(gpu, settings, t, run))
    health = parse_fault(settings.fault).health
    if settings.scenario == "sglang" and t >= XID_AT:
        # The Xid 63 marks a row for remapping at the next reset: the driver's
        # remapped_rows.pending says Yes from then on (NVIDIA's A100 GPU Memory Error
        # Management, "Row-remapping pending flag"; nvmlDeviceGetRemappedRows' isPending).
        health = frozenset({*health, ("row_pending", XID_GPU)})
    return [_with_health(g, health, t) for g in gpus] if health else gpus


def _with_health(gpu: SimGpu, health: frozenset[tuple[str, int]], t: float) -> SimGpu:
    """``gpu`` in the stand-in health states a test set for it (``HEALTH_FAULTS``)."""
    states = {name for name, index in health if index == gpu.index}
    if not states:
        return gpu
    reasons = gpu.clocks_event_reasons
    reasons |= 0x8 if "hw_slowdown" in states else 0
    reasons |= 0x60 if "thermal_slowdown" in states else 0
    return replace(
        gpu,
        clocks_event_reasons=reasons,
        pcie_width=4 if "pcie_x4" in states else gpu.pcie_width,
        ecc_uncorrected=2 if "ecc_uncorrected" in states else 0,
        ecc_corrected=int(2 * t) if "ecc_corrected" in states else 0,
        rows_pending="row_pending" in states,
        rows_failure="row_failure" in states,
        recovery_action="Reset" if "recovery_reset" in states else gpu.recovery_action,
    )


def _clamp_range(centre: int) -> tuple[int, int]:
    lo, hi = _TARGET_LOAD.temperature
    return max(centre - 1, lo), min(centre + 1, hi)


def mig_used_mib(settings: SimSettings, t: float, m: MigSlice) -> int:
    """The used memory of GPU instance ``m`` at scenario time ``t`` (mig scenario)."""
    if m.pid is None or m.device != 1 or t < MIG_RAMP_AT:
        return m.steady_mib + (4 if m.pid is not None else 0) * (sample_tick(t) % 2)
    # the fine-tune's activations grow ~160 MiB/s until its slice is all but full
    return min(m.steady_mib + round(160 * (t - MIG_RAMP_AT)), m.total_mib - 96)


def mig_processes(settings: SimSettings, t: float) -> list[tuple[MigSlice, SimProcess]]:
    """The processes on the MIG GPU's instances (mig scenario), with their instance."""
    if settings.scenario != "mig":
        return []
    t = max(t, 0.0)
    out = []
    for m in MIG_INSTANCES:
        if m.pid is not None:
            used = mig_used_mib(settings, t, m) - 20
            out.append((m, SimProcess(m.pid, PROCESS_NAME, used, MIG_GPU)))
    return out


def compute_processes(settings: SimSettings, t: float) -> list[SimProcess]:
    """The compute processes at scenario time ``t``, one per busy GPU, in GPU order."""
    t = max(t, 0.0)
    gpus = gpu_states(settings, t)
    if settings.scenario in SGLANG_SCENARIOS:
        servers = [
            (_VLLM_PID, VLLM_PROCESS_NAME)
            if vllm_gpu(settings, i)
            else (_SGLANG_PID, SGLANG_PROCESS_NAME)
            for i in range(len(gpus))
        ]
        return [
            SimProcess(base + 168 * g.index, name, g.memory_used_mib - 20, i)
            for (base, name), (i, g) in zip(servers, enumerate(gpus), strict=True)
            if not vllm_gpu(settings, i) or vllm_stopped_at(settings, VLLM_GPUS.index(i), t) is None
        ]
    procs = [
        SimProcess(_TARGET_PIDS[i], PROCESS_NAME, gpus[i].memory_used_mib - 42, i)
        for i in TARGET_GPUS
    ]
    procs += [p for _, p in mig_processes(settings, t)]
    run = drafter_run(settings, t)
    if settings.scenario == "idle":  # run 0 goes on, idle or not
        run = DrafterRun(0, -math.inf)
    jupyter = jupyter_alive(settings, t)
    if run is not None:
        for i in DRAFTER_GPUS:
            offset = i - DRAFTER_GPUS[0]
            base = _DRAFTER_PID if run.number == 0 else _RESTART_PID + 100 * run.number
            used = max(gpus[i].memory_used_mib - 20 - (JUPYTER_MIB if jupyter and i == 6 else 0), 0)
            procs.append(SimProcess(base + offset, PROCESS_NAME, used, i))
    if jupyter:  # inside CT 200 its PID does not resolve: nvidia-smi says [Not Found]
        procs.append(SimProcess(JUPYTER_PID, "[Not Found]", JUPYTER_MIB, JUPYTER_GPU))
    return procs


@dataclass(frozen=True, slots=True)
class HostProcess:
    """A simulated process as the Proxmox host's /proc describes it."""

    host_pid: int
    container: int  # the CT it runs in
    pid: int  # inside that CT
    command: str


def kernel_lines(settings: SimSettings, t: float) -> list[str]:
    """The simulated kernel log's NVRM lines by scenario time ``t``, oldest first, as the
    driver writes them (``docs/formats.md`` section 4): the GPU's ``GPU at PCI`` line
    before its first Xid, then the Xid on the bus of ``BUS_IDS``."""
    if settings.scenario != "sglang" or t < XID_AT:
        return []
    pci = BUS_IDS[XID_GPU][4:14].lower()  # 0000:5d:00, as the kernel prints it
    return [
        f"NVRM: GPU at PCI:{pci}: {UUIDS[XID_GPU]}",
        f"NVRM: Xid (PCI:{pci}): 63, pid='<unknown>', name=<unknown>, "
        "Row Remapper: New row marked for remapping, reset gpu to activate.",
    ]


def vllm_gpu(settings: SimSettings, index: int) -> bool:
    """Whether GPU ``index`` runs a vLLM server (scenario ``vllm``)."""
    return settings.scenario == "vllm" and index in VLLM_GPUS


@dataclass(frozen=True, slots=True)
class ServerProcess:
    """A simulated vLLM server's process as CT 200's own /proc shows it (its PIDs inside
    the CT): what the agent's discovery reads."""

    pid: int
    ppid: int
    argv: tuple[str, ...]


def vllm_engine_pid(index: int) -> int:
    """vLLM server ``index``'s engine core's PID inside CT 200 (``CONTAINER``)."""
    return _VLLM_PID + 168 * VLLM_GPUS[index] - 2418000


def vllm_api_pid(index: int) -> int:
    """vLLM server ``index``'s API server's PID inside CT 200: started before its engine
    core, its parent."""
    return vllm_engine_pid(index) - VLLM_API_SERVER_BEFORE


def vllm_server_processes(
    vllm_ports: Sequence[int], stopped: Container[int] = ()
) -> list[ServerProcess]:
    """The vllm scenario's servers as a real vLLM V1 server runs them: the API server
    ``vllm serve MODEL --port P`` (the console script, as its ``[project.scripts]``
    installs it) and its child the engine core, whose title setproctitle sets to
    ``VLLM::EngineCore`` (vllm/v1/engine/core.py, 0.34.0); server k on GPU
    ``VLLM_GPUS[k]``, listening on ``vllm_ports[k]``; none of the servers ``stopped``
    (indexes: their API server was killed, ``vllm_stopped_at``)."""
    out = []
    for k, port in enumerate(vllm_ports[: len(VLLM_GPUS)]):
        if k in stopped:
            continue
        engine, api = vllm_engine_pid(k), vllm_api_pid(k)
        serve = (PROCESS_NAME, "/root/venv/bin/vllm", "serve", VLLM_MODEL, "--port", str(port))
        out.append(ServerProcess(api, 1, serve))
        out.append(ServerProcess(engine, api, (VLLM_PROCESS_NAME,)))
    return out


def stopped_vllm_servers(settings: SimSettings, t: float) -> set[int]:
    """The indexes of the vLLM servers stopped by ``t`` (``vllm_stopped_at``)."""
    return {k for k in range(len(VLLM_GPUS)) if vllm_stopped_at(settings, k, t) is not None}


def host_process(
    host_pid: int, sglang_ports: Sequence[int] = (), vllm_ports: Sequence[int] = ()
) -> HostProcess | None:
    """What the host's /proc says of one of the simulator's GPU PIDs (None: not one).
    ``sglang_ports``: the ports this demo's SGLang servers got, server i on GPU i (its
    command says the port it listens on); SGLang's default 30000 + i where none is given.
    ``vllm_ports``: those of its vLLM servers, server k on GPU ``VLLM_GPUS[k]`` (vLLM's
    default 8000 + k where none is given)."""
    if host_pid == JUPYTER_PID:
        return HostProcess(host_pid, JUPYTER_CONTAINER, 88, JUPYTER_COMMAND)
    if host_pid in MIG_COMMANDS:
        return HostProcess(host_pid, CONTAINER, host_pid - 2418000, MIG_COMMANDS[host_pid])
    gpu, rest = divmod(host_pid - _VLLM_PID, 168)
    if rest == 0 and gpu in VLLM_GPUS:
        k = VLLM_GPUS.index(gpu)
        port = vllm_ports[k] if k < len(vllm_ports) else 8000 + k
        command = f"{VLLM_PROCESS_NAME} (vllm serve {VLLM_MODEL} --port {port})"
        return HostProcess(host_pid, CONTAINER, host_pid - 2418000, command)
    sglang, rest = divmod(host_pid - _SGLANG_PID, 168)
    if rest == 0 and 0 <= sglang < GPU_COUNT:
        port = sglang_ports[sglang] if sglang < len(sglang_ports) else 30000 + sglang
        command = f"{SGLANG_PROCESS_NAME} (python3 -m sglang.launch_server --port {port})"
        return HostProcess(host_pid, CONTAINER, host_pid - 2418000, command)
    if host_pid in _TARGET_PIDS:
        command = f"{PROCESS_NAME} -m train.target --rank {_TARGET_PIDS.index(host_pid)}"
        return HostProcess(host_pid, CONTAINER, host_pid - 2418000, command)
    drafter = (
        host_pid - _DRAFTER_PID if host_pid < _RESTART_PID else (host_pid - _RESTART_PID) % 100
    )
    if 0 <= drafter < len(DRAFTER_GPUS):
        command = f"{PROCESS_NAME} -m train.drafter --rank {drafter} --cfg drafter.yaml"
        return HostProcess(host_pid, CONTAINER, host_pid - 2418000, command)
    return None


def simulated_pids(runs: int = 8) -> list[int]:
    """Every GPU PID the training-oom scenario can list (restarted runs up to ``runs``)."""
    pids = [*_TARGET_PIDS, JUPYTER_PID, *(_SGLANG_PID + 168 * g for g in range(GPU_COUNT))]
    pids += list(MIG_COMMANDS)
    pids += [_VLLM_PID + 168 * g for g in VLLM_GPUS]
    pids += [_DRAFTER_PID + k for k in range(len(DRAFTER_GPUS))]
    pids += [
        _RESTART_PID + 100 * n + k for n in range(1, runs + 1) for k in range(len(DRAFTER_GPUS))
    ]
    return pids
