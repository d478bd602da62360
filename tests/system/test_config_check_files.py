"""The real CLI refuses a config that names an endless file: ``known_hosts = "/dev/zero"``
passed ``gpumon config check`` and then grew ``snapshot`` to 17 GB of memory.

Each child runs under a 1 GiB address-space limit and a time limit, so even the old
behaviour ends quickly here instead of eating the shared machine.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.system

MEMORY_LIMIT = 1 << 30


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def gpumon(config: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    res = subprocess.run(
        [sys.executable, "-m", "gpumon.tui.cli", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "XDG_STATE_HOME": str(config.parent / "state")},
        preexec_fn=_limit_memory,
    )
    return res, time.monotonic() - start


@pytest.mark.parametrize("key", ["known_hosts", "identity"])
@pytest.mark.parametrize("command", [("config", "check"), ("snapshot", "gpu1")])
def test_dev_zero_as_a_key_file_is_refused_with_the_key_name(
    tmp_path: Path, key: str, command: tuple[str, ...]
) -> None:
    config = tmp_path / "config.toml"
    # Port 9 on 127.0.0.1: if the file were accepted, nothing would answer there anyway.
    config.write_text(
        f'[hosts.gpu1]\nssh = "root@127.0.0.1:9"\n{key} = "/dev/zero"\n', encoding="utf-8"
    )
    res, took = gpumon(config, *command)
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr[-2000:])
    assert f"{config}: hosts.gpu1.{key}: " in res.stderr
    assert '"/dev/zero": not a regular file (a character device)' in res.stderr
    assert res.stdout == ""
    print(f"{' '.join(command)} with {key} = /dev/zero: exit 2 in {took:.2f} s")
