"""Job-log OOM/crash scanner and kernel-log parsers against the fixtures and hostile input."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumon.backends.model import GpuRegistry, Health, parse_visible_devices, pci_key
from gpumon.backends.parsers import (
    KEEP_PATTERN,
    LogEvent,
    LogScanner,
    kernel_log_unreadable,
    parse_gpu_at_line,
    parse_host_oom_kill,
    parse_memory_events,
    parse_oom_memcg,
    parse_query_gpu,
    parse_xid_line,
    xid_level,
)
from gpumon.backends.parsers.oom import engine_event

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
NVIDIA = FIXTURES / "nvidia"
SGLANG = FIXTURES / "sglang"
GIB = 1 << 30

ALLOC_MSG = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU {gpu} has a total capacity of 94.97 GiB "
    "of which 1.23 GiB is free. Including non-PyTorch memory, this process has 93.70 GiB memory "
    "in use. Of the allocated memory 89.12 GiB is allocated by PyTorch, and 3.05 GiB is reserved "
    "by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation "
    "for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)
FRAMES = [
    "Traceback (most recent call last):",
    '  File "/srv/train.py", line 418, in <module>',
    "    main()",
    '  File "/srv/train.py", line 233, in train_step',
    "    logits = logits.float()",
    "             ^^^^^^^^^^^^^^",
]


def scan_text(text: str, cvd: str | None = None) -> list[LogEvent]:
    scanner = LogScanner(cvd)
    return scanner.scan(text.split("\n")) + scanner.flush()


def scan_file(path: Path, cvd: str | None = None) -> list[LogEvent]:
    return scan_text(path.read_text(encoding="utf-8"), cvd)


# --------------------------------------------------------------------------- fixtures


def test_the_drafter_traceback_is_one_critical_event_whose_message_is_the_key_line() -> None:
    events = scan_file(NVIDIA / "torch_oom_traceback.txt")
    assert len(events) == 1
    (e,) = events
    assert (e.kind, e.severity) == ("cuda_oom", Health.CRITICAL)
    assert e.message == (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 6 has a "
        "total capacity of 94.97 GiB of which 1.23 GiB is free."
    )
    assert e.line_no == 27  # the last line of the file
    # no CUDA_VISIBLE_DEVICES in that log: GPU 6 is the process's own number, and it says so
    assert (e.local_gpu, e.gpu) == (6, None)
    assert e.gpu_note == "GPU 6 (process-local; CUDA_VISIBLE_DEVICES unknown)"
    assert e.text.endswith("[GPU 6 (process-local; CUDA_VISIBLE_DEVICES unknown)]")


def test_the_drafter_traceback_with_known_visible_devices_names_the_physical_gpu() -> None:
    (e,) = scan_file(NVIDIA / "torch_oom_traceback.txt", cvd="0,1,2,3,4,5,6,7")
    assert (e.local_gpu, e.gpu) == (6, 6)
    (e,) = scan_file(NVIDIA / "torch_oom_traceback.txt", cvd="7,6,5,4,3,2,1,0")
    assert (e.local_gpu, e.gpu) == (6, 1)
    assert "process GPU 6 = GPU 1" in e.gpu_note


def test_alloc_conf_tail_variant() -> None:
    (e,) = scan_file(NVIDIA / "oom_variants" / "torch_oom_msg_alloc_conf_variant.txt")
    assert (e.kind, e.local_gpu) == ("cuda_oom", 6)
    assert "PYTORCH_ALLOC_CONF" not in e.message and e.message.endswith("1.23 GiB is free.")


def test_cuda_runtime_oom_and_its_hint_lines_are_one_event() -> None:
    (e,) = scan_file(NVIDIA / "oom_variants" / "cuda_runtime_oom.txt")
    assert (e.kind, e.severity) == ("cuda_oom", Health.CRITICAL)
    assert e.message == "torch.AcceleratorError: CUDA error: out of memory"
    assert e.local_gpu is None and e.gpu_note == ""


def test_sglang_scheduler_oom_fixture_gives_the_retraction_warning_and_one_oom() -> None:
    events = scan_file(NVIDIA / "oom_variants" / "sglang_scheduler_oom.txt")
    assert [(e.kind, e.severity) for e in events] == [
        ("kv_cache_full", Health.WARNING),
        ("cuda_oom", Health.CRITICAL),
    ]
    oom = events[1]
    assert oom.context == "SGLang Scheduler TP0"
    assert oom.message.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate")
    assert oom.local_gpu == 0
    assert events[0].message.startswith("Decode out of memory happened. #retracted_reqs: 1")
    # the "Received sigquit" line after it is the same crash, not a second event


def test_sglang_startup_not_enough_memory() -> None:
    (e,) = scan_file(NVIDIA / "oom_variants" / "sglang_startup_not_enough_memory.txt")
    assert (e.kind, e.severity) == ("sglang_error", Health.CRITICAL)
    assert e.message == (
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
    )
    assert e.context == "SGLang Scheduler TP0"


def test_sglang_server_oom_log_is_one_oom_on_gpu_3() -> None:
    events = scan_file(SGLANG / "server_oom.log")
    assert [(e.kind, e.local_gpu) for e in events] == [("cuda_oom", 3)]
    assert events[0].context == "SGLang Scheduler"


def test_sglang_decode_log_has_only_the_kv_pool_warning() -> None:
    events = scan_file(SGLANG / "server_decode.log")
    assert [(e.kind, e.severity) for e in events] == [("kv_cache_full", Health.WARNING)]
    assert events[0].message.startswith("KV cache pool is full. Retract requests.")
    assert not events[0].message.startswith("[")  # the timestamp prefix is stripped


# ------------------------------------------------------------------ other shapes


@pytest.mark.parametrize(
    ("line", "gpu"),
    [
        ("torch.cuda.OutOfMemoryError: " + ALLOC_MSG.format(gpu=2), 2),
        (  # torch 2.1 typo and old tail
            "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 "
            "has a total capacty of 15.78 GiB of which 3.12 MiB is free. Process 1234 has 15.77 "
            "GiB memory in use.",
            0,
        ),
        (  # torch <= 2.0
            "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 1; 15.78 GiB "
            "total capacity; 14.2 GiB already allocated; 10.5 MiB free; 14.5 GiB reserved in "
            "total by PyTorch) If reserved memory is >> allocated memory try setting "
            "max_split_size_mb to avoid fragmentation.",
            1,
        ),
        ("2026-11-29 14:33:41,207 ERROR train: " + ALLOC_MSG.format(gpu=3), 3),  # caught, logged
        ("Trial failed: OutOfMemoryError('" + ALLOC_MSG.format(gpu=4) + "')", 4),  # Ray repr
        (
            "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 1.00 GiB. GPU 5 has a "
            "total capacity of 191.98 GiB of which 0 bytes is free.",
            5,
        ),
        ("RuntimeError: CUDA error: out of memory", None),
        (
            "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling "
            "`cublasCreate(handle)`",
            None,
        ),
        ("RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED", None),
        (
            "gpu7:2418861:2418900 [3] include/alloc.h:320 NCCL WARN Cuda failure 2 'out of memory'",
            3,
        ),
        ("RuntimeError: CUDA error: out of memory on device cuda:1", 1),
    ],
)
def test_memory_failure_shapes_are_cuda_oom(line: str, gpu: int | None) -> None:
    (e,) = scan_text(line)
    assert (e.kind, e.severity, e.local_gpu) == ("cuda_oom", Health.CRITICAL, gpu)
    assert len(e.message) <= 240 and "\n" not in e.message


def test_nccl_error_with_the_oom_detail_lines_below_is_one_cuda_oom_event() -> None:
    text = "\n".join(
        [
            *FRAMES,
            "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/"
            "c10d/NCCLUtils.cpp:94, unhandled cuda error (run with NCCL_DEBUG=INFO for details), "
            "NCCL version 2.21.5",
            "ncclUnhandledCudaError: Call to CUDA function failed.",
            "Last error:",
            "Cuda failure 2 'out of memory'",
            "step 12 done",
        ]
    )
    (e,) = scan_text(text)
    assert e.kind == "cuda_oom"
    assert e.message.startswith("Cuda failure 2 'out of memory' — torch.distributed.DistBackend")
    assert e.line_no == 7  # the DistBackendError line


def test_rank_prefixed_interleaved_tracebacks_are_one_event_per_rank() -> None:
    lines = []
    for line in FRAMES:
        lines += [f"[rank0]: {line}", f"[rank1]: {line}"]
    lines += [
        "[rank1]: torch.OutOfMemoryError: " + ALLOC_MSG.format(gpu=1),
        "[rank0]: torch.OutOfMemoryError: " + ALLOC_MSG.format(gpu=0),
        "W1129 14:33:42.123000 9 torch/distributed/elastic/multiprocessing/api.py:897] "
        "Sending process 12 closing signal SIGTERM",
    ]
    events = scan_text("\n".join(lines), cvd="4,5")
    assert [(e.context, e.local_gpu, e.gpu) for e in events] == [
        ("rank 1", 1, 5),
        ("rank 0", 0, 4),
    ]
    assert all(e.message.startswith("torch.OutOfMemoryError: CUDA out of memory.") for e in events)
    assert all(not e.message.startswith("[rank") for e in events)


def test_visible_devices_from_the_log_translate_and_a_later_line_wins() -> None:
    scanner = LogScanner("0,1,2")
    events = scanner.scan(
        [
            "drafter ranks: CUDA_VISIBLE_DEVICES=5,6,7",
            *FRAMES,
            "torch.OutOfMemoryError: " + ALLOC_MSG.format(gpu=1),
        ]
    )
    assert [(e.local_gpu, e.gpu) for e in events] == [(1, 6)]
    assert events[0].gpu_note == "process GPU 1 = GPU 6 (CUDA_VISIBLE_DEVICES=5,6,7)"
    env_dump = "env: {'CUDA_VISIBLE_DEVICES': '3,2', 'HOME': '/root'}"
    (e,) = scanner.scan([env_dump, "RuntimeError: " + ALLOC_MSG.format(gpu=0)])
    assert e.gpu == 3


def test_untranslatable_device_numbers_say_why() -> None:
    (e,) = scan_text(ALLOC_MSG.format(gpu=3), cvd="5,6")
    assert e.gpu is None and e.gpu_note == "GPU 3 (not in CUDA_VISIBLE_DEVICES=5,6)"
    uuid = "GPU-2e94b7f1-c358-40da-8a67-e1f03c95d2b8"
    (e,) = scan_text(ALLOC_MSG.format(gpu=0), cvd=uuid)
    assert (e.gpu, e.gpu_uuid) == (None, uuid)
    assert parse_visible_devices("1,x,2") == (1,)
    assert parse_visible_devices("") is None and parse_visible_devices(None) is None
    assert parse_visible_devices("MIG-abc,0") == ("MIG-abc", 0)


def test_a_chained_exception_is_one_event_and_the_oom_wins() -> None:
    text = "\n".join(
        [
            *FRAMES,
            "torch.OutOfMemoryError: " + ALLOC_MSG.format(gpu=0),
            "",
            "The above exception was the direct cause of the following exception:",
            "",
            *FRAMES,
            "RuntimeError: training step failed",
        ]
    )
    events = scan_text(text)
    assert [e.kind for e in events] == ["cuda_oom"]


def test_generic_crash_waits_for_the_traceback_end_or_flush() -> None:
    scanner = LogScanner()
    assert scanner.scan([*FRAMES, "ValueError: bad shape (3, 4)"]) == []
    (e,) = scanner.flush()
    assert (e.kind, e.severity, e.message) == (
        "job_crashed",
        Health.WARNING,
        "ValueError: bad shape (3, 4)",
    )
    assert scanner.flush() == []
    (e,) = scanner.scan([*FRAMES, "KeyError: 'labels'", "next run starting"])
    assert e.message == "KeyError: 'labels'"


def test_other_output_inside_a_traceback_does_not_end_or_hide_it() -> None:
    text = "\n".join(
        [
            *FRAMES[:3],
            "[2026-08-25 14:22:03] KV cache pool is full. Retract requests. #retracted_reqs: 3",
            "Epoch 3:  42%|####      | 4200/10000 [12:01<16:36,  5.82it/s]",
            *FRAMES[3:],
            "torch._dynamo.exc.Unsupported: call_function BuiltinVariable(open) [] {}",
        ]
    )
    events = scan_text(text)
    assert [(e.kind, e.line_no) for e in events] == [("kv_cache_full", 4), ("job_crashed", 9)]
    assert events[1].message.startswith("torch._dynamo.exc.Unsupported: call_function")


def test_keyboard_interrupt_is_not_a_crash() -> None:
    assert scan_text("\n".join([*FRAMES, "KeyboardInterrupt"])) == []


def test_sglang_kv_allocator_failure_in_a_scheduler_traceback() -> None:
    text = "\n".join(
        [
            "[2026-11-29 14:21:05 TP1] Scheduler hit an exception: Traceback (most recent call "
            "last):",
            *FRAMES[1:],
            "RuntimeError: Prefill out of memory. Try to lower your batch size.",
            "Try to allocate 8192 tokens.",
            "Available tokens: 1022 (available_size=1022, evictable_size=0)",
            "",
            "[2026-11-29 14:21:05] SIGQUIT received. signum=None, frame=None. It usually means one "
            "child failed.",
        ]
    )
    (e,) = scan_text(text)
    assert (e.kind, e.severity, e.context) == (
        "sglang_error",
        Health.CRITICAL,
        "SGLang Scheduler TP1",
    )
    assert e.message == "RuntimeError: Prefill out of memory. Try to lower your batch size."


@pytest.mark.parametrize("router", ["MultiTokenizerRouter", "MultiDetokenizerRouter"])
def test_sglang_0_5_18_multi_tokenizer_router_crash_is_critical(router: str) -> None:
    """managers/multi_tokenizer_mixin.py (0.5.18 l.641/753): with --tokenizer-worker-num
    > 1 the routers log `{router} hit an exception: {traceback}` and the server dies."""
    text = "\n".join(
        [
            f"[2026-08-25 15:02:11] {router} hit an exception: Traceback (most recent call last):",
            *FRAMES[1:],
            "zmq.error.ZMQError: Address already in use (addr='ipc:///tmp/sglang_ipc_7')",
            "",
        ]
    )
    (e,) = scan_text(text)
    assert (e.kind, e.severity, e.context) == ("sglang_error", Health.CRITICAL, f"SGLang {router}")
    assert (
        e.message == "zmq.error.ZMQError: Address already in use (addr='ipc:///tmp/sglang_ipc_7')"
    )


def test_sglang_crash_lines_without_a_memory_failure() -> None:
    events = scan_text(
        "\n".join(
            [
                "[2026-08-25 15:40:59] Subprocess detokenizer (pid=42) crashed with exit code -9. "
                "Triggering SIGQUIT for cleanup...",
                "[2026-08-25 15:41:00] Health check failed. Server couldn't get a response from "
                "detokenizer for last 20 seconds.",
            ]
        )
    )
    assert [(e.kind, e.severity) for e in events] == [
        ("sglang_error", Health.CRITICAL),
        ("sglang_error", Health.WARNING),
    ]
    assert events[0].message.startswith("Subprocess detokenizer (pid=42) crashed with exit code -9")


# The watchdog lines as SGLang's own format strings print them: <= 0.5.6
# managers/scheduler_runtime_checker_mixin.py f"Watchdog timeout ({self.watchdog_timeout=})";
# 0.5.7+ utils/watchdog.py f"{self.debug_name} watchdog timeout ({self.watchdog_timeout=},
# {self.soft=})", then (hard only) 5 s later SIGQUIT to the parent.
class _Watchdog:
    """Stands in for SGLang's ``self`` so its f-strings print here as they print there."""

    def __init__(self, debug_name: str, watchdog_timeout: float, soft: bool) -> None:
        self.debug_name, self.watchdog_timeout, self.soft = debug_name, watchdog_timeout, soft

    def old_line(self) -> str:  # <= 0.5.6, verbatim
        return f"Watchdog timeout ({self.watchdog_timeout=})"

    def line(self) -> str:  # 0.5.7+, verbatim
        return f"{self.debug_name} watchdog timeout ({self.watchdog_timeout=}, {self.soft=})"


def test_the_hard_watchdog_of_every_version_is_critical_with_its_shutdown() -> None:
    old = _Watchdog("Scheduler", 300, False).old_line()
    assert old == "Watchdog timeout (self.watchdog_timeout=300)"
    new = _Watchdog("Scheduler", 300, False).line()
    assert new == "Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)"
    for line in (old, new):
        assert re.search(KEEP_PATTERN, line)  # the agent keeps it in a flood
        events = scan_text(
            "\n".join(
                [
                    "[2025-04-03 20:06:34 DP1 TP0] Scheduler debug info:",
                    f"[2025-04-03 20:06:34 DP1 TP0] {line}",
                    "",
                    "[2025-04-03 20:06:39] SIGQUIT received. signum=None, frame=None. "
                    "It usually means one child failed.",
                ]
            )
        )
        assert [(e.kind, e.severity) for e in events] == [("sglang_error", Health.CRITICAL)]
        assert events[0].message == (
            "SGLang watchdog: the scheduler was stuck 300 s; the server is being killed (SIGQUIT)"
        )
        assert events[0].context == "SGLang Scheduler DP1 TP0"


def test_the_soft_watchdog_is_a_warning_the_server_lives_on() -> None:
    for who, process in (("Scheduler", "scheduler"), ("TokenizerManager", "TokenizerManager")):
        line = _Watchdog(who, 120.0, True).line()  # --soft-watchdog-timeout 120 (a float)
        events = scan_text(f"[2026-08-25 15:41:00 TP0] {line}")
        assert [(e.kind, e.severity) for e in events] == [("sglang_error", Health.WARNING)]
        assert events[0].message == f"SGLang watchdog dump (soft): the {process} was stuck 120 s"


NEGATIVES = [
    "Killed 3 zombie workers",
    "memory usage 80%",
    "GPU memory usage: 93.2 GiB / 95.0 GiB",
    "error rate 0.1",
    "Out of memory? No: 12 GiB free",
    "2026-11-29 14:33:41,207 INFO train_drafter: step 1840/20000 loss=2.3417 mem=88.1GiB",
    "Successfully installed torch-2.7.1 nvidia-cublas-cu12-12.6.4.1",
    "Collecting nvidia-cuda-runtime-cu12==12.6.77",
    'INFO:     127.0.0.1:48230 - "GET /model_info HTTP/1.1" 200 OK',
    "INFO:     Uvicorn running on http://0.0.0.0:30003 (Press CTRL+C to quit)",
    "[2026-08-25 13:01:57] Memory pool end. avail mem=15.48 GB",
    "[2026-08-25 13:01:47] Load weight begin. avail mem=78.52 GB",
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True set to avoid fragmentation",
    "retry_on_oom: true  # retry a step that ran out of memory",
    "java.lang.OutOfMemoryError: Java heap space",
    "CUDA_VISIBLE_DEVICES is not set",
    "warning: the exception handler was replaced",
    "the scheduler watchdog is enabled",
    "    raise torch.OutOfMemoryError('CUDA out of memory.')",  # indented source, not a key line
    "NVRM: Xid (PCI:0000:18:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception",
    "Out of memory: Killed process 2433019 (python3) total-vm:209715652kB",
    "",
    "\x1b[31mERROR\x1b[0m connection reset",
]


@pytest.mark.parametrize("line", NEGATIVES)
def test_ordinary_lines_are_not_events(line: str) -> None:
    assert scan_text(line) == []


def test_a_traceback_cut_off_by_the_log_closes_and_scanning_goes_on() -> None:
    scanner = LogScanner()
    events = scanner.scan(["Traceback (most recent call last):", '  File "x.py", line 1'])
    events += scanner.scan([f"step {i}" for i in range(300)])
    events += scanner.scan(["torch.OutOfMemoryError: " + ALLOC_MSG.format(gpu=2)])
    assert [(e.kind, e.local_gpu) for e in events] == [("cuda_oom", 2)]
    assert scanner.line_no == 303


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=300), max_size=40), st.one_of(st.none(), st.text(max_size=30)))
def test_the_scanner_never_raises_on_arbitrary_text(lines: list[str], cvd: str | None) -> None:
    scanner = LogScanner(cvd)
    events = scanner.scan(lines) + scanner.flush()
    assert scanner.line_no == len(lines)
    assert all(e.severity in (Health.WARNING, Health.CRITICAL) for e in events)


_PIECES = [
    *FRAMES,
    "[rank1]: ",
    "torch.OutOfMemoryError: ",
    ALLOC_MSG,
    "CUDA_VISIBLE_DEVICES=",
    "Scheduler hit an exception: ",
    "During handling of the above exception",
    "\n",
    "GPU ",
    "Cuda failure 2 'out of memory'",
    "KV cache pool is full. Retract requests.",
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_PIECES) | st.text(max_size=8), max_size=6), max_size=30))
def test_the_scanner_never_raises_on_mixed_fragments(parts: list[list[str]]) -> None:
    lines = ["".join(p) for p in parts]
    scanner = LogScanner()
    scanner.scan(lines)
    scanner.flush()
    for line in lines:
        parse_xid_line(line)
        parse_host_oom_kill(line)
        parse_oom_memcg(line)


# --------------------------------------------------------------------------- kernel


def test_every_xid_line_of_the_dmesg_fixture() -> None:
    lines = (NVIDIA / "dmesg_xid.txt").read_text(encoding="utf-8").splitlines()
    events = [x for x in map(parse_xid_line, lines) if x is not None]
    assert [x.xid for x in events] == [
        13,
        13,
        43,
        31,
        43,
        45,
        48,
        171,
        48,
        63,
        154,
        94,
        119,
        154,
        79,
        154,
    ]
    first = events[0]
    assert (first.pci, first.pid, first.name) == ("0000:18:00", None, None)
    assert first.message.startswith("Graphics SM Warp Exception")
    assert events[3].name == "sglang::schedul" and events[3].pid == 2419020
    assert (
        events[6].message.startswith("An uncorrectable double bit error") and events[6].pid is None
    )
    levels = {x.xid: x.level for x in events if x.xid != 154}
    assert levels == {
        13: Health.WARNING,
        31: Health.WARNING,
        43: Health.INFO,
        45: Health.WARNING,  # a line read alone: the solo 45 (RESTART_FM)
        48: Health.CRITICAL,
        171: Health.CRITICAL,
        63: Health.WARNING,
        94: Health.WARNING,
        119: Health.CRITICAL,
        79: Health.CRITICAL,
    }
    assert [x.level for x in events if x.xid == 154] == [Health.CRITICAL] * 3
    # NVRM lines that are not Xid (the GSP RPC dump, "GPU has fallen off the bus") are not events
    assert sum(1 for ln in lines if "NVRM:" in ln) > len(events)


def test_xid_variants() -> None:
    mig = parse_xid_line(
        "NVRM: Xid (PCI:0000:9B:00 GPU-I:02 GPU-CI:01): 31, pid=77, name=python3, x"
    )
    assert mig is not None and (mig.pci, mig.gpu_instance, mig.compute_instance) == (
        "0000:9b:00",
        2,
        1,
    )
    kmsg = parse_xid_line(
        "6,12345,678901234,-;NVRM: Xid (PCI:0000:01:00): 95, pid=7062, Uncontained"
    )
    assert kmsg is not None and kmsg.xid == 95 and kmsg.pid == 7062
    assert xid_level(154, "changed from 0x0 (None) to 0x0 (None)") is Health.INFO
    assert xid_level(9999) is Health.WARNING
    assert parse_xid_line("Xid is a name of a river") is None


def test_pci_ids_match_between_the_kernel_and_nvidia_smi() -> None:
    assert pci_key("PCI:0000:ba:00") == pci_key("00000000:BA:00.0") == "0000:ba:00"
    assert pci_key("0001:ba:00.0") == "0001:ba:00"
    assert pci_key("not a bus id") is None and pci_key(None) is None
    gpus = parse_query_gpu((NVIDIA / "query_gpu_8x_rtxpro6000.csv").read_text()).gpus
    refs = GpuRegistry.of(gpus)
    assert [refs.bus(key) for key in ("0000:ba:00", "0000:18:00")] == [gpus[6].ref, gpus[0].ref]
    assert refs.bus("0000:99:00") is None
    at = parse_gpu_at_line(
        "[1205800.117342] NVRM: GPU at PCI:0000:18:00: GPU-6a1f0c3e-2b9d-4c57-8e14-93d0a7b2c5f1"
    )
    assert at == ("0000:18:00", "GPU-6a1f0c3e-2b9d-4c57-8e14-93d0a7b2c5f1")


def test_host_oom_killer_fixture_and_variants() -> None:
    lines = (NVIDIA / "host_oom_killer.txt").read_text(encoding="utf-8").splitlines()
    kills = [k for k in map(parse_host_oom_kill, lines) if k is not None]
    assert len(kills) == 1
    k = kills[0]
    assert (k.pid, k.comm, k.cgroup, k.anon_rss_kib, k.uid) == (
        2433019,
        "python3",
        False,
        167720008,
        100000,
    )
    assert [m for m in map(parse_oom_memcg, lines) if m] == [
        "/lxc/105/ns/user.slice/user-0.slice/session-7.scope"
    ]
    cg = parse_host_oom_kill(
        "Memory cgroup out of memory: Killed process 1562888 (convert) total-vm:2070820kB, "
        "anon-rss:863744kB, file-rss:0kB, shmem-rss:939264kB, UID:100000 pgtables:3640kB"
    )
    assert cg is not None and cg.cgroup and cg.comm == "convert"
    old = parse_host_oom_kill(
        "Out of memory: Kill process 1234 (python3) score 900 or sacrifice child"
    )
    assert old is not None and old.pid == 1234
    bare = parse_host_oom_kill("Killed process 1234 (python3) total-vm:100kB, anon-rss:50kB, file")
    assert bare is not None and bare.anon_rss_kib == 50
    for line in (
        "Killed 3 zombie workers",
        "Killed process 12 (x)",
        "oom_reaper: reaped process 1 (a)",
    ):
        assert parse_host_oom_kill(line) is None


def test_memory_events_and_unreadable_kernel_log() -> None:
    text = "low 0\nhigh 12\nmax 40\noom 3\noom_kill 2\noom_group_kill 0\ngarbage\nx y z\n"
    assert parse_memory_events(text) == {
        "low": 0,
        "high": 12,
        "max": 40,
        "oom": 3,
        "oom_kill": 2,
        "oom_group_kill": 0,
    }
    assert parse_memory_events("") == {}
    assert kernel_log_unreadable("dmesg: read kernel buffer failed: Operation not permitted")
    assert not kernel_log_unreadable("[12.3] NVRM: loading NVIDIA UNIX Open Kernel Module")


# ------------------------------------------------- issue 17 point 17: the other OOM spellings


def test_cudamallocasync_oom_names_its_device() -> None:
    """``PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync``: the allocator's own message, from
    pytorch/pytorch c10/cuda/CUDAMallocAsyncAllocator.cpp (``TORCH_CHECK_WITH(OutOfMemoryError,
    ..., "Allocation on device ", device, " would exceed allowed memory. (out of memory)",
    "\\nCurrently allocated     : ", ...)``, torch 2.x): one OOM, on the device it names."""
    events = scan_file(NVIDIA / "oom_variants" / "torch_cudamallocasync_oom.txt", "0,1,2,3")
    assert [(e.kind, e.severity, e.local_gpu, e.gpu) for e in events] == [
        ("cuda_oom", Health.CRITICAL, 3, 3)
    ]
    assert events[0].message == (
        "torch.OutOfMemoryError: Allocation on device 3 would exceed allowed memory. "
        "(out of memory)"
    )
    assert events[0].context == "rank 3"


def test_oom_logged_without_its_class_name() -> None:
    """A caught OOM logged as ``logger.error(str(e))``: str() of torch's OutOfMemoryError is
    the bare allocator text (c10/cuda/CUDACachingAllocator.cpp "CUDA out of memory. Tried to
    allocate ..."; CUDAMallocAsyncAllocator.cpp "Allocation on device N ..."): still OOMs,
    translated through the CUDA_VISIBLE_DEVICES the log printed."""
    events = scan_file(NVIDIA / "oom_variants" / "torch_oom_logged_without_class.txt")
    assert [(e.kind, e.local_gpu, e.gpu, e.line_no) for e in events] == [
        ("cuda_oom", 1, 6, 3),
        ("cuda_oom", 2, 7, 5),
    ]
    assert events[0].message.endswith("of which 1.23 GiB is free.")
    assert "Allocation on device 2 would exceed allowed memory" in events[1].message


def test_allocation_words_alone_are_not_an_oom() -> None:
    """Only the allocator's full sentence counts: a log that talks about allowed memory is
    not an OOM."""
    assert scan_text("Allocation on device 0 is within the allowed memory (out of 80 GiB)") == []
    assert scan_text("note: allocations would exceed allowed memory if batch > 64") == []


def test_an_oom_line_says_what_each_process_held_on_its_gpu() -> None:
    # c10/cuda/CUDACachingAllocator.cpp (torch 2.1 and later): "this process has" for the
    # process's own PID, "Process {pid} has" for every other one NVML lists
    [event] = scan_file(SGLANG / "server_oom.log")
    assert event.in_use_bytes == round(65.63 * GIB)
    assert event.in_use_by_pid == ((2871601, round(65.63 * GIB)), (3120877, round(12.48 * GIB)))
    # inside an LXC NVML gives the host's PID, so the own process is one of the others
    # (docs/formats.md 5.1)
    [lxc] = scan_file(NVIDIA / "oom_variants" / "torch_oom_in_lxc.txt")
    assert lxc.in_use_bytes is None
    assert lxc.in_use_by_pid == ((3187442, 6 * GIB), (2418873, round(87.70 * GIB)))
    # none said: nothing known, not 0
    [old] = scan_text(
        "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 1; 15.78 GiB "
        "total capacity; 14.2 GiB already allocated; 10.5 MiB free; 14.5 GiB reserved)"
    )
    assert old.in_use_bytes is None and old.in_use_by_pid == ()


def test_a_vllm_servers_oom_keeps_every_figure_of_the_cuda_oom() -> None:
    # engine_event rebuilt the event from its first nine fields: the bytes it tried, the
    # free and in-use figures the headline names were dropped (None)
    line = "torch.OutOfMemoryError: " + ALLOC_MSG.format(gpu=0) + " Process 2418873 has 1.00 GiB"
    (oom,) = [e for e in LogScanner().feed(line) if e.kind == "cuda_oom"]
    assert oom.tried_bytes == 2 * GIB and oom.in_use_bytes is not None, oom
    got = engine_event(oom, "vllm")
    assert got.kind == "vllm_oom"
    assert dataclasses.replace(got, kind="cuda_oom") == oom  # nothing else changed
    odd = dataclasses.replace(oom, tried_bytes=None, free_bytes=None, detail="odd words")
    assert engine_event(odd, "vllm").detail == "odd words"
    assert engine_event(oom, "sglang") is oom
