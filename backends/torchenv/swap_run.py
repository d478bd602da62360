"""Running a ``SwapPlan``: save the freeze, remove the other CUDA major's set, install (its
output streamed line by line), verify. When a step fails or verification does not show the
expected variant, the saved freeze is restored and verified again. Progress goes to an
``on_event`` callback; every run is written to the audit log (a "started" entry first: no
audit log, no change).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gpumon.backends.actions import audit
from gpumon.backends.actions.rows import Level
from gpumon.backends.config.load import HostConfig
from gpumon.backends.torchenv.checks import Check
from gpumon.backends.torchenv.doctor import ProbeError, gather_facts
from gpumon.backends.torchenv.swap_plan import SwapPlan
from gpumon.backends.torchenv.swap_steps import (
    SwapCommand,
    norm,
    parse_freeze,
    rollback_actions,
    rollback_steps,
)
from gpumon.backends.torchenv.swap_verify import (
    Expectation,
    Verification,
    expect_previous,
    expect_target,
    verify,
)
from gpumon.backends.torchenv.variants import COMPANIONS, split_version
from gpumon.backends.transport.base import Transport, TransportError
from gpumon.backends.untrusted import printable
from gpumon.backends.workloads.changes import SWAP_ACTION

StepState = Literal["running", "ok", "failed"]
Result = Literal["swapped", "rolled-back", "rollback-failed", "unchanged", "refused"]
EXIT_CODES: Mapping[str, int] = {
    "swapped": 0,
    "unchanged": 1,  # failed before changing anything
    "rolled-back": 1,
    "refused": 2,
    "rollback-failed": 4,
}
RESULT_LEVELS: Mapping[Result, Level] = {
    "swapped": "ok",
    "unchanged": "warning",
    "rolled-back": "warning",
    "refused": "warning",
    "rollback-failed": "problem",
}
ACTION = SWAP_ACTION  # what job_slow looks for in the audit log (workloads/changes.py)

# Runs a step's argv with stderr merged into stdout, unbuffered (so lines stream in order).
MERGE = (
    "import os,sys;os.dup2(1,2);os.environ['PYTHONUNBUFFERED']='1';"
    "os.execvp(sys.argv[1],sys.argv[1:])"
)
# Writes stdin to the file named by argv[1], creating its directory.
WRITE = (
    "import os,sys;p=sys.argv[1];os.makedirs(os.path.dirname(p),exist_ok=True);"
    "f=open(p,'wb');f.write(sys.stdin.buffer.read());f.close()"
)


@dataclass(frozen=True, slots=True)
class SwapEvent:
    """``kind="step"``: a step changed state (``text`` = its title, or why it failed);
    ``kind="line"``: one line of a running step's output."""

    kind: Literal["step", "line"]
    step: str  # SwapCommand.key: freeze, uninstall, install, verify, rollback-*
    text: str
    state: StepState | None = None


OnEvent = Callable[[SwapEvent], None]


@dataclass(frozen=True)
class SwapOutcome:
    result: Result
    message: str  # "swapped to 2.11.0+cu130, verified", "install failed: ...; rolled back ..."
    freeze_path: str | None = None
    freeze_text: str | None = None
    verification: tuple[Check, ...] = ()
    duration_s: float = 0.0
    audit_error: str | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.result]

    @property
    def level(self) -> Level:
        """ok when swapped, a problem when the venv's state is unknown, else a warning."""
        return RESULT_LEVELS[self.result]


def record_refusal(
    plan: SwapPlan, detail: str | None = None, *, env: Mapping[str, str] | None = None
) -> None:
    """Audit a swap that was not run (refused, not confirmed). Raises OSError."""
    why = detail or "; ".join(r.reason for r in plan.refusals) or "refused"
    audit.record(ACTION, plan.host, "refused", parameters=_parameters(plan), detail=why, env=env)


def _parameters(plan: SwapPlan) -> dict[str, Any]:
    return {
        "from": plan.current,
        "to": plan.target,
        "venv": plan.venv,
        "tool": plan.tool,
        "index_url": plan.index_url,
        "forced": [r.reason for r in plan.forced],
    }


class _Run:
    def __init__(
        self,
        plan: SwapPlan,
        transport: Transport,
        host: HostConfig,
        on_event: OnEvent | None,
        import_timeout: float,
    ) -> None:
        self.plan, self.transport, self.on_event = plan, transport, on_event
        self.host = dataclasses.replace(host, python=plan.python)
        self.import_timeout = import_timeout
        self.freeze_text: str | None = None
        self.commands: list[str] = []

    def emit(
        self, kind: Literal["step", "line"], step: str, text: str, state: StepState | None = None
    ) -> None:
        if self.on_event is not None:
            self.on_event(SwapEvent(kind, step, text, state))

    async def stream(self, step: SwapCommand) -> tuple[bool, str]:
        """Run one step, streaming its output; (succeeded, last lines)."""
        self.emit("step", step.key, step.title, "running")
        self.commands.append(step.command())
        tail: deque[str] = deque(maxlen=15)
        code: int | None = None
        try:
            proc = await self.transport.open_stream([self.plan.python, "-c", MERGE, *step.argv])
            try:
                await proc.close_stdin()
                async with asyncio.timeout(step.timeout):
                    while raw := await proc.readline():
                        # what a terminal would show: the last redraw of a progress line
                        text = raw.decode("utf-8", "replace").rstrip("\r\n")
                        line = printable(text.rpartition("\r")[2])
                        tail.append(line)
                        self.emit("line", step.key, line)
                    code = await proc.wait()
            except TimeoutError:
                tail.append(f"(timed out after {step.timeout:g} s)")
            finally:
                await proc.close()
        except TransportError as e:
            tail.append(str(e))
        ok = code == 0
        errors = [ln.strip() for ln in tail if "error" in ln.lower()]
        last = " / ".join(errors[-2:] or [ln for ln in list(tail)[-3:] if ln.strip()])
        last = last or f"exit {code}"
        self.emit(
            "step",
            step.key,
            "done" if ok else f"failed (exit {code}): {last}",
            "ok" if ok else "failed",
        )
        return ok, last

    async def save_freeze(self, step: SwapCommand) -> str | None:
        """Freeze the venv and save it on the target; None when saved, else why not."""
        self.emit("step", step.key, step.title, "running")
        self.commands.append(step.command())
        try:
            res = await self.transport.run(step.argv, timeout=step.timeout)
            if res.exit_code != 0:
                return f"{step.argv[0]} freeze failed (exit {res.exit_code}): {res.stderr[-300:]}"
            self.freeze_text = res.stdout
            path = step.save_to or self.plan.freeze_path
            save = await self.transport.run(
                [self.plan.python, "-c", WRITE, path], input=res.stdout.encode(), timeout=60
            )
            if save.exit_code != 0:
                return f"cannot write {path} (exit {save.exit_code}): {save.stderr[-300:]}"
        except TransportError as e:
            return str(e)
        count = len(parse_freeze(self.freeze_text or ""))
        self.emit("step", step.key, f"{count} packages saved to {path}", "ok")
        return None

    async def check(self, key: str, expect: Expectation) -> Verification:
        self.emit("step", key, f"verify torch {expect.describe()}", "running")
        try:
            facts = await gather_facts(
                self.transport,
                self.host,
                sections=["python", "dists", "torch", "runtime"],
                import_timeout=self.import_timeout,
            )
        except (TransportError, ProbeError) as e:
            result = Verification(False, "unknown", f"verification could not run: {e}", ())
        else:
            result = verify({**self.plan.facts, **facts}, expect, self.plan.host)
        self.emit("step", key, result.detail, "ok" if result.ok else "failed")
        return result

    async def run(self) -> SwapOutcome:
        steps = {s.key: s for s in self.plan.steps}
        why = await self.save_freeze(steps["freeze"])
        if why is not None:
            self.emit("step", "freeze", why, "failed")
            return SwapOutcome("unchanged", f"could not save the freeze: {why}; nothing changed")
        for key in ("uninstall", "install"):
            if key in steps:
                ok, last = await self.stream(steps[key])
                if not ok:
                    return await self.rollback(f"{key} failed: {last}")
        result = await self.check("verify", expect_target(self.plan))
        if not result.ok:
            return await self.rollback(f"verification failed: {result.detail}")
        return self.outcome("swapped", f"swapped to {result.got}, verified", result)

    async def rollback(self, reason: str) -> SwapOutcome:
        plan = self.plan
        lost = f"rollback FAILED: venv state unknown, freeze saved at {plan.freeze_path}"
        try:
            now = await gather_facts(self.transport, self.host, sections=["python", "dists"])
        except (TransportError, ProbeError) as e:
            return self.outcome("rollback-failed", f"{reason}; {lost} ({e})")
        before: dict[str, Any] = plan.facts.get("dists") or {}
        remove, restore = rollback_actions(
            before, now.get("dists") or {}, parse_freeze(self.freeze_text or ""), _relabel(plan)
        )
        uv = (plan.facts.get("python") or {}).get("uv")
        assert plan.tool is not None
        steps = rollback_steps(plan.tool, plan.python, uv, remove, restore, plan.previous_index_url)
        if not steps:
            self.emit("step", "rollback", "nothing to undo: the venv matches the freeze", "ok")
        for step in steps:
            ok, last = await self.stream(step)
            if not ok:
                return self.outcome("rollback-failed", f"{reason}; {lost} ({step.key}: {last})")
        expect = expect_previous(plan)
        result = await self.check("rollback-verify", expect)
        if not result.ok:
            return self.outcome("rollback-failed", f"{reason}; {lost} ({result.detail})", result)
        return self.outcome(
            "rolled-back", f"{reason}; rolled back to {result.got}, verified", result
        )

    def outcome(self, result: Result, message: str, v: Verification | None = None) -> SwapOutcome:
        return SwapOutcome(
            result, message, self.plan.freeze_path, self.freeze_text, v.checks if v else ()
        )


def _relabel(plan: SwapPlan) -> dict[str, str]:
    """Label-less torch/companions (PyPI builds) are restored with their variant's label."""
    out = {}
    dists: dict[str, Any] = plan.facts.get("dists") or {}
    for name in ("torch", *COMPANIONS):
        row = dists.get(norm(name))
        if row and plan.current_variant and not split_version(str(row["version"]))[1]:
            out[norm(name)] = f"{row['name']}=={row['version']}+{plan.current_variant}"
    return out


async def execute_swap(
    plan: SwapPlan,
    transport: Transport,
    host: HostConfig,
    *,
    on_event: OnEvent | None = None,
    audit_env: Mapping[str, str] | None = None,
    import_timeout: float = 90.0,
) -> SwapOutcome:
    """Run ``plan`` (which must be ``ok``) on ``host`` through ``transport``. Never raises
    for a failed step: the outcome says where it ended. An audit log that cannot be written
    stops the swap before anything changes."""
    if not plan.ok:
        raise ValueError("execute_swap: the plan is refused or has nothing to do")
    t0 = time.monotonic()
    try:
        audit.record(
            ACTION,
            plan.host,
            "started",
            parameters=_parameters(plan),
            commands=plan.commands(),
            env=audit_env,
        )
    except OSError as e:
        return SwapOutcome("refused", f"audit log not writable ({e}); nothing changed")
    runner = _Run(plan, transport, host, on_event, import_timeout)
    try:
        outcome = await runner.run()
    except BaseException:
        with contextlib.suppress(OSError):
            audit.record(
                ACTION,
                plan.host,
                "interrupted",
                parameters=_parameters(plan),
                commands=runner.commands,
                duration_s=time.monotonic() - t0,
                detail=f"freeze saved at {plan.freeze_path}",
                env=audit_env,
            )
        raise
    duration = time.monotonic() - t0
    outcome = dataclasses.replace(outcome, duration_s=duration)
    try:
        audit.record(
            ACTION,
            plan.host,
            outcome.result,
            parameters=_parameters(plan),
            commands=runner.commands,
            duration_s=duration,
            detail=outcome.message,
            env=audit_env,
        )
    except OSError as e:
        outcome = dataclasses.replace(outcome, audit_error=str(e))
    return outcome
