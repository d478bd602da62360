"""AlertEngine: one host's alerts from GPU samples, job logs, the kernel log and cgroup counters.

Feed it from the monitor (``on_sample``, ``on_log_lines``, ``on_kernel_lines``,
``on_memory_events``, ``note``); read ``active()`` / ``history()`` / ``worst()``; listeners
get every alert that is new or got worse, once. Thresholds: ``AlertRules`` (rules.py).

Kinds and how each one ends (``active`` becomes False):

- condition alerts ``memory``, ``time_to_full``, ``gpu_health`` (key ``KIND:GPU``; a GPU in
  MIG mode has no memory condition of its own: each GPU instance has its ``memory`` and
  ``time_to_full``, key ``KIND:GPU:giID``, judged on its own memory; the
  driver's health facts each ``gpu_health:TOPIC:GPU``, ``alerts.health``),
  ``gpu_idle_held`` (key ``gpu_idle_held:GPU``, or ``gpu_idle_held:job:NAME`` for the
  GPUs of a job, one alert for all of them), ``server_idle`` (key ``server_idle:PORT``:
  the GPUs of an SGLang server up and answering, idle as long, a server without traffic),
  ``stale_data`` and ``driver_error`` (from ``on_silence``) and ``host_unreachable``
  (from ``on_unreachable``) and ``sglang_hung`` (key ``sglang_hung:PORT``, from
  ``on_server_condition``) and ``spec_accept_low`` (``on_spec_accept_low``) and a warning
  ``sglang_error`` for a server whose ``/metrics`` page cannot be read (key
  ``sglang_page:PORT``, from ``on_sglang_page``) last while the condition holds (with
  hysteresis, see alert_rules). Acknowledging one only silences it (``acknowledged``); it
  rings again if it gets worse.
- event alerts end when acknowledged, when ``clear(key_prefix)`` is called (the restart
  action), or on recovery:
  - ``cuda_oom``, ``sglang_error``, ``job_crashed`` (key ``log:PATH:LINE``): the log gets new
    lines ``LOG_RECOVERY_S`` or more after the event (a dead process writes nothing, so it is
    a new run), or the event's GPU is seen below ``oom_death_low_pct`` after the event and
    then at least ``RECOVERY_PCT`` used again (a restarted job filled it);
  - ``oom_death`` (key ``oom_death:GPU:TIME``): the same GPU refill rule;
  - ``kv_cache_full`` and warning-level ``sglang_error`` lines: after ``TRANSIENT_S``
    without a repeat; a failed health check only then, and not while an ``sglang_hung``
    of its GPU lasts (nor when its log goes on: a hung server still writes);
  - ``xid``, ``host_oom_kill``, ``cgroup_oom_kill``: acknowledge or clear only.
- Repeats do not raise again: an event of the same log, kind and GPU (or the same Xid on
  the same GPU) while one is active only moves its ``last_seen``.
- Backlog (``backlog=True``, the tail of a log read at start, or an old kernel buffer):
  events are history: recorded as already past (in ``history()``, dated by the log
  file's last write where the agent said it, listeners not called, not returned), never
  active. One exception, a condition: a configured job whose log ENDS in a failure (the
  last failure event with at most ``BACKLOG_END_LINES`` non-blank lines after it, crash
  aftermath) and that is still down (``judge_job_down``: no process on its GPUs) is one
  ``job_crashed`` condition (key ``job_crashed:JOB``) dated by that line, in its words,
  announced to no listener; it ends when the job runs again (its GPUs held, its log
  written) or a restart clears it.
"""

from __future__ import annotations

import math
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from gpumon.backends.alerts.facts import (
    NO_FACTS,
    SWAP_WINDOW_S,
    AlertFacts,
    Held,
    Holder,
    IdleCost,
    TorchSwap,
    XidFacts,
)
from gpumon.backends.alerts.health import HealthWatch
from gpumon.backends.alerts.kinds import Tag, tagged
from gpumon.backends.alerts.rules import (
    IDLE_GAP_INTERVALS,
    MIB_PER_GIB,
    STALE_WARNING_FLOOR_S,
    AlertRules,
    GpuWatch,
    IdleHeld,
    foreign_held,
    held_on,
)
from gpumon.backends.alerts.store import (
    JOB_DOWN_KEY,
    PAGE_KEY,
    Alert,
    AlertStore,
    Listener,
)
from gpumon.backends.model import (
    GpuProcess,
    GpuRef,
    GpuRegistry,
    GpuSample,
    Health,
    HostSample,
    UnreadableGpu,
    bus_id_key,
    pci_key,
)
from gpumon.backends.parsers.kernel import (
    XidEvent,
    kernel_log_unreadable,
    parse_gpu_at_line,
    parse_host_oom_kill,
    parse_memory_events,
    parse_oom_memcg,
    parse_xid_line,
)
from gpumon.backends.parsers.nvidia_smi import unreadable_advice
from gpumon.backends.parsers.oom import LogEvent, LogScanner, engine_event
from gpumon.backends.parsers.processes import container_label, index_ranges, process_words
from gpumon.backends.parsers.units import duration_words
from gpumon.backends.parsers.xid import XID_45_COMPANY_S, xid_action, xid_info, xid_level

__all__ = [
    "Alert",
    "AlertEngine",
    "AlertRules",
    "Listener",
    "check_level",
    "log_key_prefix",
]

LOG_RECOVERY_S = 30.0
RECOVERY_PCT = 50.0
TRANSIENT_S = 120.0
BACKLOG_END_LINES = 40
_KERNEL_SEEN_MAX = 4096
# Kernel lines read before the first sample wait for it (an Xid's bus is tied to a GPU
# by the GPUs' bus IDs), at most this many, and this long into a silence.
_EARLY_MAX = 256
_EARLY_KERNEL_WAIT_S = 3.0
LOG_SOURCES_MAX = 256  # logs scanned at once; a glob over rotated files names new ones
_FAILURE_KINDS = tagged(Tag.LOG_FAILURE)
# Events that end when their GPU empties and fills again (a restarted job filled it).
_GPU_EVENT_KINDS = tagged(Tag.CRASH) | _FAILURE_KINDS
_SILENCE_KINDS = sorted(tagged(Tag.SILENCE))  # their key is their kind
_IDLE_KINDS = tagged(Tag.IDLE)  # judged together (``_idle_held``)
HEALTH_TOPICS = ("pcie", "clocks", "ecc", "rows", "recovery")  # gpu_health:TOPIC:GPU


LOG_CONTEXT_LINES = 8  # lines of a log kept up to an event's key line (a traceback's end)
_LISTED_MAX = 1024  # GPUs remembered as listed (more than any host has)


# Never compared nor printed (the engine's own memo): no generated __eq__, __hash__ or
# __repr__, each compiled at import on the one-shot's path (issue 41).
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class _Listed:
    """A GPU as it was last listed: read (its index, name) or not (its index where known)."""

    index: int | None
    bus_id: str | None
    name: str | None
    at: float


@dataclass(frozen=True, slots=True, eq=False, repr=False)  # as _Listed
class _LogEnd:
    """The failure a configured job's log ended in when gpumon came: what its job-down
    condition says, dated by the line (``at``), with the lines that raised it."""

    severity: Health
    gpu: int | None
    text: str
    at: float
    lines: tuple[str, ...]
    facts: AlertFacts


def _gpu_identity(bus_id: str | None, index: int | None) -> str:
    """Which GPU this is across samples: its PCI address (``0000:19:00``, the form Xid
    lines use), else its index (a field list without ``pci.bus_id``)."""
    return pci_key(bus_id) or f"index {index}"


@dataclass(frozen=True, slots=True, eq=False, repr=False)  # as _Listed
class _LogSource:
    scanner: LogScanner
    job: str | None
    gpus: tuple[int, ...] | None
    # (line number, line) of the newest lines read: an event's key line and the lines
    # before it (a traceback read over two reads included) are what raised its alert
    recent: deque[tuple[int, str]] = field(
        default_factory=lambda: deque(maxlen=4 * LOG_CONTEXT_LINES)
    )

    def lines_to(self, line_no: int) -> list[str]:
        """The lines kept up to and including ``line_no``, at most ``LOG_CONTEXT_LINES``."""
        upto = [line for n, line in self.recent if line_no - LOG_CONTEXT_LINES < n <= line_no]
        return upto[-LOG_CONTEXT_LINES:]


class AlertEngine(AlertStore):
    """Alerts of one host. Not thread-safe: call it from the monitor's event loop."""

    def __init__(
        self,
        host: str,
        rules: AlertRules,
        clock: Callable[[], float] = time.time,
        *,
        container: int | None = None,
        jobs: Mapping[str, Sequence[int]] | None = None,
    ) -> None:
        super().__init__(host, clock)
        self.rules = rules
        self.container = container  # the watched Proxmox CT: others' processes are foreign
        # The configured jobs' GPUs: their idle GPUs are one gpu_idle_held alert per job.
        self.job_of_gpu: dict[int, str] = {g: job for job, gs in (jobs or {}).items() for g in gs}
        # The sampling interval the monitor asks for (None: the shortest gap seen between
        # two samples stands for it): a gap of IDLE_GAP_INTERVALS of it breaks an idle run.
        self.interval_s: float | None = None
        # GPU -> the port of the SGLang server up and answering that holds it (the
        # monitor's ``Workloads.serving_gpus``): idle there is a server without traffic
        self.serving: Mapping[int, int] = {}
        # gpumon's newest torch swap on this host at or after an epoch second (the
        # monitor's ``Workloads.swaps``, which reads the audit log this layer may not):
        # GPUs that went idle after one say it, and their incident offers to swap back.
        self.torch_swap: Callable[[float], TorchSwap | None] | None = None
        # What a kWh costs, and in what (the config's [usage]): a gpu_idle_held names what
        # its GPUs cost so far; None: no price, only the kWh
        self.energy_price: tuple[float, str] | None = None
        # Xid events raised (not repeats, not a backlog), per (GPU, code, level, action) as
        # their alerts' facts say them (Xid 154: the action its line names), for the
        # exporter's counter: it only goes up, so a reset keeps it.
        self.xid_counts: Counter[tuple[int | None, int, Health, str | None]] = Counter()
        self._reset_rules_state()

    def reset(self) -> None:
        """Forget every alert, note and trend; the listeners stay (a replay rewinding)."""
        listeners = self._listeners
        AlertStore.__init__(self, self.host, self.clock)
        self._listeners = listeners
        self._reset_rules_state()

    def _reset_rules_state(self) -> None:
        self.last_foreign: dict[int, tuple[float, str]] = {}  # GPU -> (when, who else held it)
        self._watches: dict[int, GpuWatch] = {}
        self._slices: dict[tuple[int, int], GpuWatch] = {}  # (GPU, GPU instance id) in MIG mode
        self._listed: dict[str, _Listed] = {}  # GPUs the host listed, by ``_gpu_identity``
        self._latest: HostSample | None = None
        # the newest sample with a process list that came after it (``on_processes``),
        # until the next sample: what runs where, for an Xid read in between
        self._with_list: HostSample | None = None
        self._latest_came: float | None = None  # when it came (``on_sample``)
        # when the samples of the last ``ttf_window_s`` came: what the time-to-full rule
        # had to look at (``time_to_full_unjudged``)
        self._came: deque[float] = deque()
        self._early_kernel: list[str] = []  # kernel lines before the first sample
        # Xid alerts raised before the first process list, which say what runs on their
        # GPU once it comes (alert key -> the Xid, its GPU, whether it came alone)
        self._whose_pending: dict[str, tuple[XidEvent, int, bool]] = {}
        self._processes_seen = False
        self._logs: dict[str, _LogSource] = {}
        self._kernel_seen: set[str] = set()
        self._kernel_order: deque[str] = deque()
        self._pci_uuid: dict[str, str] = {}
        self._other_xid_at: dict[str, float] = {}  # PCI -> last read of an Xid other than 45
        self._memcg: str | None = None
        self._oom_kills: int | None = None
        self._oom_kill_base = 0
        self._shortest_gap = math.inf  # between two samples: the sampling interval, about
        self._idle_test: tuple[AlertRules, IdleHeld] | None = None
        self._refs = GpuRegistry()  # the GPUs of the sample judged now, by every name
        self._health = HealthWatch()
        # configured jobs whose log, when gpumon came, ended in a failure (``_LogEnd``);
        # the job-down condition each one raised while the job stays down
        self._ended_in: dict[str, _LogEnd] = {}
        self._down: set[str] = set()

    def gpu_ref(self, index: int) -> GpuRef:
        """GPU ``index`` by every name the sample judged now (else the last) gives it."""
        return self._refs.index(index) or GpuRef(index)

    def time_to_full(self, gpu: int) -> float | None:
        """Seconds until ``gpu``'s memory is full at the current trend, or None; while
        its ``time_to_full`` alert holds through a sample that gave no estimate (a short
        window's noise read as a rise that slows), the one the alert says: the row, the
        check's data and the alert give one number."""
        watch = self._watches.get(gpu)
        if watch is None:
            return None
        if watch.ttf is None and f"time_to_full:{gpu}" in self._active:
            return watch.alert_ttf
        return watch.ttf

    def time_to_full_unjudged(self) -> str | None:
        """Why the time-to-full rule could not judge the last sample: too few samples in
        its window (``ttf_min_points`` spanning two thirds of ``ttf_window_s``, a loaded
        sampler's gaps), said as "time-to-full not judged: 2 samples in 4 s, 4 needed";
        None when it could, or when it is off (``ttf_horizon_s`` 0). A GPU that was not
        rising was judged all the same: its trend is none."""
        rules = self.rules
        if rules.ttf_horizon_s <= 0:
            return None
        came = self._came
        span = came[-1] - came[0] if came else 0.0
        need_span = rules.ttf_window_s * 2.0 / 3.0
        if len(came) >= rules.ttf_min_points and span >= need_span:
            return None
        return (
            f"time-to-full not judged: {len(came)} sample{'' if len(came) == 1 else 's'} "
            f"in {span:.0f} s, "
            f"{rules.ttf_min_points} needed over {need_span:.3g} s"
        )

    def instance_times_to_full(self, gpu: int) -> dict[int, float]:
        """GPU instance id -> seconds until its memory is full at its trend, for the GPU
        instances of ``gpu`` (in MIG mode) whose memory rises."""
        return {gi: w.ttf for (i, gi), w in self._slices.items() if i == gpu and w.ttf is not None}

    def memory_level(self, gpu: GpuSample, at: float) -> Health | None:
        """The memory level of ``gpu``, from the sample taken at ``at``, as the alerts see
        it: for the last sample fed, the level the memory alert has (hysteresis and the
        free-memory rule included), so what a screen colours and what it alerts agree;
        for an older sample (a paused screen) the thresholds' level of its values. None
        when the GPU reports no memory fill."""
        fraction = gpu.memory_used_fraction
        if fraction is None:
            return None
        watch = self._watches.get(gpu.index)
        if watch is not None and self._latest is not None and self._latest.time == at:
            return watch.level
        return self.rules.memory_health(fraction, gpu.memory_free_mib)

    # --- samples ----------------------------------------------------------------------
    def on_sample(self, sample: HostSample, *, came: float | None = None) -> list[Alert]:
        """Memory, time-to-full, OOM-death, GPU-health and idle rules for one sample,
        which ``came`` at that time of the monitor's monotonic clock (None: at its
        ``time``). The alerts are dated by the sample's time; every duration the rules
        judge between samples (a trend, a fall, an idle run, a slowdown's share) is
        counted on ``came``, so a wall-clock step between two samples makes no GPU
        idle for an hour, no fill rate flat and no OOM death missed."""
        now = sample.time
        t = now if came is None else came
        rules = self.rules
        raised: list[Alert] = []
        self._refs = sample.gpu_refs
        for gpu in sample.gpus:
            i = gpu.index
            watch = self._watches.get(i)
            if watch is None:
                watch = self._watches[i] = GpuWatch(i)
            self._gpu_health(now, gpu, watch, raised)
            self._health_facts(now, t, gpu, raised)
            self._foreign(now, gpu, sample, raised)
            fraction = gpu.memory_used_fraction
            if gpu.mig_mode:  # its memory is its slices': a job runs out of its slice's
                self._mig_slices(now, t, gpu, sample, raised)
                continue
            if fraction is None:
                continue
            level = watch.memory_level(gpu, fraction, rules)
            key = f"memory:{i}"
            if level is not Health.OK:
                text = _memory_text(gpu, fraction)
                free = gpu.memory_free_mib
                facts = AlertFacts(free_bytes=None if free is None else round(free * 2**20))
                self._condition(
                    key, "memory", level, i, text, now, raised, score=fraction, facts=facts
                )
            elif key in self._active:
                self._end(key)
            watch.held_by(t, frozenset(p.pid for p in sample.processes_for(gpu) if p.pid))
            self._time_to_full(now, t, gpu, fraction, watch, raised)
            death = watch.death(t, fraction, rules, at=now)
            if death is not None:
                self._oom_death(now, gpu, fraction, death, raised)
            elif fraction * 100.0 >= RECOVERY_PCT and watch.emptied_at is not None:
                self._recover_gpu(i, watch.emptied_at)
                watch.emptied_at = None
        self._idle_held(now, t, sample, raised)
        unread = [self._known_as(gpu) for gpu in sample.unreadable]
        self._unreadable_gpus(now, sample, unread, raised)
        self._missing_gpus(now, sample, unread, raised)
        for key in _SILENCE_KINDS:  # data again: neither a silence nor its cause holds
            if key in self._active:
                self._end(key)
        self._expire(now)
        self._latest, self._latest_came = sample, t
        self._with_list = None  # the sample has the newest list
        self._came.append(t)
        while self._came[0] < t - rules.ttf_window_s:
            self._came.popleft()
        self._remember_listed(now, sample, unread)
        self._early_kernel_lines(now, raised)
        return self._announce(raised)

    def on_processes(self, sample: HostSample) -> list[Alert]:
        """The process list changed between samples (``sample``: the latest one, with the
        new list): who else holds memory (``foreign_process``) is judged now, so the
        Proxmox host's list counts from the moment it arrives; the other rules wait for
        the next sample."""
        raised: list[Alert] = []
        self._refs = sample.gpu_refs
        # what runs where is this list's until the next sample (an Xid read before it says
        # "running ..." from it: ci15). Not ``_latest``: while a sample is judged that is
        # the one before it, whose list says who held a GPU before its memory fell (an OOM
        # death names the process that died, not the one left: triple run 2)
        self._with_list = sample
        for gpu in sample.gpus:
            self._foreign(sample.time, gpu, sample, raised)
        self._processes_seen = True
        self._say_whose(sample)
        return self._announce(raised)

    def _say_whose(self, sample: HostSample) -> None:
        """The Xid alerts raised before the first process list (on a busy machine the
        kernel's round can come first) say what runs on their GPU now that it is known:
        "Xid 63 on GPU 3 (running sglang::scheduler_TP0): ...", as one raised after it."""
        pending, self._whose_pending = self._whose_pending, {}
        for key, (xid, gpu, alone) in pending.items():
            alert = self._history.get(key)
            whose = self._xid_whose(xid, gpu, sample)
            if alert is None or whose is None or alert.facts.xid is None:
                continue
            facts = replace(alert.facts, xid=replace(alert.facts.xid, whose=whose))
            self._store(replace(alert, message=xid.describe(gpu, whose, alone=alone), facts=facts))

    def on_mig(self, sample: HostSample, *, came: float | None = None) -> list[Alert]:
        """The GPU instances came between samples (read with the process list; ``sample``
        the latest, with them): their memory is judged now, not at the next sample."""
        raised: list[Alert] = []
        t = sample.time if came is None else came
        for gpu in sample.gpus:
            if gpu.mig_mode:
                self._mig_slices(sample.time, t, gpu, sample, raised)
        return self._announce(raised)

    def _idle_held(self, now: float, t: float, sample: HostSample, out: list[Alert]) -> None:
        """``gpu_idle_held`` (warning): GPUs held and idle for ``idle_held_after_s``
        (``IdleHeld``), naming who holds them; the GPUs of one job are one alert (the job's
        incident), the others one per GPU. Ends when the GPU is busy again, frees its
        memory or stops reporting its utilisation. Not held and idle: a GPU of an SGLang
        server up and answering (``serving``: a server without traffic keeps its KV pool;
        a ``server_idle`` note per server says it, which notifiers do not get unless
        asked), and a GPU whose every holder ``idle_held_ignore`` names."""
        cached = self._idle_test
        if cached is None or cached[0] is not self.rules:  # rules are frozen: build it once
            cached = self._idle_test = (self.rules, self.rules.idle_held)
        test = cached[1]
        last = self._latest_came
        if last is not None and t > last:
            self._shortest_gap = min(self._shortest_gap, t - last)
        period = self.interval_s or self._shortest_gap
        gap_s = max(STALE_WARNING_FLOOR_S, IDLE_GAP_INTERVALS * period)
        idle: dict[str | None, list[tuple[GpuSample, float]]] = {}
        servers: dict[int, list[tuple[GpuSample, float]]] = {}
        for gpu in sample.gpus if test.after_s > 0 else ():  # 0: off
            watch = self._watches[gpu.index]
            holding = self._idle_key(gpu.index) in self._active
            seconds = watch.idle_for(t, gpu, test, gap_s, read=now, holding=holding)
            if seconds is None or seconds < test.after_s:
                continue
            port = self.serving.get(gpu.index)
            if port is not None:
                servers.setdefault(port, []).append((gpu, seconds))
            elif not self.rules.idle_held_ignored(sample.processes_for(gpu)):
                idle.setdefault(self._job_for(gpu.index), []).append((gpu, seconds))
        keys: set[str] = set()
        for port, group in servers.items():
            key = f"server_idle:{port}"
            keys.add(key)
            text = self._server_idle_text(port, group)
            seconds = min(s for _, s in group)
            self._condition(  # a note: normal operation, worth a look, never a page
                key, "server_idle", Health.INFO, group[0][0].index, text, now, out, seconds,
                facts=AlertFacts(port=port, names_gpu=True),
            )  # fmt: skip
        for job, gpus in idle.items():
            for group in [gpus] if job is not None else [[g] for g in gpus]:
                first = group[0][0].index
                key = self._idle_key(first)
                keys.add(key)
                text = self._idle_text(job, group, sample)
                seconds = min(s for _, s in group)
                cost = self._idle_cost(group, seconds)
                if cost.kwh is not None:  # the time alone the text says already
                    text += f"; {cost.words()}"
                swap = self._swap_before(now - seconds)
                if swap is not None:
                    text += f"; after {swap.words(now)}"
                # its text leads with the job; who holds it is what stops it (its fixes)
                facts = AlertFacts(
                    job=job,
                    names_gpu=True,
                    torch_swap=swap,
                    idle_cost=cost,
                    gpus=tuple(g.index for g, _ in group) if job else (),
                    held=None if job else _idle_holder(group[0][0], sample),
                )
                self._condition(
                    key, "gpu_idle_held", Health.WARNING, first, text, now, out, seconds,
                    facts=facts,
                )  # fmt: skip
                if job is not None and self._active[key].job != job:  # a configured job's
                    self._store(replace(self._active[key], job=job))
        for key in [k for k, a in self._active.items() if a.kind in _IDLE_KINDS]:
            if key not in keys:
                self._end(key)

    def _idle_key(self, index: int) -> str:
        """The key of the idle alert GPU ``index`` would be part of (``_idle_held``)."""
        port = self.serving.get(index)
        if port is not None:
            return f"server_idle:{port}"
        job = self._job_for(index)
        return f"gpu_idle_held:job:{job}" if job else f"gpu_idle_held:{index}"

    def _idle_cost(self, group: list[tuple[GpuSample, float]], seconds: float) -> IdleCost:
        """What ``group``'s GPUs drew in their idle runs (power x time: ``GpuWatch``), and
        its price (``energy_price``)."""
        drawn = [self._watches[g.index].idle_joules for g, _ in group]
        known = [j for j in drawn if j is not None]
        kwh = sum(known) / 3.6e6 if known else None
        price, currency = self.energy_price or (None, "")
        return IdleCost(len(group), seconds, kwh, price, currency)

    def _swap_before(self, idle_since: float) -> TorchSwap | None:
        """gpumon's torch swap within ``SWAP_WINDOW_S`` before GPUs went idle at
        ``idle_since`` (None: none, or no audit log to ask)."""
        if self.torch_swap is None:
            return None
        return self.torch_swap(idle_since - SWAP_WINDOW_S)

    def _server_idle_text(self, port: int, group: list[tuple[GpuSample, float]]) -> str:
        """``sglang :30000 up, no request for 12 min: GPU 0 at 0 % holds 69 GiB (its KV
        cache pool); a server without traffic``."""
        indexes = [g.index for g, _ in group]
        which = f"GPU {indexes[0]}" if len(indexes) == 1 else f"GPUs {index_ranges(indexes)}"
        gib = sorted({f"{(g.memory_used_mib or 0) / MIB_PER_GIB:.0f}" for g, _ in group}, key=int)
        held = gib[0] if len(gib) == 1 else f"{gib[0]}-{gib[-1]}"
        each = " each" if len(indexes) > 1 else ""
        seconds = min(s for _, s in group)
        return (
            f"sglang :{port} up, idle for {duration_words(seconds)}: {which} at under "
            f"{self.rules.idle_util_pct:g} % hold{'s' if len(indexes) == 1 else ''} "
            f"{held} GiB{each} (its KV cache pool); a server without traffic"
        )

    def _job_for(self, gpu: int) -> str | None:
        """The job an alert on ``gpu`` belongs to: the configured job of that GPU from the
        start (before its log's first lines came, a loaded machine's GPU 6 memory warning
        opened an incident of its own, beside the drafter's OOM), else the one whose log
        named it."""
        return self.job_of_gpu.get(gpu) or self._jobs_by_gpu.get(gpu)

    def _idle_text(
        self, job: str | None, group: list[tuple[GpuSample, float]], sample: HostSample
    ) -> str:
        """``drafter's GPUs 5-7 idle (0-2 %) for 6 min while holding 88 GiB each; held by
        PID 4242 python train.py`` (``GPU 3 idle (0 %) ...`` without a job)."""
        indexes = [g.index for g, _ in group]
        watches = [self._watches[i] for i in indexes]
        low = min(w.idle_low for w in watches)
        high = max(w.idle_high for w in watches)
        util = f"{low:.0f} %" if f"{low:.0f}" == f"{high:.0f}" else f"{low:.0f}-{high:.0f} %"
        gib = sorted({f"{(g.memory_used_mib or 0) / MIB_PER_GIB:.0f}" for g, _ in group}, key=int)
        if len(group) == 1:
            held = f"{gib[0]} GiB"
        else:
            held = f"{gib[0]} GiB each" if len(gib) == 1 else f"{gib[0]}-{gib[-1]} GiB each"
        which = f"GPU {indexes[0]}" if len(indexes) == 1 else f"GPUs {index_ranges(indexes)}"
        who = f"{job}'s {which}" if job else which
        seconds = min(s for _, s in group)
        procs: dict[tuple[object, ...], GpuProcess] = {}
        for gpu, _ in group:
            for p in sample.processes_for(gpu):
                procs.setdefault((p.pid, p.host_pid, p.container), p)
        return f"{who} idle ({util}) for {duration_words(seconds)} while holding {held}; " + (
            _holders(list(procs.values()))
        )

    def _known_as(self, gpu: UnreadableGpu) -> UnreadableGpu:
        """``gpu`` with what the GPU listed before under its bus id (its index) or its
        index (its bus id) filled in: nvidia-smi's line names only the bus, NVML's row
        only the index."""
        if gpu.index is None and gpu.bus_id:
            seen = self._listed.get(_gpu_identity(gpu.bus_id, None))
            return gpu if seen is None else replace(gpu, index=seen.index)
        if gpu.bus_id is None and gpu.index is not None:
            for seen in self._listed.values():
                if seen.index == gpu.index and seen.bus_id:
                    return replace(gpu, bus_id=seen.bus_id)
        return gpu

    def _unreadable_gpus(
        self, now: float, sample: HostSample, unread: list[UnreadableGpu], out: list[Alert]
    ) -> None:
        """A GPU the host lists but gpumon cannot read (``sample.unreadable``: nvidia-smi's
        ``Unable to determine the device handle`` in place of its row, NVML refusing its
        handle) is a critical ``gpu_health`` condition on that GPU in the driver's words; a
        row of it that does not parse, a warning. It is keyed by the GPU's index where known
        (NVML's row, or the GPU seen before with that bus id), else by its bus id
        (``gpu_health:0000:19:00``, ``gpu`` None). An index key ends like any health
        alert once the GPU reads healthy again; a bus id key as soon as it reads again."""
        taken = {gpu.index for gpu in sample.gpus}
        for gpu in unread:
            index = gpu.index
            if index is not None and index in taken:
                index = None  # another GPU reads under that index now: by bus id
            ident = _gpu_identity(gpu.bus_id, index)
            if index is not None:
                self._unobserved(index)
            name = f"GPU {index}" if index is not None else f"GPU {gpu.bus_id}"
            if index is not None and gpu.bus_id:
                name += f" ({gpu.bus_id})"
            text = f"{name} cannot be read: {gpu.reason}"
            if gpu.said:
                text += f' (nvidia-smi printed "{gpu.said}")'
            severity = Health.CRITICAL if gpu.device else Health.WARNING
            if gpu.device:
                text += f"; {unreadable_advice(gpu)}"
            else:
                text += "; it is not watched while so"
            key = f"gpu_health:{index}" if index is not None else f"gpu_health:{ident}"
            facts = AlertFacts(gpu=GpuRef(index, bus_id=bus_id_key(gpu.bus_id)), names_gpu=True)
            self._condition(key, "gpu_health", severity, index, text, now, out, facts=facts)
        for read in sample.gpus:  # read again: an alert by its bus id ends
            key = f"gpu_health:{_gpu_identity(read.bus_id, None)}"
            if read.bus_id and key in self._active:
                self._end(key)

    def _missing_gpus(
        self, now: float, sample: HostSample, unread: list[UnreadableGpu], out: list[Alert]
    ) -> None:
        """A GPU listed before (read or not) and absent from this sample is a critical
        ``gpu_health`` condition: nvidia-smi and NVML stop listing a GPU that fell off the
        bus (Xid 79) or whose driver state is gone. GPUs are told apart by bus id (a GPU
        gone may leave its index to another); the alert is on its last index unless
        another GPU reads under it now (then on its bus id). It ends like any health
        alert, after ``clear_samples`` healthy samples once the GPU is listed again. Its
        memory and time-to-full conditions end: nothing observes them any more."""
        taken = {gpu.index for gpu in sample.gpus}
        present = {_gpu_identity(g.bus_id, g.index) for g in sample.gpus}
        present |= {_gpu_identity(g.bus_id, g.index) for g in unread}
        for ident, seen in self._listed.items():
            if ident in present:
                continue
            index = seen.index if seen.index not in taken else None
            if index is not None:
                self._unobserved(index)
                what = ", ".join(x for x in (seen.name, seen.bus_id) if x)
                name = f"GPU {index}"
            else:  # its index is another GPU's now: the bus id says which one went
                what = ", ".join(x for x in (f"was GPU {seen.index}", seen.name) if x)
                name = f"GPU {seen.bus_id}"
            text = (
                f"{name} is no longer reported{f' ({what})' if what else ''}: fallen off "
                f"the bus? Last seen at {time.strftime('%H:%M:%S', time.localtime(seen.at))}; "
                "look for Xid 79 in the kernel log"
            )
            key = f"gpu_health:{index}" if index is not None else f"gpu_health:{ident}"
            ref = GpuRef(index, bus_id=bus_id_key(seen.bus_id))  # listed before, not now
            facts = AlertFacts(gpu=ref, names_gpu=True)
            self._condition(key, "gpu_health", Health.CRITICAL, index, text, now, out, facts=facts)

    def _unobserved(self, index: int) -> None:
        """GPU ``index`` is not read now: its memory trend is forgotten (a GPU that comes
        back after a reset empty did not die of OOM, and its fill rate before the gap says
        nothing about after) and its memory conditions end."""
        self._watches[index] = GpuWatch(index)
        self._health.forget(index)
        for kind in ("memory", "time_to_full", *(f"gpu_health:{t}" for t in HEALTH_TOPICS)):
            if f"{kind}:{index}" in self._active:
                self._end(f"{kind}:{index}")

    def _remember_listed(self, now: float, sample: HostSample, unread: list[UnreadableGpu]) -> None:
        for gpu in sample.gpus:
            self._listed[_gpu_identity(gpu.bus_id, gpu.index)] = _Listed(
                gpu.index, gpu.bus_id, gpu.name, now
            )
        for gone in unread:
            ident = _gpu_identity(gone.bus_id, gone.index)
            old = self._listed.get(ident)
            name = old.name if old is not None else None
            self._listed[ident] = _Listed(gone.index, gone.bus_id, name, now)
        while len(self._listed) > _LISTED_MAX:  # a target inventing bus ids: bounded
            del self._listed[next(iter(self._listed))]

    def _gpu_health(self, now: float, gpu: GpuSample, watch: GpuWatch, out: list[Alert]) -> None:
        key = f"gpu_health:{gpu.index}"
        if gpu.health is not Health.OK:
            watch.health_calm = 0
            text = f"GPU {gpu.index}: {'; '.join(gpu.problems) or gpu.health.value}"
            facts = AlertFacts(names_gpu=True)
            self._condition(key, "gpu_health", gpu.health, gpu.index, text, now, out, facts=facts)
        elif key in self._active:
            watch.health_calm += 1
            if watch.health_calm >= self.rules.clear_samples:
                self._end(key)

    def _health_facts(self, now: float, t: float, gpu: GpuSample, out: list[Alert]) -> None:
        """The health facts (``alerts.health``) as ``gpu_health`` conditions, one per
        topic (``gpu_health:pcie:3``): each lasts while its fact holds; judged over the
        samples' ``t`` (``on_sample``), dated ``now``."""
        found = {f.topic: f for f in self._health.judge(t, gpu)}
        for topic in HEALTH_TOPICS:
            key = f"gpu_health:{topic}:{gpu.index}"
            finding = found.get(topic)
            if finding is not None:
                facts = AlertFacts(advice=finding.advice, names_gpu=True)
                self._condition(
                    key, "gpu_health", finding.severity, gpu.index, finding.message, now, out,
                    facts=facts,
                )  # fmt: skip
            elif key in self._active:
                self._end(key)

    def _foreign(self, now: float, gpu: GpuSample, sample: HostSample, out: list[Alert]) -> None:
        """``foreign_process`` (warning) while another container or the host holds memory
        on ``gpu``: the classic cause of an OOM that no tool inside the CT can see."""
        key = f"foreign_process:{gpu.index}"
        held = foreign_held(sample.processes_for(gpu), self.container)
        if held is not None:
            text = held_on(gpu.index, held)
            self.last_foreign[gpu.index] = (now, text)
            facts = AlertFacts(held=held, names_gpu=True)
            self._condition(
                key, "foreign_process", Health.WARNING, gpu.index, text, now, out, facts=facts
            )
        elif key in self._active:
            self._end(key)

    def foreign_holder(self, gpu: int, now: float, within_s: float = 60.0) -> str | None:
        """Who else held memory on ``gpu`` lately (``GPU 6: 6.0 GiB held by CT 201 ...``):
        a crash verdict names them even when they died with the job."""
        seen = self.last_foreign.get(gpu)
        return seen[1] if seen is not None and now - seen[0] <= within_s else None

    def _mig_slices(
        self, now: float, t: float, gpu: GpuSample, sample: HostSample, out: list[Alert]
    ) -> None:
        """``memory`` and ``time_to_full`` of each GPU instance of ``gpu`` (in MIG mode),
        judged on its own memory as a GPU's are (key ``KIND:GPU:giID``); the conditions of
        an instance gone (or of instances no longer read) end."""
        seen: set[str] = set()
        for inst in sample.mig_instances(gpu) or ():
            part = GpuSample(
                index=gpu.index,
                uuid=gpu.uuid,
                bus_id=gpu.bus_id,
                memory_total_mib=inst.memory_total_mib,
                memory_used_mib=inst.memory_used_mib,
                memory_free_mib=inst.memory_free_mib,
            )
            fraction = part.memory_used_fraction
            if fraction is None:
                continue
            at = (gpu.index, inst.gpu_instance_id)
            watch = self._slices.get(at)
            if watch is None:
                watch = self._slices[at] = GpuWatch(gpu.index)
            suffix = f":{gpu.index}:gi{inst.gpu_instance_id}"
            seen |= {"memory" + suffix, "time_to_full" + suffix}
            label = f"GPU {gpu.index} MIG {inst.name}"
            level = watch.memory_level(part, fraction, self.rules)
            key = "memory" + suffix
            if level is not Health.OK:
                text = label + _memory_text(part, fraction).removeprefix(f"GPU {gpu.index}")
                free = inst.memory_free_mib
                facts = AlertFacts(free_bytes=None if free is None else round(free * 2**20))
                self._condition(
                    key, "memory", level, gpu.index, text, now, out, score=fraction, facts=facts
                )
            elif key in self._active:
                self._end(key)
            self._time_to_full(now, t, part, fraction, watch, out, suffix, label)
        for key in [k for k in self._active if k.startswith(("memory:", "time_to_full:"))]:
            parts = key.split(":")
            slice_key = len(parts) == 3 and parts[2].startswith("gi")
            if slice_key and parts[1] == str(gpu.index) and key not in seen:
                self._end(key)

    def _time_to_full(
        self,
        now: float,
        t: float,
        gpu: GpuSample,
        fraction: float,
        watch: GpuWatch,
        out: list[Alert],
        suffix: str | None = None,
        label: str | None = None,
    ) -> None:
        """``time_to_full`` of ``gpu`` (key ``time_to_full:GPU``), or of a GPU instance
        of it (``suffix`` ``:GPU:giID``, named ``label``)."""
        horizon = self.rules.ttf_horizon_s
        ttf = watch.time_to_full(t, gpu, fraction, self.rules)
        key = "time_to_full" + (suffix or f":{gpu.index}")
        if horizon <= 0:
            return
        if ttf is not None and ttf <= horizon:
            watch.ttf_hits += 1
            watch.ttf_calm = 0
            if watch.ttf_hits >= self.rules.ttf_confirm or key in self._active:
                text = (
                    f"{label or f'GPU {gpu.index}'} memory full in ~{ttf:.0f} s at "
                    f"+{watch.rate:.0f} MiB/s ({fraction:.0%} used)"
                )
                facts = AlertFacts(rate=watch.rate, unit="MiB/s", names_gpu=True)
                self._condition(
                    key, "time_to_full", Health.WARNING, gpu.index, text, now, out, score=-ttf,
                    facts=facts,
                )  # fmt: skip
                if suffix is None:
                    watch.alert_ttf = round(ttf)  # as its words say it
            return
        watch.ttf_hits = 0
        if key in self._active and (ttf is None or ttf > horizon * 1.25):
            watch.ttf_calm += 1
            if watch.ttf_calm >= self.rules.clear_samples:
                self._end(key)

    def _oom_death(
        self,
        now: float,
        gpu: GpuSample,
        fraction: float,
        death: tuple[float, float],
        out: list[Alert],
    ) -> None:
        peak, seconds = death
        procs = self._latest.processes_for(gpu) if self._latest else ()
        who = f" (process {', '.join(process_words(p) for p in procs)})" if procs else ""
        high = peak * 100.0 >= self.rules.memory_warning_pct
        severity = Health.CRITICAL if high else Health.WARNING
        text = (
            f"GPU {gpu.index} memory fell from {peak:.0%} to {fraction:.0%} in {seconds:.0f} s"
            f"{who}: likely OOM death"
        )
        key = f"oom_death:{gpu.index}:{now:.0f}"
        facts = AlertFacts(names_gpu=True)
        out.append(self._new(key, "oom_death", severity, gpu.index, None, text, now, facts=facts))

    def _recover_gpu(self, gpu: int, emptied_at: float) -> None:
        for alert in list(self._active.values()):
            if (
                alert.gpu == gpu
                and alert.kind in _GPU_EVENT_KINDS
                and not alert.key.startswith(PAGE_KEY)  # a condition: the page says
                and emptied_at >= alert.time - 15.0
            ):
                self._end(alert.key)

    def _expire(self, now: float) -> None:
        hung_on = {a.gpu for a in self._active.values() if a.kind == "sglang_hung"}
        for alert in list(self._active.values()):
            transient = alert.kind == "kv_cache_full" or (
                alert.kind == "sglang_error"
                and alert.severity is Health.WARNING
                and not alert.key.startswith(PAGE_KEY)  # a condition: the page says
                # a failed health check is the evidence of its server's hang while it lasts
                and not (alert.facts.health_check and alert.gpu in hung_on)
            )
            if transient and now - alert.last_seen >= TRANSIENT_S:
                self._end(alert.key)

    # --- jobs ------------------------------------------------------------------------
    def on_job_condition(
        self,
        kind: str,
        job: str,
        severity: Health,
        text: str | None,
        now: float,
        *,
        gpu: int | None = None,
        score: float = 0.0,
        facts: AlertFacts = NO_FACTS,
    ) -> list[Alert]:
        """A job's condition judged by the workloads (``job_stalled``): ``text`` raises or
        updates it (key ``KIND:JOB``), None ends it (progress resumed, the job ended);
        ``facts``: what it says, typed (the job, which its text leads with, is set)."""
        key = f"{kind}:{job}"
        if text is None:
            if key in self._active:
                self._end(key)
            return []
        raised: list[Alert] = []
        facts = replace(facts, job=job)
        self._condition(
            key, kind, severity, gpu, text, now, raised, score=score, job=job, facts=facts
        )
        return self._announce(raised)

    # --- silence ---------------------------------------------------------------------
    def on_silence(
        self,
        age_s: float | None,
        interval_s: float,
        now: float,
        *,
        error: str | None = None,
        driver: bool = False,
    ) -> list[Alert]:
        """``stale_data``: the host is connected and its newest GPU data is ``age_s``
        seconds old (None: it is not connected, or nothing is expected yet, which ends the
        alert: ``host_unreachable`` covers a lost connection). Levels:
        ``AlertRules.stale_level``. A sample ends it too (``on_sample``).

        ``error``: the host's error now (nvidia-smi's words), said in the message. With
        ``driver`` the error is the driver's own verdict (GPU lost, driver not loaded,
        version mismatch): the silence is a critical ``driver_error`` whose message is
        those words and what to do, instead of a ``stale_data`` that guesses, once the
        host has been silent ``STALE_WARNING_FLOOR_S`` (at any interval)."""
        kind = "driver_error" if driver and error else "stale_data"
        if age_s is None:
            level = Health.OK
        elif kind == "driver_error":  # its own verdict: no intervals to wait, a blip's floor
            level = Health.CRITICAL if age_s >= STALE_WARNING_FLOOR_S else Health.OK
        else:
            level = self.rules.stale_level(age_s, interval_s)
        for key in _SILENCE_KINDS:
            if key in self._active and (key != kind or level is Health.OK or age_s is None):
                self._end(key)
        raised: list[Alert] = []
        if age_s is not None and age_s >= _EARLY_KERNEL_WAIT_S and self._early_kernel:
            self._early_kernel_lines(now, raised)  # no GPU will tie them soon: say them now
        if level is Health.OK or age_s is None:
            return self._announce(raised)
        if kind == "driver_error":
            assert error is not None
            self._condition(kind, kind, Health.CRITICAL, None, error, now, raised, score=age_s)
            return self._announce(raised)
        last = time.strftime("%H:%M:%S", time.localtime(now - age_s))
        text = (
            f"no GPU data for {age_s:.0f} s while connected (last at {last}): the agent, "
            "nvidia-smi or NVML is not answering"
        )
        if error:
            text += f"; {error}"
        self._condition(kind, kind, level, None, text, now, raised, score=age_s)
        return self._announce(raised)

    def on_unreachable(
        self,
        failures: int,
        down_s: float | None,
        error: str | None,
        now: float,
        *,
        gave_up: bool = False,
    ) -> list[Alert]:
        """``host_unreachable``: ``failures`` sessions in a row failed (the connection
        refused, timed out, the name did not resolve, the agent did not start), the last
        with ``error``, and the host has sent no GPU data for ``down_s`` seconds. Levels:
        ``AlertRules.unreachable_level``; ``gave_up`` (a one-shot's only try failed: there
        is no retry to wait for) is at least a warning. None for ``down_s`` (connected,
        or stopped) ends it: the host is back."""
        key = "host_unreachable"
        level = Health.OK
        if down_s is not None:
            level = self.rules.unreachable_level(failures, down_s)
            if gave_up and failures:
                level = Health.worst(level, Health.WARNING)
        if level is Health.OK:
            if key in self._active:
                self._end(key)
            return []
        assert down_s is not None
        tries = f"{failures} attempt{'s' if failures != 1 else ''} failed"
        text = f"{error or 'no connection'} (unreachable for {down_s:.0f} s, {tries})"
        raised: list[Alert] = []
        self._condition(key, key, level, None, text, now, raised, score=down_s)
        return self._announce(raised)

    def on_spec_accept_low(self, port: int, text: str | None, now: float) -> list[Alert]:
        """``spec_accept_low`` (warning) for the server on ``port`` while ``text`` is
        given; None ends it."""
        return self._server_condition("spec_accept_low", Health.WARNING, port, text, now, 0.0)

    def on_sglang_page(
        self, port: int, text: str | None, now: float, *, gpu: int | None = None
    ) -> list[Alert]:
        """``sglang_error`` (warning, key ``sglang_page:PORT``) while the server on
        ``port`` answers a ``/metrics`` page that cannot be read (over the agent's bound,
        cut short by the close, without SGLang's metrics in it): its numbers are all unknown. None
        ends it: a readable page again, or no page at all (a stopped server is no fault)."""
        return self._server_condition(
            "sglang_error", Health.WARNING, port, text, now, 0.0, gpu, key=f"{PAGE_KEY}{port}"
        )

    def on_server_condition(
        self,
        kind: str,
        level: Health,
        port: int,
        text: str | None,
        now: float,
        *,
        score: float = 0.0,
        gpu: int | None = None,
        names_gpu: bool = False,
        schedulers: tuple[int, ...] = (),
        job: str | None = None,
        command: str | None = None,
        engine_pids: tuple[int, ...] = (),
        server_pid: int | None = None,
    ) -> list[Alert]:
        """A serving engine's condition ``kind`` (key ``KIND:PORT``) for the server on
        ``port`` while ``text`` is given; None ends it. SGLang's ``sglang_hung`` and the
        vLLM verdicts (``workloads/watch.py`` ``judge_hung``, ``judge_vllm``) come through
        here. ``score``: how bad it is (a hang's seconds without a token); ``gpu``: the
        server's (first) GPU, so what else happens on that GPU folds into its incident;
        ``names_gpu``: ``text`` names ``gpu`` itself; ``schedulers``: the server's
        scheduler PIDs, which the incident's fixes name; ``job``: the configured job the
        server is (its ``server`` key), which ``r`` restarts; ``command``: the command
        line it was started with (masked), which the fix of one that is no job says;
        ``engine_pids``, ``server_pid``: a vLLM server's engine processes and its API
        server, which the incident's fixes name."""
        return self._server_condition(
            kind,
            level,
            port,
            text,
            now,
            score,
            gpu,
            names_gpu=names_gpu,
            schedulers=schedulers,
            job=job,
            command=command,
            engine_pids=engine_pids,
            server_pid=server_pid,
        )

    def _server_condition(
        self,
        kind: str,
        level: Health,
        port: int,
        text: str | None,
        now: float,
        score: float,
        gpu: int | None = None,
        key: str | None = None,
        *,
        names_gpu: bool = False,
        schedulers: tuple[int, ...] = (),
        job: str | None = None,
        command: str | None = None,
        engine_pids: tuple[int, ...] = (),
        server_pid: int | None = None,
    ) -> list[Alert]:
        key = key or f"{kind}:{port}"
        if text is None:
            if key in self._active:
                self._end(key)
            return []
        raised: list[Alert] = []
        facts = AlertFacts(
            port=port,
            names_gpu=names_gpu,
            schedulers=schedulers,
            command=command,
            engine_pids=engine_pids,
            server_pid=server_pid,
        )
        self._condition(key, kind, level, gpu, text, now, raised, score, job=job, facts=facts)
        return self._announce(raised)

    # --- logs ---------------------------------------------------------------------------
    def on_log_lines(
        self,
        path: str,
        lines: Sequence[str],
        *,
        job: str | None = None,
        gpus: tuple[int, ...] | None = None,
        backlog: bool = False,
        cuda_visible_devices: str | None = None,
        written: float | None = None,
        engine: str | None = None,
    ) -> list[Alert]:
        """Scan new lines of the job log ``path`` (one scanner per path, kept across calls).
        ``backlog``: lines that were in the log when gpumon came, last written at
        ``written`` (the file's mtime; None: not known, now is said): history.

        ``gpus``: the physical GPUs of the job, used when a message's device number cannot be
        translated through CUDA_VISIBLE_DEVICES (``cuda_visible_devices``, e.g. read from
        /proc/PID/environ, or a ``CUDA_VISIBLE_DEVICES=`` line in the log). ``job`` and
        ``gpus`` left as None keep what an earlier call said for this path. ``engine``:
        the serving engine whose server writes it (``vllm``): its CUDA OOM is that
        engine's (``vllm_oom``, with the fix vLLM gives).
        """
        source = self._logs.pop(path, None)  # put back last: the dict is in order of use
        if source is None:
            if len(self._logs) >= LOG_SOURCES_MAX:  # the longest-silent log is forgotten
                del self._logs[next(iter(self._logs))]
            source = _LogSource(LogScanner(), job, gpus)
        elif (job is not None and job != source.job) or (gpus is not None and gpus != source.gpus):
            job = source.job if job is None else job
            gpus = source.gpus if gpus is None else gpus
            source = _LogSource(source.scanner, job, gpus, source.recent)
        self._logs[path] = source
        if source.job is not None:
            for g in source.gpus or ():
                self._jobs_by_gpu[g] = source.job
        scanner = source.scanner
        if cuda_visible_devices is not None:
            scanner.cuda_visible_devices = cuda_visible_devices
        now = self.clock()
        base = scanner.line_no
        source.recent.extend(enumerate(lines, start=base + 1))
        events = scanner.scan(lines) + scanner.flush()
        if engine is not None:
            events = [engine_event(e, engine) for e in events]
        raised: list[Alert] = []
        if backlog:
            self._backlog_events(path, source, events, lines, base, now, written)
            return []
        if source.job is not None and any(line.strip() for line in lines):
            self._job_log_written(source.job, now)
        if not events and any(line.strip() for line in lines):
            self._log_activity(path, now)
        for event in events:
            alert = self._log_event(path, source, event, now, active=True)
            if alert is not None:
                raised.append(alert)
        self._expire(now)
        return self._announce(raised)

    def _log_activity(self, path: str, now: float) -> None:
        prefix = log_key_prefix(path)
        for alert in list(self._active.values()):
            if (
                alert.key.startswith(prefix)
                and alert.kind in _FAILURE_KINDS
                # a server whose health check failed is no dead process: its log goes on
                # (its tokenizer's lines) while it hangs; _expire ends it
                and not alert.facts.health_check
                and now - alert.last_seen >= LOG_RECOVERY_S
            ):
                self._end(alert.key)

    def _backlog_events(
        self,
        path: str,
        source: _LogSource,
        events: list[LogEvent],
        lines: Sequence[str],
        base: int,
        now: float,
        written: float | None,
    ) -> None:
        """History, dated by the file's last write: a 3-day-old OOM is not news. Where the
        log ends in a failure and names a configured job, that job may still be down:
        ``judge_job_down`` says so once the processes are known."""
        at = now if written is None else min(written, now)
        for event in events:
            self._log_event(path, source, event, at, active=False, past=True)
        failures = [e for e in events if e.kind in _FAILURE_KINDS and e.severity is Health.CRITICAL]
        if not failures or source.job is None:
            return
        last = failures[-1]
        after = lines[last.line_no - base :]
        if sum(1 for line in after if line.strip()) <= BACKLOG_END_LINES:
            gpu, text, facts = self._event_text(last, source)
            facts = replace(facts, failure=last.kind)
            lines_to = tuple(source.lines_to(last.line_no))
            self._ended_in[source.job] = _LogEnd(last.severity, gpu, text, at, lines_to, facts)

    def jobs_ended_in_failure(self) -> list[str]:
        """The configured jobs whose log ended in a failure when gpumon came and that are
        not known to run again: ``judge_job_down`` them."""
        return [*self._ended_in, *(job for job in self._down if job not in self._ended_in)]

    def judge_job_down(self, job: str, down: bool, now: float) -> None:
        """``job``, whose log ended in a failure when gpumon came: ``down`` (no process
        holds its GPUs) raises the one ``job_crashed`` condition, dated by that line, in
        its words; not down, it runs again and the failure is history only. Announced to
        no listener (nothing restarts a job behind the user's back, no toast rings for a
        past failure); the incident says it, and notifiers that want job_crashed hear it."""
        key = f"{JOB_DOWN_KEY}{job}"
        if not down:
            self.job_runs_again(job)
            return
        end = self._ended_in.pop(job, None)
        if end is None or key in self._active:
            return
        self._down.add(job)
        self._new(key, "job_crashed", end.severity, end.gpu, job, end.text, end.at, facts=end.facts)
        self._keep_source(key, end.lines)

    def _job_log_written(self, job: str, now: float) -> None:
        """The log of ``job`` got lines: ``LOG_RECOVERY_S`` after the failure it had
        ended in, a new run (sooner, the crash's aftermath: a dead process writes nothing
        for long)."""
        key = f"{JOB_DOWN_KEY}{job}"
        end = self._ended_in.get(job)
        since = end.at if end is not None else None
        if since is None and key in self._active:
            since = self._active[key].time
        if since is not None and now - since >= LOG_RECOVERY_S:
            self.job_runs_again(job)

    def job_runs_again(self, job: str) -> None:
        """``job`` runs again (its log written, its GPUs held, a restart): the failure its
        log ended in is history only; its job-down condition ends."""
        self._ended_in.pop(job, None)
        self._down.discard(job)
        key = f"{JOB_DOWN_KEY}{job}"
        if key in self._active:
            self._end(key)

    def _log_event(
        self,
        path: str,
        source: _LogSource,
        event: LogEvent,
        now: float,
        *,
        active: bool,
        past: bool = False,
    ) -> Alert | None:
        gpu, text, facts = self._event_text(event, source)
        if past and not active:
            text += " (before gpumon started)"
            facts = replace(facts, line=f"{facts.line} (before gpumon started)")
        identity = ("log", path, event.kind, gpu)
        if self._coalesce(identity, event.severity, text, now, past and not active, facts):
            return None
        key = f"{log_key_prefix(path)}{event.line_no}"
        alert = self._new(
            key, event.kind, event.severity, gpu, source.job, text, now, active, facts=facts
        )
        self._keep_source(key, source.lines_to(event.line_no))
        self._repeat[identity] = key
        return None if past else alert

    def _event_text(
        self, event: LogEvent, source: _LogSource
    ) -> tuple[int | None, str, AlertFacts]:
        """(the event's physical GPU, its alert text: the line's words and, in brackets,
        how its GPU was told, and its facts: the line's words, what a memory failure
        tried and had free)."""
        gpu, note = self._event_gpu(event, source.gpus)
        head = f"{event.context}: {event.message}" if event.context else event.message
        facts = AlertFacts(
            tried_bytes=event.tried_bytes,
            free_bytes=event.free_bytes,
            in_use_bytes=event.in_use_bytes,
            in_use_by_pid=event.in_use_by_pid,
            line=" ".join(head.split()),
            detail=event.detail,
            health_check=event.health_check,
            # the log's own words name the GPU (what gpumon adds is the note)
            names_gpu=gpu is not None and f"GPU {gpu}" in head,
        )
        return gpu, f"{head} [{note}]" if note else head, facts

    def _event_gpu(self, event: LogEvent, gpus: tuple[int, ...] | None) -> tuple[int | None, str]:
        if event.gpu is not None:
            return event.gpu, event.gpu_note
        if event.gpu_uuid is not None and self._latest is not None:
            ref = self._latest.gpu_refs.uuid(event.gpu_uuid)
            if ref is not None and ref.index is not None:
                return ref.index, f"{event.gpu_note} = {ref}"
            sliced = self._latest.mig_device(event.gpu_uuid)  # CUDA_VISIBLE_DEVICES=MIG-...
            ref = None if sliced is None else self._latest.gpu_refs.uuid(sliced[0].gpu_uuid)
            if sliced is not None and ref is not None and ref.index is not None:
                return ref.index, f"{event.gpu_note} = GPU {ref.index} MIG {sliced[0].name}"
        k = event.local_gpu
        if gpus and len(gpus) == 1:
            note = (
                f"GPU {k} (process-local) = GPU {gpus[0]}, the job's GPU" if k is not None else ""
            )
            return gpus[0], note
        if k is not None and gpus and k not in gpus and k < len(gpus):
            return gpus[k], f"process GPU {k} = GPU {gpus[k]} (job GPUs {','.join(map(str, gpus))})"
        return k, event.gpu_note

    # --- kernel log and cgroup --------------------------------------------------------
    def on_kernel_lines(self, lines: Sequence[str], *, backlog: bool = False) -> list[Alert]:
        """Xid and OOM-killer lines (dmesg / journalctl -k / kmsg). Repeated lines are ignored."""
        now = self.clock()
        raised: list[Alert] = []
        self._note_other_xids(lines, now)
        for line in lines:
            if kernel_log_unreadable(line):
                self.note(f"kernel log not readable here: {line.strip()[:160]}")
                continue
            if "NVRM" not in line and "Kill" not in line and "oom-kill" not in line:
                continue
            if line in self._kernel_seen:
                continue
            self._remember_kernel_line(line)
            if self._latest is None and not backlog and len(self._early_kernel) < _EARLY_MAX:
                self._early_kernel.append(line)  # an Xid's bus is a GPU once one is listed
                continue
            alert = self._kernel_line(line, now, backlog)
            if alert is not None and not backlog:
                raised.append(alert)
        return self._announce(raised)

    def _early_kernel_lines(self, now: float, raised: list[Alert]) -> None:
        """The kernel lines held until the first sample (``on_kernel_lines``): the GPUs'
        bus IDs now tie their Xids; without a sample after a silence they go as they are."""
        early, self._early_kernel = self._early_kernel, []
        self._note_other_xids(early, now)
        for line in early:
            alert = self._kernel_line(line, now, False)
            if alert is not None:
                raised.append(alert)

    def _note_other_xids(self, lines: Sequence[str], now: float) -> None:
        """When each bus last had an Xid other than 45, counting the whole read (a 45's
        cause can follow it in the same read): the company that makes a 45 not solo."""
        for line in lines:
            xid = parse_xid_line(line) if line not in self._kernel_seen else None
            if xid is not None and xid.xid != 45:
                self._other_xid_at[xid.pci] = now

    def _alone(self, xid: XidEvent, now: float) -> bool:
        """Whether an Xid came without another on its bus within ``XID_45_COMPANY_S``."""
        at = self._other_xid_at.get(xid.pci)
        return at is None or now - at > XID_45_COMPANY_S

    def _remember_kernel_line(self, line: str) -> None:
        self._kernel_seen.add(line)
        self._kernel_order.append(line)
        if len(self._kernel_order) > _KERNEL_SEEN_MAX:
            self._kernel_seen.discard(self._kernel_order.popleft())

    def _kernel_line(self, line: str, now: float, backlog: bool) -> Alert | None:
        gpus = self._latest.gpus if self._latest is not None else ()
        if "NVRM" in line:
            at = parse_gpu_at_line(line)
            if at is not None:
                self._pci_uuid[at[0]] = at[1]
            xid = parse_xid_line(line)
            if xid is None:
                return None
            alone = self._alone(xid, now)
            level = xid_level(xid.xid, xid.message, alone=alone)
            if not level.alarming:  # informational: counted by the exporter only
                return None
            refs = self._latest.gpu_refs if self._latest is not None else GpuRegistry()
            ref = refs.bus(xid.pci) or refs.uuid(self._pci_uuid.get(xid.pci))
            gpu = None if ref is None else ref.index
            whose = self._xid_whose(xid, gpu)
            text = xid.describe(gpu, whose, alone=alone)
            if ref is None:  # not one of the watched GPUs: its bus, and its uuid if said
                ref = GpuRef(None, self._pci_uuid.get(xid.pci), bus_id_key(xid.pci))
            meaning = xid_info(xid.xid, alone=alone).meaning
            action = xid_action(xid.xid, xid.message, alone=alone)
            facts = AlertFacts(gpu=ref, xid=XidFacts(xid.xid, meaning, action, whose))
            alert = self._event(
                ("xid", xid.pci, xid.xid), "xid", level, gpu, text, now, backlog, facts
            )
            if alert is not None:
                self._keep_source(alert.key, [line])
                if whose is None and gpu is not None and not self._processes_seen:
                    self._whose_pending[alert.key] = (xid, gpu, alone)
            if alert is not None and not backlog:
                self.xid_counts[(gpu, xid.xid, level, action)] += 1
            return alert
        memcg = parse_oom_memcg(line)
        if memcg is not None:
            self._memcg = memcg
            return None
        kill = parse_host_oom_kill(line)
        if kill is None:
            return None
        latest = self._latest
        on_gpu = (
            g for g in gpus if latest and any(p.pid == kill.pid for p in latest.processes_for(g))
        )
        gpu = next((g.index for g in on_gpu), None)
        text, self._memcg = kill.describe(self._memcg), None
        ident = ("host_oom_kill", kill.pid)
        alert = self._event(ident, "host_oom_kill", Health.CRITICAL, gpu, text, now, backlog)
        if alert is not None:
            self._keep_source(alert.key, [line])
        return alert

    def _xid_whose(
        self, xid: XidEvent, gpu: int | None, latest: HostSample | None = None
    ) -> str | None:
        """What the Xid's GPU is to this host: what runs on a watched GPU without a job
        (the job is said by the alert's job: "running sglang::scheduler_TP0"); for a bus
        none of the watched GPUs has, that it is not ours, and whose it is when the Proxmox
        host's process list has a process on it ("not a GPU of this host: CT 201's");
        ``latest``: the sample to read (the newest one by default)."""
        latest = latest or self._with_list or self._latest
        if latest is None or not latest.gpus:
            return None  # nothing known yet to tell ours from others'
        if gpu is not None:
            if self._job_for(gpu) is not None:
                return None
            sample = next((g for g in latest.gpus if g.index == gpu), None)
            procs = latest.processes_for(sample) if sample is not None else ()
            names = list(dict.fromkeys(p.short_name for p in procs if p.short_name))
            more = f" (+{len(names) - 2} more)" if len(names) > 2 else ""
            return f"running {', '.join(names[:2])}{more}" if names else None
        owners = {
            container_label(p.container)
            for p in latest.processes
            if p.gpu_bus_id is not None and pci_key(p.gpu_bus_id) == xid.pci
        }
        owners.discard(container_label(None if self.container is None else str(self.container)))
        if owners:
            whose = ", ".join(
                sorted("the host" if o == "host" else o.replace("CT", "CT ", 1) for o in owners)
            )
            return f"not a GPU of this host: {whose}'s"
        return "not a GPU of this host: another container's or the host's"

    def on_memory_events(self, text: str) -> list[Alert]:
        """cgroup v2 ``memory.events``: an ``oom_kill`` counter that rose raises an alert.

        The first reading (and any reading lower than the last, a new cgroup) is the baseline.
        """
        count = parse_memory_events(text).get("oom_kill")
        if count is None:
            return []
        before, self._oom_kills = self._oom_kills, count
        if before is None or count <= before:
            return []
        now = self.clock()
        ident = ("cgroup_oom_kill", "memory.events")
        if self._repeat.get(ident) not in self._active:
            self._oom_kill_base = before  # counted from here while the alert lasts
        base = self._oom_kill_base
        text = (
            f"container memory limit: {count - base} process(es) OOM-killed "
            f"(memory.events oom_kill {base} -> {count})"
        )
        alert = self._event(ident, "cgroup_oom_kill", Health.CRITICAL, None, text, now, False)
        return self._announce([alert] if alert is not None else [])


def log_key_prefix(path: str) -> str:
    """Key prefix of every alert raised from the log ``path`` (for ``clear``)."""
    return f"log:{path}:"


def _idle_holder(gpu: GpuSample, sample: HostSample) -> Held | None:
    """Who holds ``gpu`` idle: its biggest holder (``K`` stops it), how much all of them
    hold and how many others do; None where the process list names none."""
    procs = sorted(sample.processes_for(gpu), key=lambda p: -(p.memory_mib or 0))
    if not procs:
        return None
    first = procs[0]
    total = sum(p.memory_mib or 0 for p in procs)
    return Held(total, Holder(first.container, first.host_pid, first.short_name), len(procs) - 1)


def _holders(procs: list[GpuProcess]) -> str:
    """``held by PID 4242 python train.py in CT200 (+2 more)``, the biggest first; what
    to say when the process list has none."""
    if not procs:
        return "no process listed on it (another container's? host_processes shows them)"
    procs.sort(key=lambda p: -(p.memory_mib or 0))
    first = procs[0]
    words = process_words(first)
    if first.pid is not None:
        words = f"PID {words}"
    more = f" (+{len(procs) - 1} more)" if len(procs) > 1 else ""
    return f"held by {words}{more}"


def _memory_text(gpu: GpuSample, fraction: float) -> str:
    free = gpu.memory_free_mib
    tail = f", {free / MIB_PER_GIB:.1f} GiB free" if free is not None else ""
    return f"GPU {gpu.index} memory {fraction * 100.0:.1f}% used{tail}"


def check_level(engine: AlertEngine, sample: HostSample) -> tuple[Health, str]:
    """For ``gpumon check``: feed ``sample``, then the worst active alert and its message."""
    engine.on_sample(sample)
    alerts = engine.active()
    if not alerts:
        return Health.OK, "no alerts"
    top = alerts[0]
    more = f" (+{len(alerts) - 1} more)" if len(alerts) > 1 else ""
    return top.severity, top.message + more
