"""nvidia-smi parsers against the authored fixtures, the real captures and hostile input."""

from __future__ import annotations

import csv
import re
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from gpumon.backends.model import GpuProcess, GpuSample, Health
from gpumon.backends.parsers import (
    PROCESS_FIELDS,
    QUERY_FIELDS,
    GpuParse,
    ProcessParse,
    cell_problem,
    classify_smi_failure,
    compute_apps_args,
    is_error_cell,
    nvidia_smi,
    parse_cell,
    parse_compute_apps,
    parse_free_text,
    parse_query_gpu,
    parse_real_capture,
    query_gpu_args,
)
from gpumon.backends.parsers.nvidia_smi import fields_for_help
from gpumon.backends.remote import RowBatcher, doctor_probe

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nvidia"
CAPTURES = sorted((FIXTURES / "real-captures").glob("*.txt"))
ERRORS = FIXTURES / "nvidia_smi_errors"


def read(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


# ---------------------------------------------------------------- expected healthy snapshot

RTX = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
UUIDS = (
    "GPU-6a1f0c3e-2b9d-4c57-8e14-93d0a7b2c5f1",
    "GPU-0d7e4b91-58a2-4f3c-b6e0-1c9a2f8d7e34",
    "GPU-b2c85f17-93e4-4a6d-a0f2-7e5c1d49b8a6",
    "GPU-41e9d3a8-6c0b-47f2-9d15-28ab6e0c3f97",
    "GPU-f37a2c60-0e1d-4b98-85c3-d46e9b17a2f0",
    "GPU-8c05e9d2-7a43-4e1b-9f6c-5b2d08e4a731",
    "GPU-2e94b7f1-c358-40da-8a67-e1f03c95d2b8",
    "GPU-95d3a06c-4f21-4c8e-b7a9-0a6e2f81c4d5",
)
BUSES = tuple(f"00000000:{b}:00.0" for b in ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"))
# ms, temp, util, mem util, used, free, power, power instant, sm clock, event reasons
ROWS = (
    (512, 76, 100, 43, 84522, 12728, 592.17, 598.40, 2520, 4),
    (514, 78, 100, 47, 84518, 12732, 596.83, 601.95, 2497, 4),
    (515, 74, 99, 45, 84530, 12720, 588.02, 579.44, 2535, 0),
    (517, 79, 100, 48, 84526, 12724, 597.66, 604.12, 2482, 4),
    (518, 73, 98, 42, 84520, 12730, 571.30, 566.87, 2602, 0),
    (520, 58, 37, 12, 86214, 11036, 243.55, 251.02, 2715, 0),
    (521, 66, 71, 29, 97012, 238, 412.80, 436.15, 2655, 0),
    (523, 55, 22, 7, 86198, 11052, 198.41, 187.90, 2745, 0),
)


def expected_healthy() -> tuple[GpuSample, ...]:
    out = []
    for i, (ms, temp, util, mutil, used, free, power, inst, sm, reasons) in enumerate(ROWS):
        out.append(
            GpuSample(
                index=i,
                uuid=UUIDS[i],
                name=RTX,
                bus_id=BUSES[i],
                timestamp=f"2026/11/29 14:32:07.{ms}",
                pstate="P0",
                temperature_c=float(temp),
                memory_temperature_c=None,
                utilization_pct=float(util),
                memory_utilization_pct=float(mutil),
                memory_total_mib=97887,
                memory_reserved_mib=637,
                memory_used_mib=used,
                memory_free_mib=free,
                power_w=power,
                power_instant_w=inst,
                power_limit_w=600.0,
                enforced_power_limit_w=600.0,
                sm_clock_mhz=sm,
                memory_clock_mhz=14001,
                max_sm_clock_mhz=3090,
                fan_pct=None,
                clocks_event_reasons=reasons,
                ecc_uncorrected=0,
                ecc_corrected=0,
                compute_mode="Default",
                persistence_mode="Enabled",
            )
        )
    return tuple(out)


# ---------------------------------------------------------------- API surface


def test_query_fields_match_fixture_list() -> None:
    listed = [ln for ln in read("query_fields.txt").splitlines() if ln and not ln.startswith("#")]
    assert list(QUERY_FIELDS) == listed
    assert len(QUERY_FIELDS) == 27
    assert PROCESS_FIELDS == ("pid", "process_name", "used_memory", "gpu_uuid", "gpu_bus_id")


def test_query_gpu_args() -> None:
    assert query_gpu_args() == [
        "--query-gpu=" + ",".join(QUERY_FIELDS),
        "--format=csv,noheader,nounits",
    ]
    assert query_gpu_args(("index", "memory.used"), loop_ms=1000) == [
        "--query-gpu=index,memory.used",
        "--format=csv,noheader,nounits",
        "-lms",
        "1000",
    ]
    assert compute_apps_args() == [
        "--query-compute-apps=pid,process_name,used_memory,gpu_uuid,gpu_bus_id",
        "--format=csv,noheader,nounits",
    ]


@pytest.mark.parametrize(
    ("fields", "loop_ms"),
    [(("index; rm -rf /",), None), ((), None), (("index",), 0), (("index",), -5)],
)
def test_query_gpu_args_rejects_bad_input(fields: tuple[str, ...], loop_ms: int | None) -> None:
    with pytest.raises(ValueError):
        query_gpu_args(fields, loop_ms=loop_ms)


MISSING_SPELLINGS = [
    "[N/A]",
    "N/A",
    "[Not Supported]",
    "[Insufficient Permissions]",
    "[Function Not Found]",
    "[Requested functionality has been deprecated]",
    "[Unknown Error]",
    "[GPU requires reset]",
    "[GPU is lost]",
    "[Not Found]",
    "ERR!",
    "[Some Future Error]",
    "",
    "   ",
    " [N/A] ",
]


@pytest.mark.parametrize("text", MISSING_SPELLINGS)
def test_parse_cell_missing(text: str) -> None:
    assert parse_cell(text) is None


@pytest.mark.parametrize(
    ("text", "value"),
    [(" 84522 MiB ", "84522 MiB"), ("P0", "P0"), ("Default", "Default"), ("0", "0")],
)
def test_parse_cell_value(text: str, value: str) -> None:
    assert parse_cell(text) == value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[Unknown Error]", (Health.WARNING, "Unknown Error")),
        (" [GPU requires reset] ", (Health.CRITICAL, "GPU requires reset")),
        ("[GPU is lost]", (Health.CRITICAL, "GPU is lost")),
        ("[N/A]", None),
        ("N/A", None),
        ("[Insufficient Permissions]", None),
        ("[Requested functionality has been deprecated]", None),
        ("42", None),
    ],
)
def test_cell_problem(text: str, expected: tuple[Health, str] | None) -> None:
    assert cell_problem(text) == expected


# ---------------------------------------------------------------- --query-gpu, authored


def test_healthy_8x_every_value() -> None:
    result = parse_query_gpu(read("query_gpu_8x_rtxpro6000.csv"))
    assert result.skipped == 0
    assert result.header is None
    assert result.gpus == expected_healthy()
    gpu6 = result.gpus[6]
    assert (gpu6.memory_used_mib, gpu6.memory_free_mib, gpu6.memory_total_mib) == (
        97012,
        238,
        97887,
    )
    assert gpu6.power_w == 412.80
    assert gpu6.fan_pct is None
    assert result.gpus[0].clocks_event_reasons == 4
    assert all(g.health is Health.OK and g.problems == () for g in result.gpus)


def test_units_fixture_equals_nounits() -> None:
    units = parse_query_gpu(read("query_gpu_units.csv"))
    assert units.skipped == 0
    assert units.header == QUERY_FIELDS
    assert units.gpus == expected_healthy()


def test_csv_nounits_header_with_units_values_without() -> None:
    header = read("query_gpu_units.csv").splitlines()[0]
    text = header + "\n" + read("query_gpu_8x_rtxpro6000.csv")
    assert parse_query_gpu(text).gpus == expected_healthy()


def test_header_maps_any_field_order() -> None:
    lines = [ln.split(", ") for ln in read("query_gpu_units.csv").splitlines()]
    reversed_text = "\n".join(", ".join(reversed(cells)) for cells in lines)
    result = parse_query_gpu(reversed_text)
    assert result.gpus == expected_healthy()
    assert result.header == tuple(reversed(QUERY_FIELDS))


def test_header_aliases_and_extra_fields() -> None:
    text = (
        "index, clocks.sm [MHz], clocks.mem [MHz], clocks_throttle_reasons.active, "
        "gpu_name, driver_version, gpu.power.current_limit [W]\n"
        "0, 2520 MHz, 14001 MHz, 0x0000000000000044, NVIDIA H200, 590.48.01, 700.00 W\n"
    )
    result = parse_query_gpu(text)
    (gpu,) = result.gpus
    assert (gpu.sm_clock_mhz, gpu.memory_clock_mhz) == (2520, 14001)
    assert gpu.clocks_event_reasons == 0x44
    assert gpu.name == "NVIDIA H200"
    assert gpu.enforced_power_limit_w == 700.0
    assert gpu.memory_used_mib is None  # not queried: unknown, not 0


def test_explicit_field_list_without_header() -> None:
    result = parse_query_gpu("3, 1234, 2520\n", fields=("index", "memory.used", "clocks.sm"))
    assert result.gpus == (GpuSample(index=3, memory_used_mib=1234, sm_clock_mhz=2520),)


def test_iterable_of_lines_same_as_text() -> None:
    text = read("query_gpu_units.csv")
    lines = text.splitlines(keepends=True)
    assert parse_query_gpu(lines) == parse_query_gpu(text)
    assert parse_query_gpu(iter(lines)).gpus == expected_healthy()


def test_with_na_fixture() -> None:
    result = parse_query_gpu(read("query_gpu_with_na.csv"))
    assert result.skipped == 0
    gpus = {g.index: g for g in result.gpus}
    assert sorted(gpus) == list(range(8))
    healthy = {g.index: g for g in expected_healthy()}
    for i in (0, 1, 2, 6):
        assert gpus[i] == healthy[i]

    gpu3 = gpus[3]
    assert gpu3.temperature_c is None
    assert gpu3.power_w is None and gpu3.power_instant_w is None
    assert gpu3.memory_used_mib == 84526
    assert gpu3.health is Health.WARNING
    assert gpu3.problems == (
        "temperature.gpu: Unknown Error",
        "power.draw: Unknown Error",
        "power.draw.instant: Unknown Error",
    )

    gpu4 = gpus[4]
    assert gpu4.health is Health.CRITICAL
    assert gpu4.problems == ("GPU is lost",)
    assert (gpu4.uuid, gpu4.bus_id, gpu4.name) == (UUIDS[4], BUSES[4], RTX)
    measured = replace(gpu4, index=0, uuid=None, name=None, bus_id=None, timestamp=None)
    assert measured == GpuSample(index=0, health=Health.CRITICAL, problems=("GPU is lost",))

    gpu5 = gpus[5]
    assert gpu5.ecc_uncorrected is None and gpu5.ecc_corrected is None
    assert gpu5.health is Health.OK and gpu5.problems == ()
    assert gpu5.memory_used_mib == 86214

    gpu7 = gpus[7]
    assert gpu7.health is Health.CRITICAL
    assert gpu7.problems == ("GPU requires reset",)
    assert (gpu7.memory_total_mib, gpu7.memory_used_mib, gpu7.memory_free_mib) == (97887, 0, 97250)
    assert gpu7.pstate is None and gpu7.temperature_c is None
    assert gpu7.sm_clock_mhz is None and gpu7.clocks_event_reasons is None
    assert gpu7.utilization_pct is None and gpu7.power_w is None
    assert gpu7.max_sm_clock_mhz == 3090


def test_loop_output_with_interleaved_garbage() -> None:
    rows = read("query_gpu_8x_rtxpro6000.csv").splitlines()
    garbage = [
        "NVRM: Xid (PCI:0000:ba:00): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus.",
        "ECC error detected",
        rows[3][:40],  # a row cut short
        ", ".join(["x"] * len(QUERY_FIELDS)),  # right column count, no index
        rows[5].replace(", 5, ", ", [N/A], ", 1),  # index missing
        "Xid 79, " + ", ".join(["1"] * (len(QUERY_FIELDS) - 1)),  # right count, bad timestamp
    ]
    stream = [*rows[:4], *garbage[:3], *rows[4:], "", *rows, *garbage[3:]]
    result = parse_query_gpu("\n".join(stream))
    # the row without its index still names its GPU by bus id: that GPU, not junk
    assert result.skipped == len(garbage) - 1
    (unread,) = result.unreadable
    assert (unread.bus_id, unread.index, unread.device) == (result.gpus[5].bus_id, None, False)
    assert unread.said is not None and garbage[4].startswith(unread.said.removesuffix("…"))
    assert [g.index for g in result.gpus] == [*range(8), *range(8)]
    assert result.gpus[:8] == expected_healthy()


@pytest.mark.parametrize("index", ["-1", "1.5", "0x1", "1 %", "[GPU is lost]", "", "1e3", "١"])
def test_row_with_unusable_index_is_skipped(index: str) -> None:
    row = read("query_gpu_8x_rtxpro6000.csv").splitlines()[1]
    assert ", 1, " in row
    result = parse_query_gpu(row.replace(", 1, ", f", {index}, ", 1))
    assert result.gpus == ()  # no GPU read from it, but its bus id says which GPU it was
    (unread,) = result.unreadable
    assert (unread.bus_id, unread.index, unread.device) == ("00000000:2A:00.0", None, False)


def test_hostile_name_cell_is_data() -> None:
    row = read("query_gpu_8x_rtxpro6000.csv").splitlines()[0]
    hostile = "\x1b[2J\x1b[31mEVIL\x1b]0;title\x07 \u2028\x85GPU"
    result = parse_query_gpu(row.replace(RTX, hostile))
    (gpu,) = result.gpus
    assert gpu.name == hostile
    assert gpu.memory_used_mib == 84522


# ---------------------------------------------------------------- --query-compute-apps

EXPECTED_APPS = (
    (2418861, "/opt/venvs/train/bin/python3", 84480, 0),
    (2418862, "/opt/venvs/train/bin/python3", 84476, 1),
    (2418863, "/opt/venvs/train/bin/python3", 84488, 2),
    (2418864, "/opt/venvs/train/bin/python3", 84484, 3),
    (2418865, "/opt/venvs/train/bin/python3", 84478, 4),
    (2419020, "sglang::scheduler_TP0", 86194, 5),
    (2418873, "/opt/venvs/train/bin/python3", 96992, 6),
    (2419188, "sglang::scheduler_TP0", 86178, 7),
)


def expected_apps(names: bool = True) -> tuple[GpuProcess, ...]:
    return tuple(
        GpuProcess(pid, name if names else None, mem, UUIDS[gpu], BUSES[gpu])
        for pid, name, mem, gpu in EXPECTED_APPS
    )


@pytest.mark.parametrize("name", ["compute_apps.csv", "compute_apps_noheader_nounits.csv"])
def test_compute_apps_variants(name: str) -> None:
    assert parse_compute_apps(read(name)) == ProcessParse(expected_apps(), 0)


def test_compute_apps_lxc_not_found_names() -> None:
    assert parse_compute_apps(read("compute_apps_lxc_pidns.csv")) == ProcessParse(
        expected_apps(names=False), 0
    )


@pytest.mark.parametrize("name", ["compute_apps_empty.txt", "compute_apps_empty_noheader.txt"])
def test_compute_apps_empty(name: str) -> None:
    assert parse_compute_apps(read(name)) == ProcessParse((), 0)
    assert parse_compute_apps("") == ProcessParse((), 0)
    assert parse_compute_apps([]) == ProcessParse((), 0)


def test_compute_apps_name_with_comma_space() -> None:
    text = (
        "4242, python3 -c import a, b, c, 512, GPU-abc, 00000000:18:00.0\n"
        "4243, , 16, GPU-abc, 00000000:18:00.0\n"
    )
    result = parse_compute_apps(text)
    assert result.processes == (
        GpuProcess(4242, "python3 -c import a, b, c", 512, "GPU-abc", "00000000:18:00.0"),
        GpuProcess(4243, None, 16, "GPU-abc", "00000000:18:00.0"),
    )


def test_compute_apps_header_order_and_name_with_comma() -> None:
    text = (
        "timestamp, gpu_name, gpu_bus_id, gpu_serial, gpu_uuid, pid, process_name, "
        "used_gpu_memory [MiB]\n"
        "2026/07/14 09:00:44.742, NVIDIA H200, 00000000:83:00.0, [N/A], GPU-1, 77, "
        "job, step 3, 2296 MiB\n"
        "2026/07/14 09:00:44.742, NVIDIA H200, 00000000:83:00.0, [N/A], GPU-1, 78, x, [N/A]\n"
    )
    result = parse_compute_apps(text)
    assert result.processes == (
        GpuProcess(77, "job, step 3", 2296, "GPU-1", "00000000:83:00.0"),
        GpuProcess(78, "x", None, "GPU-1", "00000000:83:00.0"),
    )


def test_compute_apps_aliases_in_header() -> None:
    text = "gpu_uuid, name, pid, used_memory [MiB]\nGPU-9, trainer, 12, 100 MiB\n"
    (proc,) = parse_compute_apps(text).processes
    assert proc == GpuProcess(12, "trainer", 100, "GPU-9", None)


def test_compute_apps_skips_bad_rows() -> None:
    good = read("compute_apps_noheader_nounits.csv").splitlines()
    text = "\n".join(
        [good[0], "No running processes found", "abc, x, 1, GPU-1, 0000", "1, x, 1", *good[1:]]
    )
    result = parse_compute_apps(text)
    assert result.processes == expected_apps()
    assert result.skipped == 3


def test_compute_apps_hostile_process_name() -> None:
    hostile = "\x1b[31m\x1b]8;;http://x\x07rm -rf /\x1b[0m\x00\x7f, [bold]x[/bold]\u202e"
    text = f"999, {hostile}, 10, GPU-1, 00000000:01:00.0\n"
    (proc,) = parse_compute_apps(text).processes
    assert proc.name == hostile
    assert (proc.pid, proc.memory_mib) == (999, 10)


# ---------------------------------------------------------------- names with ", " and brackets

# nvidia-smi joins cells with ", " and never quotes them; a name may hold the separator.
COMMA_NAME = "NVIDIA RTX PRO 6000, Blackwell, Server Edition"
VGPU_ECC = (
    "[The requested vgpu operation is not available on target device, because ECC is enabled]"
)


@pytest.mark.parametrize("fixture", ["query_gpu_8x_rtxpro6000.csv", "query_gpu_units.csv"])
def test_a_gpu_name_holding_the_separator_keeps_the_gpu_and_every_value(fixture: str) -> None:
    result = parse_query_gpu(read(fixture).replace(RTX, COMMA_NAME))
    assert result.skipped == 0
    assert result.gpus == tuple(replace(g, name=COMMA_NAME) for g in expected_healthy())


def test_rounds_of_gpus_whose_name_holds_the_separator_stay_apart() -> None:
    rows = read("query_gpu_8x_rtxpro6000.csv").replace(RTX, COMMA_NAME).splitlines()
    batcher = RowBatcher(QUERY_FIELDS.index("index"), len(QUERY_FIELDS))
    assert [batcher.feed(r) for r in rows] == [None] * 8
    assert batcher.feed(rows[0]) == rows  # index 0 again: one whole round of 8
    assert [g.index for g in parse_query_gpu(rows).gpus] == list(range(8))


def test_an_error_cell_holding_the_separator_is_one_missing_value() -> None:
    row = read("query_gpu_8x_rtxpro6000.csv").splitlines()[0]
    assert ", 592.17, " in row
    (gpu,) = parse_query_gpu(row.replace(", 592.17, ", f", {VGPU_ECC}, ")).gpus
    assert gpu == replace(expected_healthy()[0], power_w=None)


@pytest.mark.parametrize("cell", ["P0, P1", "00000000:18:00.0, 0"])
def test_a_stray_separator_in_a_value_cell_is_never_read_as_another_field(cell: str) -> None:
    row = read("query_gpu_8x_rtxpro6000.csv").splitlines()[0]
    result = parse_query_gpu(row.replace(", P0, ", f", {cell}, ", 1))
    # the name could only take the piece if the cells after it moved into the wrong fields:
    # no GPU is read from the row, and its bus id says which GPU it was
    assert result.gpus == ()
    assert [(u.bus_id, u.index, u.device) for u in result.unreadable] == [
        ("00000000:18:00.0", 0, False)
    ]


@pytest.mark.parametrize(
    "name", ["[kworker/0:1]", "[python3]", "[N/A] trainer", "[Some Future Error]", "[", "a]"]
)
def test_a_process_or_gpu_name_in_brackets_is_its_name(name: str) -> None:
    (proc,) = parse_compute_apps(f"77, {name}, 512, GPU-1, 00000000:01:00.0").processes
    assert proc == GpuProcess(77, name, 512, "GPU-1", "00000000:01:00.0")
    (gpu,) = parse_query_gpu(
        read("query_gpu_8x_rtxpro6000.csv").splitlines()[0].replace(RTX, name)
    ).gpus
    assert (gpu.name, gpu.health, gpu.memory_used_mib) == (name, Health.OK, 84522)


NVIDIA_SMI_NO_VALUE = [
    *(c for c in MISSING_SPELLINGS if c.strip().startswith("[") and c != "[Some Future Error]"),
    "[not found]",  # case is not significant
    "[The operating system has blocked the request.]",  # pynvml's text ends in "."
    "[GPU requires restart]",  # NVML's own text for RESET_REQUIRED
    "[Insufficient Memory]",
    VGPU_ECC,
    "",
    "N/A",
]


@pytest.mark.parametrize("cell", NVIDIA_SMI_NO_VALUE)
def test_only_nvidia_smi_spellings_mean_no_name(cell: str) -> None:
    assert cell in {"", "N/A"} or is_error_cell(cell)
    (proc,) = parse_compute_apps(f"77, {cell}, 512, GPU-1, 00000000:01:00.0").processes
    assert proc == GpuProcess(77, None, 512, "GPU-1", "00000000:01:00.0")


def test_compute_apps_a_gpu_name_holding_the_separator_goes_to_the_gpu_name() -> None:
    text = (
        "timestamp, gpu_name, gpu_bus_id, gpu_serial, gpu_uuid, pid, process_name, "
        "used_gpu_memory [MiB]\n"
        "2026/07/14 09:00:44.742, NVIDIA H200, NVL, 00000000:83:00.0, [N/A], GPU-1, 77, "
        "[job], 2296 MiB\n"
        "2026/07/14 09:00:44.742, NVIDIA H200, 00000000:83:00.0, [N/A], GPU-1, 78, "
        "job, step 3, 2296 MiB\n"
    )
    assert parse_compute_apps(text) == ProcessParse(
        (
            GpuProcess(77, "[job]", 2296, "GPU-1", "00000000:83:00.0"),
            GpuProcess(78, "job, step 3", 2296, "GPU-1", "00000000:83:00.0"),
        ),
        0,
    )


# pieces that look like other cells, so a misplaced split would show in the values
NAME_PIECES = st.sampled_from(
    [
        "a",
        "Z",
        " ",
        ",",
        ", ",
        "[",
        "]",
        "N/A",
        "[N/A]",
        "GPU-1",
        "00000000:18:00.0",
        "P0",
        "7",
        "0x1F",
        "12.5 W",
        "\x1b]0;t\x07",
        "é",
    ]
)
NAMES = st.lists(NAME_PIECES, max_size=12).map("".join)


def expected_name(name: str) -> str | None:
    return None if name.strip() in ("", "N/A") or is_error_cell(name) else name.strip()


@settings(max_examples=300)
@given(NAMES, st.integers(0, 7))
def test_any_gpu_name_keeps_its_row_and_every_other_value(name: str, index: int) -> None:
    assume(not is_error_cell(name))
    rows = read("query_gpu_8x_rtxpro6000.csv").splitlines()
    result = parse_query_gpu(rows[index].replace(RTX, name))
    assert result.skipped == 0
    (gpu,) = result.gpus
    assert gpu == replace(expected_healthy()[index], name=expected_name(name))
    assert parse_free_text(name) == expected_name(name)


@settings(max_examples=300)
@given(NAMES, st.sampled_from(["84480", "84480 MiB", "[N/A]"]))
def test_any_process_name_keeps_its_row_and_every_other_value(name: str, memory: str) -> None:
    line = f"2418861, {name}, {memory}, {UUIDS[0]}, {BUSES[0]}"
    (proc,) = parse_compute_apps(line).processes
    mib = None if memory == "[N/A]" else 84480
    assert proc == GpuProcess(2418861, expected_name(name), mib, UUIDS[0], BUSES[0])


def test_doctor_keeps_a_gpu_whose_name_holds_commas() -> None:
    rows = doctor_probe.parse_smi_rows(f"0, {COMMA_NAME}, 12.0, 580.95.05\n1, X,Y, 12.0, 1\n")
    assert rows == [
        {"index": "0", "name": COMMA_NAME, "compute_cap": "12.0", "driver": "580.95.05"},
        {"index": "1", "name": "X,Y", "compute_cap": "12.0", "driver": "1"},
    ]


# ---------------------------------------------------------------- failures


def expected_kind(file: str) -> str | None:
    kinds = {
        "driver_not_loaded.txt": "driver_not_loaded",
        "driver_library_version_mismatch.txt": "version_mismatch",
        "nvml_unknown_error.txt": "nvml_unknown_error",
        "no_devices_found.txt": "no_devices",
        "device_handle_unknown_error.txt": "device_handle",
        "invalid_field.txt": "invalid_field",
        "table_with_err.txt": None,
    }
    return kinds[file]


def manifest() -> list[tuple[str, int]]:
    with (ERRORS / "manifest.tsv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    out = []
    for row in rows:
        code = row["exit_code"]
        # "nonzero": not observed; try the likely value and a generic one
        out += [(row["file"], c) for c in ([255, 1] if code == "nonzero" else [int(code)])]
    return out


def test_manifest_covers_every_error_file() -> None:
    listed = {file for file, _ in manifest()}
    assert listed == {p.name for p in ERRORS.glob("*.txt")}
    assert len(listed) == 7


@pytest.mark.parametrize(("file", "exit_code"), manifest())
def test_error_fixtures(file: str, exit_code: int) -> None:
    output = (ERRORS / file).read_text(encoding="utf-8")
    failure = classify_smi_failure(output, exit_code)
    kind = expected_kind(file)
    if kind is None:
        assert exit_code == 0
        assert failure is None
        return
    assert failure is not None
    assert failure.kind == kind
    assert failure.exit_code == exit_code
    first_line = output.splitlines()[0]
    assert f'"{first_line}"' in failure.message
    assert f"(exit {exit_code})" in failure.message
    assert failure.message.startswith(f'nvidia-smi: "{first_line}" (exit {exit_code})')
    assert len(failure.message) > len(first_line) + 20  # a hint follows


def test_version_mismatch_message_has_library_version_and_lxc_hint() -> None:
    output = (ERRORS / "driver_library_version_mismatch.txt").read_text(encoding="utf-8")
    failure = classify_smi_failure(output, 18)
    assert failure is not None
    assert "NVML library version: 580.105" in failure.message
    assert "LXC" in failure.message and "kernel module" in failure.message
    bare = classify_smi_failure("Failed to initialize NVML: Driver/library version mismatch", 18)
    assert bare is not None and bare.kind == "version_mismatch"
    assert "NVML library version" not in bare.message


@pytest.mark.parametrize(
    ("output", "exit_code", "kind"),
    [
        (
            "Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error\n",
            255,
            "device_handle",
        ),
        (
            "Unable to determine the device handle for GPU 0000:02:00.0: GPU is lost. "
            "Reboot the system to recover this GPU\n",
            15,
            "device_handle",
        ),
        (
            "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure "
            "that the NVIDIA Display Driver is properly installed and present in your system.\n"
            "Please also try adding directory that contains libnvidia-ml.so to your system PATH.\n",
            12,
            "library_not_found",
        ),
        (
            "Failed to initialize NVML: No supported GPUs were found\n"
            "Unable to determine the number of GPUs\n",
            255,
            "no_supported_gpus",
        ),
        ('Field "cuda_version" is not a valid field to query.\n', 2, "invalid_field"),
        ("bash: nvidia-smi: command not found\n", 127, "not_found"),
        ("sh: 1: nvidia-smi: not found\n", 127, "not_found"),
        ("env: 'nvidia-smi': No such file or directory\n", 127, "not_found"),
        ("", 127, "not_found"),
        ("something new and strange\nsecond line\n", 3, "other"),
        ("", 255, "other"),
        ("", 9, "driver_not_loaded"),
    ],
)
def test_classify_other_shapes(output: str, exit_code: int, kind: str) -> None:
    failure = classify_smi_failure(output, exit_code)
    assert failure is not None
    assert failure.kind == kind
    assert failure.exit_code == exit_code
    first = next((ln.strip() for ln in output.splitlines() if ln.strip()), None)
    if first is not None:
        assert f'nvidia-smi: "{first}" (exit {exit_code})' in failure.message
    else:
        assert "no output" in failure.message


@pytest.mark.parametrize(
    ("output", "exit_code", "final"),
    [
        ("bash: nvidia-smi: command not found\n", 127, True),  # no nvidia-smi to run
        ("nvidia-smi: No such file or directory", 127, True),  # the agent's exec failed
        ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver", 9, True),
        ("Failed to initialize NVML: Driver/library version mismatch\n", 18, True),
        ("No devices were found\n", 6, True),
        ("something new and strange\n", 3, False),  # an exit code alone may pass
        ("", 255, False),
        ('Field "cuda_version" is not a valid field to query.\n', 2, False),  # re-probed
        (
            "nvidia-smi gave no usable GPU row for 10 s (stuck): killed and started again",
            124,
            False,
        ),
    ],
)
def test_a_failure_is_final_when_no_retry_can_end_it(
    output: str, exit_code: int, final: bool
) -> None:
    """``final``: a one-shot says it at once instead of waiting out its --timeout."""
    failure = classify_smi_failure(output, exit_code)
    assert failure is not None and failure.final is final, failure


def test_gpu_lost_device_handle_hint_says_reboot() -> None:
    failure = classify_smi_failure(
        "Unable to determine the device handle for GPU 0000:02:00.0: GPU is lost. "
        "Reboot the system to recover this GPU",
        15,
    )
    assert failure is not None and "Xid 79" in failure.message


@pytest.mark.parametrize("exit_code", [0, None])
def test_classify_good_output_is_none(exit_code: int | None) -> None:
    assert classify_smi_failure(read("query_gpu_8x_rtxpro6000.csv"), exit_code) is None
    assert classify_smi_failure("", exit_code) is None
    # failure words inside a process name do not trigger a failure
    apps = (
        "12, No devices were found, 10, GPU-1, 0000:01:00.0\n"
        "13, No such file or directory, 1, GPU-1, 0000:01:00.0\n"
    )
    assert classify_smi_failure(apps, exit_code) is None


def test_classify_known_text_wins_with_exit_zero() -> None:
    failure = classify_smi_failure("No devices were found\n", 0)
    assert failure is not None and failure.kind == "no_devices"
    assert "(exit 0)" in failure.message


# ---------------------------------------------------------------- real captures


def capture_id(path: Path) -> str:
    return path.stem


def test_captures_present_with_license() -> None:
    assert len(CAPTURES) == 10
    assert "MIT License" in (FIXTURES / "real-captures" / "LICENSE").read_text(encoding="utf-8")


@pytest.mark.parametrize("path", CAPTURES, ids=capture_id)
def test_real_capture_sections(path: Path) -> None:
    sections = parse_real_capture(path.read_text(encoding="utf-8"))
    for phase in ("idle", "load"):
        for title in (
            "nvidia-smi (default table)",
            "query (-q)",
            "query-gpu (csv, what the exporter parses)",
            "query-compute-apps (per-process)",
            "pmon (per-process monitor)",
            "dmon (per-device monitor, incl. PCIe rx/tx)",
        ):
            assert f"{phase} :: {title}" in sections
    assert sections["capabilities :: version"].startswith("NVIDIA-SMI version")
    # pmon output lines that start with "#" belong to the output, not to a banner
    assert sections["idle :: pmon (per-process monitor)"].startswith("# gpu")
    assert not any(value.endswith("\n\n") for value in sections.values())
    assert not any(line.startswith("#####") for v in sections.values() for line in v.split("\n"))


@pytest.mark.parametrize("path", CAPTURES, ids=capture_id)
@pytest.mark.parametrize("phase", ["idle", "load"])
def test_real_capture_query_gpu(path: Path, phase: str) -> None:
    sections = parse_real_capture(path.read_text(encoding="utf-8"))
    result = parse_query_gpu(sections[f"{phase} :: query-gpu (csv, what the exporter parses)"])
    assert isinstance(result, GpuParse)
    assert result.skipped == 0
    assert len(result.gpus) > 0
    # the header, units stripped, is exactly the field list the capture queried
    field_list = sections[
        "capabilities :: query-gpu field list (derived, used for query-gpu above)"
    ]
    assert result.header == tuple(field_list.split())

    model = path.stem.split("__")[1].removesuffix("-mig")
    mig = path.stem.split("__")[1].endswith("-mig")
    for gpu in result.gpus:
        assert gpu.name is not None
        assert gpu.name.lower().replace(" ", "-").startswith(model)
        assert gpu.memory_total_mib is not None and gpu.memory_total_mib > 0
        assert gpu.memory_used_mib is not None and gpu.memory_free_mib is not None
        assert gpu.memory_reserved_mib is not None
        parts = gpu.memory_reserved_mib + gpu.memory_used_mib + gpu.memory_free_mib
        assert abs(parts - gpu.memory_total_mib) <= 2  # each cell rounded up separately
        assert gpu.uuid is not None and gpu.uuid.startswith("GPU-")
        assert gpu.bus_id is not None and re.fullmatch(
            r"[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.0", gpu.bus_id
        )
        assert gpu.power_w is not None and gpu.power_w > 0
        assert gpu.power_limit_w is not None and gpu.temperature_c is not None
        assert gpu.sm_clock_mhz is not None and gpu.max_sm_clock_mhz is not None
        assert gpu.clocks_event_reasons is not None
        assert gpu.health is Health.OK and gpu.problems == ()
        if mig:
            assert gpu.utilization_pct is None  # [N/A] under MIG: absent, never 0
        else:
            assert gpu.utilization_pct is not None


@pytest.mark.parametrize(
    ("model", "total"),
    [("h100-80gb-hbm3", 81559), ("h200__", 143771), ("l40s", 46068), ("rtx-4080", 16376)],
)
def test_real_capture_memory_totals(model: str, total: int) -> None:
    (path,) = [p for p in CAPTURES if model in p.name]
    sections = parse_real_capture(path.read_text(encoding="utf-8"))
    (gpu,) = parse_query_gpu(sections["load :: query-gpu (csv, what the exporter parses)"]).gpus
    assert gpu.memory_total_mib == total


@pytest.mark.parametrize("path", CAPTURES, ids=capture_id)
def test_real_capture_compute_apps(path: Path) -> None:
    sections = parse_real_capture(path.read_text(encoding="utf-8"))
    windows = path.name.startswith("windows")
    idle = parse_compute_apps(sections["idle :: query-compute-apps (per-process)"])
    load = parse_compute_apps(sections["load :: query-compute-apps (per-process)"])
    assert idle.skipped == 0 and load.skipped == 0
    assert len(load.processes) >= 2
    for proc in (*idle.processes, *load.processes):
        assert proc.pid is not None and proc.pid > 0
        assert proc.name
        assert proc.gpu_uuid is not None and proc.gpu_uuid.startswith("GPU-")
        assert proc.gpu_bus_id is not None and proc.gpu_bus_id.startswith("00000000:")
        if windows:
            assert proc.memory_mib is None  # WDDM prints [N/A]
            assert proc.name.endswith(".exe")
        else:
            assert proc.memory_mib is not None and proc.memory_mib > 0


def test_real_capture_windows_name_with_spaces() -> None:
    (path,) = [p for p in CAPTURES if "591.86" in p.name]
    sections = parse_real_capture(path.read_text(encoding="utf-8"))
    names = {
        p.name
        for p in parse_compute_apps(sections["load :: query-compute-apps (per-process)"]).processes
    }
    assert r"C:\Program Files\NZXT CAM\NZXT CAM.exe" in names


def test_real_capture_other_sections_do_not_crash_parsers() -> None:
    for path in CAPTURES:
        for key, text in parse_real_capture(path.read_text(encoding="utf-8")).items():
            gpus = parse_query_gpu(text)
            procs = parse_compute_apps(text)
            if "query-gpu (csv" not in key:
                assert gpus.gpus == (), key  # tables, -q output and help text are not GPU rows
            assert isinstance(procs, ProcessParse)


# ---------------------------------------------------------------- properties

CELL_TOKENS = st.sampled_from(
    [
        "[N/A]",
        "N/A",
        "[Unknown Error]",
        "[GPU is lost]",
        "[GPU requires reset]",
        "ERR!",
        "",
        " ",
        "0",
        "0 MiB",
        "12.5 W",
        "0x1F",
        "0x",
        "nan",
        "inf",
        "-inf",
        "1e5",
        "1_000",
        "١٢",
        "9" * 5000,
        "0.0.0",
        "-",
        "P0",
        "Default",
        "[",
        "]",
    ]
)
CELLS = st.one_of(CELL_TOKENS, st.text(max_size=20))
NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")
PID = re.compile(r"[0-9]+")
NUMERIC_FIELDS = {
    "temperature.gpu": "temperature_c",
    "temperature.memory": "memory_temperature_c",
    "utilization.gpu": "utilization_pct",
    "utilization.memory": "memory_utilization_pct",
    "memory.total": "memory_total_mib",
    "memory.reserved": "memory_reserved_mib",
    "memory.used": "memory_used_mib",
    "memory.free": "memory_free_mib",
    "power.draw": "power_w",
    "power.draw.instant": "power_instant_w",
    "power.limit": "power_limit_w",
    "enforced.power.limit": "enforced_power_limit_w",
    "clocks.current.sm": "sm_clock_mhz",
    "clocks.current.memory": "memory_clock_mhz",
    "clocks.max.sm": "max_sm_clock_mhz",
    "fan.speed": "fan_pct",
    "ecc.errors.uncorrected.volatile.total": "ecc_uncorrected",
    "ecc.errors.corrected.volatile.total": "ecc_corrected",
}


def leading_number(cell: str) -> float | None:
    """Independent oracle: the number a cell starts with, or None."""
    m = NUMBER.match(cell.strip())
    return float(m.group()) if m else None


@settings(max_examples=300)
@given(st.text(), st.one_of(st.none(), st.integers(-(2**40), 2**40)))
def test_arbitrary_text_never_raises(text: str, exit_code: int | None) -> None:
    gpus = parse_query_gpu(text)
    procs = parse_compute_apps(text)
    assert gpus.skipped + len(gpus.gpus) <= len(text.split("\n"))
    assert procs.skipped + len(procs.processes) <= len(text.split("\n"))
    failure = classify_smi_failure(text, exit_code)
    if exit_code not in (0, None):
        assert failure is not None  # a non-zero exit is always reported
    if failure is not None:
        assert failure.message.startswith("nvidia-smi: ")
        first = next((ln.strip() for ln in text.split("\n") if ln.strip()), None)
        if first is not None and len(first) <= 500:
            assert f'"{first}"' in failure.message


@settings(max_examples=300)
@given(st.lists(CELLS, min_size=len(QUERY_FIELDS), max_size=len(QUERY_FIELDS)))
def test_query_gpu_never_invents_numbers(cells: list[str]) -> None:
    cells[0] = "2026/11/29 14:32:07.512"
    cells[1] = "5"
    result = parse_query_gpu(", ".join(cells))
    if any(", " in c or "\n" in c or "\r" in c for c in cells):
        return  # the row shape changed; covered by the never-raises property
    (gpu,) = result.gpus
    assert gpu.index == 5
    row = dict(zip(QUERY_FIELDS, cells, strict=True))
    for field, attr in NUMERIC_FIELDS.items():
        value = getattr(gpu, attr)
        if value is not None:
            assert leading_number(row[field]) == value, (field, row[field], value)
    reasons = gpu.clocks_event_reasons
    cell = row["clocks_event_reasons.active"].strip()
    if reasons is not None:
        assert cell.lower().startswith("0x") or leading_number(cell) == reasons


@settings(max_examples=300)
@given(st.lists(CELLS, min_size=0, max_size=40))
def test_arbitrary_cell_rows_never_raise_or_invent_zero(cells: list[str]) -> None:
    line = ", ".join(cells)
    pieces = line.split(", ")  # a number reported is one whole piece of the line
    for gpu in parse_query_gpu(line).gpus:
        for attr in NUMERIC_FIELDS.values():
            value = getattr(gpu, attr)
            assert value is None or any(leading_number(c) == value for c in pieces)
    for proc in parse_compute_apps(line).processes:
        assert any(PID.fullmatch(c.strip()) and int(c) == proc.pid for c in pieces)
        assert proc.memory_mib is None or any(leading_number(c) == proc.memory_mib for c in pieces)
    classify_smi_failure(line, 1)


@settings(max_examples=200)
@given(CELLS, CELLS)
@example(", ", "0x1F")
def test_compute_apps_never_invents_memory(name: str, memory: str) -> None:
    result = parse_compute_apps(f"77, {name}, {memory}, GPU-1, 00000000:01:00.0")
    if "\n" in name + memory or "\r" in name + memory or ", " in memory:
        return
    if ", " in name and not result.processes:
        # A name with the separator in it is placed only where every other cell is
        # well-formed; with a memory cell of no known shape the row is ambiguous and is
        # counted as skipped, never split by guess.
        assert result.skipped == 1
        return
    (proc,) = result.processes
    assert proc.pid == 77
    if proc.memory_mib is not None:
        assert leading_number(memory) == proc.memory_mib
    assert proc.name is None or proc.name == name.strip()


def test_count_fields_reject_fractions_and_keep_big_values_exact() -> None:
    fields = ("index", "memory.used", "memory.total", "ecc.errors.corrected.volatile.total")
    (gpu,) = parse_query_gpu("0, 12.5 MiB, 97887.00 MiB, 123456789012345678", fields).gpus
    assert gpu.memory_used_mib is None
    assert gpu.memory_total_mib == 97887
    assert gpu.ecc_corrected == 123456789012345678


# ------------------------------------------- issue 17 point 12: drivers before R535


def test_the_query_asks_what_the_driver_knows() -> None:
    """fields_for_help: every real R535+ capture's --help-query-gpu (590.x to 610.x) lists
    all 27 fields; the pre-R535 help (fixtures/nvidia/help_query_gpu_pre_r535.txt) lists
    the clock reasons only as clocks_throttle_reasons.* and no power.draw.instant: the query
    asks the old name and leaves the instant power out instead of failing whole."""
    for path in sorted((FIXTURES / "real-captures").glob("linux-*.txt")):
        help_text = parse_real_capture(path.read_text(encoding="utf-8"))[
            "capabilities :: help-query-gpu"
        ]
        assert fields_for_help(help_text) == QUERY_FIELDS, path.name
    old = fields_for_help((FIXTURES / "help_query_gpu_pre_r535.txt").read_text())
    assert "clocks_throttle_reasons.active" in old and "clocks_event_reasons.active" not in old
    assert "power.draw.instant" not in old
    assert [f for f in QUERY_FIELDS if f not in old] == [
        "power.draw.instant",
        "clocks_event_reasons.active",
    ]
    row = parse_query_gpu(["0, 0x0000000000000044"], ("index", "clocks_throttle_reasons.active"))
    assert row.gpus[0].clocks_event_reasons == 0x44
    assert fields_for_help("no quoted names here") == QUERY_FIELDS  # unfamiliar: all of them


@given(
    st.sampled_from(sorted(nvidia_smi._CONVERTERS)),
    st.text(alphabet=st.sampled_from("0123456789.x [],-NA/GPUislotErr! MiBW%"), max_size=14),
)
def test_a_remembered_conversion_is_the_conversion(kind: str, cell: str) -> None:
    """The memo of cell conversions (``_convert``) gives what converting afresh gives,
    the first time and every time after."""
    fresh = (nvidia_smi._CONVERTERS[kind](cell), nvidia_smi.cell_problem(cell))
    assert nvidia_smi._convert(kind, cell) == fresh
    assert nvidia_smi._convert(kind, cell) == fresh


def test_the_conversion_memo_stays_bounded() -> None:
    """A day of ever-new readings never grows the memo past its bound."""
    for k in range(3 * nvidia_smi._CONVERTED_MAX):
        nvidia_smi._convert("int", f"{k} MiB")
        assert len(nvidia_smi._CONVERTED) <= nvidia_smi._CONVERTED_MAX
    assert nvidia_smi._convert("int", "12 MiB") == (12, None)
