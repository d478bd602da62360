"""The accounting (issue 39 point 2, ``backends/usage``): a sample's GPU time split among
its holders by memory, used vs held idle by ``gpu_idle_held``'s own test, a gap not
counted; the database's minute rows rolled into hours after 48 h and dropped after 90
days without losing a GPU-second, kept across a restart; the recorder's batches (a
minute of samples, handed to the writer, never written on the caller's thread); the
report's table, JSON, CSV and cost; ``--since``'s words."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from gpumon.backends.alerts.rules import AlertRules
from gpumon.backends.config.usage import UsageSettings
from gpumon.backends.model import GpuProcess, GpuSample, HostSample, ProcessSource, Source
from gpumon.backends.usage import Tally, UsageStore, UsageWriter, parse_since, usage_report
from gpumon.backends.usage.account import MAX_OWNERS_PER_GPU, OTHERS
from gpumon.backends.usage.report import SinceError
from gpumon.backends.usage.store import HOUR, HOURS_KEPT_S, MINUTES_KEPT_S
from gpumon.backends.workloads.owners import OwnedBy

T0 = 1_800_000_000.0 - 1_800_000_000.0 % 3600  # an hour's start
UUIDS = ("GPU-a", "GPU-b")


def gpu(index: int, used: int | None, util: float | None, power: float | None = 300.0) -> GpuSample:
    return GpuSample(
        index=index,
        uuid=UUIDS[index],
        memory_used_mib=used,
        memory_total_mib=97_000,
        utilization_pct=util,
        power_w=power,
    )


def proc(
    pid: int, on: int, mib: int, *, container: str | None = None, name: str = "train.py"
) -> GpuProcess:
    source = (
        ProcessSource.HOST.value if container is not None else ProcessSource.CONTAINER_NVML.value
    )
    return GpuProcess(
        pid=pid if container is None else None,
        name=name,
        memory_mib=mib,
        gpu_uuid=UUIDS[on],
        host_pid=pid,
        container=container,
        user="root",
        command=f"python3 {name}",
        source=source,
    )


def sample(t: float, gpus: tuple[GpuSample, ...], procs: tuple[GpuProcess, ...] = ()) -> HostSample:
    return HostSample("ct200", t, Source.AGENT_NVML, gpus, procs)


def sums(tally: Tally) -> dict[tuple[int, str, str, str], list[float]]:
    out: dict[tuple[int, str, str, str], list[float]] = {}
    for (_, index, container, user, job), row in tally.rows.items():
        got = out.setdefault((index, container, user, job), [0.0] * 6)
        for i, value in enumerate(row):
            got[i] += value
    return out


def test_a_gpu_s_seconds_go_to_its_holders_by_the_memory_each_holds() -> None:
    tally = Tally(AlertRules(), watched=200)
    owners = {0: OwnedBy("drafter", "job", "drafter")}
    # GPU 0: the drafter (CT200, 6 GiB) and another container's jupyter (2 GiB); busy
    # GPU 1: held by nobody
    procs = (proc(10, 0, 6144), proc(11, 0, 2048, container="201", name="jupyter-lab"))
    gpus = (gpu(0, 8192, 80.0), gpu(1, 0, 0.0))
    assert tally.add(sample(T0, gpus, procs), procs, owners, 5.0) == 0.0  # the first: no span
    assert tally.add(sample(T0 + 2, gpus, procs), procs, owners, 5.0) == 2.0
    got = sums(tally)
    drafter = got[(0, "CT200", "root", "drafter")]
    jupyter = got[(0, "CT201", "root", "jupyter-lab")]  # not the drafter's: its own program
    assert drafter[:4] == pytest.approx([1.5, 1.5, 0.0, 300 * 2 * 0.75])
    assert jupyter[:4] == pytest.approx([0.5, 0.5, 0.0, 300 * 2 * 0.25])
    assert drafter[4] == 6144 * 2 and drafter[5] == pytest.approx(80.0 * 1.5)
    assert got[(1, "-", "-", "-")][:3] == [2.0, 0.0, 0.0]  # busy neither, held by no one
    assert tally.estimated


def test_held_idle_is_gpu_idle_helds_own_test_and_unknown_utilisation_is_neither() -> None:
    rules = AlertRules(idle_util_pct=5.0, idle_held_min_mib=2048)
    tally = Tally(rules)
    procs = (proc(10, 0, 4000), proc(12, 1, 1000))
    for t, util0, util1 in ((0, 4.9, None), (1, 4.9, None), (2, 5.0, None)):
        gpus = (gpu(0, 4000, util0), gpu(1, 1000, util1))
        tally.add(sample(T0 + t, gpus, procs), procs, {}, 5.0)
    got = sums(tally)
    # held idle the first second (4000 MiB at 4.9 %), used the next (5.0 % is busy)
    assert got[(0, "host", "root", "train.py")][:3] == [2.0, 1.0, 1.0]
    assert got[(1, "host", "root", "train.py")][:3] == [2.0, 0.0, 0.0]  # util not reported
    assert rules.idle_held.sample(4000, 4.9) and not rules.idle_held.sample(4000, 5.0)


def test_a_gap_longer_than_the_stale_limit_is_not_counted() -> None:
    tally = Tally(AlertRules())
    gpus = (gpu(0, 4000, 50.0),)
    for t in (0, 1, 20, 21):  # 19 s without data: not watched time
        tally.add(sample(T0 + t, gpus), (), {}, 5.0)
    assert sum(row[0] for row in tally.rows.values()) == 2.0


def test_owners_past_the_bound_share_one_row_per_gpu_and_minute() -> None:
    tally = Tally(AlertRules())
    procs = tuple(proc(100 + i, 0, 100, name=f"p{i}.py") for i in range(MAX_OWNERS_PER_GPU + 4))
    gpus = (gpu(0, 4000, 50.0),)
    tally.add(sample(T0, gpus, procs), procs, {}, 5.0)
    tally.add(sample(T0 + 1, gpus, procs), procs, {}, 5.0)
    assert len(tally.rows) == MAX_OWNERS_PER_GPU + 1  # the bound, and the others' row
    assert (OTHERS, OTHERS, OTHERS) in {k[2:] for k in tally.rows}
    assert sum(row[0] for row in tally.rows.values()) == pytest.approx(1.0)


def write(store: UsageStore, tally: Tally, now: float) -> None:
    store.write("ct200", tally.take(), tally.estimated, now)


def test_minutes_roll_up_into_hours_after_48_h_and_go_after_90_days(tmp_path: Path) -> None:
    path = tmp_path / "usage.sqlite3"
    store = UsageStore(path)
    tally = Tally(AlertRules())
    gpus = (gpu(0, 4000, 50.0), gpu(1, 4000, 1.0))
    procs = (proc(10, 0, 4000), proc(11, 1, 4000))
    for t in range(0, 2 * 3600, 10):  # two hours at one sample per 10 s
        tally.add(sample(T0 + t, gpus, procs), procs, {}, 50.0)
    write(store, tally, T0 + 2 * HOUR)
    before = store.totals("ct200", 0, ["gpu"])
    assert store.row_count() == 2 * 120  # a minute row per GPU and minute
    store.close()

    store = UsageStore(path)  # a restart: the rows are still there
    assert store.totals("ct200", 0, ["gpu"]) == before
    store.write("ct200", [], False, T0 + 2 * HOUR + MINUTES_KEPT_S)  # 48 h on: rolled up
    assert store.row_count() == 2 * 2  # an hour row per GPU and hour
    after = store.totals("ct200", 0, ["gpu"])
    assert [k for k, _, _ in after] == [k for k, _, _ in before]
    for (_, old, _), (_, new, _) in zip(before, after, strict=True):
        assert new == pytest.approx(old)  # no GPU-second lost
    assert after[0][1][:3] == pytest.approx([7190.0, 7190.0, 0.0])  # GPU 0: busy
    assert after[1][1][:3] == pytest.approx([7190.0, 0.0, 7190.0])  # GPU 1: held idle
    store.write("ct200", [], False, T0 + 2 * HOUR + HOURS_KEPT_S + HOUR)  # 90 days on
    assert store.row_count() == 0
    store.close()


def test_the_writer_writes_on_its_own_thread_and_close_writes_what_is_queued(
    tmp_path: Path,
) -> None:
    path = tmp_path / "usage.sqlite3"
    writer = UsageWriter(path)
    threads: list[str] = []
    real = UsageStore.write

    def spy(self: UsageStore, *args: object, **kw: object) -> None:
        threads.append(threading.current_thread().name)
        real(self, *args, **kw)  # type: ignore[arg-type]

    tally = Tally(AlertRules())
    for t in (0, 1, 2):
        tally.add(sample(T0 + t, (gpu(0, 4000, 50.0),)), (), {}, 5.0)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(UsageStore, "write", spy)
        writer.put("ct200", tally.take(), tally.estimated, T0 + 2)
        writer.close()
    assert threads == ["gpumon-usage"]
    store = UsageStore(path)
    [(_, total, estimated)] = store.totals("ct200", 0, [])
    assert total[0] == 2.0 and estimated


def test_the_report_says_hours_energy_cost_and_the_top_idle_holders(tmp_path: Path) -> None:
    store = UsageStore(tmp_path / "usage.sqlite3")
    tally = Tally(AlertRules(), watched=200)
    procs = (proc(10, 0, 8000), proc(11, 1, 6000, container="201", name="jupyter-lab"))
    gpus = (gpu(0, 8000, 90.0, power=500.0), gpu(1, 6000, 0.0, power=100.0))
    for t in range(0, 3601):  # an hour at 1 Hz
        tally.add(sample(T0 + t, gpus, procs), procs, {}, 5.0)
    write(store, tally, T0 + 3600)
    settings = UsageSettings(price_per_kwh=0.15, currency="EUR")
    report = usage_report(store, "ct200", T0, T0 + 3600, "container", settings)
    table = report.table()
    assert table[1].split() == [
        "container",
        "GPU-h",
        "used",
        "GPU-h",
        "held",
        "idle",
        "kWh",
        "cost",
    ]
    assert table[2].split() == ["CT200", "1.00", "0.00", "0.50", "~0.07", "EUR"]
    assert table[3].split() == ["CT201", "0.00", "1.00", "0.10", "~0.01", "EUR"]
    assert table[4].split() == ["total", "1.00", "1.00", "0.60", "~0.09", "EUR"]
    assert "held idle most: CT201 / root / jupyter-lab 1.00 GPU-h" in table
    assert "energy estimated: power x time where no energy counter was read" in table
    data = json.loads(json.dumps(report.to_json()))
    assert data["total"]["energy_kwh"] == pytest.approx(0.6) and data["currency"] == "EUR"
    assert data["total"]["cost"] == pytest.approx(0.09)
    csv = report.to_csv().splitlines()
    assert csv[0].startswith("container,gpu_hours,used_gpu_hours,idle_gpu_hours,energy_kwh")
    assert csv[-1].startswith("total,2.0,1.0,1.0,0.6,true,0.09,EUR")
    no_price = usage_report(store, "ct200", T0, T0 + 3600, "gpu")
    assert no_price.table()[2].split()[:2] == ["GPU", "0"] and no_price.total.cost(None) is None
    assert "cost: set [usage] price_per_kwh (and currency) in the config" in no_price.table()
    assert usage_report(store, "other", T0, T0 + 1, "job").table()[1] == (
        "nothing recorded in that time"
    )
    store.close()


def test_since_reads_a_span_or_a_date() -> None:
    now = 1_800_000_000.0
    assert parse_since("24h", now) == now - 86400
    assert parse_since("7d", now) == now - 7 * 86400
    assert parse_since("90m", now) == now - 5400
    assert parse_since("2026-12-01T08:00+00:00", now) == 1_796_112_000.0
    with pytest.raises(SinceError, match="--since 'yesterday'"):
        parse_since("yesterday", now)


class Writes:
    """A writer that keeps what it is handed (the recorder's side of ``UsageWriter``)."""

    def __init__(self) -> None:
        self.batches: list[tuple[str, list[object], float]] = []

    def put(self, host: str, rows: list[object], estimated: bool, now: float) -> None:
        self.batches.append((host, rows, now))


def test_the_recorder_hands_over_a_batch_a_minute_and_the_rest_at_close() -> None:
    from gpumon.backends.config import HostConfig
    from gpumon.backends.monitor import HostMonitor
    from gpumon.backends.usage import UsageRecorder

    from quiet_source import Quiet

    async def never(seconds: float) -> None:
        raise AssertionError("nothing waits here")

    monitor = HostMonitor(
        HostConfig(name="box", kind="local", kernel_log=False), Quiet(), sleep=never, record=False
    )
    writes, standing_by = Writes(), [False]
    recorder = UsageRecorder(monitor, writes, lambda: standing_by[0])  # type: ignore[arg-type]
    monitor.add_listener(recorder)
    procs = (proc(10, 0, 4000),)
    for t in range(0, 150):  # two and a half minutes at 1 Hz
        monitor.ingest_sample(sample(T0 + t, (gpu(0, 4000, 50.0),), procs))
        monitor.ingest_note("a change of state without a sample: nothing accounted")
    # a batch when a minute of samples has passed, of the minutes finished by then
    assert [(now - T0, len(rows)) for _, rows, now in writes.batches] == [(60, 1), (120, 1)]
    recorder.close()
    assert [len(rows) for _, rows, _ in writes.batches] == [1, 1, 1]  # the third minute
    assert recorder.accounted_s == 149.0
    standing_by[0] = True  # a watch records this host: the dashboard's rows are dropped
    monitor.ingest_sample(sample(T0 + 150, (gpu(0, 4000, 50.0),), procs))
    recorder.close()
    assert len(writes.batches) == 3


def test_two_dashboards_on_one_host_count_it_once_and_the_second_takes_over(
    tmp_path: Path,
) -> None:
    """Two dashboards watching ct200 without a watch each wrote its GPU time: `gpumon
    usage` said twice the hours. The host's lease (a flock beside the database) lets
    one count; the other takes over at its next batch once the first has gone; another
    host's lease is its own."""
    from gpumon.backends.config import HostConfig
    from gpumon.backends.monitor import HostMonitor
    from gpumon.backends.usage.recorder import HostLease, UsageRecorder

    from quiet_source import Quiet

    async def never(seconds: float) -> None:
        raise AssertionError("nothing waits here")

    def dashboard(name: str) -> tuple[HostMonitor, Writes, UsageRecorder]:
        host = HostConfig(name=name, kind="local", kernel_log=False)
        monitor = HostMonitor(host, Quiet(), sleep=never, record=False)
        writes = Writes()
        lease = HostLease(tmp_path, name)
        recorder = UsageRecorder(monitor, writes, lambda: False, lease)  # type: ignore[arg-type]
        monitor.add_listener(recorder)
        return monitor, writes, recorder

    first, second, other = dashboard("ct200"), dashboard("ct200"), dashboard("ct201")
    procs = (proc(10, 0, 4000),)

    def feed(seconds: range, *dashboards: tuple[HostMonitor, Writes, UsageRecorder]) -> None:
        for t in seconds:
            for monitor, _, _ in dashboards:
                monitor.ingest_sample(sample(T0 + t, (gpu(0, 4000, 50.0),), procs))

    feed(range(0, 130), first, second, other)
    assert len(first[1].batches) == 2 and second[1].batches == []  # one of them counts
    assert len(other[1].batches) == 2  # another host: its own lease
    first[2].close()  # the first dashboard quits: its lease goes with it
    feed(range(130, 250), second, other)
    assert len(second[1].batches) == 2, second[1].batches
    second[2].close()
    other[2].close()


async def test_the_exporter_counts_energy_and_each_owners_gpu_seconds_since_the_start(
    tmp_path: Path,
) -> None:
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from gpumon.backends.config import HostConfig
    from gpumon.backends.monitor import HostMonitor
    from gpumon.backends.runtime import Runtime

    from quiet_source import Quiet

    async def never(seconds: float) -> None:
        raise AssertionError("nothing waits here")

    host = HostConfig(name="ct200", kind="local", kernel_log=False, container=200)
    runtime = Runtime()
    runtime.account(tmp_path / "usage.sqlite3")
    runtime.export(0)
    monitor = runtime.start_monitor(
        runtime.adopt(HostMonitor(host, Quiet(), sleep=never, record=False))
    )
    procs = (proc(10, 0, 6000), proc(11, 1, 3000, container="201", name="jupyter-lab"))
    for t in range(0, 11):  # ten seconds: GPU 0 at work, GPU 1 held idle by CT201
        gpus = (gpu(0, 6000, 90.0, power=400.0), gpu(1, 3000, 0.0, power=None))
        monitor.ingest_sample(sample(T0 + t, gpus, procs))
    assert runtime.metrics is not None
    text = generate_latest(runtime.metrics.registry).decode()
    got = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith(("gpumon_gpu_energy", "gpumon_owner_gpu"))
    }
    energy = (("gpu", "0"), ("host", "ct200"), ("method", "power_x_time"))
    ct200 = (("container", "CT200"), ("host", "ct200"), ("job_name", "train.py"), ("user", "root"))
    ct201 = (
        ("container", "CT201"),
        ("host", "ct200"),
        ("job_name", "jupyter-lab"),
        ("user", "root"),
    )
    assert got == {
        # power x time: 400 W for 10 s on GPU 0; GPU 1 reports no power: no series, not 0
        ("gpumon_gpu_energy_joules_total", energy): 4000.0,
        ("gpumon_owner_gpu_used_seconds_total", ct200): 10.0,
        ("gpumon_owner_gpu_idle_held_seconds_total", ct200): 0.0,
        ("gpumon_owner_gpu_used_seconds_total", ct201): 0.0,
        ("gpumon_owner_gpu_idle_held_seconds_total", ct201): 10.0,
    }  # fmt: skip
    await runtime.stop()
