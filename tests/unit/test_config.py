"""The config file: where it is found, what it accepts, what it refuses and how it says so."""

from __future__ import annotations

import dataclasses
import re
import tempfile
from pathlib import Path
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumon.backends.actions.plan import JobTarget
from gpumon.backends.config import Invalid
from gpumon.backends.config.load import (
    HOST_KEYS,
    HOST_SETTINGS,
    Config,
    ConfigError,
    HostConfig,
    config_path,
    format_hosts,
    load_config,
    resolve_host,
)
from gpumon.backends.config.schema import KeySpec, check_table
from gpumon.backends.transport.base import Transport


def write(tmp_path: Path, text: str, name: str = "config.toml") -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def load(tmp_path: Path, text: str) -> Config:
    return load_config(write(tmp_path, text), env={})


def refusal(tmp_path: Path, text: str) -> tuple[Path, ConfigError]:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    return path, caught.value


# --- where the file is -------------------------------------------------------------------


def test_explicit_path_beats_environment() -> None:
    env = {"GPUMON_CONFIG": "/env/c.toml", "XDG_CONFIG_HOME": "/xdg", "HOME": "/home/u"}
    assert config_path("/cli/c.toml", env) == (Path("/cli/c.toml"), "--config")
    assert config_path(Path("rel.toml"), env) == (Path("rel.toml"), "--config")


def test_gpumon_config_beats_xdg() -> None:
    env = {"GPUMON_CONFIG": "/env/c.toml", "XDG_CONFIG_HOME": "/xdg"}
    assert config_path(None, env) == (Path("/env/c.toml"), "$GPUMON_CONFIG")


def test_xdg_config_home_then_home_dot_config() -> None:
    assert config_path(None, {"XDG_CONFIG_HOME": "/xdg", "HOME": "/home/u"}) == (
        Path("/xdg/gpumon/config.toml"),
        "XDG default",
    )
    expected = (Path("/home/u/.config/gpumon/config.toml"), "XDG default")
    assert config_path(None, {"HOME": "/home/u"}) == expected
    # Empty values count as unset; a relative XDG_CONFIG_HOME is ignored (XDG spec).
    assert config_path(None, {"HOME": "/home/u", "GPUMON_CONFIG": ""}) == expected
    assert config_path(None, {"HOME": "/home/u", "XDG_CONFIG_HOME": "rel"}) == expected


def test_tilde_in_named_paths_is_expanded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/tilde")
    assert config_path("~/c.toml", {})[0] == Path("/home/tilde/c.toml")
    assert config_path(None, {"GPUMON_CONFIG": "~/e.toml"})[0] == Path("/home/tilde/e.toml")


def test_empty_explicit_path_is_refused() -> None:
    with pytest.raises(ConfigError, match="--config: expected a file path"):
        config_path("", {})


def test_load_reads_the_file_precedence_picks(tmp_path: Path) -> None:
    cli = write(tmp_path, "[hosts.from_cli]\n", "cli.toml")
    env_file = write(tmp_path, "[hosts.from_env]\n", "env.toml")
    write(tmp_path, "[hosts.from_xdg]\n", "xdg/gpumon/config.toml")
    env = {"GPUMON_CONFIG": str(env_file), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}

    assert list(load_config(cli, env).hosts) == ["from_cli"]
    assert list(load_config(None, env).hosts) == ["from_env"]
    del env["GPUMON_CONFIG"]
    config = load_config(None, env)
    assert list(config.hosts) == ["from_xdg"]
    assert config.path == tmp_path / "xdg/gpumon/config.toml"
    assert config.reason == "XDG default"


def test_missing_default_file_is_an_empty_config(tmp_path: Path) -> None:
    config = load_config(None, {"XDG_CONFIG_HOME": str(tmp_path)})
    assert config.path is None
    assert config.hosts == {}
    assert config.searched == tmp_path / "gpumon/config.toml"
    assert config.defaults["interval"] == 1.0


@pytest.mark.parametrize("how", ["--config", "$GPUMON_CONFIG"])
def test_missing_named_file_is_an_error(tmp_path: Path, how: str) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as caught:
        if how == "--config":
            load_config(missing, env={})
        else:
            load_config(None, env={"GPUMON_CONFIG": str(missing)})
    assert str(caught.value) == f"{missing}: no such file (named by {how})"


def test_unreadable_and_non_utf8_files_are_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"^{re.escape(str(tmp_path))}: cannot read"):
        load_config(tmp_path, env={})
    latin = tmp_path / "latin.toml"
    latin.write_bytes(b'[hosts.x]\npython = "/caf\xe9"\n')
    with pytest.raises(ConfigError, match=r"latin\.toml: not UTF-8 text"):
        load_config(latin, env={})


def test_toml_syntax_error_names_file_line_and_column(tmp_path: Path) -> None:
    path, err = refusal(tmp_path, '[hosts.ct200]\nssh = "root@pve1"\ninterval = \n')
    assert str(err).startswith(f"{path}: invalid TOML: ")
    assert str(err).count("line 3") == 1
    assert "column" in str(err)
    assert err.source == str(path) and err.line == 3


def test_a_refused_key_names_its_line(tmp_path: Path) -> None:
    """A value the schema refuses (tomllib keeps no positions) is found in the text: the
    key's own line, a key inside an inline table by the table's line, a missing key by its
    table's header; quoted names and comments do not mislead the search."""
    text = (
        "# gpumon\n"
        "[defaults]\n"
        "interval = 2\n"
        "\n"
        '[hosts."gpu1"]  # quoted\n'
        'ssh = "root@gpu1"\n'
        'port = "22"\n'
    )
    path, err = refusal(tmp_path, text)
    expected = 'expected an integer port 1..65535, got "22"'
    assert str(err) == f"{path}: hosts.gpu1.port: {expected} (line 7)"
    assert err.line == 7
    _, err = refusal(tmp_path, "[hosts.gpu1]\nssh = 'a'\nintervall = 2\n")
    assert err.key == "hosts.gpu1.intervall" and err.line == 3
    _, err = refusal(tmp_path, text.replace('"gpu1"', '"gpu 1"'))  # not a host name
    assert err.key == 'hosts."gpu 1"' and err.line == 5
    _, err = refusal(tmp_path, "[hosts.a]\nssh = 'a'\n\n[fleet.lab]\nrefresh = 5\n")
    assert err.key == "fleet.lab.prometheus" and err.line == 4, str(err)  # missing: its table
    fleet = '[fleet.lab]\nprometheus = "http://p:9090"\nbasic_auth = { user = 1 }\n'
    _, err = refusal(tmp_path, fleet)
    assert err.key is not None and err.key.startswith("fleet.lab.basic_auth") and err.line == 3


# --- what it accepts -------------------------------------------------------------------


def test_every_host_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/op")
    config = load(
        tmp_path,
        """
        [hosts.ct200]
        ssh = "root@pve1"
        port = 2222
        identity = "~/.ssh/id_ed25519"
        known_hosts = "~/.ssh/gpumon_known_hosts"
        accept_new = true
        container = 200
        python = "/root/venv/bin/python"
        nvidia_smi = "/usr/bin/nvidia-smi"
        interval = 2
        connect_timeout = 3.5
        read_only = true
        """,
    )
    host = config.hosts["ct200"]
    assert host == HostConfig(
        name="ct200",
        kind="ssh",
        ssh_host="pve1",
        user="root",
        port=2222,
        identity=("/home/op/.ssh/id_ed25519",),
        known_hosts="/home/op/.ssh/gpumon_known_hosts",
        accept_new=True,
        container=200,
        python="/root/venv/bin/python",
        nvidia_smi="/usr/bin/nvidia-smi",
        interval=2.0,
        connect_timeout=3.5,
        read_only=True,
        source=str(tmp_path / "config.toml"),
    )
    assert isinstance(host.interval, float)
    assert host.describe() == "ssh root@pve1:2222 -> pct exec 200"


def test_minimal_host_gets_builtin_defaults_and_its_name_as_ssh_target(tmp_path: Path) -> None:
    host = load(tmp_path, "[hosts.gpu1]\n").hosts["gpu1"]
    assert (host.ssh_host, host.user, host.port, host.container) == ("gpu1", None, None, None)
    assert (host.identity, host.known_hosts, host.accept_new) == ((), None, False)
    assert (host.python, host.nvidia_smi, host.read_only) == (None, "nvidia-smi", False)
    assert (host.interval, host.connect_timeout) == (1.0, 10.0)
    assert host.describe() == "ssh gpu1"


def test_other_accepted_spellings(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        """
        [hosts.a]
        ssh = "admin@[fe80::1%eth0]:2200"
        identity = ["/k/one", "/k/two"]
        container = "201"
        [hosts."gpu.lab"]
        ssh = "10.0.0.5:22"
        identity = []
        """,
    )
    a = config.hosts["a"]
    assert (a.user, a.ssh_host, a.port) == ("admin", "fe80::1%eth0", 2200)
    assert a.identity == ("/k/one", "/k/two")
    assert a.container == 201
    assert a.describe() == "ssh admin@[fe80::1%eth0]:2200 -> pct exec 201"
    lab = config.hosts["gpu.lab"]
    assert (lab.ssh_host, lab.port, lab.identity) == ("10.0.0.5", 22, ())


def test_defaults_apply_to_every_host_and_hosts_override(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        """
        [defaults]
        interval = 5
        read_only = true
        container = 200
        port = 2200
        identity = "/keys/ops"

        [hosts.inherits]
        ssh = "root@pve1"

        [hosts.overrides]
        ssh = "root@pve2:22"
        interval = 0.5
        read_only = false
        identity = ["/keys/other"]

        [hosts.port_key]
        port = 2022
        """,
    )
    inherits, overrides = config.hosts["inherits"], config.hosts["overrides"]
    assert (inherits.interval, inherits.read_only, inherits.container) == (5.0, True, 200)
    assert (inherits.port, inherits.identity) == (2200, ("/keys/ops",))
    assert (overrides.interval, overrides.read_only, overrides.container) == (0.5, False, 200)
    assert (overrides.port, overrides.identity) == (22, ("/keys/other",))
    assert config.hosts["port_key"].port == 2022
    assert config.defaults["interval"] == 5.0
    assert config.defaults["nvidia_smi"] == "nvidia-smi"


def test_port_in_ssh_and_a_different_port_key_conflict(tmp_path: Path) -> None:
    path, err = refusal(tmp_path, '[hosts.x]\nssh = "h:2222"\nport = 22\n')
    assert str(err).startswith(f"{path}: hosts.x.port: 22 conflicts with port 2222")
    assert load(tmp_path, '[hosts.x]\nssh = "h:22"\nport = 22\n').hosts["x"].port == 22


# --- what it refuses, and how it says so -----------------------------------------------

SECONDS = "expected a number of seconds between 0.1 and 3600"
PORT = "expected an integer port 1..65535"
CT = "expected a Proxmox container id"
SSH = "expected an SSH target"


@pytest.mark.parametrize(
    ("text", "key", "says"),
    [
        # unknown keys, everywhere
        ('colour = "red"\n', "colour", "unknown key; expected one of: defaults, fleet, hosts"),
        ('[host.x]\nssh = "h"\n', "host", 'unknown key (did you mean "hosts"?)'),
        ("[hosts.ct200]\nintervl = 2\n", "hosts.ct200.intervl", 'did you mean "interval"'),
        ('[defaults]\nssh = "root@h"\n', "defaults.ssh", "unknown key"),
        ('[hosts.gpu1.lab]\nssh = "h"\n', "hosts.gpu1.lab", "unknown key"),
        # wrong types, bool is not an int
        ('[hosts.ct200]\ninterval = "fast"\n', "hosts.ct200.interval", f'{SECONDS}, got "fast"'),
        ("[hosts.x]\ninterval = true\n", "hosts.x.interval", f"{SECONDS}, got true"),
        ("[hosts.x]\nport = true\n", "hosts.x.port", f"{PORT}, got true"),
        ("[hosts.x]\nport = 22.0\n", "hosts.x.port", f"{PORT}, got 22.0"),
        ('[hosts.x]\nport = "22"\n', "hosts.x.port", f'{PORT}, got "22"'),
        (
            '[hosts.x]\naccept_new = "yes"\n',
            "hosts.x.accept_new",
            'expected true or false, got "yes"',
        ),
        ("[hosts.x]\nread_only = 1\n", "hosts.x.read_only", "expected true or false, got 1"),
        ("[hosts.x]\ncontainer = true\n", "hosts.x.container", f"{CT}"),
        ("[hosts.x]\ncontainer = 200.0\n", "hosts.x.container", "got 200.0"),
        ("[hosts.x]\nidentity = 5\n", "hosts.x.identity", "expected a key file path or a list"),
        ('[hosts.x]\nidentity = ["/k", 3]\n', "hosts.x.identity", 'got ["/k", 3]'),
        ("[hosts.x]\nknown_hosts = 3\n", "hosts.x.known_hosts", "expected a known_hosts file"),
        ("[hosts.x]\nnvidia_smi = 7\n", "hosts.x.nvidia_smi", "expected a non-empty path"),
        ("[hosts.x]\nssh = 5\n", "hosts.x.ssh", f"{SSH}"),
        ("[hosts.x]\nssh = { host = 'h' }\n", "hosts.x.ssh", "got a table"),
        ("hosts = 5\n", "hosts", "expected [hosts.NAME] tables, got 5"),
        ('[hosts]\nx = "root@h"\n', "hosts.x", 'expected a table of host settings, got "root@h"'),
        ("defaults = 3\n", "defaults", "expected a [defaults] table, got 3"),
        # out of range / bad values
        ("[hosts.x]\ninterval = 0.05\n", "hosts.x.interval", f"{SECONDS}, got 0.05"),
        ("[hosts.x]\ninterval = 3601\n", "hosts.x.interval", f"{SECONDS}, got 3601"),
        ("[hosts.x]\ninterval = nan\n", "hosts.x.interval", f"{SECONDS}, got nan"),
        ("[hosts.x]\nconnect_timeout = 0\n", "hosts.x.connect_timeout", f"{SECONDS}, got 0"),
        ('[defaults]\ninterval = "x"\n', "defaults.interval", f'{SECONDS}, got "x"'),
        ("[hosts.x]\nport = 0\n", "hosts.x.port", f"{PORT}, got 0"),
        ("[hosts.x]\nport = 65536\n", "hosts.x.port", f"{PORT}, got 65536"),
        ("[hosts.x]\ncontainer = 99\n", "hosts.x.container", f"{CT}: an integer 100..999999999"),
        ("[hosts.x]\ncontainer = 1000000000\n", "hosts.x.container", "got 1000000000"),
        (
            '[hosts.x]\ncontainer = "abc"\n',
            "hosts.x.container",
            f'{CT}: an integer 100..999999999 or a string of digits, got "abc"',
        ),
        ('[hosts.x]\ncontainer = "20x"\n', "hosts.x.container", 'got "20x"'),
        ('[hosts.x]\nidentity = ""\n', "hosts.x.identity", 'got ""'),
        ('[hosts.x]\npython = ""\n', "hosts.x.python", "expected a non-empty path or program name"),
        ('[hosts.x]\npython = "-c"\n', "hosts.x.python", "not starting with '-'"),
        ('[hosts.x]\npython = "py\\nthon"\n', "hosts.x.python", r'got "py\nthon"'),
        # bad SSH targets and host names
        ('[hosts.x]\nssh = "root@host:99999"\n', "hosts.x.ssh", "port 99999"),
        ('[hosts.x]\nssh = "bad host"\n', "hosts.x.ssh", f"{SSH}: user@host[:port]"),
        ('[hosts.x]\nssh = "-oProxyCommand=sh"\n', "hosts.x.ssh", SSH),
        ('[hosts.x]\nssh = "root@"\n', "hosts.x.ssh", SSH),
        ('[hosts.x]\nssh = "h;reboot"\n', "hosts.x.ssh", SSH),
        ('[hosts.x]\nssh = "[1:2:3]:22"\n', "hosts.x.ssh", SSH),
        ("[hosts.demo]\n", "hosts.demo", '"demo" is a built-in host'),
        ("[hosts.local]\n", "hosts.local", '"local" is a built-in host'),
        ('[hosts."bad name"]\n', 'hosts."bad name"', "expected a host name of letters"),
        ("[hosts.-oops]\n", "hosts.-oops", "expected a host name"),
    ],
)
def test_refusals_name_file_key_and_expectation(
    tmp_path: Path, text: str, key: str, says: str
) -> None:
    path, err = refusal(tmp_path, text)
    assert str(err).startswith(f"{path}: {key}: "), str(err)
    assert says in str(err)
    assert (err.source, err.key) == (str(path), key)


def test_the_issue_example_message_exactly(tmp_path: Path) -> None:
    path, err = refusal(tmp_path, '[hosts.ct200]\nssh = "root@pve1"\ninterval = "fast"\n')
    expected = 'expected a number of seconds between 0.1 and 3600, got "fast"'
    assert str(err) == f"{path}: hosts.ct200.interval: {expected} (line 3)"


# --- names on the command line -----------------------------------------------------------

EMPTY = Config(path=None)


@pytest.mark.parametrize(
    ("name", "user", "ssh_host", "port", "describe"),
    [
        ("root@10.0.0.5:2222", "root", "10.0.0.5", 2222, "ssh root@10.0.0.5:2222"),
        ("[::1]:2200", None, "::1", 2200, "ssh [::1]:2200"),
        ("alias", None, "alias", None, "ssh alias"),
        ("user@alias", "user", "alias", None, "ssh user@alias"),
        ("gpu1.lab:22", None, "gpu1.lab", 22, "ssh gpu1.lab:22"),
        ("op@[2001:db8::7]", "op", "2001:db8::7", None, "ssh op@[2001:db8::7]"),
    ],
)
def test_ad_hoc_ssh_targets(
    name: str, user: str | None, ssh_host: str, port: int | None, describe: str
) -> None:
    host = resolve_host(EMPTY, name)
    assert (host.name, host.kind, host.source) == (name, "ssh", "command line")
    assert (host.user, host.ssh_host, host.port) == (user, ssh_host, port)
    assert host.describe() == describe


def test_ad_hoc_targets_get_the_defaults(tmp_path: Path) -> None:
    config = load(tmp_path, "[defaults]\ncontainer = 200\ninterval = 2\nport = 2022\n")
    host = resolve_host(config, "root@pve1")
    assert (host.container, host.interval, host.port) == (200, 2.0, 2022)
    assert host.describe() == "ssh root@pve1:2022 -> pct exec 200"
    assert resolve_host(config, "root@pve1:22").port == 22


def test_configured_names_win(tmp_path: Path) -> None:
    config = load(tmp_path, '[hosts.ct200]\nssh = "root@pve1"\ncontainer = 200\n')
    assert resolve_host(config, "ct200") is config.hosts["ct200"]
    assert resolve_host(config, "ct200").source == str(tmp_path / "config.toml")


def test_builtins_demo_and_local(tmp_path: Path) -> None:
    config = load(tmp_path, "[defaults]\ninterval = 3\ncontainer = 200\nport = 2022\n")
    demo, local = resolve_host(config, "demo"), resolve_host(config, "local")
    assert (demo.kind, demo.describe(), demo.ssh_host) == ("demo", "simulator", None)
    assert (local.kind, local.describe(), local.ssh_host) == ("local", "local", None)
    # Settings about the GPU reading apply; SSH and container settings do not.
    assert demo.interval == local.interval == 3.0
    assert demo.container is local.container is None
    assert demo.port is local.port is None


@pytest.mark.parametrize(
    "name",
    [
        "",
        " ",
        "host name",
        "host;rm -rf /",
        "$(reboot)",
        "`id`",
        "-oProxyCommand=sh",
        "a|b",
        "a&b",
        "a>b",
        "user@",
        "@host",
        "host:",
        ":22",
        "a..b",
        ".host",
        "host:0",
        "host:70000",
        "user@@host",
        "host\n",
        "[::1",
        "[nothost]:22",
        "::1:22x",
        "u@h:22:33",
        "~root",
    ],
)
def test_hostile_or_empty_names_are_refused(name: str) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve_host(EMPTY, name)
    assert str(caught.value).startswith("command line: host ")
    assert "not a configured host (no config file), demo or local" in str(caught.value)
    assert caught.value.source == "command line"


def test_refused_port_says_why() -> None:
    with pytest.raises(ConfigError, match=r'port 70000 in "h:70000" is out of range'):
        resolve_host(EMPTY, "h:70000")


def test_refusal_names_the_config_searched(tmp_path: Path) -> None:
    config = load(tmp_path, "[hosts.ct200]\n")
    with pytest.raises(ConfigError, match=f"not a configured host in {re.escape(str(tmp_path))}"):
        resolve_host(config, "ct 200")


# --- showing -----------------------------------------------------------------------------


def test_format_hosts_lists_every_resolved_value(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        '[hosts.ct200]\nssh = "root@pve1:22"\ncontainer = 200\ninterval = 0.5\n'
        '[hosts.gpu2]\nidentity = ["/k/a", "/k/b"]\nread_only = true\n',
    )
    text = format_hosts(config)
    assert text.splitlines()[0] == f"config: {tmp_path / 'config.toml'} (--config)"
    assert "[hosts.ct200]  ssh root@pve1:22 -> pct exec 200" in text
    assert "[hosts.gpu2]  ssh gpu2" in text
    for f in dataclasses.fields(HostConfig):
        if f.name != "alerts":  # a table of its own under each host
            assert text.count(f"  {f.name} ") == 2, f.name
    assert len(re.findall(r"\n  alerts\n    memory_warning_pct +95\.0\n", text)) == 2
    assert "AlertRules(" not in text and "JobConfig(" not in text  # tables, not reprs
    assert "  interval         0.5 s" in text
    assert "  identity         /k/a (no such file), /k/b (no such file)" in text
    assert "  read_only        true" in text
    assert "  python           (try python3)" in text


def test_format_hosts_shows_jobs_and_sglang_as_tables(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        '[hosts.ct200]\n[hosts.ct200.sglang]\nports = "30000-30001"\n'
        '[hosts.ct200.jobs.drafter]\ngpus = [5, 6]\nstart = "python train.py"\n'
        'env = { CUDA_VISIBLE_DEVICES = "5,6" }\n',
    )
    lines = format_hosts(config).splitlines()
    at = lines.index("  jobs.drafter")
    # the column fits the longest job key, expect_tokens_per_s
    assert lines[at + 1 : at + 3] == ["    gpus                 5, 6", "    log                  -"]
    assert "    env                  CUDA_VISIBLE_DEVICES=5,6" in lines
    assert "    params               -" in lines
    at = lines.index("  sglang")
    assert lines[at + 1] == "    ports            30000, 30001"
    assert not any("Config(" in line or "mappingproxy" in line for line in lines)


def test_format_hosts_without_a_file(tmp_path: Path) -> None:
    text = format_hosts(load_config(None, {"XDG_CONFIG_HOME": str(tmp_path)}))
    assert f"config: none at {tmp_path / 'gpumon/config.toml'} (XDG default)" in text
    assert "no hosts configured" in text
    assert "built in: demo (simulator), local (this machine)" in text


# --- the key tables are the single place a key is defined -------------------------------


def test_every_host_key_is_a_host_config_field() -> None:
    names = {f.name for f in dataclasses.fields(HostConfig)}
    assert {spec.name for spec in HOST_SETTINGS} <= names
    host_only = ["sglang", "vllm", "jobs"]  # tables that make no sense in [defaults]
    assert [spec.name for spec in HOST_KEYS] == [
        "ssh",
        *(s.name for s in HOST_SETTINGS),
        *host_only,
    ]
    assert set(host_only) <= names


def test_nested_spec_tables_report_the_full_dotted_key() -> None:
    def port_list(value: object) -> list[int]:
        if not isinstance(value, list):
            raise TypeError
        return [int(p) for p in value]

    ports = KeySpec("ports", port_list, "a list of port numbers", [])
    sglang = KeySpec("sglang", lambda raw: check_table(raw, (ports,)), "a table", {})
    with pytest.raises(Invalid) as caught:
        check_table({"sglang": {"ports": ["x"]}}, (sglang,))
    assert caught.value.path == ("sglang", "ports")
    assert caught.value.problem == 'expected a list of port numbers, got ["x"]'
    assert check_table({"sglang": {"ports": ["1"]}}, (sglang,)) == {"sglang": {"ports": [1]}}


# --- workloads: [hosts.NAME.sglang], [hosts.NAME.jobs.JOB], watch_logs ------------------


def _load_text(tmp_path: Path, text: str) -> Config:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return load_config(path)


def test_sglang_jobs_and_watch_logs(tmp_path: Path) -> None:
    cfg = _load_text(
        tmp_path,
        """
[hosts.ct200]
container = 200
watch_logs = ["/var/log/train/*.log", "~/x.log"]
[hosts.ct200.sglang]
ports = "30000-30007"
log = "/root/sglang/*.log"
[hosts.ct200.jobs.drafter]
gpus = [5, 6, 7]
log = "/root/drafter/train.log"
progress = "kv"
start = "python train.py --token-budget {token_budget} --resume {resume}"
params = { token_budget = 65536, resume = "latest" }
env = { CUDA_VISIBLE_DEVICES = "5,6,7" }
stop_timeout = 10
""",
    )
    host = cfg.hosts["ct200"]
    assert host.sglang is not None and host.sglang.ports == tuple(range(30000, 30008))
    assert host.watch_logs[0] == "/var/log/train/*.log"
    assert host.watch_logs[1] == str(Path.home() / "x.log")
    job = host.job("drafter")
    assert job is not None and job.gpus == (5, 6, 7) and job.stop_timeout == 10.0
    assert job.params["token_budget"] == 65536 and job.env["CUDA_VISIBLE_DEVICES"] == "5,6,7"
    assert host.job("nope") is None
    assert job.server is None


def test_a_server_can_be_a_job(tmp_path: Path) -> None:
    """Issue 36.2: ``server = PORT`` makes the job the SGLang server on that port."""
    cfg = _load_text(
        tmp_path,
        '[hosts.h.jobs.srv]\nserver = 30000\nstart = "python -m sglang.launch_server"\n',
    )
    job = cfg.hosts["h"].job("srv")
    assert job is not None and job.server == 30000


def test_a_vllm_server_can_be_a_job(tmp_path: Path) -> None:
    """``server = PORT`` of a port the host's vLLM table names: the job is that vLLM
    server (``r`` on its wedged engine restarts it); the same port's SGLang job on
    another host is SGLang's."""
    cfg = _load_text(
        tmp_path,
        "[hosts.h.vllm]\nports = [8000]\n"
        '[hosts.h.jobs.llama]\nserver = 8000\nstart = "vllm serve m --port 8000"\n'
        '[hosts.g.jobs.srv]\nserver = 8000\nstart = "python -m sglang.launch_server"\n',
    )
    llama, srv = cfg.hosts["h"].job("llama"), cfg.hosts["g"].job("srv")
    assert llama is not None and llama.server == 8000
    assert srv is not None and srv.server == 8000
    transport = cast(Transport, None)  # the engine is the config's: no connection read
    assert JobTarget(cfg.hosts["h"], transport).server_engine(llama) == "vllm"
    assert JobTarget(cfg.hosts["g"], transport).server_engine(srv) == "sglang"


@pytest.mark.parametrize(
    ("table", "key", "expected"),
    [
        ('[hosts.h.sglang]\nports = "30007-30000"', "hosts.h.sglang.ports", "range"),
        ("[hosts.h.sglang]\nport = 1", "hosts.h.sglang.port", "unknown key"),
        ("[hosts.h.jobs.j]\ngpus = []", "hosts.h.jobs.j.gpus", "non-empty list"),
        ("[hosts.h.jobs.j]\ngpus = [1, 1]", "hosts.h.jobs.j.gpus", "appears twice"),
        ("[hosts.h.jobs.j]\nprogress = 'step (?P<stp>\\d+)'", "hosts.h.jobs.j.progress", "stp"),
        ('[hosts.h.jobs.j]\nprogress = "("', "hosts.h.jobs.j.progress", "valid regex"),
        ('[hosts.h.jobs.j]\nstart = "run {x}"', "hosts.h.jobs.j.start", "placeholders"),
        ("[hosts.h.jobs.j]\nparams = { a = [1] }", "hosts.h.jobs.j.params.a", "string, number"),
        ('[hosts.h]\ntorch_index = "ftp://x"', "hosts.h.torch_index", "http(s) URL"),
        ("[hosts.h.jobs.j]\nserver = 0", "hosts.h.jobs.j.server", "1..65535"),
        (
            "[hosts.h.jobs.a]\nserver = 30000\n[hosts.h.jobs.b]\nserver = 30000",
            "hosts.h.jobs.b.server",
            "already the server of job a",
        ),
        (
            "[hosts.h.sglang]\nports = [8000]\n[hosts.h.vllm]\nports = [8000]\n"
            "[hosts.h.jobs.a]\nserver = 8000",
            "hosts.h.jobs.a.server",
            "in both [hosts.NAME.sglang] and [hosts.NAME.vllm] ports",
        ),
    ],
)
def test_workload_errors_name_the_key(tmp_path: Path, table: str, key: str, expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        _load_text(tmp_path, table + "\n")
    assert err.value.key == key
    assert expected in str(err.value) and str(tmp_path / "c.toml") in str(err.value)


@pytest.mark.parametrize(
    ("table", "key", "says"),
    [
        # nvidia_smi is a path run as one program: shell text used to end as UNKNOWN
        ('[hosts.h]\nnvidia_smi = "nvidia-smi -i 0"', "hosts.h.nvidia_smi", "has a space"),
        ('[defaults]\nnvidia_smi = "timeout 5 nvidia-smi"', "defaults.nvidia_smi", "a space"),
        ('[hosts.h]\nnvidia_smi = "nvidia-smi;reboot"', "hosts.h.nvidia_smi", "has ';'"),
        ('[hosts.h]\nnvidia_smi = "$(which nvidia-smi)"', "hosts.h.nvidia_smi", "has '$'"),
        ('[hosts.h]\nnvidia_smi = "nvidia-smi|tee"', "hosts.h.nvidia_smi", "not a command line"),
        # watch_logs is a list (a string was taken as a list of its one path)
        ('[hosts.h]\nwatch_logs = "/var/log/x.log"', "hosts.h.watch_logs", "expected a list"),
        # a parameter value with a newline was refused only at restart
        (
            '[hosts.h.jobs.j]\nparams = { tag = "a\\nreboot" }',
            "hosts.h.jobs.j.params.tag",
            "control characters (a newline ends the command)",
        ),
        ('[hosts.h.jobs.j]\nparams = { tag = "a\\u0000" }', "hosts.h.jobs.j.params.tag", "control"),
    ],
)
def test_values_refused_at_config_check_instead_of_later(
    tmp_path: Path, table: str, key: str, says: str
) -> None:
    with pytest.raises(ConfigError) as err:
        _load_text(tmp_path, table + "\n")
    assert err.value.key == key
    assert says in str(err.value), str(err.value)


def test_paths_and_tabs_that_stay_accepted(tmp_path: Path) -> None:
    cfg = _load_text(
        tmp_path,
        '[hosts.h]\nnvidia_smi = "/opt/nvidia/bin/nvidia-smi"\nwatch_logs = ["/l/*.log"]\n'
        '[hosts.h.jobs.j]\nparams = { sep = "a\\tb", n = 3 }\n',
    )
    host = cfg.hosts["h"]
    assert host.nvidia_smi == "/opt/nvidia/bin/nvidia-smi" and host.watch_logs == ("/l/*.log",)
    job = host.job("j")
    assert job is not None and job.params == {"sep": "a\tb", "n": 3}


def test_alert_thresholds_global_and_per_host(tmp_path: Path) -> None:
    cfg = _load_text(
        tmp_path,
        "[defaults.alerts]\nmemory_warning_pct = 90\nttf_horizon_s = 120\n"
        "[hosts.a]\n[hosts.b.alerts]\nmemory_warning_pct = 80\n",
    )
    assert cfg.hosts["a"].alerts.memory_warning_pct == 90.0
    assert cfg.hosts["b"].alerts.memory_warning_pct == 80.0
    assert cfg.hosts["b"].alerts.ttf_horizon_s == 120.0  # the rest comes from [defaults]
    assert resolve_host(cfg, "demo").alerts.memory_warning_pct == 90.0
    with pytest.raises(ConfigError) as err:
        _load_text(tmp_path, "[hosts.b.alerts]\nclear_samples = 2.5\n")
    assert err.value.key == "hosts.b.alerts.clear_samples" and "integer" in str(err.value)


# --- limits: file size, nesting, lengths; errors quote a cut value ----------------------

BIG = 5 << 20  # the fault campaign's 5 MB value


def short_refusal(tmp_path: Path, text: str) -> tuple[Path, ConfigError]:
    """The refusal of ``text``; its message is short whatever the file holds."""
    path, err = refusal(tmp_path, text)
    assert str(err).startswith(f"{path}: "), str(err)[:300]
    assert len(str(err)) < len(str(path)) + 400, len(str(err))
    return path, err


@pytest.mark.parametrize(
    "text",
    [
        '[hosts.x]\nssh = "h"\n[hosts.x.sglang]\nports = ' + "[" * 5000 + "]" * 5000 + "\n",
        "a = " + "{b = " * 3000 + "1" + "}" * 3000 + "\n",
    ],
    ids=["arrays", "inline-tables"],
)
def test_nesting_too_deep_to_read_is_a_config_error_naming_the_file(
    tmp_path: Path, text: str
) -> None:
    _, err = short_refusal(tmp_path, text)
    assert "nested too deeply" in str(err) and err.key is None


def test_nesting_deeper_than_the_limit_names_the_key(tmp_path: Path) -> None:
    _, err = short_refusal(tmp_path, "[hosts.x.sglang]\nports = " + "[" * 40 + "]" * 40 + "\n")
    assert err.key == "hosts.x.sglang.ports" and "more than 16 levels" in str(err)
    # what a real config nests (hosts.N.jobs.J.env.V) is well within it
    load(tmp_path, '[hosts.x.jobs.j]\nlog = "/j.log"\nenv = { A = "1" }\n')


def test_a_file_over_one_mib_is_refused_unread(tmp_path: Path) -> None:
    _, err = short_refusal(tmp_path, '[hosts.x]\nssh = "' + "a" * BIG + '"\n')
    assert "larger than 1 MiB" in str(err)
    load(tmp_path, "# " + "x" * ((1 << 20) - 10) + "\n")  # just under: read


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (
            '[hosts.x.jobs.j]\nstop_timeout = "' + "A" * 10_000 + '"\n',
            "hosts.x.jobs.j.stop_timeout",
        ),
        ("[hosts.x]\ninterval = [" + "1, " * 1000 + "]\n", "hosts.x.interval"),
        ("[hosts.x.jobs.j]\nenv = { A = [" + '"v", ' * 1000 + "] }\n", "hosts.x.jobs.j.env.A"),
        ("[hosts.x.jobs.j]\nparams = { a = [" + "1, " * 1000 + "] }\n", "hosts.x.jobs.j.params.a"),
    ],
    ids=["string", "list", "env", "params"],
)
def test_an_error_quotes_a_cut_value(tmp_path: Path, text: str, key: str) -> None:
    _, err = short_refusal(tmp_path, text)
    assert err.key == key
    assert "..." in str(err)


def test_a_long_key_is_refused_and_cut_in_the_message(tmp_path: Path) -> None:
    _, err = short_refusal(tmp_path, "[hosts.x]\n" + "k" * 100_000 + " = 1\n")
    assert "a key of 100000 characters; at most 255" in str(err)
    assert err.key is not None and err.key.startswith("hosts.x.kkk") and err.key.endswith("...")
    _, err = short_refusal(tmp_path, "[hosts." + "h" * 256 + "]\n")
    assert "a key of 256 characters" in str(err)


@pytest.mark.parametrize(
    ("key", "value", "most"),
    [
        ("ssh", "h" * 255, None),
        ("ssh", "root@" + "h" * 256, "a host name of 256 characters; at most 255"),
        ("ssh", "u" * 256 + "@h", "a user name of 256 characters; at most 255"),
        ("ssh", "h" * 10_000, "a host name has at most 255"),
        ("python", "/" + "p" * 4095, None),
        ("python", "/" + "p" * 4096, "too long: 4097 characters; at most 4096"),
        ("identity", "/" + "k" * 4096, "at most 4096"),
        ("watch_logs", "/" + "l" * 4096, "at most 4096"),
        ("torch_index", "https://x/" + "i" * 2040, "at most 2048"),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 20 else f"{len(v)}" if v else "ok",
)
def test_values_have_length_limits(tmp_path: Path, key: str, value: str, most: str | None) -> None:
    rendered = f'["{value}"]' if key == "watch_logs" else f'"{value}"'  # a list of paths
    text = f"[hosts.x]\n{key} = {rendered}\n"
    if most is None:
        load(tmp_path, text)
        return
    _, err = short_refusal(tmp_path, text)
    assert err.key == f"hosts.x.{key}" and most in str(err)


def test_job_templates_and_paths_have_length_limits(tmp_path: Path) -> None:
    job = '[hosts.x.jobs.j]\nlog = "/j.log"\n'
    load(tmp_path, job + 'start = """' + "run\n" * 4096 + '"""\n')  # 16 KiB: a long script
    _, err = short_refusal(tmp_path, job + 'start = """' + "run\n" * 4097 + '"""\n')
    assert err.key == "hosts.x.jobs.j.start" and "at most 16384" in str(err)
    _, err = short_refusal(tmp_path, job + 'workdir = "/' + "w" * 4096 + '"\n')
    assert err.key == "hosts.x.jobs.j.workdir" and "at most 4096" in str(err)


def test_tables_and_arrays_have_an_entry_limit(tmp_path: Path) -> None:
    ports = ", ".join(str(30000 + i) for i in range(1025))
    _, err = short_refusal(tmp_path, f"[hosts.x.sglang]\nports = [{ports}]\n")
    assert err.key == "hosts.x.sglang.ports" and "1025 entries; at most 1024" in str(err)


def test_a_long_ad_hoc_host_on_the_command_line_is_refused_shortly() -> None:
    with pytest.raises(ConfigError) as err:
        resolve_host(Config(path=None), "root@" + "h" * 100_000)
    assert "at most 255" in str(err.value) and len(str(err.value)) < 400


TOML_PIECES = st.sampled_from(
    [
        "[hosts.x]",
        "[hosts.x.jobs.j]",
        "[defaults]",
        "\n",
        " = ",
        "ssh",
        "interval",
        "ports",
        "start",
        '"',
        "'",
        "[",
        "]",
        "{",
        "}",
        ",",
        "1",
        "3.5",
        "true",
        "a" * 300,
        "\\u001b",
        "=",
        "[[hosts]]",
        "#",
        ".",
        "env",
        "log",
        '"""',
    ]
)


@settings(max_examples=200, deadline=None)
@given(st.lists(TOML_PIECES, max_size=40).map("".join))
def test_any_config_text_loads_or_is_one_short_config_error(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.toml"
        path.write_text(text, encoding="utf-8")
        try:
            load_config(path, env={})
        except ConfigError as e:
            assert str(e).startswith(str(path)) and len(str(e)) < len(str(path)) + 400
