"""Actions that change a machine: job control, restarts and their session, auto-restart, audit."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpumon.backends.lazy import lazy_exports

if TYPE_CHECKING:
    from .audit import read_entries
    from .autorestart import AutoRestarter, AutoRestartPolicy
    from .job_watch import JobWatch
    from .jobs import (
        JobError,
        JobRecord,
        JobStatus,
        job_status,
        launch_job,
        parse_status,
        signal_job,
    )
    from .params import (
        ParamError,
        ParamValue,
        check_template,
        format_value,
        merge_params,
        render_command,
    )
    from .plan import Blocker
    from .rows import Level, PlanRow
    from .run import (
        Action,
        ActionPlan,
        GpuReadings,
        GpuUse,
        JobRun,
        JobTarget,
        Outcome,
        RunRegistry,
        Step,
        find_job,
        make_plan,
        record_not_confirmed,
    )
    from .session import Session

__all__ = [
    "Action",
    "ActionPlan",
    "AutoRestartPolicy",
    "AutoRestarter",
    "Blocker",
    "GpuReadings",
    "GpuUse",
    "JobError",
    "JobRecord",
    "JobRun",
    "JobStatus",
    "JobTarget",
    "JobWatch",
    "Level",
    "Outcome",
    "ParamError",
    "ParamValue",
    "PlanRow",
    "RunRegistry",
    "Session",
    "Step",
    "check_template",
    "find_job",
    "format_value",
    "job_status",
    "launch_job",
    "make_plan",
    "merge_params",
    "parse_status",
    "read_entries",
    "record_not_confirmed",
    "render_command",
    "signal_job",
]

# Not seen by mypy: a module __getattr__ would make every unknown name Any; mypy checks
# the names against the TYPE_CHECKING imports above instead.
if not TYPE_CHECKING:
    __getattr__ = lazy_exports(
        __name__,
        {
            "Action": "run",
            "ActionPlan": "run",
            "AutoRestartPolicy": "autorestart",
            "AutoRestarter": "autorestart",
            "Blocker": "plan",
            "GpuReadings": "run",
            "GpuUse": "run",
            "JobError": "jobs",
            "JobRecord": "jobs",
            "JobStatus": "jobs",
            "JobTarget": "run",
            "JobWatch": "job_watch",
            "Level": "rows",
            "Outcome": "run",
            "ParamError": "params",
            "ParamValue": "params",
            "PlanRow": "rows",
            "JobRun": "run",
            "RunRegistry": "run",
            "Session": "session",
            "Step": "run",
            "check_template": "params",
            "find_job": "run",
            "format_value": "params",
            "job_status": "jobs",
            "launch_job": "jobs",
            "make_plan": "run",
            "merge_params": "params",
            "parse_status": "jobs",
            "read_entries": "audit",
            "record_not_confirmed": "run",
            "render_command": "params",
            "signal_job": "jobs",
        },
    )
