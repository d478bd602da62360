"""An Xid in the kernel log over the real sshd and agent (issue 27.2): the agent follows a
kernel-log file the test appends to (the transport's ``kernel_log_path``: the kernel
itself is the one part a test cannot drive, as the GPU is simulated), the simulator's
nvidia-smi gives the GPUs' bus IDs, and an Xid 79 on GPU 6's bus raises a critical
incident tied to GPU 6 that says to reboot the node; an Xid on a bus none of the GPUs
has says it is not this host's GPU."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gpumon.backends.alerts.incident import command_fix, incidents, line, screen_fixes
from gpumon.backends.config import load_config, resolve_host
from gpumon.backends.model import Health
from gpumon.backends.monitor import demo_settings, make_monitor
from gpumon.backends.sim import write_wrapper

from sshd_server import SshServer
from waiting import until

pytestmark = pytest.mark.integration

FELL = "79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


async def test_an_xid_79_in_the_kernel_log_says_to_reboot_the_node(
    sshd: SshServer, tmp_path: Path, state_home: Path
) -> None:
    write_wrapper(sshd.bin, demo_settings("sglang", demo_time=10.0))
    kmsg = tmp_path / "kern.log"
    kmsg.write_text("NVRM: loading NVIDIA UNIX x86_64 Kernel Module  580.95.05\n")
    config = tmp_path / "gpumon.toml"
    config.write_text(sshd.config_toml("ct200", interval=0.5))
    monitor = make_monitor(resolve_host(load_config(config), "ct200"), record=False)
    monitor.transport.kernel_log_path = str(kmsg)
    monitor.start()
    try:
        # the first sample and the process list: an Xid says what runs on its GPU from
        # it ("running sglang::..."; ci14: on a busy machine the Xid came before it)
        await until(lambda: monitor.latest is not None, 30, "the first sample")
        await until(lambda: monitor.processes_time is not None, 30, "the process list")
        with kmsg.open("a") as f:  # as the driver writes it (docs/formats.md, section 4)
            f.write(f"[ 8812.552301] NVRM: Xid (PCI:0000:ba:00): {FELL}\n")
            f.write(f"[ 8812.552377] NVRM: Xid (PCI:0000:78:00): {FELL}\n")

        def xids() -> list[str]:
            return [a.message for a in monitor.alerts.active() if a.kind == "xid"]

        await until(lambda: len(xids()) == 2, 20, lambda: f"two Xid alerts: {xids()}")
        found = {
            i.cause.gpu: i for i in incidents(monitor.alerts.active()) if i.cause.kind == "xid"
        }
        ours = found[6]  # 00000000:BA:00.0 is the simulated GPU 6
        assert ours.severity is Health.CRITICAL
        assert ours.headline.startswith("Xid 79 on GPU 6 (running ")
        assert ours.headline.endswith("): fallen off the bus")
        said = line(ours, screen_fixes(ours))
        assert " — reboot the node (the GPU cannot be reset in place), drain the node" in said
        assert command_fix(ours) == "fix: reboot the node (the GPU cannot be reset in place)"
        other = found[None]
        assert other.headline == (
            "Xid 79 on PCI 0000:78:00 (not a GPU of this host: another container's or the "
            "host's): fallen off the bus"
        )
        assert time.time() - ours.time < 60
    finally:
        await monitor.stop()
