"""Job progress lines -> ``ProgressUpdate``: presets for common log shapes, or a user regex.

Presets (``PRESETS``):

- ``kv``: key/value training logs: ``step 690/5000 | loss 2.31 | 12.8 Ktok/s | tokens 8.83M``
  (the simulator's job), ``step=690 loss=2.31 tok/s=12800``, ``Step: 690/5000, loss: 2.31``.
- ``tqdm``: progress bars, also several ``\\r``-separated updates in one line:
  ``45%|████▌     | 450/1000 [01:23<01:40, 5.41it/s, loss=2.31]``.
- ``hf``: Hugging Face Trainer dict lines ``{'loss': 2.31, 'learning_rate': 2e-05, ...}``
  (5.x: ``{'loss': '2.31', ...}``, strings), ``num_input_tokens_seen`` as the token count,
  the final ``{'train_runtime': ...}`` summary, and its tqdm bar.
- ``jsonl``: one JSON object per line with keys such as step/total_steps/loss/tokens_per_s.
- ``batch``: batch generation: ``Processed 1200/193010 prompts (3 failed), 5.2M output
  tokens`` or ``[batch] done=1200 total=193010 failed=3 out_tokens=5.2M 41.3 prompts/s``.

A user regex names its groups from ``PROGRESS_GROUPS``; values may carry units ("12.8K",
"12.8 Ktok/s", "01:40"). Parsing never raises; a line without progress gives None.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from gpumon.backends.errors import GpumonError
from gpumon.backends.parsers.progress_presets import (
    ProgressUpdate,
    nonempty,
    parse_batch,
    parse_hf,
    parse_jsonl,
    parse_kv,
    parse_tqdm,
    read_count,
    read_eta,
    read_tokens_per_s,
)
from gpumon.backends.parsers.units import parse_number

__all__ = [
    "MAX_LINE",
    "PRESETS",
    "PROGRESS_GROUPS",
    "ProgressParser",
    "ProgressSpecError",
    "ProgressUpdate",
    "compile_progress_regex",
]

PRESETS = ("kv", "tqdm", "hf", "jsonl", "batch")
PROGRESS_GROUPS = frozenset(
    {"step", "total_steps", "loss", "tokens_per_s", "tokens", "done", "total", "failed", "eta"}
)
MAX_LINE = 16384  # longer lines are not progress (and would cost regex time)


class ProgressSpecError(GpumonError, ValueError):
    """A progress spec that is neither a preset nor a usable regex; the message says why."""


# ---------------------------------------------------------------------------- user regex


def compile_progress_regex(pattern: str) -> re.Pattern[str]:
    """The compiled user regex; ProgressSpecError when it does not compile, has no named
    groups, or names a group outside ``PROGRESS_GROUPS``."""
    try:
        rx = re.compile(pattern)
    except (re.error, RecursionError, OverflowError) as e:
        raise ProgressSpecError(
            f"progress {pattern!r} is not a preset ({', '.join(PRESETS)}) "
            f"and not a valid regex: {e}"
        ) from None
    unknown = sorted(set(rx.groupindex) - PROGRESS_GROUPS)
    if unknown or not rx.groupindex:
        known = ", ".join(sorted(PROGRESS_GROUPS))
        problem = f"unknown: {', '.join(unknown)}" if unknown else "it has none"
        raise ProgressSpecError(
            f"progress regex {pattern!r}: groups must be named from {known}; {problem}"
        )
    return rx


def _regex_parser(rx: re.Pattern[str]) -> Callable[[str], ProgressUpdate | None]:
    def parse(line: str) -> ProgressUpdate | None:
        m = rx.search(line)
        if m is None:
            return None
        g = m.groupdict()
        tokens = g.get("tokens")
        return nonempty(
            ProgressUpdate(
                step=read_count(g.get("step")),
                total_steps=read_count(g.get("total_steps")),
                loss=parse_number(g["loss"]) if g.get("loss") else None,
                tokens_per_s=read_tokens_per_s(g.get("tokens_per_s")),
                tokens=parse_number(tokens) if tokens else None,
                done=read_count(g.get("done")),
                total=read_count(g.get("total")),
                failed=read_count(g.get("failed")),
                eta_s=read_eta(g.get("eta")),
            )
        )

    return parse


_PRESET_PARSERS: dict[str, Callable[[str], ProgressUpdate | None]] = {
    "kv": parse_kv,
    "tqdm": parse_tqdm,
    "hf": parse_hf,
    "jsonl": parse_jsonl,
    "batch": parse_batch,
}


class ProgressParser:
    """Reads one job's log lines with a preset or a user regex (``spec``).

    Raises ProgressSpecError for a bad spec (see ``compile_progress_regex``).
    """

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.preset = spec if spec in _PRESET_PARSERS else None
        if self.preset is not None:
            self._parse = _PRESET_PARSERS[self.preset]
        else:
            self._parse = _regex_parser(compile_progress_regex(spec))

    def parse(self, line: str) -> ProgressUpdate | None:
        """The progress in ``line``: its ``\\r``-separated parts merged, newest last.

        None when no part says anything; never raises.
        """
        merged: ProgressUpdate | None = None
        for part in line.split("\r"):
            if not part.strip() or len(part) > MAX_LINE:
                continue
            try:
                update = self._parse(part)
            except (ValueError, ArithmeticError, RecursionError):
                update = None
            if update is not None:
                merged = update if merged is None else merged.merged(update)
        return merged
