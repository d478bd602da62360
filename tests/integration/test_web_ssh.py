"""The incident page in headless Chromium with hostile names from a real target (issue 40
point 4): ``gpumon watch`` over the test sshd, the target's nvidia-smi naming its GPU and
its process in markup, and a followed log whose CUDA OOM line carries more. Each name
is shown as its characters on the front page and the OOM's incident page, at phone and
desktop size: no dialog opens, nothing is said on the console (the CSP would refuse a
script or handler that got into the page, and say so there) and the tab asks for
nothing but the pages (an ``<img src=x>`` that became an element would ask for ``/x``).
The screenshots are kept: ``chromium.artefact_dir``."""

from __future__ import annotations

import re
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from chromium import SIZES, Chromium, artefact_dir, browser, fits
from prometheus import free_port
from sshd_server import SshServer
from watch_faults import FAKE_SMI, Watch

pytestmark = pytest.mark.integration

# Markup in what the target names: each runs a script where it reaches a page as HTML.
HOSTILE_GPU = "<script>alert(1)</script>"
HOSTILE_PROCESS = "<img src=x onerror=alert(2)>"
HOSTILE_LOG = "<svg onload=alert(3)>"


def hostile_smi(sshd: SshServer) -> Path:
    """The target's nvidia-smi: tests/support/fake_smi.py with the hostile names."""
    script = sshd.bin / "nvidia-smi-hostile"
    script.write_text(
        f"#!/bin/sh\nHOSTILE_NAME='{HOSTILE_GPU}' HOSTILE_PROCESS='{HOSTILE_PROCESS}' "
        f'exec "{sys.executable}" "{FAKE_SMI}" "$@"\n',
        encoding="utf-8",
    )
    script.chmod(0o755)
    return script


def page(url: str) -> str:
    """The page at ``url``; "" while the listener is not up or says no."""
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return str(resp.read().decode())
    except (OSError, urllib.error.HTTPError):
        return ""


def test_hostile_names_from_the_target_render_as_text(
    sshd: SshServer, client_env: dict[str, str], tmp_path: Path
) -> None:
    if browser() is None:
        pytest.skip("needs Debian's chromium (.ci/run installs it)")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "train.log").touch()  # there from the start: its OOM line is read live
    port = free_port()
    host = sshd.config_toml("box", nvidia_smi=str(hostile_smi(sshd)), kernel_log=False)
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'{host}watch_logs = ["{logs}/*.log"]\n\n[watch]\nmetrics_port = 0\n')
    base = f"http://127.0.0.1:{port}/"
    log = tmp_path / "watch.log"
    with Watch(cfg, client_env, log, "box", "--metrics-port", str(port)) as watch:
        watch.wait(lambda: "alert(2)" in page(base), 60, "the process on the front page")
        with (logs / "train.log").open("a", encoding="utf-8") as train:
            train.write(f"torch.OutOfMemoryError: CUDA out of memory. {HOSTILE_LOG} end\n")
        watch.wait(lambda: 'class="headline" href="' in page(base), 60, "the OOM's incident")
        [incident] = re.findall(r'class="headline" href="\./([^"]+)"', page(base))
        shots = artefact_dir(tmp_path, "hostile-names")
        with Chromium(tmp_path / "chromium") as chromium:
            for width, height in SIZES:
                tab = chromium.tab(width, height)
                for name, url in (("front", base), ("incident", base + incident)):
                    tab.load(url)
                    shown = tab.layout()
                    tab.screenshot(shots / f"{name}-{width}x{height}.png")
                    fits(shown, width)
                    assert HOSTILE_LOG in shown["text"], name
                    if name == "front":
                        assert HOSTILE_GPU in shown["text"] and HOSTILE_PROCESS in shown["text"]
                assert tab.dialogs() == []
                assert tab.errors() == []
                assert set(tab.requested()) <= {base, base + incident}, tab.requested()
