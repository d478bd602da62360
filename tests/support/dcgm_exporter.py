"""A stand-in dcgm-exporter for many fake nodes, serving its exact text format on 127.0.0.1.

Metric names, types and help texts are dcgm-exporter's ``etc/default-counters.csv`` (the
enabled rows); each line is what its renderer (``internal/pkg/rendermetrics``) writes:
``NAME{gpu="0",UUID="GPU-…",pci_bus_id="…",device="nvidia0",modelName="…",hostname="…",
DCGM_FI_DRIVER_VERSION="…"} VALUE``, integers as ``%d`` and doubles as ``%f``, a blank
(unsupported) value left out. The host label is ``Hostname`` before dcgm-exporter's 2026
rename and ``hostname`` after: each fake node picks one. Prometheus scrapes it with
``honor_labels`` so one exporter can stand for a whole fleet.

``DCGM_FI_DEV_XID_ERRORS`` carries ``err_code`` and ``err_msg`` after the other labels, as
dcgm-exporter 3.3.6 and later write them (``collector/gpu_collector.go``, the texts from
``collector/xid_errors.go``): a GPU whose Xid changes becomes a new series. Its value is
held until the exporter restarts (dcgm-exporter issue #500).
"""

from __future__ import annotations

import contextlib
import random
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# (field, type, help, int?) in default-counters.csv order (its enabled rows).
COUNTERS: tuple[tuple[str, str, str, bool], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", True),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", True),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", True),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", True),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", False),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
        True,
    ),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", True),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", True),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", True),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", True),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", True),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", True),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", True),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", True),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).", True),
    (
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "counter",
        "Total number of NVLink bandwidth counters for all lanes.",
        True,
    ),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status", True),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
        True,
    ),
    (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors",
        True,
    ),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed", True),
    (
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "gauge",
        "Ratio of time the graphics engine is active.",
        False,
    ),
)
# dcgm-exporter's xidErrCodeToText, for the codes the tests use.
XID_TEXT = {
    0: "No Error",
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    45: "Preemptive cleanup, due to previous errors -- "
    "Most likely to see when running multiple cuda",
    48: "Double Bit ECC Error",
    79: "GPU has fallen off the bus",
    94: "Contained ECC error",
}
MODEL = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
DRIVER = "580.95.05"
TOTAL_MIB = 97887
RESERVED_MIB = 531


@dataclass
class FakeGpu:
    used_mib: int = 1000
    util: int = 50
    temp: int = 45
    power_w: float = 200.0
    xid: int = 0
    remap_failure: int = 0
    power_reported: bool = True  # False: a blank value (the line is left out)


@dataclass
class FakeNode:
    name: str
    gpus: list[FakeGpu] = field(default_factory=lambda: [FakeGpu() for _ in range(8)])
    host_label: str = "hostname"  # "Hostname" (dcgm-exporter before 2026) or "hostname"
    model: str = MODEL
    serving: bool = True  # False: the exporter stops listing this node

    def uuid(self, i: int) -> str:
        h = abs(hash((self.name, i))) % (1 << 48)
        return f"GPU-{h:012x}-0000-0000-0000-{i:012d}"


def _value(counter: str, gpu: FakeGpu, i: int) -> float | int | None:
    free = TOTAL_MIB - RESERVED_MIB - gpu.used_mib
    values: dict[str, float | int | None] = {
        "DCGM_FI_DEV_SM_CLOCK": 2430 if gpu.util else 180,
        "DCGM_FI_DEV_MEM_CLOCK": 14001,
        "DCGM_FI_DEV_MEMORY_TEMP": gpu.temp + 4,
        "DCGM_FI_DEV_GPU_TEMP": gpu.temp,
        "DCGM_FI_DEV_POWER_USAGE": gpu.power_w if gpu.power_reported else None,
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 123456789 + i,
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 0,
        "DCGM_FI_DEV_GPU_UTIL": gpu.util,
        "DCGM_FI_DEV_MEM_COPY_UTIL": gpu.util // 2,
        "DCGM_FI_DEV_ENC_UTIL": 0,
        "DCGM_FI_DEV_DEC_UTIL": 0,
        "DCGM_FI_DEV_XID_ERRORS": gpu.xid,
        "DCGM_FI_DEV_FB_FREE": free,
        "DCGM_FI_DEV_FB_USED": gpu.used_mib,
        "DCGM_FI_DEV_FB_RESERVED": RESERVED_MIB,
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": 0,
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS": 0,
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0,
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 0,
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": gpu.remap_failure,
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": gpu.util / 100,
    }
    return values[counter]


def render(nodes: list[FakeNode]) -> str:
    """The /metrics body for ``nodes``, as dcgm-exporter writes it (one family at a time)."""
    out: list[str] = []
    serving = [n for n in nodes if n.serving]
    for counter, kind, help_text, is_int in COUNTERS:
        out.append(f"# HELP {counter} {help_text}\n# TYPE {counter} {kind}\n")
        for node in serving:
            for i, gpu in enumerate(node.gpus):
                v = _value(counter, gpu, i)
                if v is None:
                    continue
                text = f"{int(v)}" if is_int else f"{float(v):f}"
                attrs = ""
                if counter == "DCGM_FI_DEV_XID_ERRORS":
                    msg = XID_TEXT.get(int(v), "Unknown Error")
                    attrs = f',err_code="{int(v)}",err_msg="{msg}"'
                out.append(
                    f'{counter}{{gpu="{i}",UUID="{node.uuid(i)}",'
                    f'pci_bus_id="00000000:{i + 1:02X}:00.0",device="nvidia{i}",'
                    f'modelName="{node.model}",{node.host_label}="{node.name}",'
                    f'DCGM_FI_DRIVER_VERSION="{DRIVER}"{attrs}}} {text}\n'
                )
    return "".join(out)


def fleet(count: int, *, gpus: int = 8, seed: int = 0, prefix: str = "node") -> list[FakeNode]:
    """``count`` nodes named ``node-0001``...; half spell the label ``Hostname``."""
    rng = random.Random(seed)
    nodes = []
    for k in range(count):
        cards = [
            FakeGpu(
                used_mib=rng.randrange(0, 90000),
                util=rng.randrange(10, 100),
                temp=rng.randrange(30, 80),
                power_w=round(rng.uniform(80, 550), 3),
            )
            for _ in range(gpus)
        ]
        label = "Hostname" if k % 2 else "hostname"
        nodes.append(FakeNode(f"{prefix}-{k + 1:04d}", cards, host_label=label))
    return nodes


class DcgmExporter:
    """Serves ``nodes`` at ``http://127.0.0.1:PORT/metrics`` from a thread. Change the
    nodes under ``lock``; the next scrape sees the change."""

    def __init__(self, nodes: list[FakeNode], *, extra: str = "", cache: bool = False) -> None:
        self.nodes = nodes
        self.extra = extra  # more exposition text after dcgm's (gpumon watch's metrics)
        self.cache = cache  # render once (a large fleet that does not change)
        self._body: bytes | None = None
        self.lock = threading.Lock()
        self.scrapes = 0
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                with exporter.lock:
                    body = exporter._body
                    if body is None:
                        body = (render(exporter.nodes) + exporter.extra).encode()
                        if exporter.cache:
                            exporter._body = body
                    exporter.scrapes += 1
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def node(self, name: str) -> FakeNode:
        return next(n for n in self.nodes if n.name == name)

    def start(self) -> DcgmExporter:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def serving(nodes: list[FakeNode], **options: Any) -> Iterator[DcgmExporter]:
    exporter = DcgmExporter(nodes, **options).start()
    try:
        yield exporter
    finally:
        exporter.stop()


def gpumon_alerts(alerts: list[tuple[str, str, str, int]]) -> str:
    """gpumon watch's alert gauge for (host, severity, kind, count) rows."""
    lines = [
        "# HELP gpumon_alerts_active Active gpumon alerts.",
        "# TYPE gpumon_alerts_active gauge",
    ]
    lines += [
        f'gpumon_alerts_active{{host="{h}",severity="{s}",kind="{k}"}} {n}' for h, s, k, n in alerts
    ]
    return "\n".join(lines) + "\n"


def closed_port() -> int:
    """A 127.0.0.1 port nothing listens on (a target that is down)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    """``python tests/support/dcgm_exporter.py NODES [GPUS]``: serve a fleet (rendered once)
    from its own process and print the port (the benchmark keeps it out of its RSS)."""
    import sys
    import time

    count = int(sys.argv[1])
    gpus = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    exporter = DcgmExporter(fleet(count, gpus=gpus, seed=1), cache=True).start()
    print(exporter.port, flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
