"""``gpumon usage``'s answer: GPU-hours used and held idle, energy and its cost, per
container, user, job or GPU of one host, from the accounting's database; as a table,
JSON or CSV. The dashboard's ``u`` shows the same table."""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
from dataclasses import dataclass
from typing import Any

from gpumon.backends.config.usage import UsageSettings
from gpumon.backends.errors import GpumonError
from gpumon.backends.model import iso_time
from gpumon.backends.usage.account import NOBODY
from gpumon.backends.usage.store import DIMENSIONS, UsageStore

__all__ = ["TOP_IDLE", "UsageLine", "UsageReport", "parse_since", "usage_report"]

TOP_IDLE = 5  # the idle holders named under the table
J_PER_KWH = 3.6e6
_SPAN = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*(s|min|m|h|d|w)")
_UNIT_S = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class SinceError(GpumonError):
    """A ``--since`` gpumon cannot read."""


def parse_since(text: str, now: float) -> float:
    """``--since``: a span back from ``now`` (``90m``, ``24h``, ``7d``, ``2w``) or a
    local date or time (``2026-12-01``, ``2026-12-01T08:00``, ISO 8601 with an offset)."""
    word = text.strip()
    span = _SPAN.fullmatch(word)
    if span is not None:
        return now - float(span.group(1)) * _UNIT_S[span.group(2)]
    try:
        when = dt.datetime.fromisoformat(word)
    except ValueError:
        raise SinceError(
            f"--since {text!r}: say a span back from now (30m, 24h, 7d) or a date "
            "(2026-12-01, 2026-12-01T08:00)"
        ) from None
    if when.tzinfo is None:
        when = when.astimezone()  # the local time zone, as a user types a date
    return when.timestamp()


@dataclass(frozen=True, slots=True)
class UsageLine:
    """One group's sums: ``key`` its words (a container, ``CT201 / root / jupyter-lab``)."""

    key: str
    gpu_hours: float  # watched GPU time held by it (nobody's: the GPUs no process held)
    used_hours: float
    idle_hours: float
    kwh: float
    estimated: bool

    def cost(self, price: float | None) -> float | None:
        return None if price is None else self.kwh * price

    def to_json(self, price: float | None) -> dict[str, Any]:
        return {
            "key": self.key,
            "gpu_hours": round(self.gpu_hours, 6),
            "used_gpu_hours": round(self.used_hours, 6),
            "idle_gpu_hours": round(self.idle_hours, 6),
            "energy_kwh": round(self.kwh, 6),
            "energy_estimated": self.estimated,
            "cost": None if price is None else round(self.kwh * price, 6),
        }


@dataclass(frozen=True, slots=True)
class UsageReport:
    host: str
    since: float
    until: float
    by: str
    lines: tuple[UsageLine, ...]
    total: UsageLine
    top_idle: tuple[UsageLine, ...]  # by container / user / job, most idle first
    settings: UsageSettings

    def to_json(self) -> dict[str, Any]:
        price = self.settings.price_per_kwh
        return {
            "host": self.host,
            "since": iso_time(self.since),
            "until": iso_time(self.until),
            "by": self.by,
            "currency": self.settings.currency or None,
            "price_per_kwh": price,
            "rows": [line.to_json(price) for line in self.lines],
            "total": self.total.to_json(price),
            "top_idle_holders": [line.to_json(price) for line in self.top_idle],
        }

    def to_csv(self) -> str:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(
            [self.by, "gpu_hours", "used_gpu_hours", "idle_gpu_hours", "energy_kwh",
             "energy_estimated", "cost", "currency"]
        )  # fmt: skip
        price = self.settings.price_per_kwh
        for line in (*self.lines, self.total):
            row = line.to_json(price)
            writer.writerow(
                [row["key"], row["gpu_hours"], row["used_gpu_hours"], row["idle_gpu_hours"],
                 row["energy_kwh"], str(line.estimated).lower(),
                 "" if row["cost"] is None else row["cost"], self.settings.currency]
            )  # fmt: skip
        return out.getvalue()

    def cost_text(self, line: UsageLine) -> str:
        price = self.settings.price_per_kwh
        if price is None:
            return "-"
        currency = f" {self.settings.currency}" if self.settings.currency else ""
        return f"~{line.kwh * price:.2f}{currency}"

    def table(self) -> list[str]:
        """The table as lines of text (``gpumon usage``, the dashboard's ``u``)."""
        span = _span_words(self.until - self.since)
        head = f"usage of {self.host} since {_local(self.since)} ({span}), by {self.by}"
        if not self.lines:
            return [head, "nothing recorded in that time"]
        width = max(len(self.by), 5, *(len(line.key) for line in self.lines))
        titles = ("GPU-h used", "GPU-h held idle", "kWh", "cost")
        rows = [
            (
                line.key,
                _hours(line.used_hours),
                _hours(line.idle_hours),
                f"{line.kwh:.2f}",
                self.cost_text(line),
            )
            for line in (*self.lines, self.total)
        ]
        widths = [max(len(t), *(len(r[i + 1]) for r in rows)) for i, t in enumerate(titles)]
        out = [
            head,
            "  ".join(
                [self.by.ljust(width), *(t.rjust(w) for t, w in zip(titles, widths, strict=True))]
            ),
        ]
        for key, *cells in rows:
            out.append(
                "  ".join(
                    [key.ljust(width), *(c.rjust(w) for c, w in zip(cells, widths, strict=True))]
                )
            )
        idle = [line for line in self.top_idle if line.idle_hours > 0]
        if idle:
            out.append("held idle most: " + ", ".join(
                f"{line.key} {_hours(line.idle_hours)} GPU-h" for line in idle
            ))  # fmt: skip
        if self.total.estimated:
            out.append("energy estimated: power x time where no energy counter was read")
        if self.settings.price_per_kwh is None:
            out.append("cost: set [usage] price_per_kwh (and currency) in the config")
        return out


def usage_report(
    store: UsageStore,
    host: str,
    since: float,
    until: float,
    by: str,
    settings: UsageSettings | None = None,
) -> UsageReport:
    """``host``'s usage from ``since`` on, grouped ``by`` one of ``DIMENSIONS``."""
    if by not in DIMENSIONS:
        raise ValueError(by)
    lines = tuple(
        _line((f"GPU {key[0]}",) if by == "gpu" else key, sums, est)
        for key, sums, est in store.totals(host, since, [by])
    )
    everything = store.totals(host, since, [])
    total = (
        _line(("total",), *everything[0][1:]) if everything else _line(("total",), [0.0] * 6, False)
    )
    holders = store.totals(host, since, ["container", "user", "job"])
    holders.sort(key=lambda r: -r[1][2])
    top = tuple(_line(k, s, e) for k, s, e in holders[:TOP_IDLE] if s[2] > 0)
    return UsageReport(host, since, until, by, lines, total, top, settings or UsageSettings())


def _line(key: tuple[str | int, ...], sums: list[float], estimated: bool) -> UsageLine:
    words = " / ".join(str(k) for k in key) if key else "total"
    if words == " / ".join([NOBODY] * len(key)):
        words = "(nobody)"
    seconds, used_s, idle_s, joules = sums[0], sums[1], sums[2], sums[3]
    return UsageLine(
        words, seconds / 3600, used_s / 3600, idle_s / 3600, joules / J_PER_KWH, estimated
    )


def _hours(hours: float) -> str:
    """GPU-hours to two places; ``<0.01`` for some time that rounds to none."""
    return "<0.01" if 0 < hours < 0.005 else f"{hours:.2f}"


def _local(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M")


def _span_words(seconds: float) -> str:
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} d"
