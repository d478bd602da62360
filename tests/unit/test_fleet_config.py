"""``[fleet.NAME]`` tables: what they accept, their defaults, what they refuse and how
the drill-down finds a node's host."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpumon.backends.config import (
    Config,
    ConfigError,
    FleetConfig,
    Invalid,
    format_hosts,
    load_config,
)
from gpumon.backends.config.fleet import DEFAULT_NODE_LABELS
from gpumon.backends.fleet import FleetSource
from gpumon.tui.cli.fleet import pick_fleet
from gpumon.tui.fleet.app import node_host


def load(tmp_path: Path, text: str) -> Config:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return load_config(path, env={})


def refusal(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as e:
        load(tmp_path, text)
    return str(e.value)


def test_a_full_fleet_table(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        """
[fleet.rack1]
prometheus = "https://prom.example:9090/"
headers = { X-Scope-OrgID = "team-a" }
token_env = "PROM_TOKEN"
basic_auth = { user = "gpumon", password_env = "PROM_PASSWORD" }
selector = '{cluster="a", rack=~"r1.*"}'
node_label = "node"
ssh_template = "root@{node}.lab"
container = 200
refresh = 30
""",
    )
    fleet = config.fleets["rack1"]
    assert fleet.prometheus == "https://prom.example:9090"
    assert dict(fleet.headers) == {"X-Scope-OrgID": "team-a"}
    assert fleet.selector == 'cluster="a", rack=~"r1.*"'
    assert fleet.node_labels == ("node",)
    assert (fleet.ssh_template, fleet.container, fleet.refresh) == ("root@{node}.lab", 200, 30.0)
    assert fleet.source == str(tmp_path / "config.toml")
    env = {"PROM_TOKEN": "t0k", "PROM_PASSWORD": "pw"}
    assert fleet.auth_headers(env) == {"X-Scope-OrgID": "team-a", "Authorization": "Bearer t0k"}
    assert fleet.basic_credentials(env) == ("gpumon", "pw")


def test_defaults(tmp_path: Path) -> None:
    fleet = load(tmp_path, '[fleet.a]\nprometheus = "http://127.0.0.1:9090"\n').fleets["a"]
    assert fleet.node_labels == DEFAULT_NODE_LABELS == ("Hostname", "hostname", "instance")
    assert (fleet.refresh, fleet.selector, fleet.ssh_template) == (15.0, "", None)
    assert fleet.auth_headers({}) == {} and fleet.basic_credentials({}) is None


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ('selector = "cluster=a"', "fleet.a.selector: expected PromQL label matchers"),
        ("selector = 'x=\"1\"} or vector(1) {'", "fleet.a.selector: expected PromQL label"),
        ('node_label = "host-name"', "fleet.a.node_label: expected a Prometheus label name"),
        ('ssh_template = "root@host"', "fleet.a.ssh_template: expected an SSH target with {node}"),
        ('ssh_template = "{node}@{user}"', "fleet.a.ssh_template: only {node} may appear"),
        ("refresh = 0.1", "fleet.a.refresh: expected a number of seconds between 1 and 3600"),
        ('headers = { "bad header" = "x" }', 'fleet.a.headers."bad header": not an HTTP header'),
        ('basic_auth = { user = "a:b", password_env = "P" }', "fleet.a.basic_auth.user"),
        ("refrsh = 5", 'fleet.a.refrsh: unknown key (did you mean "refresh"?); expected one of:'),
    ],
)
def test_refusals_name_the_key(tmp_path: Path, table: str, expected: str) -> None:
    text = f'[fleet.a]\nprometheus = "http://127.0.0.1:9090"\n{table}\n'
    assert expected in refusal(tmp_path, text)


def test_prometheus_is_required_and_an_url(tmp_path: Path) -> None:
    assert "fleet.a.prometheus: missing" in refusal(tmp_path, "[fleet.a]\nrefresh = 5\n")
    bad = refusal(tmp_path, '[fleet.a]\nprometheus = "prom:9090"\n')
    assert "fleet.a.prometheus: expected an http(s) URL" in bad


def test_an_unset_token_variable_is_said_when_the_source_is_made(tmp_path: Path) -> None:
    config = load(
        tmp_path, '[fleet.a]\nprometheus = "http://127.0.0.1:9"\ntoken_env = "NO_SUCH_VAR"\n'
    )
    with pytest.raises(ConfigError, match=r"fleet\.a\.token_env: \$NO_SUCH_VAR"):
        FleetSource(config.fleets["a"], env={})
    with pytest.raises(Invalid):
        config.fleets["a"].auth_headers({})


def test_pick_fleet_by_name_or_the_only_one(tmp_path: Path) -> None:
    one = load(tmp_path, '[fleet.a]\nprometheus = "http://127.0.0.1:9090"\n')
    assert pick_fleet(one, None).name == "a"
    with pytest.raises(ConfigError, match=r"no \[fleet\.b\] in .* \(fleets: a\)"):
        pick_fleet(one, "b")
    two = load(
        tmp_path,
        '[fleet.a]\nprometheus = "http://127.0.0.1:9090"\n'
        '[fleet.b]\nprometheus = "http://127.0.0.1:9091"\n',
    )
    with pytest.raises(ConfigError, match=r"name a fleet: gpumon fleet NAME .*: a, b"):
        pick_fleet(two, None)


def test_the_drill_down_host_of_a_node(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        """
[hosts.gpu7]
ssh = "root@10.0.0.7"
[hosts.ct200]
ssh = "root@pve1:2222"
container = 200
[fleet.a]
prometheus = "http://127.0.0.1:9090"
""",
    )
    fleet = config.fleets["a"]
    assert node_host(config, fleet, "gpu7") is config.hosts["gpu7"]  # by name
    assert node_host(config, fleet, "pve1") is config.hosts["ct200"]  # by its SSH host
    assert node_host(config, fleet, "gpu9") is None  # Prometheus only
    templated = FleetConfig("a", "http://x:1", ssh_template="admin@{node}.lab", container=201)
    host = node_host(config, templated, "gpu9")
    assert host is not None
    assert (host.name, host.user, host.ssh_host, host.container) == (
        "gpu9",
        "admin",
        "gpu9.lab",
        201,
    )
    hostile = FleetConfig("a", "http://x:1", ssh_template="root@{node}")
    assert node_host(config, hostile, "-oProxyCommand=x") is None  # not an SSH target


def test_config_check_lists_fleets_without_header_values(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        '[fleet.a]\nprometheus = "http://127.0.0.1:9090"\n'
        'headers = { X-Api-Key = "s3cret" }\n'
        'basic_auth = { user = "gpumon", password_env = "PROM_PASSWORD" }\n',
    )
    text = format_hosts(config)
    assert "[fleet.a]  prometheus http://127.0.0.1:9090" in text
    assert "X-Api-Key" in text and "s3cret" not in text
    assert "gpumon, password from $PROM_PASSWORD" in text
