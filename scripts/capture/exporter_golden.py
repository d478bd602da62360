"""The exporter's golden page, for tests/fixtures/upstream/prometheus_client-<version>/.

Run by ``scripts/capture-upstream exporter`` with the project's own environment (its
prometheus_client is the version pyproject.toml pins): ``python exporter_golden.py OUT_DIR``.
The page is prometheus_client's ``generate_latest`` over gpumon's collector for one fixed
scene (tests/support/exporter_scene.py); Prometheus' own ``promtool check metrics`` reads
it where promtool is installed, and its verdict goes in the README.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib.metadata import version as installed
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "support"))
from exporter_scene import exporter_page


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    page = exporter_page()
    (out / "exporter.prom").write_bytes(page)
    print(
        f"- `exporter.prom`: gpumon's exporter (`backends/exporter/metrics.py`) for the scene"
        " in `tests/support/exporter_scene.py`, as prometheus_client"
        f" {installed('prometheus_client')} `generate_latest` writes it (what `MetricsServer`"
        " serves)."
    )
    promtool = shutil.which("promtool")
    if promtool is None:
        print("\n`promtool check metrics`: not run (no promtool here).")
        return
    done = subprocess.run(
        [promtool, "check", "metrics"], input=page, capture_output=True, timeout=60, check=False
    )
    promtool_version = subprocess.run(
        [promtool, "--version"], capture_output=True, text=True, timeout=60, check=False
    ).stdout.splitlines()[:1]
    said = (done.stdout + done.stderr).decode().strip() or "no findings"
    print(
        f"\n`promtool check metrics` ({' '.join(promtool_version)}): exit {done.returncode},"
        f" {said}."
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
