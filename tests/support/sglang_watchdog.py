"""The lines of a hung SGLang server's log, as SGLang 0.5.23 writes its watchdog's dump
(python/sglang/srt/utils/watchdog.py WatchdogRaw._watchdog_once: ``{name} debug info:``
and its lines, the schedulers' stacks of utils/cudacore_pyspy_dump_utils.py
pyspy_dump_schedulers, ``{name} watchdog timeout (self.watchdog_timeout=...,
self.soft=...)``), with a stats line before it and a line after it."""

WATCHDOG_DUMP = (
    "[2026-01-05 03:12:40 TP0] Scheduler debug info:\n"
    "last_forward_batch: forward_mode=DECODE, batch_size=12\n"
    "[2026-01-05 03:12:40 TP0] Pyspy dump for PID 4242 "
    "(py-spy dump --native --pid 4242):\n"
    'Thread 4242 (active): "MainThread"\n'
    "    all_reduce (torch/distributed/distributed_c10d.py:2806)\n"
    "[2026-01-05 03:12:41 TP0] Scheduler watchdog timeout "
    "(self.watchdog_timeout=300, self.soft=False)\n"
)
BEFORE = "[2026-01-05 03:07:40 TP0] Decode batch, #running-req: 12, #token: 4096, gen throughput (token/s): 410.00\n"  # noqa: E501
AFTER = "[2026-01-05 03:12:42] stand-in: the watchdog's dump is over\n"
