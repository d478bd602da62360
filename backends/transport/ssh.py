"""SSH transport on asyncssh: one verified connection per host, multiplexed channels.

Honours ``~/.ssh/config`` (aliases, User, Port, IdentityFile, ProxyJump), the SSH agent
and configured identities. Host keys are always verified: an unknown key is refused with
its fingerprint and how to trust it, unless ``accept_new`` asks for trust on first use,
in which case it is recorded in known_hosts. A *changed* key is always refused.

asyncssh is imported lazily so ``gpumon --help`` and the demo never pay for it, and always
through ``_quiet_asyncssh`` first (cryptography's DSA deprecation, below).
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import re
import socket
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpumon.backends.config.files import (
    IDENTITY_MAX,
    KNOWN_HOSTS_MAX,
    FileRefused,
    read_bounded,
)
from gpumon.backends.config.load import COMMAND_LINE, HostConfig
from gpumon.backends.transport.base import ProcessStream, Transport, TransportError, ssh_command

if TYPE_CHECKING:
    import asyncssh

KEEPALIVE_S = 5.0  # an idle dead link is closed after KEEPALIVE_S * (KEEPALIVE_COUNT + 1)
KEEPALIVE_COUNT = 3
# A probed link (``probe_link``: its stream went quiet): a keepalive every LINK_PROBE_S
# while nothing comes, closed after LINK_PROBE_COUNT unanswered (about 1.5 s).
LINK_PROBE_S = 0.5
LINK_PROBE_COUNT = 2
# A killed command's channel is waited for this long. OpenSSH keeps a session's channel
# open until its command exits (session.c, session_close_by_channel: "has child"), and
# a root login's command cannot be signalled before 10.0p1 (below): one stuck in a read
# would hold a closing stream for good.
CLOSE_WAIT_S = 2.0


def _quiet_asyncssh() -> None:
    """Silence cryptography's DSA deprecation for asyncssh's own modules, before asyncssh is
    imported. cryptography 51 deprecates DSA, and importing asyncssh 2.24.1 then prints ten
    ``CryptographyDeprecationWarning`` lines on stderr (every SSH command, and the first
    lines of ``watch --log-format json``). The lock holds cryptography below 51 (the cause);
    this covers an environment that installed a newer one beside gpumon. Only that category,
    raised from asyncssh's modules: every other warning still shows."""
    from cryptography.utils import CryptographyDeprecationWarning

    warnings.filterwarnings(
        "ignore", category=CryptographyDeprecationWarning, module=r"asyncssh(\.|$)"
    )


def default_known_hosts() -> Path:
    return Path.home() / ".ssh" / "known_hosts"


def _known_hosts_entry(host: str, port: int | None, key: asyncssh.SSHKey) -> str:
    pattern = host if port in (None, 22) else f"[{host}]:{port}"
    algo, data = key.export_public_key("openssh").decode().split()[:2]
    return f"{pattern} {algo} {data}\n"


def _read_known_hosts(path: Path) -> str:
    """The known_hosts file's text ("" when it does not exist yet), read bounded: asyncssh
    would read a path to its end (``/dev/zero``: until memory runs out)."""
    if not path.exists():
        return ""
    return read_bounded(str(path), KNOWN_HOSTS_MAX, "known_hosts").decode("utf-8", "replace")


def _client_keys(paths: Sequence[str]) -> list[tuple[bytes, bytes | None]]:
    """Each identity file (and its ``-cert.pub`` when there is one), read bounded, as the
    (key, certificate) pairs asyncssh takes instead of paths it would read unbounded."""
    keys: list[tuple[bytes, bytes | None]] = []
    for path in paths:
        key = read_bounded(path, IDENTITY_MAX, "identity")
        cert = None
        if os.path.exists(path + "-cert.pub"):
            cert = read_bounded(path + "-cert.pub", IDENTITY_MAX, "identity certificate")
        keys.append((key, cert))
    return keys


def _client_factory(
    host_cfg: HostConfig, known_hosts: Path, trusted: asyncssh.SSHKnownHosts
) -> tuple[Any, dict[str, Any]]:
    """An asyncssh client class that records (and, with accept_new, trusts) an unknown key;
    ``trusted`` is the known_hosts file as read for this connection."""
    _quiet_asyncssh()
    import asyncssh

    seen: dict[str, Any] = {}

    class Client(asyncssh.SSHClient):
        def validate_host_public_key(
            self, host: str, addr: str, port: int, key: asyncssh.SSHKey
        ) -> bool:
            seen.update(host=host, addr=addr, port=port, key=key)
            known: Sequence[Any] = trusted.match(host, addr, port)[0]
            seen["conflict"] = bool(known)
            if known or not host_cfg.accept_new:
                return False
            known_hosts.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with known_hosts.open("a") as f:
                f.write(_known_hosts_entry(host, port, key))
            seen["recorded"] = True
            return True

    return Client, seen


def _host_key_message(host_cfg: HostConfig, seen: dict[str, Any], known_hosts: Path) -> str:
    key = seen.get("key")
    if key is None:
        return f"host key of {host_cfg.describe()} could not be verified"
    host, port = seen["host"], seen["port"]
    fp = key.get_fingerprint("sha256")
    where = host if port in (None, 22) else f"{host}:{port}"
    if seen.get("conflict"):
        return (
            f"HOST KEY CHANGED for {where}: offered {key.get_algorithm()} {fp} does not match "
            f"{known_hosts}. This may be a man-in-the-middle attack; if the host was really "
            f"reinstalled, remove its old line from {known_hosts} and connect again."
        )
    scan = f"ssh-keyscan{'' if port in (None, 22) else f' -p {port}'} {host}"
    return (
        f"unknown host key for {where}: {key.get_algorithm()} {fp}. If that is the host's "
        f"key, trust it with `{scan} >> {known_hosts}`, or set accept_new = true for this "
        f"host to record it on first use."
    )


class SshTransport(Transport):
    """Commands over one SSH connection; at most MAX_CHANNELS channels at once."""

    def __init__(self, host: HostConfig) -> None:
        super().__init__(host)
        self._conn: asyncssh.SSHClientConnection | None = None
        self._lock = asyncio.Lock()
        self._connected_once = False  # a name that resolved once may be a DNS outage later

    @property
    def known_hosts(self) -> Path:
        return Path(self.host.known_hosts) if self.host.known_hosts else default_known_hosts()

    async def connect(self) -> None:
        async with self._lock:
            if self._conn is not None and not self._conn.is_closed():
                return
            self._conn = await self._connect()
            self._connected_once = True

    def probe_link(self) -> bool:
        """asyncssh's keepalive, quickened: a request every LINK_PROBE_S while nothing is
        received, the connection closed (with every channel on it) when LINK_PROBE_COUNT
        go unanswered; a link that answers keeps its session."""
        conn = self._conn
        if conn is None or conn.is_closed():
            return False
        conn.set_keepalive(LINK_PROBE_S, LINK_PROBE_COUNT)
        return True

    def link_answered(self) -> None:
        conn = self._conn
        if conn is not None and not conn.is_closed():
            conn.set_keepalive(KEEPALIVE_S, KEEPALIVE_COUNT)

    def link_lost(self) -> bool:
        return self._conn is not None and self._conn.is_closed()

    async def reachable(self, timeout: float) -> bool | None:
        """A TCP connect to the SSH port (no SSH traffic). A host only known to the SSH
        config by an alias may not resolve here: then it reads as unreachable, and the
        reconnect loop simply keeps its backoff."""
        target = self.host.ssh_host or self.host.name
        try:
            async with asyncio.timeout(timeout):
                _, writer = await asyncio.open_connection(target, self.host.port or 22)
        except (OSError, TimeoutError):
            return False
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return True

    async def _connect(self) -> asyncssh.SSHClientConnection:
        h = self.host
        known_hosts = self.known_hosts
        try:  # read here, bounded, and handed to asyncssh as data
            known_text = _read_known_hosts(known_hosts)
            identities = _client_keys([os.path.expanduser(p) for p in h.identity])
        except FileRefused as e:
            raise TransportError(f"cannot connect to {h.describe()}: {e}", permanent=True) from e

        _quiet_asyncssh()
        import asyncssh

        # An empty trust set when there is no file: every key is then "unknown" and goes
        # through validate_host_public_key (refused, or recorded with accept_new).
        trusted = asyncssh.import_known_hosts(known_text)
        client, seen = _client_factory(h, known_hosts, trusted)
        kwargs: dict[str, Any] = {
            "connect_timeout": h.connect_timeout,
            "keepalive_interval": KEEPALIVE_S,
            "keepalive_count_max": KEEPALIVE_COUNT,
            "client_factory": client,
            "known_hosts": trusted,
        }
        if h.user:
            kwargs["username"] = h.user
        if h.port:
            kwargs["port"] = h.port
        if identities:
            kwargs["client_keys"] = identities
        ssh_config = os.environ.get("GPUMON_SSH_CONFIG")
        if ssh_config is not None:  # tests point this at an empty file
            kwargs["config"] = [ssh_config] if ssh_config else []
        target = h.ssh_host or h.name
        try:
            return await asyncssh.connect(target, **kwargs)
        except asyncssh.HostKeyNotVerifiable as e:
            raise TransportError(_host_key_message(h, seen, known_hosts), permanent=True) from e
        except asyncssh.PermissionDenied as e:
            who = f"{h.user + '@' if h.user else ''}{target}"
            raise TransportError(
                f"authentication refused by {who}: {e.reason or 'permission denied'} "
                "(check identity / ssh-agent / authorized_keys)",
                permanent=True,
            ) from e
        except TimeoutError as e:
            raise TransportError(f"no answer from {target} within {h.connect_timeout:g} s") from e
        except OSError as e:
            if name_unknown(e) and not self._connected_once:
                raise TransportError(unresolved_message(h, e), final=True) from e
            port = f" port {h.port}" if h.port else ""
            text = f"cannot connect to {target}{port}: {os_reason(e)}"
            if os_reason(e) == "connection refused":
                text += refused_hint(h)
            raise TransportError(text) from e
        except asyncssh.Error as e:
            raise TransportError(f"SSH to {target} failed: {e.reason}") from e

    async def open_stream(self, argv: Sequence[str]) -> ProcessStream:
        return await self._start(ssh_command(argv, self.host.container))

    async def open_host_stream(self, argv: Sequence[str]) -> ProcessStream:
        """On the SSH host itself, outside ``pct exec``."""
        return await self._start(ssh_command(argv, None))

    async def _start(self, command: str) -> ProcessStream:
        _quiet_asyncssh()
        import asyncssh

        await self.connect()
        conn = self._conn
        assert conn is not None
        await self._channels.acquire()
        try:
            proc = await conn.create_process(command, encoding=None)
        except (asyncssh.Error, OSError) as e:
            self._channels.release()
            self._conn = None
            raise TransportError(f"SSH channel to {self.host.name} failed: {e}") from e

        async def wait() -> int | None:
            await proc.wait()
            return proc.exit_status

        def kill() -> None:
            # Closing the channel alone leaves the command running on the target (sshd
            # only closes its pipes: one stuck in a read never notices). A "signal"
            # request first: OpenSSH answers it with killpg() on the session's process
            # group (session.c, session_signal_req, from 7.9p1), but refuses it before
            # 10.0p1 where the session has no privilege separation, as a root login
            # has not (sshd.c, privsep_postauth). Commands that may hang are bounded on
            # the target too (the bundle's `timeout`).
            with contextlib.suppress(Exception):
                proc.send_signal("KILL")
            proc.close()

        return ProcessStream(
            proc.stdout,
            proc.stdin,
            proc.stderr,
            wait,
            kill,
            self._channels.release,
            reap_s=CLOSE_WAIT_S,
        )

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.wait_closed(), 2.0)


def name_unknown(error: OSError) -> bool:
    """Whether ``error`` is the resolver saying the name does not exist (EAI_NONAME,
    EAI_NODATA): not a temporary failure (EAI_AGAIN), which a retry may get past."""
    codes = {getattr(socket, n) for n in ("EAI_NONAME", "EAI_NODATA") if hasattr(socket, n)}
    return isinstance(error, socket.gaierror) and error.errno in codes


def _tried(h: HostConfig) -> str:
    """Who connects where: ``user root, port 22`` (this machine's user and port 22 when
    the host sets neither and the ssh config does not either)."""
    user = h.user or f"{getpass.getuser()} (unless the ssh config says)"
    port = h.port or 22
    return f"user {user}, port {port}"


def unresolved_message(h: HostConfig, error: OSError) -> str:
    """The first connection's "no such name", with what was tried and where to look."""
    target = h.ssh_host or h.name
    if h.source == COMMAND_LINE:
        where = "from the command line"
    else:
        where = f"[hosts.{h.name}] in {h.source}"
    text = f"cannot resolve {target}: {os_reason(error)} (tried ssh {target}: {_tried(h)}; {where})"
    if h.config_note:
        text += f"; {h.config_note}"
    return text + "; not retried: fix the name, then start gpumon again"


def refused_hint(h: HostConfig) -> str:
    """What to check when nothing listens on the SSH port."""
    target = h.ssh_host or h.name
    port = h.port or 22
    key = "the host's `port` key" if h.source != COMMAND_LINE else f"the port ({target}:PORT)"
    return f": is sshd running on {target} port {port}? check {key}"


def os_reason(error: OSError) -> str:
    """An OSError in words, one sentence: "connection refused", "name or service not
    known", never asyncio's "Connect call failed ('127.0.0.1', 22)" or its "Multiple
    exceptions: [Errno 111] ..., [Errno 99] ..." listing (the first errno said once)."""
    code = error.errno
    if code is None:
        found = re.search(r"\[Errno (\d+)\]", str(error))
        code = int(found.group(1)) if found else None
    if code is not None and code > 0:
        return os.strerror(code).lower()
    text = str(error.strerror or error) or type(error).__name__
    return text[:1].lower() + text[1:]
