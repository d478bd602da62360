"""The preset progress parsers (see ``progress`` for the shapes each one reads) and the
``ProgressUpdate`` they produce. Every parser takes one line (one ``\\r`` segment) and
returns None when it carries no progress; none of them raises on any text.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

from gpumon.backends import untrusted
from gpumon.backends.lazy import lazy_pattern
from gpumon.backends.parsers.units import (
    NUMBER,
    Rate,
    parse_duration,
    parse_number,
    parse_rate,
    parse_rates,
)


@dataclass(frozen=True, slots=True)
class ProgressUpdate:
    """What one line says about a job's progress; None: the line does not say.

    ``items_per_s`` is a logged step/item rate (tqdm's it/s, prompts/s); ``finished`` is
    set by a final summary line (HF ``train_runtime``, "training complete", ...).
    """

    step: int | None = None
    total_steps: int | None = None
    loss: float | None = None
    tokens_per_s: float | None = None
    tokens: float | None = None
    done: int | None = None
    total: int | None = None
    failed: int | None = None
    eta_s: float | None = None
    items_per_s: float | None = None
    finished: bool = False
    unit: str | None = None  # what ``items_per_s`` counts when a bar names it ("B", "img")

    def merged(self, later: ProgressUpdate) -> ProgressUpdate:
        """This update with every value ``later`` has replaced."""
        changes = {
            f.name: getattr(later, f.name)
            for f in fields(later)
            if getattr(later, f.name) not in (None, False)
        }
        return replace(self, **changes) if changes else self


_EMPTY = ProgressUpdate()


def read_count(text: str | None) -> int | None:
    value = parse_number(text) if text else None
    return int(value) if value is not None and 0 <= value < 1e18 else None


def read_tokens_per_s(text: str | None) -> float | None:
    if not text:
        return None
    rate = parse_rate(text)
    if rate is not None:
        return rate.per_second
    value = parse_number(text.strip().removesuffix("/s").removesuffix("tok").strip())
    return value if value is not None and value >= 0 else None


def read_eta(text: str | None) -> float | None:
    return parse_duration(text) if text else None


def nonempty(update: ProgressUpdate) -> ProgressUpdate | None:
    return None if update == _EMPTY else update


# ------------------------------------------------------------------------------------ kv

_SI = r"(?:\s*(?-i:[kKMGBT])(?![A-Za-z]))?"  # case-sensitive even inside (?i) patterns
_N = rf"({NUMBER}(?![\d.]|,\d){_SI})"
_INT = r"\d+(?:,\d{3})*"
_STEP = lazy_pattern(
    r"(?i)(?<![\w/-])(?:global[_ ])?(?:step|iter(?:ation)?)s?\b\s*[:=]?\s*\[?\s*"
    rf"({_INT})(?:\s*(?:/|of)\s*({_INT}))?"
)
_TOTAL_STEPS = lazy_pattern(r"(?i)\b(?:total_steps|max_steps|num_steps|total_iters)\s*[:=]\s*(\d+)")
_LOSS = lazy_pattern(rf"(?i)(?<![\w/-])(?<!val )(?<!eval )(?:train[_ ]?)?loss\b\s*[:=]?\s*{_N}")
_TOK_RATE_KEY = lazy_pattern(
    r"(?i)(?<![\w/])(?:tok(?:en)?s?/s(?:ec)?|tok(?:en)?s?_per_s(?:ec(?:ond)?)?|tps|throughput)"
    rf"\s*[:=]?\s*{_N}(?!\s*[a-zA-Z]*\s*/\s*s)"
)
_TOKENS = lazy_pattern(
    r"(?i)(?<![\w/])(?:tokens|num_tokens|total_tokens|tokens_seen|consumed_tokens|tok_seen)"
    rf"\b(?![/_])\s*[:=]?\s*{_N}"
)
_ETA = lazy_pattern(r"(?i)\beta\b\s*[:=]?\s*([^|,;\]\[]+)")
_DONE_WORDS = lazy_pattern(
    r"(?i)\b(?:training|train|run|job|fine-?tuning)\s+(?:is\s+)?"
    r"(?:complete[d]?|finished|done)\b|\bfinished training\b"
)


def _eta_in(line: str) -> float | None:
    m = _ETA.search(line)
    words = m[1].split() if m is not None else []
    if not words:
        return None
    whole = parse_duration(" ".join(words))  # "1h 5m"
    return whole if whole is not None else parse_duration(words[0])  # "01:40 left"


def _token_rate_in(line: str, rates: list[Rate]) -> float | None:
    rate = next((r for r in rates if r.is_tokens), None)
    if rate is not None:
        return rate.per_second
    m = _TOK_RATE_KEY.search(line)
    return parse_number(m[1]) if m is not None else None


def _items_rate_in(rates: list[Rate]) -> float | None:
    return next((r.per_second for r in rates if not r.is_tokens), None)


def parse_kv(line: str) -> ProgressUpdate | None:
    step = _STEP.search(line)
    total = _TOTAL_STEPS.search(line)
    loss = _LOSS.search(line)
    tokens = _TOKENS.search(line)
    rates = parse_rates(line)
    if step is not None and step[2]:
        total_steps = read_count(step[2])
    else:
        total_steps = read_count(total[1]) if total is not None else None
    return nonempty(
        ProgressUpdate(
            step=read_count(step[1]) if step else None,
            total_steps=total_steps,
            loss=parse_number(loss[1]) if loss else None,
            tokens_per_s=_token_rate_in(line, rates),
            tokens=parse_number(tokens[1]) if tokens else None,
            eta_s=_eta_in(line),
            items_per_s=_items_rate_in(rates),
            finished=_DONE_WORDS.search(line) is not None,
        )
    )


# ---------------------------------------------------------------------------------- tqdm

# tqdm.std.tqdm.format_meter (tqdm 4.70): r_bar is "| {n_fmt}/{total_fmt} [{elapsed}<{remaining},
# {rate_fmt}{postfix}]", without a total "{n_fmt}{unit} [{elapsed}, {rate_fmt}{postfix}]".
# With unit_scale, n_fmt / total_fmt are format_sizeof(n, divisor=unit_divisor) (prefixes
# k M G T P E Z, then Y), but the rate is format_sizeof(rate) with the default divisor 1000:
# "50.0M/100M [00:05<00:05, 10.5MB/s]" for a unit_divisor=1024 byte bar is 50 MiB of 100 MiB
# at 10.5e6 B/s. rate_fmt is "{rate}{unit}/s", or "{1/rate}s/{unit}" when slower than 1/s.
_TQDM = lazy_pattern(
    r"(\d[\d.]*[kMGTPEZY]?)(?:/(\d[\d.]*[kMGTPEZY]?|\?))?\s*([A-Za-z]+\s*)?"
    r"\[\s*([\d:]+(?:\.\d+)?|\?)\s*(?:<\s*([^,\]]*))?,\s*([^,\]]*)(?:,\s*([^\]]*))?\]"
)
_TQDM_PREFIX = {"": 1, "k": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6, "Z": 7, "Y": 8}
_TQDM_COUNT = lazy_pattern(r"(\d+(?:\.\d+)?)([kMGTPEZY]?)")
_TQDM_RATE = lazy_pattern(
    rf"\s*(?:({NUMBER})([kMGTPEZY]?)|\?)([^\s/\d][^\s/]*)/s\s*"  # 10.5MB/s, 5.41it/s, ?B/s
    rf"|\s*({NUMBER})([kMGTPEZY]?)s/([^\s/]+)\s*"  # 3.20s/it
)
_TQDM_PERCENT = lazy_pattern(r"(\d{1,3})%\|[^|]*\|\s*$")
_BYTE_UNITS = frozenset({"B", "iB", "b"})


def _tqdm_count(text: str | None, divisor: int) -> float | None:
    m = _TQDM_COUNT.fullmatch(text or "")
    if m is None:
        return None
    power = 0 if not m[2] else _TQDM_PREFIX[m[2]]
    value = float(m[1]) * divisor**power
    return value if math.isfinite(value) else None


def _tqdm_rate(text: str) -> tuple[float | None, str | None]:
    """(per second, unit) of tqdm's rate_fmt; the prefix is always SI (divisor 1000)."""
    m = _TQDM_RATE.fullmatch(text)
    if m is None:
        return None, None
    if m[3] is not None:
        if m[1] is None:
            return None, m[3]  # "?B/s": no rate yet
        value = float(m[1]) * 1000 ** (_TQDM_PREFIX[m[2]] if m[2] else 0)
        return (value if math.isfinite(value) else None), m[3]
    seconds = float(m[4]) * 1000 ** (_TQDM_PREFIX[m[5]] if m[5] else 0)
    return (1.0 / seconds if seconds > 0 and math.isfinite(seconds) else None), m[6]


def _tqdm_divisor(n: str, total: str | None, unit: str | None, percent: str | None) -> int:
    """The unit_divisor a scaled bar was printed with. The text does not say it; the
    bar's percentage (n / total, format "{:3.0f}") tells when the two divisors disagree
    on it, else a byte bar is taken as binary (tqdm's documented byte idiom,
    ``unit="B", unit_scale=True, unit_divisor=1024``) and anything else as 1000."""
    if percent is not None and total:
        fits = []
        for divisor in (1000, 1024):
            a, b = _tqdm_count(n, divisor), _tqdm_count(total, divisor)
            if a is not None and b:
                fits.append((abs(a / b * 100 - int(percent)), divisor))
        if len(fits) == 2 and abs(fits[0][0] - fits[1][0]) > 0.5:
            return min(fits)[1]
    return 1024 if unit in _BYTE_UNITS else 1000


def _scaled(*texts: str | None) -> bool:
    return any(t is not None and (t[-1:].isalpha() or "." in t) for t in texts)


def parse_tqdm(line: str) -> ProgressUpdate | None:
    bars = list(_TQDM.finditer(line))
    if not bars:
        return None
    m = bars[-1]  # the newest bar on the line
    rate, rate_unit = _tqdm_rate(m[6])
    unit = (m[3] or "").strip() or rate_unit
    postfix = parse_kv(m[7]) if m[7] else None
    total_text = m[2] if m[2] and m[2] != "?" else None
    if _scaled(m[1], total_text):  # unit_scale: 1.00k, 50.0M, 0.00
        percent = _TQDM_PERCENT.search(line, 0, m.start())
        divisor = _tqdm_divisor(m[1], total_text, unit, percent[1] if percent else None)
        n_value, total_value = _tqdm_count(m[1], divisor), _tqdm_count(total_text, divisor)
        n = int(n_value) if n_value is not None and n_value < 1e18 else None
        total = int(total_value) if total_value is not None and total_value < 1e18 else None
    else:
        n, total = read_count(m[1]), read_count(total_text)
    tokens = (unit or "").lower().startswith("tok")  # unit="tok" bars count tokens, not steps
    named = unit if unit and unit not in ("it", "tok") else None
    base = ProgressUpdate(
        step=None if tokens else n,
        total_steps=None if tokens else total,
        tokens=float(n) if tokens and n is not None else None,
        tokens_per_s=rate if rate is not None and tokens else None,
        items_per_s=rate if rate is not None and not tokens else None,
        eta_s=read_eta(m[5]) if m[5] else None,
        unit=named,
    )
    return base.merged(postfix) if postfix else base


# ------------------------------------------------------------------------------------ hf

_HF_DICT = lazy_pattern(r"\{['\"][a-z_/]+['\"]\s*:.*\}")


def _dict_value(d: Mapping[str, object], *keys: str) -> float | None:
    for key in keys:
        v = d.get(key)
        if isinstance(v, bool):
            continue
        if isinstance(v, int | float) and math.isfinite(v):
            return float(v)
        if isinstance(v, str):
            n = parse_number(v)
            if n is not None:
                return n
    return None


def parse_hf(line: str) -> ProgressUpdate | None:
    m = _HF_DICT.search(line)
    if m is None:
        return parse_tqdm(line)
    try:
        d = ast.literal_eval(m[0])
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if not isinstance(d, dict) or not all(isinstance(k, str) for k in d):
        return None
    # The end of a run is Trainer's final summary (``_inner_training_loop`` /
    # ``_finalize_training``: speed_metrics("train", ...) + train_loss, no "loss"). From
    # 4.52.0 on (not 4.51.3: tests/fixtures/upstream), with include_num_input_tokens_seen
    # every periodic log also carries train_runtime / train_tokens_per_second
    # (``Trainer.log``), beside its "loss" (4.48 to 4.51 computed them there and dropped
    # the result).
    final = "train_runtime" in d and "loss" not in d
    loss = _dict_value(d, "train_loss" if final else "loss", "loss")
    if loss is None and not final:
        return None  # eval dicts and others: no training progress
    # With include_num_input_tokens_seen every log carries the running token count
    # (``num_input_tokens_seen``, an int); 5.x prints the floats as 4-digit strings.
    seen = _dict_value(d, "num_input_tokens_seen")
    return ProgressUpdate(
        loss=loss,
        tokens=seen if seen is not None and seen >= 0 else None,
        tokens_per_s=_dict_value(d, "train_tokens_per_second", "tokens_per_second"),
        step=read_count(str(d.get("step", d.get("global_step", "")))),
        finished=final,
    )


# --------------------------------------------------------------------------------- jsonl

_JSON_KEYS: dict[str, tuple[str, ...]] = {
    "step": ("step", "global_step", "iter", "iteration", "steps"),
    "total_steps": ("total_steps", "max_steps", "num_steps", "total_iters"),
    "loss": ("loss", "train_loss"),
    "tokens_per_s": (
        "tokens_per_s",
        "tokens_per_sec",
        "tokens_per_second",
        "tok_per_s",
        "tok/s",
        "tokens/s",
        "tps",
        "throughput_tokens_per_s",
    ),
    "tokens": ("tokens", "num_tokens", "total_tokens", "tokens_seen", "consumed_tokens"),
    "done": ("done", "completed", "processed"),
    "total": ("total",),
    "failed": ("failed", "errors", "failures"),
    "eta": ("eta_s", "eta", "eta_seconds", "remaining_s"),
}
_FINAL_EVENTS = {"finished", "done", "complete", "completed", "end", "train_end", "success"}


def parse_jsonl(line: str) -> ProgressUpdate | None:
    start = line.find("{")
    if start < 0:
        return None
    try:
        d = untrusted.loads(line[start:])
    except (ValueError, RecursionError):
        return None
    if not isinstance(d, dict):
        return None
    flat: dict[str, object] = {}
    for k, v in d.items():  # "train/loss" (wandb style) also answers to "loss"
        flat.setdefault(str(k).lower(), v)
        flat.setdefault(str(k).lower().rsplit("/", 1)[-1], v)

    def number(name: str) -> float | None:
        return _dict_value(flat, *_JSON_KEYS[name])

    def whole(name: str) -> int | None:
        value = number(name)
        return int(value) if value is not None and 0 <= value < 1e18 else None

    eta = next((flat[k] for k in _JSON_KEYS["eta"] if k in flat), None)
    event = flat.get("event", flat.get("status"))
    finished = (isinstance(event, str) and event.lower() in _FINAL_EVENTS) or any(
        flat.get(k) is True for k in ("finished", "done", "complete")
    )
    return nonempty(
        ProgressUpdate(
            step=whole("step"),
            total_steps=whole("total_steps"),
            loss=number("loss"),
            tokens_per_s=number("tokens_per_s"),
            tokens=number("tokens"),
            done=whole("done"),
            total=whole("total"),
            failed=whole("failed"),
            eta_s=read_eta(str(eta)) if isinstance(eta, int | float | str) else None,
            finished=finished,
        )
    )


# --------------------------------------------------------------------------------- batch

_BATCH_FRACTION = lazy_pattern(
    rf"(?i)({_INT})\s*/\s*({_INT})\s*(?:prompts|requests|samples|items|rows|examples|"
    r"records|done|completed|processed)\b"
    rf"|(?:processed|done|completed|progress)\s*[:=]?\s*({_INT})\s*/\s*({_INT})"
)
_BATCH_KEYS = lazy_pattern(rf"(?i)\b(done|total|failed|errors)\s*[:=]\s*({_INT})")
_FAILED = lazy_pattern(rf"(?i)\b({_INT})\s+(?:failed|errors?)\b")
_OUT_TOKENS = lazy_pattern(
    rf"(?i){_N}\s*(?:output|generated|out) tokens\b(?!\s*[:=])"
    rf"|(?:output|out|generated)_tokens\s*[:=]\s*{_N}"
)
_BATCH_DONE = lazy_pattern(
    r"(?i)\b(?:batch|generation|job|run)\s+(?:is\s+)?(?:finished|complete[d]?|done)\b"
    r"|\b(?:finished|completed|all done)\s*[:.!]"
)


def parse_batch(line: str) -> ProgressUpdate | None:
    got: dict[str, int | None] = {}
    m = _BATCH_FRACTION.search(line)
    if m is not None:
        got["done"], got["total"] = read_count(m[1] or m[3]), read_count(m[2] or m[4])
    for key, value in _BATCH_KEYS.findall(line):
        got[{"errors": "failed"}.get(key.lower(), key.lower())] = read_count(value)
    failed = _FAILED.search(line)
    if failed is not None and "failed" not in got:
        got["failed"] = read_count(failed[1])
    out = _OUT_TOKENS.search(line)
    rates = parse_rates(line)
    return nonempty(
        ProgressUpdate(
            done=got.get("done"),
            total=got.get("total"),
            failed=got.get("failed"),
            tokens=parse_number(out[1] or out[2] or "") if out else None,
            tokens_per_s=_token_rate_in(line, rates),
            items_per_s=_items_rate_in(rates),
            eta_s=_eta_in(line),
            finished=_BATCH_DONE.search(line) is not None,
        )
    )
