"""The ``[usage]`` table: what a kWh costs, for ``gpumon usage``'s cost column."""

from __future__ import annotations

from dataclasses import dataclass

from gpumon.backends.config.schema import KeySpec, check_table, number, text

__all__ = ["USAGE_KEYS", "UsageSettings", "usage_settings"]


@dataclass(frozen=True, slots=True)
class UsageSettings:
    """``price_per_kwh`` in ``currency`` (None: no cost is said, only kWh)."""

    price_per_kwh: float | None = None
    currency: str = ""


def _currency(v: object) -> str:
    value = text(v)
    if len(value) > 16:
        raise ValueError
    return value


USAGE_KEYS: tuple[KeySpec, ...] = (
    KeySpec("price_per_kwh", number(0, 1_000_000), "a price per kWh, 0 or more"),
    KeySpec("currency", _currency, 'a currency of at most 16 characters, e.g. "EUR"'),
)


def usage_settings(raw: object) -> UsageSettings:
    """The checked ``[usage]`` table (``Invalid`` naming a bad key)."""
    keys = check_table(raw, USAGE_KEYS)
    return UsageSettings(keys.get("price_per_kwh"), keys.get("currency", ""))
