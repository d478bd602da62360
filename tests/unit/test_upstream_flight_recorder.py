"""PyTorch's own flight-recorder dumps (tests/fixtures/upstream/flight-recorder/torch-<v>/,
made by ``scripts/capture-upstream flight-recorder``: 4 real ranks on Gloo, rank 2 skipped
an ``all_reduce``) read by ``backends/parsers/flight_recorder.py``: the rank that never
arrived is named from the dumps alone. The format is ``FlightRecorder::dump``'s
(``torch/csrc/distributed/c10d/FlightRecorder.cpp``, dump version "2.10" in torch 2.13.0
and 2.14.1) as ``torch/distributed/flight_recorder/components/loader.py`` reads it."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from gpumon.backends.parsers.flight_recorder import analyze, rank_ranges, read_dump

from upstream_captures import UPSTREAM

FOLDER = UPSTREAM / "flight-recorder"
VERSIONS = sorted(p.name for p in FOLDER.glob("torch-*"))


def scenario(version: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FOLDER / version / "scenario.json").read_text())
    return data


def dumps(version: str, kind: str) -> dict[int, bytes]:
    prefix = scenario(version)["prefix"]
    folder = FOLDER / version / kind
    return {
        int(p.name[len(prefix) :]): p.read_bytes()
        for p in folder.iterdir()
        if p.name.startswith(prefix)
    }


def pids(version: str) -> dict[int, int]:
    return {int(r): int(p) for r, p in scenario(version)["pids"].items()}


def test_two_versions_are_captured() -> None:
    assert len(VERSIONS) >= 2, VERSIONS


@pytest.mark.parametrize("version", VERSIONS)
def test_the_rank_that_never_arrived_is_named(version: str) -> None:
    said = scenario(version)
    skipped, seq = said["skipped_rank"], said["skipped_seq"]
    gpus = {r: 4 + r for r in range(said["world"])}
    report = analyze(dumps(version, "on-demand"), pids=pids(version), gpus=gpus)
    assert report.stuck is not None
    assert (report.stuck.op, report.stuck.seq) == ("all_reduce", seq)
    assert report.stuck.sizes == ((said["grad_numel"],),)
    assert (report.stuck.pg, report.stuck.pg_desc) == ("0", "default_pg")
    assert report.stuck.timeout_ms == said["timeout_s"] * 1000
    assert report.absent == (skipped,)
    others = tuple(r for r in range(said["world"]) if r != skipped)
    assert report.waiting == others
    assert report.undumped == ()
    pid = said["pids"][str(skipped)]
    assert report.words("drafter") == (
        f"drafter stalled: rank {skipped} (GPU {4 + skipped}, PID {pid}) never entered "
        f"all_reduce #{seq} (ranks {rank_ranges(others)} waiting)"
    )
    assert report.detail() == (
        f"process group 0 (default_pg), inputs {said['grad_numel']} Float, "
        f"timeout {said['timeout_s']:g} s"
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_the_table_has_each_ranks_last_collectives(version: str) -> None:
    said = scenario(version)
    skipped, seq = said["skipped_rank"], said["skipped_seq"]
    report = analyze(dumps(version, "on-demand"))
    by_rank = {row.rank: row for row in report.rows}
    assert sorted(by_rank) == list(range(said["world"]))
    for rank, row in by_rank.items():
        assert row.last_completed is not None and row.last_entered is not None
        # the step's broadcast came before the all_reduce rank 2 skipped
        assert row.last_completed.words() == f"broadcast #{seq - 1}"
        expected = seq - 1 if rank == skipped else seq
        assert row.last_entered.seq == expected
    lines = report.table()
    assert lines[1 + skipped].split()[-2:] == ["broadcast", f"#{seq - 1}"]


@pytest.mark.parametrize("version", VERSIONS)
def test_waited_seconds_come_from_the_dump_times(version: str) -> None:
    report = analyze(dumps(version, "on-demand"))
    assert report.stuck is not None and report.stuck.created_ns is not None
    entered = report.stuck.created_ns / 1e9
    at = {r: entered + 600.0 for r in report.waiting}
    timed = analyze(dumps(version, "on-demand"), at=at)
    assert timed.waited_s == pytest.approx(600.0, abs=1.0)
    assert "waiting 10 min)" in timed.words("drafter")


@pytest.mark.parametrize("version", VERSIONS)
def test_a_missing_dump_is_said_as_missing(version: str) -> None:
    """On the timeout only the ranks that timed out dump: rank 2 wrote none."""
    said = scenario(version)
    skipped, seq = said["skipped_rank"], said["skipped_seq"]
    got = dumps(version, "on-timeout")
    assert sorted(got) == said["on_timeout_ranks"]
    report = analyze(got, pids=pids(version))
    assert report.undumped == (skipped,)
    assert report.stuck is not None and report.stuck.seq == seq
    pid = said["pids"][str(skipped)]
    others = rank_ranges(said["on_timeout_ranks"])
    assert report.words("drafter") == (
        f"drafter stalled: no dump from rank {skipped} (PID {pid}); ranks {others} last "
        f"entered all_reduce #{seq}"
    )
    row = next(r for r in report.rows if r.rank == skipped)
    assert not row.dumped and "no dump (missing)" in report.table()[1 + skipped]


@pytest.mark.parametrize("version", VERSIONS)
def test_pytorchs_analyzer_fails_on_gloo_dumps(version: str) -> None:
    """Why gpumon reads the dumps itself: fr_trace (builder.py's build_collectives) looks
    the group up by the entries' name, "0", where Gloo's pg_config keys it by ""."""
    for kind in ("on-demand", "on-timeout"):
        text = (FOLDER / version / kind / "analyzer_allow_incomplete_ranks.txt").read_text()
        assert "# exit status 1" in text and "KeyError: ('0'," in text
    config = read_dump(dumps(version, "on-demand")[0], 0).groups
    assert config == {"": (0, 1, 2, 3)}


@pytest.mark.parametrize("version", VERSIONS)
def test_the_dump_format(version: str) -> None:
    dump = read_dump(dumps(version, "on-demand")[0], 0)
    assert dump.version == "2.10"
    assert [e.op for e in dump.entries[:3]] == ["broadcast", "all_reduce", "all_reduce"]
    assert [e.seq for e in dump.entries] == list(range(1, len(dump.entries) + 1))


def test_a_dump_that_would_run_code_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    # what pickle.dumps writes for a call of os.system: a global and a REDUCE
    evil = b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR."
    with pytest.raises(ValueError, match=r"refused: the dump names os\.system"):
        read_dump(evil, 0)
    assert not marker.exists()
    report = analyze({0: evil, 1: pickle.dumps({"entries": []})}, world=[0, 1])
    assert report.undumped == (0,)
    assert "refused" in (report.rows[0].why or "")


def test_a_cut_dump_is_unreadable_not_a_crash() -> None:
    whole = dumps(VERSIONS[0], "on-demand")[0]
    with pytest.raises(ValueError, match="not a flight-recorder dump"):
        read_dump(whole[: len(whole) // 2], 0)
    with pytest.raises(ValueError, match="no 'entries'"):
        read_dump(pickle.dumps([1, 2]), 0)


def test_rank_ranges() -> None:
    assert rank_ranges([0, 1, 2, 3, 4, 6, 7]) == "0-4, 6, 7"
    assert rank_ranges([3]) == "3"


@pytest.mark.parametrize("kind", ["on-demand", "on-timeout"])
def test_the_report_travels_as_an_alerts_facts(kind: str) -> None:
    """Into a recording and the snapshot JSON and back (``AlertFacts.collective``)."""
    from gpumon.backends.alerts.facts import AlertFacts

    report = analyze(dumps(VERSIONS[0], kind), pids=pids(VERSIONS[0]), at={0: 1.8e9})
    facts = AlertFacts(collective=report)
    back = AlertFacts.from_json(json.loads(json.dumps(facts.to_json())))
    assert back == facts
    assert back.collective is not None and back.collective.table() == report.table()
