"""Files the config names (identity, known_hosts, the outbox): refused at load when they
are not regular files, read bounded by the SSH transport, a missing one named.

The fault campaign's ``known_hosts = "/dev/zero"`` passed ``config check`` and grew
``snapshot`` to 17 GB of memory; a FIFO would hang the read.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from gpumon.backends.config import ConfigError, HostConfig, format_hosts, load_config
from gpumon.backends.config.files import FileRefused, read_bounded, regular_file
from gpumon.backends.config.schema import Invalid
from gpumon.backends.transport import TransportError
from gpumon.backends.transport.ssh import SshTransport


def refused(tmp_path: Path, text: str) -> ConfigError:
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    return caught.value


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ("[hosts.x]\nknown_hosts = {path}", "hosts.x.known_hosts"),
        ("[defaults]\nknown_hosts = {path}", "defaults.known_hosts"),
        ("[hosts.x]\nidentity = {path}", "hosts.x.identity"),
        ('[hosts.x]\nidentity = ["{ok}", {path}]', "hosts.x.identity"),
        ("[watch]\noutbox = {path}", "watch.outbox"),
    ],
)
@pytest.mark.parametrize(
    ("special", "kind"),
    [("/dev/zero", "a character device"), ("FIFO", "a FIFO"), ("DIR", "a directory")],
)
def test_a_named_file_that_is_not_a_regular_file_is_refused_at_load(
    tmp_path: Path, fifo: Path, table: str, key: str, special: str, kind: str
) -> None:
    target = {"FIFO": str(fifo), "DIR": str(tmp_path)}.get(special, special)
    ok = tmp_path / "id_ok"
    ok.write_text("key\n")
    err = refused(tmp_path, table.format(path=f'"{target}"', ok=ok) + "\n")
    assert err.key == key
    assert f"not a regular file ({kind})" in err.problem
    assert target[:40] in err.problem  # the file is named


def test_a_regular_file_or_a_missing_one_is_accepted_at_load(tmp_path: Path) -> None:
    """Missing: known_hosts is created on first use (accept_new), a key may be made later;
    the command that reads it names it (see the transport tests below)."""
    key = tmp_path / "id"
    key.write_text("key\n")
    link = tmp_path / "link"
    link.symlink_to(key)
    path = tmp_path / "config.toml"
    path.write_text(
        f'[hosts.x]\nidentity = ["{key}", "{link}"]\nknown_hosts = "{tmp_path / "kh"}"\n',
        encoding="utf-8",
    )
    host = load_config(path, env={}).hosts["x"]
    assert host.identity == (str(key), str(link))
    assert host.known_hosts == str(tmp_path / "kh")


def test_config_check_names_a_missing_identity_file(tmp_path: Path) -> None:
    key = tmp_path / "id"
    key.write_text("key\n")
    path = tmp_path / "config.toml"
    path.write_text(f'[hosts.x]\nidentity = ["{key}", "{tmp_path / "gone"}"]\n', "utf-8")
    listing = format_hosts(load_config(path, env={}))
    assert f"  identity         {key}, {tmp_path / 'gone'} (no such file)\n" in listing


def test_a_symlink_to_a_device_is_refused(tmp_path: Path) -> None:
    link = tmp_path / "kh"
    link.symlink_to("/dev/zero")
    with pytest.raises(Invalid, match=r"a character device"):
        regular_file(str(link))


def test_a_terminal_notifier_writes_to_a_terminal_or_a_file_never_a_fifo(
    tmp_path: Path, fifo: Path
) -> None:
    base = '[notify.desk]\nkind = "terminal"\ntty = '
    err = refused(tmp_path, f'{base}"{fifo}"\n')
    assert err.key == "notify.desk.tty"
    assert "not a terminal or a regular file (a FIFO)" in err.problem
    for ok in ("/dev/null", str(tmp_path / "capture"), str(tmp_path / "later")):
        (tmp_path / "capture").touch()
        path = tmp_path / "ok.toml"
        path.write_text(f'{base}"{ok}"\n', encoding="utf-8")
        assert load_config(path, env={}).notify_settings().notifiers["desk"].tty == ok


# --- reading bounded ---------------------------------------------------------------------


def test_read_bounded_reads_a_regular_file(tmp_path: Path) -> None:
    path = tmp_path / "known_hosts"
    path.write_bytes(b"h ssh-ed25519 AAAA\n")
    assert read_bounded(str(path), 100, "known_hosts") == b"h ssh-ed25519 AAAA\n"


@pytest.mark.parametrize(
    ("special", "says"),
    [
        ("/dev/zero", "known_hosts /dev/zero: not a regular file (a character device)"),
        ("FIFO", "not a regular file (a FIFO)"),  # opened without blocking, never read
        ("SOCKET", "not a regular file (a socket)"),
        ("MISSING", "no such file"),
        ("BIG", "larger than 1 MiB; not read"),
    ],
)
def test_read_bounded_refuses_what_it_would_not_finish(
    tmp_path: Path, fifo: Path, special: str, says: str
) -> None:
    path = {"FIFO": str(fifo), "MISSING": str(tmp_path / "nope")}.get(special, special)
    if special == "BIG":
        path = str(tmp_path / "big")
        Path(path).write_bytes(b"x" * ((1 << 20) + 1))
    if special == "SOCKET":
        path = str(tmp_path / "sock")
        server = socket.socket(socket.AF_UNIX)
        server.bind(path)
    try:
        with pytest.raises(FileRefused) as caught:
            read_bounded(path, 1 << 20, "known_hosts")
    finally:
        if special == "SOCKET":
            server.close()
    assert says in str(caught.value)
    assert str(caught.value).startswith(f"known_hosts {path}")


# --- the SSH transport reads them itself -----------------------------------------------


def ssh_host(identity: str | None, known_hosts: str) -> HostConfig:
    # Port 9 on 127.0.0.1: nothing is reached, the files are read before any connection.
    return HostConfig(
        name="x",
        kind="ssh",
        ssh_host="127.0.0.1",
        port=9,
        identity=() if identity is None else (identity,),
        known_hosts=known_hosts,
    )


async def test_a_missing_identity_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "id_gone"
    transport = SshTransport(ssh_host(str(missing), str(tmp_path / "known_hosts")))
    with pytest.raises(TransportError) as caught:
        await transport.connect()
    assert f"identity {missing}: no such file" in str(caught.value)
    assert caught.value.permanent  # a config problem: no point retrying every few seconds


@pytest.mark.parametrize("key", ["known_hosts", "identity"])
async def test_a_device_that_slipped_past_load_is_not_read(tmp_path: Path, key: str) -> None:
    """The file is checked again where it is read (it may have changed since the load)."""
    if key == "known_hosts":
        host = ssh_host(None, "/dev/zero")
    else:
        host = ssh_host("/dev/zero", str(tmp_path / "known_hosts"))
    transport = SshTransport(host)
    with pytest.raises(TransportError) as caught:
        await transport.connect()
    assert f"{key} /dev/" in str(caught.value) and "not a regular file" in str(caught.value)
