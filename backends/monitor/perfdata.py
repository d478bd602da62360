"""``gpumon check``'s performance data: what follows the ``|`` of its line, in the
monitoring plugins' format (the Monitoring Plugins Development Guidelines, "Performance
data"), so Nagios, Icinga and their graphers plot it:

    'label'=value[UOM];[warn];[crit];[min];[max]

- pairs separated by one space; a label is quoted with single quotes when it holds a
  space, ``=`` or ``'`` (a ``'`` in it doubled);
- UOM is one of none (a count, or a number of things), ``s``/``ms``/``us``, ``%``,
  ``B``/``KB``/``MB``/``TB`` and ``c``: there is no unit for degrees, so the temperature
  is a bare number and its label says Celsius (``hottest_gpu_c``);
- warn and crit are ranges (``95`` is "more than 95", ``60:`` is "less than 60"), empty
  where no rule applies; trailing empty fields are dropped;
- a value that was not reported is left out, never written as 0.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpumon.backends.alerts.store import Alert
from gpumon.backends.model import Health, HostSample

__all__ = ["Perf", "check_perfdata", "perf_text"]


@dataclass(frozen=True, slots=True)
class Perf:
    """One performance value; ``warn`` / ``crit``: ranges in the guidelines' syntax."""

    label: str
    value: float | int
    uom: str = ""
    warn: str = ""
    crit: str = ""
    min: float | int | None = None
    max: float | int | None = None

    def text(self) -> str:
        label = self.label
        if any(ch in label for ch in " ='"):
            label = "'" + label.replace("'", "''") + "'"
        fields = [
            f"{_number(self.value)}{self.uom}",
            self.warn,
            self.crit,
            "" if self.min is None else _number(self.min),
            "" if self.max is None else _number(self.max),
        ]
        while len(fields) > 1 and not fields[-1]:
            fields.pop()
        return f"{label}={';'.join(fields)}"


def _number(value: float | int) -> str:
    """A plain decimal ([-0-9.] only: no exponent, no ``inf``), at most one decimal."""
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    return f"{value:.1f}"


def perf_text(values: Iterable[Perf]) -> str:
    """The values as one performance-data string (no leading ``|``)."""
    return " ".join(v.text() for v in values)


def check_perfdata(
    sample: HostSample,
    alerts: Iterable[Alert],
    *,
    memory_warning_pct: float,
    memory_critical_pct: float,
    time_to_full_s: float | None,
    ttf_horizon_s: float,
) -> list[Perf]:
    """``check``'s values: the fullest GPU's memory % (warn and crit: the memory rules'),
    the hottest GPU's °C, the active alerts by severity, and the shortest time to full
    memory of a GPU that fills (warn: under the time-to-full horizon; left out when no
    GPU fills, or when the horizon rule is off)."""
    out: list[Perf] = []
    known = [f for f, _ in sample.memory_fills()]  # a GPU in MIG mode: its instances'
    if known:
        out.append(
            Perf(
                "fullest_gpu_mem",
                round(max(known) * 100, 1),
                "%",
                _number(memory_warning_pct),
                _number(memory_critical_pct),
            )
        )
    temps = [g.temperature_c for g in sample.gpus if g.temperature_c is not None]
    if temps:
        out.append(Perf("hottest_gpu_c", round(max(temps))))
    live = [a for a in alerts if a.active]
    for level in (Health.CRITICAL, Health.WARNING):
        out.append(Perf(f"alerts_{level.value}", sum(a.severity is level for a in live)))
    if time_to_full_s is not None and ttf_horizon_s > 0:
        warn = f"{_number(ttf_horizon_s)}:"
        out.append(Perf("time_to_full", max(round(time_to_full_s), 0), "s", warn, min=0))
    return out
