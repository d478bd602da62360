"""Bars written by tqdm itself to files, for tests/fixtures/upstream/tqdm-<version>/.

Run by ``scripts/capture-upstream`` inside a throwaway venv holding only the pinned tqdm:
``python tqdm_bars.py OUT_DIR``. Each scenario opens a file and hands it to ``tqdm(file=...)``
as a job's redirected stderr would be (not a terminal: tqdm writes ``\\r`` + the bar per
refresh, a newline when the bar closes). The only thing replaced is the clock
(``tqdm.std.time``), so that elapsed times and rates are the same on every run; the
text, the rounding, the smoothing of the rate and the choice of what to print are tqdm's.

``truth.json`` holds, per file, tqdm's own ``format_dict`` (n, total, rate, unit, ...) at
the last refresh: what the bar's text stands for, for the tests to compare a parse with.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tqdm as tqdm_module
import tqdm.std


class Clock:
    """A clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


CLOCK = Clock()
tqdm.std.time = CLOCK  # type: ignore[assignment]  # read by tqdm.__init__: self._time = time

TRUTH_KEYS = ("n", "total", "rate", "elapsed", "unit", "unit_scale", "unit_divisor", "postfix")


def truth(bar: Any) -> dict[str, Any]:
    d = bar.format_dict
    out = {k: d.get(k) for k in TRUTH_KEYS}
    # format_meter's own fallback when no smoothed rate is known yet
    if out["rate"] is None and d.get("elapsed"):
        out["rate"] = (d["n"] - d.get("initial", 0)) / d["elapsed"]
    return out


def steps(bar_cls: Any, f: Any) -> Any:
    """A training loop: 1000 steps, ~5 it/s, a loss postfix, a tqdm.write line between."""
    bar = bar_cls(total=1000, desc="train", file=f)
    loss = 3.2
    for i in range(1, 9):
        CLOCK.advance(1.1)
        loss *= 0.93
        bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
        bar.update(6 if i % 3 else 5)
        if i == 4:
            bar.write("saved checkpoint-24", file=f)
    return bar


def drive(bar: Any, redraws: int, every_s: float, by: int) -> Any:
    """``redraws`` updates of ``by``, ``every_s`` apart on the clock."""
    for _ in range(redraws):
        CLOCK.advance(every_s)
        bar.update(by)
    return bar


def tokens(bar_cls: Any, f: Any) -> Any:
    """Tokens counted with unit_scale: "1.02M/2.00M [.., 128ktok/s]"."""
    bar = bar_cls(total=2_000_000, unit="tok", unit_scale=True, desc="tokens", file=f)
    return drive(bar, 8, 1.0, 12_800 * 10)


def bytes_binary(bar_cls: Any, f: Any) -> Any:
    """A download as huggingface_hub and pip draw it: bytes, unit_divisor=1024."""
    total = 100 * 1024 * 1024
    bar = bar_cls(
        total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="model.safetensors", file=f
    )
    return drive(bar, 6, 1.0, 10_500_000)


def slow(bar_cls: Any, f: Any) -> Any:
    """Slower than one item a second: the rate turns into "3.20s/it"."""
    return drive(bar_cls(total=50, desc="eval", file=f), 5, 3.2, 1)


def unknown_total(bar_cls: Any, f: Any) -> Any:
    """No total (a generator): "120it [00:04, 25.00it/s]"."""
    return drive(bar_cls(desc="batches", file=f), 6, 0.8, 20)


def midline(bar_cls: Any, f: Any) -> Any:
    """A bar still running when the file is read: the last line has no newline."""
    return drive(bar_cls(total=400, unit="img", file=f), 5, 0.5, 17)


SCENARIOS: dict[str, tuple[Callable[[Any, Any], Any], bool]] = {
    # name -> (scenario, close the bar at the end)
    "steps": (steps, True),
    "tokens": (tokens, True),
    "bytes": (bytes_binary, True),
    "slow": (slow, True),
    "unknown_total": (unknown_total, True),
    "midline": (midline, False),
}


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    facts: dict[str, Any] = {"tqdm": tqdm_module.__version__, "files": {}}
    for name, (scenario, close) in SCENARIOS.items():
        path = out / f"{name}.log"
        with path.open("w", encoding="utf-8", newline="") as f:
            bar = scenario(tqdm.std.tqdm, f)
            if close:
                bar.close()  # prints the bar once more, then the newline
            facts["files"][path.name] = {"closed": close, **truth(bar)}
            if not close:
                f.flush()
                bar.disable = True  # leave the text as it stands: no close(), no newline
    (out / "truth.json").write_text(json.dumps(facts, indent=1, sort_keys=True) + "\n")
    print("Files (each one bar, written by tqdm to the file it was given):\n")
    for name, (scenario, close) in SCENARIOS.items():
        left = "" if close else " Left open: no close(), the file ends mid-line."
        print(f"- `{name}.log`: {(scenario.__doc__ or '').strip()}{left}")
    print("- `truth.json`: tqdm's `format_dict` behind each file's last bar.")
    print(
        "\nThe clock is the one thing replaced (`tqdm.std.time`, a counter moved by the"
        " scenario), so a rerun writes the same bytes; rounding, smoothing and layout are tqdm's."
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
