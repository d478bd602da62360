"""A GPU's identity (issue 35.3): one ``GpuRef`` (index as nvidia-smi numbers it on the
host, uuid, bus id, device minor) per GPU of a sample, found by any of those names, every
spelling of a bus id read as one, the device minors the agent reads (NVML, else the
driver's ``/proc/driver/nvidia/gpus``, docs/formats.md 1.7), and a device-file user placed
on the GPU its ``/dev/nvidiaN`` is, in a container that sees a subset of the host's GPUs."""

from __future__ import annotations

from pathlib import Path

import pytest
from nvml_stand_in import load_fake_nvml

from gpumon.backends.config import HostConfig
from gpumon.backends.model import (
    ConnState,
    GpuProcess,
    GpuRef,
    GpuRegistry,
    HostSample,
    ProcessSource,
    bus_id_key,
    pci_key,
)
from gpumon.backends.monitor import HostMonitor, snapshot_json
from gpumon.backends.monitor.sources import AgentSource
from gpumon.backends.parsers.nvidia_smi import QUERY_FIELDS, parse_query_gpu
from gpumon.backends.parsers.processes import device_gpus, from_record
from gpumon.backends.remote import agent, procfacts, protocol
from gpumon.backends.transport import LocalTransport

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nvidia"
ROWS = (FIXTURES / "query_gpu_8x_rtxpro6000.csv").read_text().splitlines()  # QUERY_FIELDS
GPU6 = "GPU-2e94b7f1-c358-40da-8a67-e1f03c95d2b8"  # the fixture's GPU 6, at 00000000:BA:00.0


def information(bus: str, minor: int) -> str:
    """A GPU's ``information`` file as nv-procfs.c's ``nv_procfs_read_gpu_info`` prints it
    (open-gpu-kernel-modules 595.45.04; 515.43.04 has the same lines but ``GPU Firmware``
    only where there is one)."""
    return (
        "Model: \t\t NVIDIA RTX PRO 6000 Blackwell Server Edition\n"
        "IRQ:   \t\t 236\n"
        "GPU UUID: \t GPU-2e94b7f1-c358-40da-8a67-e1f03c95d2b8\n"
        "Video BIOS: \t 98.02.2e.00.01\n"
        "Bus Type: \t PCIe\n"
        "DMA Size: \t 52 bits\n"
        "DMA Mask: \t 0xfffffffffffff\n"
        f"Bus Location: \t {bus}\n"
        f"Device Minor: \t {minor}\n"
        "GPU Firmware: \t 595.45.04\n"
        "GPU Excluded:\t No\n"
    )


def subset_rows(host_gpus: range) -> list[str]:
    """The fixture's rows of ``host_gpus`` as nvidia-smi prints them in a container given
    only those: renumbered from 0 (index is the second cell), uuid and bus id kept."""
    out = []
    for i, g in enumerate(host_gpus):
        cells = ROWS[g].split(", ")
        cells[QUERY_FIELDS.index("index")] = str(i)
        out.append(", ".join(cells))
    return out


def test_every_spelling_of_a_bus_id_is_one_key() -> None:
    spellings = [
        "00000000:BA:00.0",  # nvidia-smi pci.bus_id, NVML busId (NVML_DEVICE_PCI_BUS_ID_FMT)
        "0000:BA:00.0",  # NVML busIdLegacy (NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT)
        "0000:ba:00.0",  # /proc/driver/nvidia/gpus/<bus>, its Bus Location, sysfs
        "PCI:0000:ba:00",  # an Xid line (no function)
        " ba:00.0 ",  # no domain
    ]
    assert {bus_id_key(s) for s in spellings} == {"0000:ba:00.0"}
    assert {pci_key(s) for s in spellings} == {"0000:ba:00"}
    assert bus_id_key("00010000:01:00.0") == bus_id_key("10000:01:00.0") == "10000:01:00.0"
    for junk in (None, "", "not a bus id", "GPU-2e94", "0000:ba:00.9", "ba"):
        assert bus_id_key(junk) is None and pci_key(junk) is None


def test_a_sample_s_gpus_are_found_by_every_name() -> None:
    minors = {"0000:18:00.0": 10, "0000:2a:00.0": 11, "0000:3a:00.0": 12}  # bus_id_key's
    gpus = parse_query_gpu(ROWS, QUERY_FIELDS, minors=minors).gpus
    refs = HostSample("h", 0.0, None, gpus).gpu_refs
    six = GpuRef(6, GPU6, "0000:ba:00.0", None)
    assert refs.index(6) == six and str(six) == "GPU 6"
    assert refs.uuid(GPU6) == refs.uuid("GPU-2e94") == six  # CUDA takes a unique prefix
    assert refs.bus("00000000:BA:00.0") == refs.bus("PCI:0000:ba:00") == six
    assert [refs.minor(m) for m in (10, 11, 12)] == [refs.index(0), refs.index(1), refs.index(2)]
    assert refs.index(0) == GpuRef(0, gpus[0].uuid, "0000:18:00.0", 10)
    assert (refs.index(8), refs.uuid("GPU-ffff"), refs.bus("0000:99:00.0"), refs.minor(6)) == (
        None,
        None,
        None,
        None,
    )
    twins = GpuRegistry([GpuRef(0, "GPU-a1"), GpuRef(1, "GPU-a2")])
    assert twins.uuid("GPU-a") is None and twins.uuid("GPU-a2") == GpuRef(1, "GPU-a2")


def test_a_cuda_ordinal_is_the_gpu_its_cuda_visible_devices_names() -> None:
    refs = GpuRegistry.of(parse_query_gpu(ROWS).gpus)
    assert refs.cuda(1, "5,6,7") == refs.index(6)  # PyTorch's "GPU 1" in a 5,6,7 job
    assert refs.cuda(0, "GPU-2e94b7f1,GPU-95d3a06c") == refs.index(6)
    assert refs.cuda(1, "GPU-2e94b7f1,GPU-95d3a06c") == refs.index(7)
    assert refs.cuda(3, "5,6,7") is None  # no such ordinal
    assert refs.cuda(0, None) is None and refs.cuda(0, "8") is None  # unknown; no GPU 8


def test_a_device_file_is_the_gpu_whose_minor_it_is() -> None:
    """A container given the host's GPUs 4-7: nvidia-smi numbers them 0-3, their device
    files keep the host's minors. /dev/nvidia5 is GPU 1 there."""
    minors = {f"0000:{b}:00.0": 4 + i for i, b in enumerate(["9a", "ab", "ba", "db"])}
    gpus = parse_query_gpu(subset_rows(range(4, 8)), minors=minors).gpus
    refs = GpuRegistry.of(gpus)
    assert [(r.index, r.minor) for r in refs] == [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert refs.holders([5]) == (refs.index(1),)
    assert refs.holders([0, 1]) == ()  # not this container's GPUs
    user = GpuProcess(7, "python", None, source=ProcessSource.DEVICE_FILES, minors=(5, 7))
    [placed] = device_gpus([user], refs)
    assert (placed.gpus, placed.minors) == ((1, 3), (5, 7))
    sample = HostSample("h", 0.0, None, gpus, (placed,))
    assert [len(sample.processes_for(g)) for g in gpus] == [0, 1, 0, 1]
    # Without the driver's numbers (no NVML, no /proc/driver/nvidia) N is taken as the
    # index: right where the container sees every GPU, as before.
    blind = GpuRegistry.of(parse_query_gpu(ROWS).gpus)
    assert not blind.knows_minors and blind.holders([5]) == (blind.index(5),)


def test_a_driver_row_is_on_its_gpu_by_uuid_else_by_bus_id_in_any_spelling() -> None:
    gpus = parse_query_gpu(ROWS).gpus
    by_uuid = GpuProcess(1, "a", 10, gpu_uuid=GPU6, gpu_bus_id="00000000:18:00.0")
    by_bus = GpuProcess(2, "b", 10, gpu_bus_id="0000:ba:00.0")  # NVML's legacy spelling
    unknown = GpuProcess(3, "c", 10, gpu_uuid="GPU-ffffffff", gpu_bus_id="00000000:BA:00.0")
    sample = HostSample("h", 0.0, None, gpus, (by_uuid, by_bus, unknown))
    assert sample.processes_for(gpus[6]) == (by_uuid, by_bus)
    assert sample.processes_for(gpus[0]) == ()  # the uuid decides, not the bus id beside it


def test_the_driver_s_proc_folder_gives_each_bus_id_its_minor(tmp_path: Path) -> None:
    root = tmp_path / "gpus"
    for bus, minor in (("0000:9a:00.0", 4), ("0000:ba:00.0", 6)):
        (root / bus).mkdir(parents=True)
        (root / bus / "information").write_text(information(bus, minor))
    (root / "0000:db:00.0").mkdir()  # no information file (gone since the listing)
    (root / "0000:ab:00.0").mkdir()
    (root / "0000:ab:00.0" / "information").write_text("Model: \t\t x\nDevice Minor: \t ?\n")
    assert procfacts.driver_minors(str(root)) == ({"0000:9a:00.0": 4, "0000:ba:00.0": 6}, None)
    minors, error = procfacts.driver_minors(str(tmp_path / "none"))
    assert minors == {} and error is not None and "No such file" in error


class _Out:
    def __init__(self) -> None:
        self.sent: list[protocol.Message] = []

    def send(self, msg: protocol.Message) -> None:
        self.sent.append(msg)


def test_the_agent_sends_nvml_s_minors_before_the_first_round_and_when_gpus_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAKE_NVML_GPUS", "2")
    monkeypatch.setenv("FAKE_NVML_MINOR_BASE", "4")
    nvml = load_fake_nvml("fake_nvml_minors")
    assert agent.nvml_minors(nvml) == {"00000000:18:00.0": 4, "00000000:19:00.0": 5}
    out = _Out()
    options = protocol.AgentOptions(fields=list(QUERY_FIELDS), process_fields=[], nvml=True)
    loop = agent.Agent(options, out)  # type: ignore[arg-type]
    loop.nvml = nvml
    rows = agent.nvml_gpu_rows(nvml, QUERY_FIELDS)
    for _ in range(3):
        loop.send_rows(list(QUERY_FIELDS), rows)
    assert [m.TYPE for m in out.sent] == ["minors", "gpus", "gpus", "gpus"]
    first = out.sent[0]
    assert isinstance(first, protocol.Minors) and first.source == "nvml"
    assert first.minors == {"00000000:18:00.0": 4, "00000000:19:00.0": 5}
    loop.send_rows(list(QUERY_FIELDS), rows[:1])  # a GPU gone: read again
    assert [m.TYPE for m in out.sent[-2:]] == ["minors", "gpus"]


def test_without_nvml_the_agent_reads_the_driver_s_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "0000:18:00.0").mkdir()
    (tmp_path / "0000:18:00.0" / "information").write_text(information("0000:18:00.0", 3))
    monkeypatch.setattr(procfacts, "DRIVER_GPUS", str(tmp_path))
    out = _Out()
    loop = agent.Agent(protocol.AgentOptions(fields=list(QUERY_FIELDS), process_fields=[]), out)  # type: ignore[arg-type]
    loop.send_rows(list(QUERY_FIELDS), ROWS[:1])
    first = out.sent[0]
    assert isinstance(first, protocol.Minors)
    assert (first.minors, first.source, first.error) == ({"0000:18:00.0": 3}, "procfs", None)


def test_a_device_file_user_listed_before_the_first_sample_is_placed_once_it_comes() -> None:
    """The monitor of a container given GPUs 4-7: the agent's minors (NVML's spelling),
    then a device-file user holding /dev/nvidia5 (before any sample: on no GPU yet), then
    the first round. The user is on GPU 1, and the snapshot says each GPU's minor."""
    host = HostConfig(name="ct202", kind="local", container=202, kernel_log=False)
    monitor = HostMonitor(host, AgentSource(LocalTransport(host)), record=False)
    monitor.ingest_status(ConnState.CONNECTED)
    buses = ["9A", "AB", "BA", "DB"]
    monitor.ingest_minors({f"00000000:{b}:00.0": 4 + i for i, b in enumerate(buses)})
    record = {"pid": 42, "command": "python train.py", "user": "root", "minors": [5]}
    monitor.ingest_proc_records("device-files", [record], 0.0)
    [early] = monitor.processes
    assert (early.gpus, early.minors) == ((), (5,))  # which GPU /dev/nvidia5 is: not known yet
    assert monitor.ingest_gpu_rows(subset_rows(range(4, 8)), QUERY_FIELDS)
    [user] = monitor.processes
    assert (user.pid, user.gpus, user.minors) == (42, (1,), (5,))
    data = snapshot_json(monitor, 0.0)
    assert [g["minor"] for g in data["gpus"]] == [4, 5, 6, 7]
    assert [[p["pid"] for p in g["processes"]] for g in data["gpus"]] == [[], [42], [], []]
    assert data["gpus"][1]["processes"][0]["minors"] == [5]


def test_a_record_s_minors_are_checked() -> None:
    record = {"pid": 1, "minors": [5, -1, True, "6", 2**40, *range(100)]}
    p = from_record(record, "device-files", 200)
    assert p.minors[:2] == (5, 2**40) and len(p.minors) == 64 and p.gpus == ()
    assert from_record({"pid": 1, "minors": "5"}, "device-files", 200).minors == ()
