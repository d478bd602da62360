"""swap-torch: plan building (table, refusals, commands, quoting), rollback decisions,
verification, and the step runner against an in-memory venv behind a fake Transport."""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import json
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from memory_stream import memory_stream

from gpumon.backends.actions import audit
from gpumon.backends.config import HostConfig, JobConfig
from gpumon.backends.remote import BOOTSTRAP
from gpumon.backends.torchenv import (
    MERGE,
    WRITE,
    Expectation,
    SwapEvent,
    SwapPlan,
    build_plan,
    execute_swap,
    norm,
    parse_freeze,
    rollback_actions,
    rollback_steps,
    verify,
)
from gpumon.backends.transport import ProcessStream, Transport

VENV = "/root/venv"
PY = f"{VENV}/bin/python"
UV = "/root/.local/bin/uv"
NOW = dt.datetime(2026, 5, 1, 12, 0, 0, tzinfo=dt.UTC)
CU12 = ["nvidia-cudnn-cu12", "nvidia-nccl-cu12", "nvidia-cublas-cu12"]


def host(**kw: Any) -> HostConfig:
    base: dict[str, Any] = {"name": "ct200", "kind": "ssh", "ssh_host": "pve1", "container": 200}
    return HostConfig(**{**base, **kw})


def facts(version: str = "2.11.0+cu128", *, venv: str = VENV, uv: bool = True) -> dict[str, Any]:
    """CT200 with torch ``version`` (+ torchvision, the cu12 runtime set) and 8 sm_120 GPUs."""
    label = version.partition("+")[2]
    cuda = {"cu128": "12.8", "cu130": "13.0", "cpu": None}.get(label, "12.8")
    dists = {
        "torch": {"name": "torch", "version": version},
        "torchvision": {"name": "torchvision", "version": f"0.26.0+{label}"},
        "pip": {"name": "pip", "version": "25.0"},
        **{n: {"name": n, "version": "12.8.1"} for n in CU12},
    }
    return {
        "python": {
            "executable": f"{venv}/bin/python",
            "prefix": venv,
            "is_venv": True,
            "pip": not uv,
            "uv": UV if uv else None,
        },
        "dists": dists,
        "nvidia": [
            {"name": n, "version": "12.8.1", "major": 12, "shared": "cudnn" in n or "nccl" in n}
            for n in CU12
        ],
        "torch": {
            "installed": True,
            "version": version,
            "version_py": {"version": version, "cuda": cuda},
        },
        "runtime": {
            "ok": True,
            "version": version,
            "cuda": cuda,
            "available": True,
            "device_count": 8,
        },
        "gpu": {
            "smi": "ok",
            "driver": "580.95.05",
            "gpus": [
                {"index": str(i), "name": "RTX PRO 6000", "compute_cap": "12.0"} for i in range(8)
            ],
        },
        "procs": [],
        "disk": [{"path": venv, "free": 100 << 30}],
    }


def plan(variant: str = "cu130", f: dict[str, Any] | None = None, **kw: Any) -> SwapPlan:
    h = kw.pop("host", None) or host()
    return build_plan(h, f if f is not None else facts(), variant, now=NOW, **kw)


# --- plans -------------------------------------------------------------------------------


def test_cu128_to_cu130_with_uv_moves_companions_and_the_runtime_set() -> None:
    p = plan()
    assert p.ok and p.refusals == () and p.tool == "uv"
    assert (p.current, p.target, p.cuda) == ("2.11.0+cu128", "2.11.0+cu130", "13.0")
    assert p.pins == ("torch==2.11.0+cu130", "torchvision==0.26.0+cu130")
    assert p.companions == (("torchvision", "0.26.0+cu128", "0.26.0+cu130"),)
    assert p.uninstall == tuple(sorted(CU12))
    assert [s.key for s in p.steps] == ["freeze", "uninstall", "install", "verify"]
    assert p.freeze_path == f"{VENV}/.gpumon/freeze-20260501T120000Z-cu128.txt"
    assert p.index_url == "https://download.pytorch.org/whl/cu130"
    assert p.previous_index_url == "https://download.pytorch.org/whl/cu128"
    freeze, uninstall, install, _ = p.steps
    assert freeze.argv == (UV, "pip", "freeze", "--python", PY)
    assert uninstall.argv == (UV, "pip", "uninstall", "--python", PY, *sorted(CU12))
    assert install.argv[:7] == (UV, "pip", "install", "--python", PY, "--index-url", p.index_url)
    again = [install.argv[i + 1] for i, a in enumerate(install.argv) if a == "--reinstall-package"]
    assert again[:2] == ["torch", "torchvision"] and "nvidia-cudnn-cu13" in again
    assert install.argv[-2:] == p.pins
    text = p.describe()
    assert "2.11.0+cu128 -> 2.11.0+cu130" in text and "moves with torch: torchvision" in text


def test_pip_when_the_venv_has_no_uv_and_index_from_the_host() -> None:
    p = plan("cu128", facts("2.11.0+cu130", uv=False), host=host(torch_index="http://mirror/whl"))
    assert p.tool == "pip" and p.ok
    assert p.steps[0].argv == (PY, "-m", "pip", "freeze", "--all")
    install = next(s for s in p.steps if s.key == "install")
    assert install.argv == (
        PY,
        "-m",
        "pip",
        "install",
        "--progress-bar",
        "off",
        "--index-url",
        "http://mirror/whl/cu128",
        "torch==2.11.0+cu128",
        "torchvision==0.26.0+cu128",
    )
    assert p.uninstall == ()  # facts() lists a cu12 set: already the target's major


@pytest.mark.parametrize("odd", ["/srv/my venv", "/srv/v; rm -rf ~", "/srv/$(id)/`x` 'q'"])
def test_commands_are_argv_lists_and_odd_venv_paths_stay_literal(odd: str) -> None:
    p = plan(f=facts(venv=odd))
    assert p.python == f"{odd}/bin/python" and p.freeze_path.startswith(f"{odd}/.gpumon/")
    for step in p.steps:
        if step.argv:
            assert f"{odd}/bin/python" in step.argv  # one argv word, as is
            shown = shlex.split(step.command())
            expected = [*step.argv, ">", step.save_to] if step.save_to else list(step.argv)
            assert shown == expected


def test_cu126_refused_on_sm120_unless_forced() -> None:
    p = plan("cu126")
    assert not p.ok
    assert [r.reason for r in p.refusals] == [
        "cu126 has no code for sm_120 (compute capability 12.0 of RTX PRO 6000)"
    ]
    forced = plan("cu126", force=True)
    assert forced.ok and [r.reason for r in forced.forced] == [p.refusals[0].reason]


def test_plan_rows_carry_levels_and_steps_and_describe_prints_them() -> None:
    refused, forced, noop = plan("cu126"), plan("cu126", force=True), plan("cu128")
    reason = refused.refusals[0].reason
    assert ("refused", reason, "problem") in [(r.label, r.text, r.level) for r in refused.rows()]
    assert ("--force overrides", reason, "warning") in [
        (r.label, r.text, r.level) for r in forced.rows()
    ]
    assert all(r.level == "warning" for r in forced.rows() if r.label == "warning")
    assert [(r.label, r.level) for r in noop.rows() if r.level == "ok"] == [("nothing to do", "ok")]
    steps = [r for r in forced.rows() if r.step is not None]
    assert [(r.label, r.step, r.text) for r in steps] == [
        (f"{i}.", s.key, s.command()) for i, s in enumerate(forced.steps, 1)
    ]
    lines = forced.describe().splitlines()
    assert (
        lines[0]
        == forced.title
        == ("swap-torch ct200: 2.11.0+cu128 -> 2.11.0+cu126 in /root/venv (uv)")
    )
    assert f"  --force overrides: {reason}" in lines and "  commands:" in lines
    assert f"    1. {forced.steps[0].command()}" in lines


def test_driver_too_old_for_cu130_but_fine_for_cu128() -> None:
    f = facts("2.11.0+cu128")
    f["gpu"]["driver"] = "575.57.08"
    assert [r.reason for r in plan("cu130", f).refusals] == [
        "cu130 needs NVIDIA driver >= 580; ct200 has 575.57.08"
    ]
    g = facts("2.11.0+cu130")
    g["gpu"]["driver"] = "570.124.06"
    assert plan("cu128", g).ok
    g["gpu"]["driver"] = "560.35.05"  # above the compat floor, below the bundled driver
    p = plan("cu128", g)
    assert p.ok and any("below 570.124.06" in w for w in p.warnings)


def test_running_configured_job_and_sglang_server_refuse() -> None:
    job = JobConfig(name="train", gpus=(0,), start=f"{PY} train.py --steps {{steps}}")
    f = facts()
    f["procs"] = [
        {"pid": 4242, "argv": [PY, "train.py", "--steps", "100"], "why": "argv"},
        {"pid": 4343, "argv": [PY, "-m", "sglang.launch_server", "--port", "30000"]},
        # ``sglang serve``, the console script recommended since SGLang 0.5.7
        {"pid": 4444, "argv": [PY, "/root/venv/bin/sglang", "serve", "--port", "30001"]},
    ]
    p = plan(f=f, host=host(jobs=(job,)))
    assert [u.label for u in p.users] == ["job train", "SGLang server", "SGLang server"]
    (refusal,) = p.refusals
    assert refusal.overridable and "3 process(es) use /root/venv" in refusal.reason
    assert "job train (pid 4242" in refusal.reason
    # swapping under them (Force) changes nothing they run: they imported the old torch
    assert refusal.reason.endswith("running jobs keep the old torch until restarted")
    assert plan(f=f, host=host(jobs=(job,)), force=True).ok


def test_configured_job_not_running_is_listed_not_refused() -> None:
    job = JobConfig(name="train", gpus=(0,), start=f"{PY} train.py")
    p = plan(host=host(jobs=(job,)))
    assert p.ok and [u.label for u in p.users] == ["job train (not running)"]


@pytest.mark.parametrize("how", ["argument", "config"])
def test_read_only_refuses_even_with_force(how: str) -> None:
    kw: dict[str, Any] = {"read_only": True} if how == "argument" else {}
    h = host(read_only=how == "config")
    p = plan(host=h, force=True, **kw)
    assert not p.ok and not p.refusals[0].overridable
    assert "read-only" in p.refusals[0].reason


def test_no_gpu_allows_cpu_and_cuda_only_with_force() -> None:
    f = facts("2.11.0+cpu")
    f["gpu"] = {"smi": "missing", "gpus": [], "error": "nvidia-smi: not found"}
    cpu_to_cuda = plan("cu130", f)
    assert [r.reason for r in cpu_to_cuda.refusals] == [
        "no NVIDIA GPU on ct200 (no NVIDIA GPU seen (nvidia-smi not found)): "
        "only cpu is allowed without --force"
    ]
    assert plan("cu130", f, force=True).ok
    g = facts("2.11.0+cu128")
    g["gpu"] = f["gpu"]
    to_cpu = plan("cpu", g)
    assert to_cpu.ok and to_cpu.cuda is None and to_cpu.uninstall == ()
    assert "nvidia-* packages stay installed (the CPU build does not use them)" in to_cpu.warnings


@pytest.mark.parametrize(
    ("kw", "fact_patch", "reason", "overridable"),
    [
        ({"version": "2.16.0"}, {}, "torch 2.16 is not in the built-in variants table", True),
        ({"version": "--index-url=http://evil"}, {}, "is not a release number", False),
        ({}, {"torch": {"installed": False}}, "torch is not installed in this venv", False),
        ({}, {"python": {"is_venv": False}}, "is not a virtual environment", True),
        ({}, {"python": {"uv": None, "pip": False}}, "neither uv nor pip", False),
        ({"env_locked": "the venv is managed by the image"}, {}, "managed by the image", False),
    ],
)
def test_refusals(
    kw: dict[str, Any], fact_patch: dict[str, Any], reason: str, overridable: bool
) -> None:
    f = facts()
    for key, value in fact_patch.items():
        f[key].update(value)
    if "installed" in fact_patch.get("torch", {}):
        f["dists"].pop("torch")
    p = plan(f=f, **kw)
    assert [r.overridable for r in p.refusals if reason in r.reason] == [overridable], p.refusals


def test_companion_versions_come_from_the_table_or_stay() -> None:
    p = plan("cu130", version="2.10.0")
    assert p.pins == ("torch==2.10.0+cu130", "torchvision==0.25.0+cu130")  # the release table
    f = facts("2.9.1+cu128")
    f["dists"]["torchvision"]["version"] = "0.24.1+cu128"
    assert plan("cu130", f).pins[1] == "torchvision==0.24.1+cu130"
    f = facts("2.16.0+cu128")  # not in the table: same release keeps its torchvision
    assert plan("cu130", f, force=True).pins == (
        "torch==2.16.0+cu130",
        "torchvision==0.26.0+cu130",
    )
    unknown = plan("cu130", version="2.16.0", force=True)  # another release: unknown pairing
    (refusal,) = unknown.refusals
    assert refusal.reason == (
        "no known torchvision release pairs with torch 2.16.0; uninstall torchvision first"
    )
    assert not refusal.overridable


def test_installed_target_is_a_noop_and_force_repairs() -> None:
    f = facts("2.11.0+cu130", uv=False)
    assert plan("cu130", f).noop and not plan("cu130", f).ok
    repair = plan("cu130", f, force=True)
    assert repair.ok and repair.repair
    install = next(s for s in repair.steps if s.key == "install")
    assert "--force-reinstall" in install.argv and "--no-deps" in install.argv


def test_warnings_for_what_does_not_move() -> None:
    f = facts()
    f["dists"]["sglang-kernel"] = {"name": "sglang-kernel", "version": "0.4.2.post2+cu129"}
    f["dists"]["xformers"] = {"name": "xformers", "version": "0.0.30+cu128"}
    warnings = "\n".join(plan(f=f).warnings)
    assert (
        "'sglang-kernel==0.4.2.post2+cu130' --extra-index-url https://docs.sglang.ai/whl/cu130"
        in warnings
    )
    assert "xformers 0.0.30+cu128 is built for cu128; not moved" in warnings
    assert "go cold" in warnings
    f["caches"] = [{"name": "inductor", "exists": True, "bytes": 353 << 20}]
    assert "compile caches (inductor 353 MiB) go cold" in "\n".join(plan(f=f).warnings)


def test_mixed_majors_relay_shared_dirs_of_the_target() -> None:
    f = facts()
    f["nvidia"].append(
        {"name": "nvidia-cudnn-cu13", "version": "9.19", "major": 13, "shared": True}
    )
    f["nvidia"].append(
        {"name": "nvidia-cufft", "version": "12.0.0.15", "major": 13, "shared": False}
    )
    p = plan("cu130", f)
    assert p.uninstall == (*sorted(CU12), "nvidia-cudnn-cu13")
    back = plan("cu128", f)
    assert back.uninstall == (
        "nvidia-cudnn-cu13",
        "nvidia-cufft",
        "nvidia-cudnn-cu12",
        "nvidia-nccl-cu12",
    )


# --- rollback decisions and verification -------------------------------------------------


def _d(**versions: str) -> dict[str, dict[str, str]]:
    return {norm(k): {"name": k.replace("_", "-"), "version": v} for k, v in versions.items()}


def test_parse_freeze() -> None:
    text = "# comment\n-e git+https://x#egg=y\ntorch==2.11.0+cu128\nTyping_Extensions==4.1\nfoo @ file:///w/foo.whl\n\n"
    assert parse_freeze(text) == {
        "torch": "torch==2.11.0+cu128",
        "typing-extensions": "Typing_Extensions==4.1",
        "foo": "foo @ file:///w/foo.whl",
    }


def test_rollback_actions_undo_a_partial_swap() -> None:
    before = _d(torch="2.11.0+cu128", nvidia_cudnn_cu12="9.10", foo="1.0", pip="25.0")
    after = _d(torch="2.11.0+cu130", nvidia_cudnn_cu13="9.19", foo="1.0", pip="25.1", wheel="0.45")
    freeze = parse_freeze("torch==2.11.0+cu128\nnvidia-cudnn-cu12==9.10\nfoo==1.0\n")
    remove, restore = rollback_actions(before, after, freeze)
    assert remove == ["nvidia-cudnn-cu13"]  # wheel is protected, pip never downgraded
    assert restore == ["nvidia-cudnn-cu12==9.10", "torch==2.11.0+cu128"]
    assert rollback_actions(before, before, freeze) == ([], [])


def test_rollback_uses_url_lines_and_relabels_pypi_builds() -> None:
    before = _d(torch="2.11.0", bar="2.0")
    after = _d(torch="2.11.0+cu128")
    freeze = {"bar": "bar @ file:///wheels/bar-2.0-py3-none-any.whl"}
    _, restore = rollback_actions(before, after, freeze, {"torch": "torch==2.11.0+cu130"})
    assert restore == ["bar @ file:///wheels/bar-2.0-py3-none-any.whl", "torch==2.11.0+cu130"]


def test_rollback_steps_argv() -> None:
    steps = rollback_steps(
        "pip", PY, None, ["nvidia-x-cu13"], ["torch==2.11.0+cu128"], "http://i/cu128"
    )
    assert [s.argv for s in steps] == [
        (PY, "-m", "pip", "uninstall", "-y", "nvidia-x-cu13"),
        (
            PY,
            "-m",
            "pip",
            "install",
            "--progress-bar",
            "off",
            "--index-url",
            "http://i/cu128",
            "torch==2.11.0+cu128",
        ),
    ]
    (uv_install,) = rollback_steps("uv", PY, UV, [], ["torch==2.11.0+cu128"], None)
    assert uv_install.argv == (
        UV,
        "pip",
        "install",
        "--python",
        PY,
        "--reinstall-package",
        "torch",
        "torch==2.11.0+cu128",
    )


@pytest.mark.parametrize(
    ("runtime", "expect", "ok", "detail"),
    [
        ({}, Expectation("2.11.0+cu130", "13.0"), True, "2.11.0+cu130, torch.version.cuda 13.0"),
        (
            {"cuda": "12.8"},
            Expectation("2.11.0+cu130", "13.0"),
            False,
            "got 2.11.0+cu130, torch.version.cuda 12.8",
        ),
        ({}, Expectation("2.11.0+cu128", "13.0"), False, "expected 2.11.0+cu128"),
        ({}, Expectation("2.11.0", "13.0", exact_label=False), True, "2.11.0+cu130"),
        (
            {"ok": False, "error": "x\nImportError: libcudart.so.13"},
            Expectation("2.11.0+cu130", "13.0"),
            False,
            "import torch: ImportError: libcudart.so.13",
        ),
        (
            {"available": False},
            Expectation("2.11.0+cu130", "13.0", available_before=True),
            False,
            "no longer available",
        ),
        (
            {"device_count": 4},
            Expectation("2.11.0+cu130", "13.0", available_before=True, devices_before=8),
            False,
            "sees 4 GPUs, 8 before",
        ),
        ({}, Expectation(None, None), False, "torch 2.11.0+cu130 is installed"),
    ],
)
def test_verify(runtime: dict[str, Any], expect: Expectation, ok: bool, detail: str) -> None:
    f = facts("2.11.0+cu130")
    f["runtime"].update(runtime)
    result = verify(f, expect)
    assert (result.ok, detail in result.detail) == (ok, True), result.detail
    assert {c.name for c in result.checks} >= {"torch", "torch.version.cuda", "cuda available"}


def test_verify_absent_torch() -> None:
    f = facts()
    f["torch"] = {"installed": False}
    assert verify(f, Expectation(None, None)).ok
    assert not verify(f, Expectation("2.11.0+cu128", "12.8")).ok


# --- the runner against a fake venv -------------------------------------------------------


Install = Callable[["FakeVenv", list[str]], tuple[int, list[str]]]


def install_as_asked(venv: FakeVenv, reqs: list[str]) -> tuple[int, list[str]]:
    for req in reqs:
        name, _, version = req.partition("==")
        venv.dists[norm(name)] = {"name": name, "version": version}
    return 0, [f"Installed {len(reqs)} packages", *(f" + {r}" for r in reqs)]


class FakeVenv(Transport):
    """An in-memory venv: answers the probe, freeze, write, uninstall and install argv."""

    def __init__(self, h: HostConfig, base: dict[str, Any], install: Install = install_as_asked):
        super().__init__(h)
        self.base = copy.deepcopy(base)
        self.dists: dict[str, dict[str, str]] = copy.deepcopy(base["dists"])
        self.cuda_of: dict[str, str | None] = {}  # torch version -> what its import reports
        self.installs: list[Install] = [install]
        self.files: dict[str, bytes] = {}
        self.calls: list[list[str]] = []
        self.freeze_fails = False

    async def open_stream(self, argv: Sequence[str]) -> ProcessStream:
        self.calls.append(list(argv))
        return memory_stream(lambda data: self.respond(list(argv), data))

    def respond(self, argv: list[str], stdin: bytes) -> tuple[int, str]:
        if argv[1:3] == ["-c", BOOTSTRAP]:
            return 0, json.dumps(self.probe()) + "\n"
        if argv[1:3] == ["-c", WRITE]:
            self.files[argv[3]] = stdin
            return 0, ""
        inner = argv[3:] if argv[1:3] == ["-c", MERGE] else argv
        if "freeze" in inner:
            lines = [f"{d['name']}=={d['version']}\n" for d in self.dists.values()]
            return (1, "") if self.freeze_fails else (0, "".join(lines))
        words = [a for a in inner if not a.startswith("-") and "/" not in a]
        if "uninstall" in inner:
            for name in words[words.index("uninstall") + 1 :]:
                self.dists.pop(norm(name), None)
            return 0, "Uninstalled\n"
        reqs = [a for a in words if "==" in a]
        code, lines = self.installs.pop(0)(self, reqs) if self.installs else (1, ["no more"])
        return code, "".join(f"{ln}\n" for ln in lines)

    def probe(self) -> dict[str, Any]:
        f = copy.deepcopy(self.base)
        f["dists"] = copy.deepcopy(self.dists)
        torch = self.dists.get("torch")
        if torch is None:
            f["torch"], f["runtime"] = {"installed": False}, {"ok": False, "error": "no torch"}
            return f
        v = torch["version"]
        cuda = self.cuda_of.get(v, {"cu128": "12.8", "cu130": "13.0"}.get(v.partition("+")[2]))
        f["torch"] = {"installed": True, "version": v, "version_py": {"version": v, "cuda": cuda}}
        f["runtime"].update(version=v, cuda=cuda)
        return f


def run_swap(tmp_path: Path, venv: FakeVenv, p: SwapPlan) -> tuple[Any, list[SwapEvent]]:
    events: list[SwapEvent] = []
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    outcome = asyncio.run(execute_swap(p, venv, host(), on_event=events.append, audit_env=env))
    return outcome, events


def test_runner_swaps_streams_and_audits(tmp_path: Path) -> None:
    p = plan()
    venv = FakeVenv(host(), p.facts)
    outcome, events = run_swap(tmp_path, venv, p)
    assert (outcome.result, outcome.message, outcome.exit_code, outcome.level) == (
        "swapped",
        "swapped to 2.11.0+cu130, verified",
        0,
        "ok",
    )
    assert venv.dists["torch"]["version"] == "2.11.0+cu130"
    assert not any(n in venv.dists for n in CU12)
    saved = venv.files[p.freeze_path].decode()
    assert "torch==2.11.0+cu128" in saved and outcome.freeze_text == saved
    states = [(e.step, e.state) for e in events if e.kind == "step"]
    assert states == [
        ("freeze", "running"),
        ("freeze", "ok"),
        ("uninstall", "running"),
        ("uninstall", "ok"),
        ("install", "running"),
        ("install", "ok"),
        ("verify", "running"),
        ("verify", "ok"),
    ]
    lines = [e.text for e in events if e.kind == "line" and e.step == "install"]
    assert lines[0] == "Installed 2 packages"
    install_call = next(c for c in venv.calls if "install" in c)
    assert install_call[:3] == [PY, "-c", MERGE] and tuple(install_call[3:]) == p.steps[2].argv
    entries = audit.read_entries({"XDG_STATE_HOME": str(tmp_path / "state")})
    assert [e["outcome"] for e in entries] == ["started", "swapped"]
    assert (
        entries[1]["detail"] == outcome.message and p.steps[2].command() in entries[1]["commands"]
    )


def partial_then_fail(venv: FakeVenv, reqs: list[str]) -> tuple[int, list[str]]:
    venv.dists["torch"] = {"name": "torch", "version": "2.11.0+cu130"}
    venv.dists["nvidia-cudnn-cu13"] = {"name": "nvidia-cudnn-cu13", "version": "9.19"}
    return 1, ["Collecting torchvision==0.26.0+cu130", "ERROR: No matching distribution found"]


def test_failed_install_rolls_back_to_the_freeze(tmp_path: Path) -> None:
    p = plan()
    venv = FakeVenv(host(), p.facts, partial_then_fail)
    venv.installs.append(install_as_asked)
    outcome, events = run_swap(tmp_path, venv, p)
    assert outcome.result == "rolled-back" and outcome.exit_code == 1
    assert outcome.level == "warning"
    assert outcome.message == (
        "install failed: ERROR: No matching distribution found; "
        "rolled back to 2.11.0+cu128, verified"
    )
    assert {k: v["version"] for k, v in venv.dists.items()} == {
        k: v["version"] for k, v in p.facts["dists"].items()
    }
    rollback = [c for c in venv.calls if c[1:3] == ["-c", MERGE]][-2:]
    assert rollback[0][3:] == [UV, "pip", "uninstall", "--python", PY, "nvidia-cudnn-cu13"]
    assert "--index-url" in rollback[1] and "https://download.pytorch.org/whl/cu128" in rollback[1]
    assert "torch==2.11.0+cu128" in rollback[1]
    assert ("rollback-verify", "ok") in [(e.step, e.state) for e in events]


def test_wrong_variant_after_install_rolls_back(tmp_path: Path) -> None:
    p = plan()
    venv = FakeVenv(host(), p.facts)
    venv.installs.append(install_as_asked)
    venv.cuda_of["2.11.0+cu130"] = "12.8"
    outcome, _ = run_swap(tmp_path, venv, p)
    assert outcome.result == "rolled-back"
    assert outcome.message.startswith(
        "verification failed: expected 2.11.0+cu130, torch.version.cuda 13.0, "
        "got 2.11.0+cu130, torch.version.cuda 12.8; rolled back to 2.11.0+cu128"
    )


def test_failed_rollback_says_the_state_is_unknown(tmp_path: Path) -> None:
    p = plan()
    venv = FakeVenv(host(), p.facts, partial_then_fail)
    venv.installs.append(lambda v, r: (1, ["ERROR: index unreachable"]))
    outcome, _ = run_swap(tmp_path, venv, p)
    assert outcome.result == "rollback-failed" and outcome.exit_code == 4
    assert outcome.level == "problem"
    assert (
        f"rollback FAILED: venv state unknown, freeze saved at {p.freeze_path}" in outcome.message
    )
    entries = audit.read_entries({"XDG_STATE_HOME": str(tmp_path / "state")})
    assert entries[-1]["outcome"] == "rollback-failed"


def test_freeze_failure_changes_nothing(tmp_path: Path) -> None:
    p = plan()
    venv = FakeVenv(host(), p.facts)
    venv.freeze_fails = True
    outcome, _ = run_swap(tmp_path, venv, p)
    assert outcome.result == "unchanged" and outcome.message.endswith("; nothing changed")
    assert not any("install" in c or "uninstall" in c for c in venv.calls)


def test_unwritable_audit_log_stops_before_any_command(tmp_path: Path) -> None:
    p = plan()
    venv = FakeVenv(host(), p.facts)
    (tmp_path / "state").write_text("a file, not a directory")
    outcome, _ = run_swap(tmp_path, venv, p)
    assert outcome.result == "refused" and "audit log not writable" in outcome.message
    assert venv.calls == []


def test_refused_plan_is_not_executed(tmp_path: Path) -> None:
    p = plan("cu126")
    venv = FakeVenv(host(), p.facts)
    with pytest.raises(ValueError, match="refused"):
        run_swap(tmp_path, venv, p)
    assert venv.calls == []


def test_fresh_install_that_fails_verification_is_removed_again(tmp_path: Path) -> None:
    f = facts()
    f["torch"] = {"installed": False}
    for name in ("torch", "torchvision"):
        f["dists"].pop(name)
    p = plan("cu128", f, version="2.11.0")
    assert p.ok and p.current is None and p.previous_index_url is None
    assert p.freeze_path.endswith("-none.txt") and p.pins == ("torch==2.11.0+cu128",)
    venv = FakeVenv(host(), p.facts)
    venv.cuda_of["2.11.0+cu128"] = "13.0"
    outcome, _ = run_swap(tmp_path, venv, p)
    assert outcome.result == "rolled-back"
    assert outcome.message.endswith("; rolled back to no torch, verified")
    assert "torch" not in venv.dists
    removal = [c for c in venv.calls if c[1:3] == ["-c", MERGE] and "uninstall" in c][-1]
    assert removal[-1] == "torch"
