"""Energy from NVML's counter through the real agent (issue 39): ``gpumon watch``'s
accounting on the local host, whose agent reads the NVML stand-in
(tests/support/fake_nvml: ``nvmlDeviceGetTotalEnergyConsumption`` rising at 90 W while
its power reading says 80.5 W), records as kWh exactly the counter's rise between the
first and the last sample it saw, measured, not estimated; a GPU that answers
NOT_SUPPORTED is power x time, said as estimated."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import pytest
from nvml_stand_in import FAKE_NVML

from gpumon.backends.config import Config, resolve_host
from gpumon.backends.model import HostSample
from gpumon.backends.monitor import HostMonitor, make_monitor
from gpumon.backends.runtime import Runtime
from gpumon.backends.usage import UsageStore, usage_report
from gpumon.backends.usage.report import J_PER_KWH

from waiting import until

pytestmark = pytest.mark.system

SAMPLES = 6


async def _watch(tmp_path: Path) -> tuple[list[HostSample], float, bool]:
    """The samples a watch of the local host saw, and the kWh and whether estimated that
    ``gpumon usage`` reads back from its database."""
    db = tmp_path / "usage.sqlite3"
    runtime = Runtime()
    runtime.account(db)
    host = replace(resolve_host(Config(path=None), "local"), interval=0.2)
    monitor = runtime.start_monitor(runtime.adopt(make_monitor(host)))
    seen: list[HostSample] = []

    def keep(m: HostMonitor) -> None:
        if m.latest is not None and (not seen or seen[-1] is not m.latest):
            seen.append(m.latest)

    monitor.add_listener(keep)
    try:
        await until(lambda: len(seen) >= SAMPLES, 60, lambda: f"{len(seen)} samples")
    finally:
        await runtime.stop()
    store = UsageStore(db)
    report = usage_report(store, monitor.name, seen[0].time - 60, seen[-1].time + 60, "gpu")
    return seen, report.total.kwh, report.total.estimated


async def test_usage_kwh_is_the_energy_counters_rise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUMON_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setenv("PYTHONPATH", str(FAKE_NVML.parent))
    seen, kwh, estimated = await _watch(tmp_path)
    counters = [s.gpus[0].energy_mj for s in seen]
    read = [c for c in counters if c is not None]
    assert read == counters and read == sorted(read), counters
    first, last = read[0], read[-1]
    assert kwh == pytest.approx((last - first) / 1000 / J_PER_KWH, rel=1e-9)
    assert not estimated
    power = seen[0].gpus[0].power_w
    span = seen[-1].time - seen[0].time
    assert power is not None and kwh != pytest.approx(power * span / J_PER_KWH, rel=0.02)


async def test_a_gpu_without_the_counter_is_power_x_time_said_as_estimated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUMON_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setenv("PYTHONPATH", str(FAKE_NVML.parent))
    monkeypatch.setenv("FAKE_NVML_ENERGY", "unsupported")
    seen, kwh, estimated = await _watch(tmp_path)
    assert all(s.gpus[0].energy_mj is None for s in seen)
    joules = sum((b.gpus[0].power_w or 0.0) * (b.time - a.time) for a, b in pairwise(seen))
    assert kwh == pytest.approx(joules / J_PER_KWH, rel=1e-9) and estimated
