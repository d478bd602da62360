"""A real OpenSSH server on 127.0.0.1 for the integration tests and benchmarks.

Each server gets throwaway host and client keys, a stand-in ``pct`` (runs what follows
``--`` and records the container id) and the simulator's ``nvidia-smi`` on the session
PATH (sshd's ``SetEnv``). Only the GPU is simulated; SSH, the agent and the parsers are
the real ones.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from gpumon.backends.monitor import demo_settings
from gpumon.backends.sim import write_wrapper

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
REPO = Path(__file__).resolve().parents[2]

PCT = """#!/bin/sh
# Stand-in for Proxmox's pct: `pct exec ID -- CMD...` runs CMD right here.
[ "$1" = exec ] || { echo "pct: only 'exec' is supported here" >&2; exit 2; }
echo "$2" >> "{log}"
shift 2
[ "$1" = -- ] && shift
exec "$@"
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def serving_sshd(server: SshServer) -> list[int]:
    """The sshd processes that serve ``server``'s sessions now (``sshd`` or, OpenSSH 9.8
    on, ``sshd-session``: the listener's descendants, not what the sessions run)."""
    assert server.proc is not None
    found = []
    for pid in descendants(server.proc.pid):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/comm").read_text().strip() in ("sshd", "sshd-session"):
                found.append(pid)
    return found


def processes_matching(marker: str, where: str = "environ") -> list[tuple[int, str]]:
    """(pid, cmdline) of live processes whose environment (or command line, with
    ``where="cmdline"``) contains ``marker``.

    Every process of a test sshd's sessions inherits that server's unique PATH, so
    ``processes_matching(str(server.bin))`` finds exactly what runs on that "target".
    """
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            text = (entry / where).read_bytes()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker.encode() in text:
            found.append((int(entry.name), cmd))
    return found


@dataclass
class SshServer:
    root: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def session_path(self) -> str:
        """The PATH of this server's sessions: what the target finds (``command -v``)."""
        return f"{self.bin}:{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin"

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def client_key(self) -> Path:
        return self.root / "client_key"

    @property
    def known_hosts(self) -> Path:
        return self.root / "known_hosts"

    @property
    def pct_log(self) -> Path:
        return self.root / "pct.log"

    @property
    def host_key_pub(self) -> str:
        return (self.root / "host_key.pub").read_text().split()[1]

    def setup(self) -> None:
        self.bin.mkdir(parents=True)
        for name in ("host_key", "client_key", "other_key"):
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.root / name)],
                check=True,
            )
        shutil.copy(self.root / "client_key.pub", self.root / "authorized_keys")
        pct = self.bin / "pct"
        pct.write_text(PCT.replace("{log}", str(self.pct_log)))
        pct.chmod(0o755)
        write_wrapper(self.bin, demo_settings("training-oom", demo_time=10.0))
        user = os.environ.get("USER") or "root"
        (self.root / "sshd_config").write_text(
            f"Port {self.port}\n"
            "ListenAddress 127.0.0.1\n"
            f"HostKey {self.root / 'host_key'}\n"
            f"PidFile {self.root / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {self.root / 'authorized_keys'}\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "PubkeyAuthentication yes\nPermitRootLogin yes\nStrictModes no\nUsePAM no\n"
            f"AllowUsers {user}\n"
            # SHLVL=1: the session's `bash -c` counts as nested and skips the account's
            # ~/.bashrc, which bash reads for an sshd command at level 1. The target under
            # test is gpumon's, not this machine's: its ~/.bashrc (pyenv init, whose rehash
            # waits 60 s on a lock a killed session left) must not delay every session.
            f"SetEnv SHLVL=1 PATH={self.session_path}\n"
            "LogLevel ERROR\n"
        )
        self.trust_host_key()

    def trust_host_key(self) -> None:
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} ssh-ed25519 {self.host_key_pub}\n")

    def start(self) -> None:
        Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation directory
        self.proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(self.root / "sshd_config")],
            stderr=open(self.root / "sshd.log", "ab"),  # noqa: SIM115 - lives as long as sshd
            start_new_session=True,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            if self.proc.poll() is not None:
                raise RuntimeError((self.root / "sshd.log").read_text())
            time.sleep(0.05)
        raise RuntimeError("sshd did not start listening")

    def kill(self) -> None:
        """Kill sshd and every session it serves (the server dies mid-stream)."""
        if self.proc is None:
            return
        for pid in [*descendants(self.proc.pid), self.proc.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait()
        self.proc = None

    def config_toml(self, name: str = "ct200", **extra: object) -> str:
        lines = [
            f"[hosts.{name}]",
            'ssh = "root@127.0.0.1"'
            if os.geteuid() == 0
            else f'ssh = "{os.environ["USER"]}@127.0.0.1"',
            f"port = {self.port}",
            f'identity = "{self.client_key}"',
            f'known_hosts = "{self.known_hosts}"',
            "connect_timeout = 5",
        ]
        for key, value in extra.items():
            if isinstance(value, bool):
                lines.append(f"{key} = {'true' if value else 'false'}")
            elif isinstance(value, (int, float)):
                lines.append(f"{key} = {value}")
            else:
                lines.append(f'{key} = "{value}"')
        return "\n".join(lines) + "\n"
