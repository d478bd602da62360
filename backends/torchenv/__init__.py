"""The target's torch / CUDA environment: doctor checks, wheel variants, verified swaps."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpumon.backends.lazy import lazy_exports

if TYPE_CHECKING:
    from .doctor import (
        STATUSES,
        DoctorReport,
        ProbeError,
        Status,
        evaluate,
        format_checks,
        format_report,
        host_python,
        probe_argv,
        run_doctor,
    )
    from .swap_plan import FORCED, SwapPlan, build_plan, plan_swap, swap_row_text
    from .swap_run import (
        MERGE,
        WRITE,
        OnEvent,
        SwapEvent,
        SwapOutcome,
        execute_swap,
        record_refusal,
    )
    from .swap_steps import norm, parse_freeze, rollback_actions, rollback_steps
    from .swap_verify import Expectation, verify
    from .variants import (
        VARIANT_NAMES,
        arch_covers,
        builtin_table,
        driver_at_least,
        series_of,
        table_covers,
        variant_cuda,
        variant_from,
    )

__all__ = [
    "FORCED",
    "MERGE",
    "STATUSES",
    "VARIANT_NAMES",
    "WRITE",
    "DoctorReport",
    "Expectation",
    "OnEvent",
    "ProbeError",
    "Status",
    "SwapEvent",
    "SwapOutcome",
    "SwapPlan",
    "arch_covers",
    "build_plan",
    "builtin_table",
    "driver_at_least",
    "evaluate",
    "execute_swap",
    "format_checks",
    "format_report",
    "host_python",
    "norm",
    "parse_freeze",
    "plan_swap",
    "probe_argv",
    "record_refusal",
    "rollback_actions",
    "rollback_steps",
    "run_doctor",
    "series_of",
    "swap_row_text",
    "table_covers",
    "variant_cuda",
    "variant_from",
    "verify",
]

# Not seen by mypy: a module __getattr__ would make every unknown name Any; mypy checks
# the names against the TYPE_CHECKING imports above instead.
if not TYPE_CHECKING:
    __getattr__ = lazy_exports(
        __name__,
        {
            "DoctorReport": "doctor",
            "FORCED": "swap_plan",
            "Expectation": "swap_verify",
            "MERGE": "swap_run",
            "OnEvent": "swap_run",
            "ProbeError": "doctor",
            "STATUSES": "doctor",
            "Status": "doctor",
            "SwapEvent": "swap_run",
            "SwapOutcome": "swap_run",
            "SwapPlan": "swap_plan",
            "VARIANT_NAMES": "variants",
            "WRITE": "swap_run",
            "arch_covers": "variants",
            "build_plan": "swap_plan",
            "builtin_table": "variants",
            "driver_at_least": "variants",
            "evaluate": "doctor",
            "execute_swap": "swap_run",
            "format_checks": "doctor",
            "format_report": "doctor",
            "host_python": "doctor",
            "norm": "swap_steps",
            "parse_freeze": "swap_steps",
            "plan_swap": "swap_plan",
            "probe_argv": "doctor",
            "record_refusal": "swap_run",
            "rollback_actions": "swap_steps",
            "rollback_steps": "swap_steps",
            "run_doctor": "doctor",
            "series_of": "variants",
            "swap_row_text": "swap_plan",
            "table_covers": "variants",
            "variant_cuda": "variants",
            "variant_from": "variants",
            "verify": "swap_verify",
        },
    )
