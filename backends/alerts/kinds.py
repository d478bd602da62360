"""Every alert kind, declared once: what it is, what it is called, how well it explains an
incident, and which families it belongs to. Every list of kinds gpumon keeps is derived
from ``ALERT_KINDS`` (the store's condition kinds, the incidents' cause order, the
dashboard's titles, the notifier filter, the exporter's zero series, the subsets the
engine, the automatic restart, the bundle and the replay act on), and ``docs/alerts.md``
is generated from it.

Adding a kind:

1. one ``AlertKind`` in ``ALERT_KINDS`` below, where the docs and the exporter should list
   it: its name, nature, title, cause rank, tags and documentation;
2. its rule: a method of ``AlertEngine`` (``engine.py``) that calls ``_condition`` or
   ``_new`` with the kind, or a source that calls ``AlertStore.raise_alert``, with what
   the alert says as its ``AlertFacts`` (``facts.py``: the outputs render from those,
   never from its message; a message that names its GPU says ``names_gpu``, else the
   headline adds "(GPU 6)");
3. its test (``tests/unit/``), and ``python -m gpumon.backends.alerts.kinds > docs/alerts.md``.

``tests/unit/test_alert_kinds.py`` fails when a kind the code raises is not declared here,
and when ``docs/alerts.md`` is not what this module writes.

A kind's tags are the families other code asks for by ``tagged(...)`` (never a list of
names of its own): a new kind that is an OOM is counted by the exporter's OOM counter
because it says ``Tag.OOM``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from gpumon.backends.untrusted import printable

__all__ = [
    "ALERT_KINDS",
    "CAUSE_ORDER",
    "CONDITION_KINDS",
    "KINDS",
    "NOTE_KINDS",
    "TAG_MEANING",
    "AlertKind",
    "Nature",
    "Tag",
    "alert_kind",
    "cause_rank",
    "kind_title",
    "reference",
    "tagged",
]


class Nature(enum.StrEnum):
    """How an alert of a kind ends."""

    CONDITION = "condition"  # lasts while its condition holds: acknowledging only silences it
    EVENT = "event"  # happened once: acknowledging it ends it


class Tag(enum.StrEnum):
    """The families of kinds the code acts on (``TAG_MEANING`` says who asks for each)."""

    OOM = "oom"
    CRASH = "crash"
    LOG_FAILURE = "log_failure"
    RESTART_FIXES = "restart_fixes"
    RAN_OUT = "ran_out"
    HUNG = "hung"
    SILENCE = "silence"
    IDLE = "idle"
    JOB_PROGRESS = "job_progress"
    SGLANG = "sglang"
    ACTION = "action"
    FROM_SAMPLES = "from_samples"


TAG_MEANING: dict[Tag, str] = {
    Tag.OOM: "a process or a container killed for memory: the exporter's "
    "`gpumon_oom_events_total` counts its critical alerts",
    Tag.CRASH: "a job died: a job with `auto_restart` is restarted on it",
    Tag.LOG_FAILURE: "a failure a log line says: it ends when the log goes on 30 s later "
    "(a new run); the failure a configured job's log ends in makes it a job down; with "
    "`crash`, what the jobs pane says a job died of",
    Tag.RESTART_FIXES: "a restart of its job fixes it: its incident offers the restart",
    Tag.RAN_OUT: "says a GPU ran out of memory: another container's memory held there "
    "(`foreign_process`) is its incident's cause",
    Tag.HUNG: "something stopped making progress: `gpumon bundle` takes its processes' "
    "stacks (py-spy)",
    Tag.SILENCE: "the host sends no data: a sample ends it, the header marks the data stale",
    Tag.IDLE: "GPUs held and idle, judged together",
    Tag.JOB_PROGRESS: "about a job's progress: its message leads with the job",
    Tag.SGLANG: "about a serving engine's server (SGLang, vLLM): its log, its `/metrics` "
    "page, its traffic",
    Tag.ACTION: "what gpumon did, not a failure: notifiers hear it as the action of the "
    "crash's incident, never as an incident of its own",
    Tag.FROM_SAMPLES: "an event the GPU samples raise by themselves: a replayed recording "
    "derives it again from its samples",
}


# One constant per kind, found by its name (``KINDS``): two kinds are the same kind only
# if the same object, so identity is their equality and hash; never printed whole. No
# generated __eq__, __hash__ or __repr__, each compiled at import on the one-shot's path
# (issue 41).
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class AlertKind:
    """One alert kind.

    ``title``: what a notification's title and the alert's detail call it ("CUDA out of
    memory"); ``cause_rank``: how well it explains an incident it is in, lower first (the
    CUDA OOM line before the crash, before the memory drop, before the memory condition);
    ``note``: its alerts are notes (``Health.INFO``): on the dashboard's alert list and
    history, never a reason for ``check``'s exit code, the strip, a toast, or a
    notifier's message unless its ``kinds`` names it; ``doc``: one line, what raises it;
    ``details``: the rest of the reference (markdown), its levels and how it ends.
    Declared in the order the docs and the exporter list the kinds."""

    name: str
    nature: Nature
    title: str
    cause_rank: int
    doc: str
    tags: frozenset[Tag] = frozenset()
    note: bool = False
    details: str = ""

    @property
    def notified_by_default(self) -> bool:
        """Whether a notifier without ``kinds`` gets it (a note: only where named)."""
        return not self.note


def _kind(
    name: str,
    nature: Nature,
    title: str,
    cause_rank: int,
    doc: str,
    *tags: Tag,
    note: bool = False,
    details: str = "",
) -> AlertKind:
    return AlertKind(name, nature, title, cause_rank, doc, frozenset(tags), note, details)


C, E = Nature.CONDITION, Nature.EVENT

ALERT_KINDS: tuple[AlertKind, ...] = (
    _kind(
        "memory",
        C,
        "GPU memory",
        170,
        "A GPU's memory is nearly full (key `memory:GPU`); on a GPU in MIG mode, a GPU "
        "instance's own memory (key `memory:GPU:giID`, never the whole GPU's).",
        Tag.RAN_OUT,
        details="Warning at `memory_warning_pct` of its total or under `memory_warning_free_gib` "
        "free, critical at `memory_critical_pct`; it rises at once and steps down after "
        "`clear_samples` samples in a row `clear_margin_pct` points below the threshold.",
    ),
    _kind(
        "time_to_full",
        C,
        "Memory filling up",
        160,
        "A GPU's memory will be full within `ttf_horizon_s` at its current rate "
        "(key `time_to_full:GPU`; a GPU instance's of a GPU in MIG mode: "
        "`time_to_full:GPU:giID`).",
        Tag.RAN_OUT,
        details="Warning, for a rise sustained to a new high only: two 10 s windows back "
        "to back (two thirds of `ttf_window_s`) both rising by `ttf_min_rate_mib_s` or "
        "more, every point of the last `ttf_window_s` at or above `ttf_min_used_pct` of "
        "total (the floor of use), memory above every high it fell from in the last 10 min "
        "by 1 % of total (a refill after `empty_cache`, an oscillation climbing back, is no "
        "trend; a process leaving the GPU forgets them) and, for a rise that slows, one "
        "that would still reach full; a fall between two samples starts it again. `full in "
        "~N s at +R MiB/s (P% used)`: N x R is the memory free at P %. It is raised on the "
        "second such estimate in a row and ends when the estimate moves past a quarter "
        "more than the horizon for `clear_samples` samples.",
    ),
    _kind(
        "cuda_oom",
        E,
        "CUDA out of memory",
        10,
        "A CUDA out-of-memory line in a job's or a server's log (PyTorch, the CUDA runtime, NCCL).",
        Tag.OOM,
        Tag.CRASH,
        Tag.LOG_FAILURE,
        Tag.RESTART_FIXES,
        Tag.RAN_OUT,
        details="Critical. Its GPU is the physical one (PyTorch's device number translated "
        "through `CUDA_VISIBLE_DEVICES`). It ends when the log goes on "
        "30 s or more after it (a new run), when its GPU empties and fills again "
        "(a restarted job), on a restart, or when acknowledged.",
    ),
    _kind(
        "oom_death",
        E,
        "Likely OOM death",
        70,
        "A GPU's used memory fell from `oom_death_high_pct` to under `oom_death_low_pct` "
        "within `oom_death_window_s`: its process likely died (key `oom_death:GPU:TIME`).",
        Tag.OOM,
        Tag.CRASH,
        Tag.RESTART_FIXES,
        Tag.RAN_OUT,
        Tag.FROM_SAMPLES,
        details="Critical when the memory was at the warning level before it fell, else a "
        "warning. A job with `auto_restart` is restarted on it; the jobs pane waits for "
        "the job's log to say how it died. It ends when the GPU fills again, on a restart "
        "of its job, or when acknowledged.",
    ),
    _kind(
        "kv_cache_full",
        E,
        "KV cache full",
        110,
        "An SGLang server's log says its KV cache is full.",
        Tag.SGLANG,
        details="Warning; ends after 120 s without a repeat.",
    ),
    _kind(
        "xid",
        E,
        "Xid error",
        40,
        "A kernel-log Xid: level, meaning and NVIDIA's action from gpumon's Xid table "
        "(`backends/parsers/xid.py`, listed in docs/fleet.md).",
        details="Warning or critical as the Xid table says; informational Xids raise none "
        "(they are counted by `gpumon_xid_events_total` with the level `info`). It ends "
        "when acknowledged or cleared.",
    ),
    _kind(
        "host_oom_kill",
        E,
        "OOM killer",
        20,
        "The kernel's OOM killer killed a process (its GPU where the process held one).",
        Tag.OOM,
        Tag.RESTART_FIXES,
        details="Critical; ends when acknowledged or cleared.",
    ),
    _kind(
        "cgroup_oom_kill",
        E,
        "Container OOM kill",
        30,
        "A container's memory cgroup killed a process (its `memory.events` `oom_kill` count rose).",
        Tag.OOM,
        Tag.RESTART_FIXES,
        details="Critical; ends when acknowledged or cleared.",
    ),
    _kind(
        "gpu_health",
        C,
        "GPU health",
        80,
        "A GPU's error cell, a GPU the host lists that cannot be read, a GPU that is gone, "
        "or one of the driver's health facts (key `gpu_health:GPU`, "
        "`gpu_health:TOPIC:GPU`).",
        details="An error cell, a GPU the host lists but that cannot be read (nvidia-smi's "
        "`Unable to determine the device handle for GPU…` in place of its row, NVML "
        "refusing its handle: critical, in the driver's words; a row of it that does not "
        "parse: a warning), or a GPU seen before that is no longer listed, told apart by "
        "bus id: critical; and the driver's health facts, one condition per fact while it "
        "holds: a PCIe link narrower than its maximum, `GPU 3 PCIe link at x4 of x16: "
        "downtrained; transfers 4x slower` (warning; a lower link generation is the driver "
        "saving power at idle and never alerts), a hardware, hardware thermal, hardware "
        "power-brake or software thermal slowdown in 20 % of the samples of the last 5 min "
        "(warning; idle, applications clocks, power cap and sync boost never alert), "
        "uncorrected ECC errors (critical) or 1 corrected error a minute or more over 5 min "
        "(warning), rows waiting to be remapped or pages to be retired, `reset the GPU at "
        "the next chance` (warning), a failed row remap, `RMA criterion` (critical), a "
        "recovery action NVML recommends, reset, reboot, drain, recover the IMEX domain, a "
        "PCIe bus reset or a system reboot (critical); each one's incident offers its "
        "advice as the fix, `reset the GPU (nvidia-smi -r -i 3) at the next chance`, with "
        "`gpumon bundle HOST` for a critical one, never a restart.",
    ),
    _kind(
        "job_crashed",
        E,
        "Job crashed",
        60,
        "An uncaught exception in a job's log; or, a condition, a configured job still down "
        "since the failure its log ended in when gpumon came, dated by that line "
        "(key `job_crashed:JOB`).",
        Tag.CRASH,
        Tag.LOG_FAILURE,
        Tag.RESTART_FIXES,
        Tag.RAN_OUT,
        details="A warning for an exception in the log, ending as `cuda_oom` does; the "
        "condition is critical, as the failure its log ended in (a CUDA OOM's line makes "
        "its headline say the OOM), and ends when the job runs again (its GPUs held, its "
        "log written 30 s after the failure, a restart). Neither is announced for a log's "
        "backlog: nothing restarts a job behind the user's back for a past failure.",
    ),
    _kind(
        "sglang_error",
        E,
        "SGLang error",
        100,
        "An SGLang process crashed, its watchdog killed the server, a health check failed, "
        "or, a condition, its `/metrics` page cannot be read (key `sglang_page:PORT`).",
        Tag.LOG_FAILURE,
        Tag.SGLANG,
        details="An SGLang process crashed, or its watchdog killed the server: critical, e.g. "
        "`SGLang watchdog: the scheduler was stuck 300 s; the server is being killed "
        "(SIGQUIT)` from `Watchdog timeout (self.watchdog_timeout=300)` of SGLang up to "
        "0.5.6 or `Scheduler watchdog timeout (…, self.soft=False)` from 0.5.7; a failed "
        "health check, or the dump of `--soft-watchdog-timeout` while the server keeps "
        "running, `SGLang watchdog dump (soft): the scheduler was stuck 300 s`: warning "
        "(ends after 120 s without a repeat, a failed health check not while its server is "
        "`sglang_hung`); and a warning while a server answers "
        "`/metrics` with a page that cannot be read, two scrapes in a row: over 8 MiB, cut "
        "short by the close, or without SGLang's metrics in it, e.g. `sglang :24061 "
        "/metrics page larger than 8 MiB: not read`, ending when a page reads again or no "
        "page comes at all: a stopped server, refused or silent, raises nothing.",
    ),
    _kind(
        "auto_restart",
        E,
        "Automatic restart",
        190,
        "What gpumon decided about a job's crash under `auto_restart`: a restart due, or "
        "that it gave up.",
        Tag.ACTION,
        details="A warning for a restart due, critical when it gave up. Notifiers hear it as "
        "the crash's incident's action, never as an incident of its own.",
    ),
    _kind(
        "job_restarted",
        E,
        "Job restarted",
        300,
        "A job was restarted or started through gpumon (by a person, headless, or "
        "`auto_restart`): by whom, when and its new PID.",
        Tag.ACTION,
        note=True,
        details="A note (`info`) raised ended, as its incident's record: `restarted by root "
        "at 05:40:13 (new PID 2433201)`. The incident keeps its cause as its headline, the "
        "restart is said in its detail and its bundle, and the job's alerts raised after it "
        "are a new incident.",
    ),
    _kind(
        "foreign_process",
        C,
        "Foreign process",
        220,
        "A process of another container or of the host holds memory on a watched GPU.",
        details="Warning, while it holds the memory; it names the holder "
        "(`GPU 6: 6.0 GiB held by CT 201 jupyter-lab`) and, in an incident of a GPU that "
        "ran out, is its cause.",
    ),
    _kind(
        "stale_data",
        C,
        "No data",
        140,
        "Connected, no GPU data for a few intervals (key `stale_data`).",
        Tag.SILENCE,
        details="Warning after `stale_warning_intervals` sampling intervals, critical after "
        "`stale_critical_intervals`; a sample ends it.",
    ),
    _kind(
        "driver_error",
        C,
        "Driver error",
        120,
        "nvidia-smi fails with the driver's own verdict, e.g. `GPU is lost` (key `driver_error`).",
        Tag.SILENCE,
        details="Critical, in the driver's words; a sample ends it.",
    ),
    _kind(
        "host_unreachable",
        C,
        "Host unreachable",
        130,
        "Sessions to the host keep failing (key `host_unreachable`).",
        details="Warning after 3 failed sessions or 30 s, critical after "
        "`unreachable_critical_s`; a one-shot that could not connect says it as a warning. "
        "It ends when data comes again.",
    ),
    _kind(
        "gpu_idle_held",
        C,
        "GPU held and idle",
        150,
        "A GPU holds memory and does nothing (key `gpu_idle_held:GPU`, or "
        "`gpu_idle_held:job:NAME` for a job's GPUs).",
        Tag.IDLE,
        details="Warning, while a GPU holds more than `idle_held_min_mib` at under "
        "`idle_util_pct` for `idle_held_after_s`; one for a job's GPUs, with `job` set and "
        "`gpu` its first; not for the GPUs of an SGLang server up and answering "
        "(`server_idle`), nor where `idle_held_ignore` names every holder. Within a day "
        "after gpumon swapped the host's torch (the audit log) it says so, `; after torch "
        "cu128 -> cu130 at 05:31 (swap by gpumon)`, and its incident offers `d` to check "
        "torch and `w` to swap back; without one, a job's GPUs offer `s` to stop the job "
        "(`s stop drafter (frees GPUs 5-7)`, from any row; the `gpus` fact), another "
        "holder `K` to stop its biggest holder (`K stop jupyter-lab`; the `held` fact). "
        "Where the GPUs report their power it names what the "
        "idle time cost so far, power x time, and at `[usage] price_per_kwh` its price: "
        "`; 4 GPUs idle 6.0 h, 14 kWh, ~2.10 EUR` (the `idle_cost` fact).",
    ),
    _kind(
        "server_idle",
        C,
        "SGLang server idle",
        210,
        "An SGLang server up and answering whose GPUs are idle as long as `gpu_idle_held` "
        "waits: a server without traffic (key `server_idle:PORT`).",
        Tag.IDLE,
        Tag.SGLANG,
        note=True,
        details="A note (`info`): on the dashboard's alert list and history, never a reason "
        "for `check`'s exit code, the strip or a toast; notifiers get it only where their "
        "`kinds` name it. A server that stops answering while its processes keep the memory "
        "is `gpu_idle_held` again.",
    ),
    _kind(
        "job_stalled",
        C,
        "Job stalled",
        50,
        "A running job's log printed no progress for `stall_after_s`, or PyTorch's NCCL "
        "watchdog timed out; a warning sooner while its GPUs spin in NCCL "
        "(key `job_stalled:JOB`).",
        Tag.HUNG,
        Tag.RESTART_FIXES,
        Tag.JOB_PROGRESS,
        details="Critical, while a running job's GPUs hold processes and its log printed no "
        "progress line (before the first one: no line at all) for `stall_after_s`, default "
        "max(5 x its median step interval, 120 s), four times that after a checkpoint save "
        "or an evaluation the log announced; at once on PyTorch's NCCL watchdog timeout "
        "lines, named by rank, GPU, operation and sequence number: `drafter stalled: rank 3 "
        "(GPU 7) timed out in ALLREDUCE #8812 after 600 s; no step for 11 min`. Before "
        "that a warning, once the next step is overdue (3 usual step intervals, at least "
        "10 s) for 20 s while every GPU of the job is at full utilisation on under 35 % of "
        "its power limit (the NCCL spin: a rank waits in a collective for a peer): "
        "`drafter stalled: no step for 21 s; GPUs 5,6,7 at 100 % utilisation on 95/96/94 W "
        "of 700 W: an NCCL spin (a rank waits in a collective for a peer)`. Once the "
        "evidence step before a restart or stop has read the job's flight-recorder dumps, "
        "it names the rank that never arrived: `drafter stalled: rank 2 (GPU 6, PID 4518) "
        "never entered all_reduce #17 (ranks 0, 1, 3 waiting 19 s)`, or the rank without a "
        "dump; the incident's detail shows each rank's last collectives (formats.md 8.1). "
        "Ends when progress resumes, the job ends or its GPUs are released.",
    ),
    _kind(
        "job_slow",
        C,
        "Job slow",
        180,
        "A running job's rate stays below `slow_below` of its baseline for `slow_for_s` "
        "(key `job_slow:JOB`).",
        Tag.JOB_PROGRESS,
        details="Warning, while a running job's rate, tokens/s else steps/s, stays below "
        "`slow_below` of its baseline for `slow_for_s`, not counting a run's first 3 minutes "
        "(its warm-up: compilation, loading) when gpumon saw the run begin (a run already "
        "going when gpumon started is judged at once); the baseline is "
        "`expect_tokens_per_s`, else the median of its previous good runs on that host, "
        "learned after each run's first 3 minutes of warm-up once it has 10 more and kept "
        "in `$XDG_STATE_HOME/gpumon/baselines/HOST.json` across restarts of the job and of "
        "gpumon: `drafter at 4.6 Ktok/s, 23 % of its usual 20.1 Ktok/s (ETA 37 d instead of "
        "8.4 d); its GPUs at 1 % utilisation (baseline run 71 %), 62 W (baseline run "
        "310 W); since the baseline: torch cu128 -> cu130 at 14:02 (swap by gpumon)`; the "
        "last part, from the audit log, names the newest `swap-torch` that took on that "
        "host after the learned baseline run started (with `expect_tokens_per_s`, within a "
        "day before the job went slow: `; after torch cu128 -> cu130 at 14:02 (swap by "
        "gpumon)`), and its incident offers `d` to check torch and `w` to swap back "
        "(`gpumon swap-torch HOST cu128`), else `d` to check torch and the GPUs (`gpumon "
        "doctor HOST`: torch against the driver, the GPUs' clocks and health); without "
        "one, a torch changed outside "
        "gpumon is named from what the doctor found (every doctor run, `gpumon doctor`, the "
        "dashboard's `d` or a swap's plan and verification, notes the host's torch in "
        "`$XDG_STATE_HOME/gpumon/torch-seen.jsonl`): `since the baseline: torch "
        "2.11.0+cu128 (doctor 09:10) -> 2.11.0+cu130 (doctor 14:02), not by gpumon`, the "
        "last torch seen at or before the baseline run's start against the newest seen "
        "since, both times said because the change lies somewhere between them. Where NVML "
        "reports a slowdown on the job's GPUs (hardware, thermal or power-brake, not the "
        "power cap a busy GPU runs at), the verdict says it after the GPUs, `; clocks held "
        "down: hardware thermal slowdown on GPU 6 (SM at 1.1 of 2.6 GHz)`, and its incident "
        "says to check the GPUs' cooling, power and the node's event log before `d`.",
    ),
    _kind(
        "sglang_hung",
        C,
        "SGLang server hung",
        90,
        "An SGLang server has requests running or queued and made no token for "
        "`hung_after_s`; a warning sooner once its log says a health check failed "
        "(key `sglang_hung:PORT`).",
        Tag.HUNG,
        Tag.SGLANG,
        details="Critical, while an SGLang server has requests running or queued and made "
        "no token for `hung_after_s`; before that a warning from the moment its log's "
        "`Health check failed.` line (no token for a `/health_generate` probe in "
        "SGLANG_HEALTH_CHECK_TIMEOUT) comes with no token since: `sglang :30000 may be "
        "hung: 37 running, no token for 27 s; /health_generate timed out (its log)`, the "
        "same alert, raised to critical at `hung_after_s`; that line's own `sglang_error` "
        "is evidence in its incident and lasts as long as it does. No token: "
        "no token counter moved between scrapes, "
        "`realtime_tokens_total` decode and prefill modes from 0.5.7, else "
        "`generation_tokens_total` / `prompt_tokens_total`, and no `Decode batch` / "
        "`Prefill batch` line in its log, dated by the line's own stamp; `gen_throughput` "
        "is not progress, it keeps its last value; e.g. `sglang :30000 hung: 37 running, "
        "no token for 94 s; /health_generate timed out (its log); last decode line at "
        "14:33:00 (94 s ago)`; a long prefill, an idle server and one that just started are "
        "not hung; it ends when tokens come again (or the server goes idle); a scrape that "
        "failed or could not be read is no token: the alert holds through it, and through "
        "the counters' span starting over after it (or the first pages' span after a "
        "verdict of its log), for up to `hung_after_s` without a judged page (a server gone "
        "that long is stopped, not hung), and ends at once when its port refuses the "
        "connection (nothing listens: stopped, not hung); the agent asks the server's "
        "`/health_generate` once it fires, at most once per `hung_after_s`; where the "
        "server's GPUs can be told (one server: the GPUs running `sglang` processes; one "
        "server per GPU) it says what they do: every rank at 95 % or more on under 35 % of "
        "its power limit is an NCCL spin, idle GPUs a hang off the GPU, and the alert "
        "carries the first GPU so that GPU's other alerts, the server log's failed health "
        "check among them, fold into the incident as evidence. Its fixes: its stacks, `py-spy "
        "dump --native --pid PID` of its scheduler (SGLang's watchdog dumps its schedulers "
        "so; not SIGQUIT, whose handler kills the process tree and dumps nothing), then, where "
        "the server is a configured job (`server = PORT`: the alert names it), `r restart "
        "NAME`, verified by `/health_generate` answering 200, and `K` on that scheduler (its "
        "PIDs are the alert's `schedulers` fact); where it is no job and discovery found "
        "it, the command line it was started with, to start it again, its secrets masked "
        "(`--api-key ****`; the `command` fact).",
    ),
    _kind(
        "spec_accept_low",
        C,
        "Drafter tokens rejected",
        200,
        "A server's speculative-decoding drafter has an accept length below "
        "`spec_accept_min` for 60 s as it decodes (key `spec_accept_low:PORT`).",
        Tag.SGLANG,
        details="Warning, e.g. `sglang :30002 drafter tokens rejected: accept length 1.04 "
        "(accept rate 1%) for 75 s, below 1.5: speculative decoding costs more than it "
        "saves`; an idle server's gauge, which keeps its last batch's value, does not count. "
        "For vLLM the mean acceptance length, `1 + accepted / drafts` over the rates of "
        "`vllm:spec_decode_num_accepted_tokens_total` and `vllm:spec_decode_num_drafts_total` "
        "(vLLM's own formula, vllm/v1/spec_decode/metrics.py), below `[hosts.NAME.vllm] "
        "spec_accept_min`; V0's pages have no drafts counter: no length, no alert.",
    ),
    _kind(
        "vllm_wedged",
        C,
        "Wedged vLLM engine",
        91,
        "A vLLM server has requests running or waiting and made no generation token for "
        "`hung_after_s`, whatever its `/health` says (key `vllm_wedged:PORT`).",
        Tag.HUNG,
        Tag.SGLANG,
        details="Critical, while a vLLM server has requests running or waiting and neither "
        "`vllm:generation_tokens_total` nor `vllm:prompt_tokens_total` moved between "
        "scrapes for `[hosts.NAME.vllm] hung_after_s` (60 s), nor did its log's periodic "
        "stats line say tokens were made (a wedged engine's log says `Avg generation "
        "throughput: 0.0 tokens/s` with requests running once, then nothing: vLLM 0.34.0's "
        "`LoggingStatLogger` logs at DEBUG once two intervals made no token, "
        "`vllm/v1/metrics/loggers.py`); e.g. `vllm :8000 wedged: 24 "
        "running, 3 waiting, no token for 94 s; /health answered 200; last stats line 12 s "
        "ago: ...`. vLLM's `/health` answers 200 while its engine loop is stuck, so the "
        "probe, asked once it fires and at most once per `hung_after_s`, is evidence, never "
        "the verdict. An idle server (nothing running or waiting) and one that just "
        "started are never wedged; it ends when tokens come again; a scrape that failed or "
        "could not be read is no token (a wedged server's page may time out too): the "
        "alert holds through it, and through the first pages' span after a verdict its "
        "log's stats line gave, for up to `hung_after_s` without a judged page, and ends "
        "at once when the port refuses the connection (`K` stopped its API server), as "
        "`sglang_hung` does. Its fixes: its engine's "
        "stacks, `py-spy dump --native --pid PID` of the processes vLLM titles "
        "`VLLM::EngineCore` and `VLLM::Worker_TP*` on its GPUs (the alert's `engine_pids` "
        "fact; the API server that answers `/health` is not where it is stuck), then, where "
        "the server is a configured job (`server = PORT`: the alert names it), `r restart "
        "NAME`, verified by `/health` answering 200; else `K` on "
        "its API server (discovery's PID, the `server_pid` fact) and its start again, with the "
        "command line it was started with where discovery found it (masked, the `command` "
        "fact).",
    ),
    _kind(
        "vllm_engine_dead",
        C,
        "Dead vLLM engine core",
        85,
        "A vLLM server's log says its engine core died while its API server still "
        "answers (key `vllm_engine_dead:PORT`).",
        Tag.SGLANG,
        details="Critical, from the log given as `[hosts.NAME.vllm] log`: V1's `EngineCore "
        "encountered a fatal error.` and `EngineDeadError` (vllm/v1/engine/core.py, "
        "exceptions.py), V0's `MQEngineDeadError` / `Engine loop is not running` and "
        "`AsyncEngineDeadError` / `Background loop has errored already`, while the server's "
        "`/metrics` still answers: every request fails until the server is restarted. The "
        "stack trace above the line in the log is the cause. It ends when the log's stats "
        "line says tokens are made again (a new engine) or the server stops answering. Its "
        "fix: `r restart NAME` where the server is a configured job (`server = PORT`), else "
        "`K` on its API server (the `server_pid` fact, from discovery) and its start "
        "again (its `command`, where discovered); a server whose PID is not known "
        "(configured ports) is said to be restarted.",
    ),
    _kind(
        "vllm_kv_pressure",
        C,
        "KV cache full (vLLM)",
        155,
        "A vLLM server's KV cache use is at least `kv_pressure_min` while requests are "
        "being preempted (key `vllm_kv_pressure:PORT`).",
        Tag.SGLANG,
        details="Warning, while `vllm:kv_cache_usage_perc` (`vllm:gpu_cache_usage_perc` "
        "before 0.9.2) is at or above `[hosts.NAME.vllm] kv_pressure_min` (0.9) and "
        "`vllm:num_preemptions_total` rose over the last scrapes: preempted requests are "
        "evicted and recomputed, so throughput falls and latency rises. The fix vLLM "
        "gives: a higher `--gpu-memory-utilization`, a lower `--max-num-seqs` or "
        "`--max-num-batched-tokens`, or more tensor parallelism.",
    ),
    _kind(
        "vllm_kv_memory",
        E,
        "No room for vLLM's KV cache",
        12,
        "A log says vLLM could not fit the KV cache its max model length needs at start-up "
        "(key `log:PATH:LINE`).",
        Tag.OOM,
        Tag.LOG_FAILURE,
        Tag.RAN_OUT,
        Tag.SGLANG,
        details="Critical, on vLLM's own words (vllm/worker/worker.py 0.6.6.post1, "
        "vllm/v1/core/kv_cache_utils.py 0.8.5 and 0.11.0, kv_cache_planning.py 0.34.0): `No "
        "available memory for the cache blocks.`, `The model's max seq len (N) is larger "
        "than the maximum number of tokens that can be stored in KV cache (M).`, `To serve "
        "at least one request with the model's max seq len (N), (X GiB KV cache is needed, "
        "which is larger than the available KV cache memory (Y GiB).` The fix is the one "
        "vLLM prints: start it with a higher `--gpu-memory-utilization` or a lower "
        "`--max-model-len`. It ends as `cuda_oom` does.",
    ),
    _kind(
        "vllm_oom",
        E,
        "CUDA out of memory (vLLM)",
        11,
        "A CUDA out-of-memory line in a vLLM server's log (`[hosts.NAME.vllm] log`) "
        "(key `log:PATH:LINE`).",
        Tag.OOM,
        Tag.LOG_FAILURE,
        Tag.RAN_OUT,
        Tag.SGLANG,
        details="Critical: `cuda_oom`'s lines (PyTorch, the CUDA runtime, NCCL, vLLM's "
        "`CUDA out of memory occurred when warming up ...`) in a vLLM server's log. vLLM "
        "takes `--gpu-memory-utilization` of the GPU for its weights and KV cache up front, "
        "so what runs out is the rest: the fix is the one vLLM prints for it "
        "(vllm/v1/worker/gpu_model_runner.py): a lower `--max-num-seqs` or "
        "`--gpu-memory-utilization`. It ends as `cuda_oom` does.",
    ),
    _kind(
        "vllm_error",
        C,
        "Unreadable vLLM page",
        105,
        "A vLLM server answers `/metrics` with a page that cannot be read, two scrapes in "
        "a row (key `vllm_error:PORT`).",
        Tag.SGLANG,
        details="Warning: over the agent's 8 MiB, cut short by the close, or without vLLM's "
        "metrics in it; it ends when a page reads again or no page comes at all.",
    ),
    _kind(
        "log_unreadable",
        E,
        "Log unreadable",
        230,
        "A watched log cannot be read: its OOM and progress lines are not seen "
        "(key `log_unreadable:PATH`).",
        details="Warning, while it cannot be read (a new reason replaces the old one); "
        "a path that is no regular file (a FIFO, a device) is `not a regular file`, "
        "never opened for reading.",
    ),
    _kind(
        "log_flood",
        E,
        "Log flood",
        240,
        "A log is written faster than the agent can scan it: bytes skipped unread "
        "(key `log_flood:PATH`).",
        details="Warning; an OOM line in what was skipped is missed.",
    ),
    _kind(
        "agent_error",
        E,
        "Agent error",
        250,
        "A thread of the agent on the target died (it is started again).",
        details="Critical.",
    ),
)
del C, E

_BY_NAME = {k.name: k for k in ALERT_KINDS}
KINDS: tuple[str, ...] = tuple(_BY_NAME)
CONDITION_KINDS = frozenset(k.name for k in ALERT_KINDS if k.nature is Nature.CONDITION)
NOTE_KINDS = frozenset(k.name for k in ALERT_KINDS if k.note)
# The kinds in the order they explain an incident: the first present leads.
CAUSE_ORDER: tuple[str, ...] = tuple(
    k.name for k in sorted(ALERT_KINDS, key=lambda k: k.cause_rank)
)
_RANK = {name: i for i, name in enumerate(CAUSE_ORDER)}


def alert_kind(name: str) -> AlertKind | None:
    """The kind called ``name``; None for a name gpumon does not raise (a recording of
    another version may hold one)."""
    return _BY_NAME.get(name)


def tagged(*tags: Tag) -> frozenset[str]:
    """The names of the kinds with every one of ``tags``."""
    return frozenset(k.name for k in ALERT_KINDS if k.tags.issuperset(tags))


def cause_rank(name: str) -> int:
    """How well kind ``name`` explains an incident (lower is better; an unknown kind
    explains least)."""
    return _RANK.get(name, len(_RANK))


def kind_title(name: str) -> str:
    """What kind ``name`` is called ("CUDA out of memory"); a kind gpumon does not declare
    (a recording of another version may hold one) by its name, made printable."""
    kind = _BY_NAME.get(name)
    return printable(name) if kind is None else kind.title


# --- the reference (docs/alerts.md) --------------------------------------------------------

REGENERATE = "python -m gpumon.backends.alerts.kinds > docs/alerts.md"


def reference(kinds: Iterable[AlertKind] = ALERT_KINDS) -> str:
    """``docs/alerts.md``: the kinds as a table, then each kind's whole entry."""
    kinds = tuple(kinds)
    out = [
        "# Alert kinds",
        "",
        "<!-- Generated from backends/alerts/kinds.py: edit the kinds there, then run",
        f"     {REGENERATE}",
        "     (tests/unit/test_alert_kinds.py fails while this file differs). -->",
        "",
        "Every alert gpumon raises has one of these kinds: the `kind` of `gpumon snapshot "
        "--json`'s alerts and incidents, of the webhook JSON and Alertmanager's labels "
        "(`alertname` `gpumon_KIND`), of `gpumon_alerts_active`, and what a notifier's "
        "`kinds` may name. A *condition* lasts while what it says holds (acknowledging it "
        "only silences it; it rings again if it gets worse); an *event* happened once "
        "(acknowledging it ends it). A *note* is shown on the dashboard's alert list and "
        "history but never makes `check` fail, the strip show it or a notifier send it "
        "unless the notifier's `kinds` names it.",
        "",
        "The *cause rank* orders the kinds by how well they explain an incident: of an "
        "incident's alerts the lowest rank is its cause, and its headline and fix are the "
        "cause's.",
        "",
        "Adding a kind is one declaration in `backends/alerts/kinds.py`, its rule (the "
        "engine, `backends/alerts/engine.py`, or the source that raises it) and its test; "
        "the module's docstring says how.",
        "",
        "| kind | nature | title | cause rank | notifiers | what raises it |",
        "|---|---|---|---|---|---|",
    ]
    for kind in kinds:
        notifiers = "only where `kinds` names it (a note)" if kind.note else "by default"
        out.append(
            f"| `{kind.name}` | {kind.nature.value} | {kind.title} | "
            f"{cause_rank(kind.name) + 1} | {notifiers} | {kind.doc} |"
        )
    out += ["", "## Tags", "", "The families the code asks for by tag (`tagged(...)`):", ""]
    for tag in Tag:
        members = ", ".join(f"`{k.name}`" for k in kinds if tag in k.tags)
        out.append(f"- `{tag.value}`: {TAG_MEANING[tag]} ({members}).")
    for kind in kinds:
        tags = ", ".join(f"`{t.value}`" for t in Tag if t in kind.tags) or "none"
        out += ["", f"## `{kind.name}`", "", f"{kind.title}: {kind.doc}"]
        if kind.details:
            out += ["", kind.details]
        out += ["", f"Tags: {tags}."]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(reference(), end="")
