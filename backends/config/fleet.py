"""``[fleet.NAME]`` tables: a Prometheus that holds dcgm-exporter's (and gpumon watch's)
metrics for many nodes, how to ask it, and how to reach a node for the live dashboard.

Same rules as the host tables: one ``KeySpec`` row per key, errors name the dotted key.
Standard library only.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from gpumon.backends.config.limits import HOST_MAX, URL_MAX, show
from gpumon.backends.config.schema import (
    REQUIRED,
    Invalid,
    KeySpec,
    base_url,
    check_table,
    env_name,
    integer,
    limited,
    named_tables,
    number,
)

DEFAULT_REFRESH_S = 15.0
DEFAULT_TIMEOUT_S = 10.0
# The node name is the first of these labels a series has (dcgm-exporter renamed
# ``Hostname`` to ``hostname`` in 2026; ``instance`` is Prometheus' own).
DEFAULT_NODE_LABELS = ("Hostname", "hostname", "instance")


@dataclass(frozen=True, slots=True)
class BasicAuth:
    user: str
    password_env: str  # the password is read from this environment variable, never the file


@dataclass(frozen=True, slots=True)
class FleetConfig:
    """One fleet: where its Prometheus is and how gpumon reaches its nodes."""

    name: str
    prometheus: str  # base URL, without a trailing slash
    headers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    token_env: str | None = None  # bearer token from this environment variable
    basic_auth: BasicAuth | None = None
    selector: str = ""  # label matchers added to every query: 'cluster="a"'
    node_labels: tuple[str, ...] = DEFAULT_NODE_LABELS  # one label when configured
    ssh_template: str | None = None  # "root@{node}": drill-down target for any node
    container: int | None = None  # Proxmox CT id on the nodes, for the drill-down
    refresh: float = DEFAULT_REFRESH_S
    timeout: float = DEFAULT_TIMEOUT_S
    source: str = ""

    def settings(self) -> list[tuple[str, str]]:
        """(key, value) for ``gpumon config check``; header values and secrets unshown."""
        auth = self.basic_auth
        return [
            ("selector", self.selector or "(none)"),
            (
                "node_label",
                ", ".join(self.node_labels)
                + ("" if len(self.node_labels) == 1 else " (first present)"),
            ),
            ("headers", ", ".join(self.headers) or "(none)"),
            ("token_env", f"${self.token_env}" if self.token_env else "(none)"),
            (
                "basic_auth",
                f"{auth.user}, password from ${auth.password_env}" if auth else "(none)",
            ),
            ("ssh_template", self.ssh_template or "(none: only configured hosts over SSH)"),
            ("container", "(none)" if self.container is None else str(self.container)),
            ("refresh", f"{self.refresh:g} s"),
            ("timeout", f"{self.timeout:g} s"),
        ]

    def auth_headers(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """The HTTP headers for every request: ``headers``, then the bearer token from
        ``token_env`` when that variable is set. Raises ``Invalid`` naming the variable
        when it is configured but unset."""
        env = os.environ if env is None else env
        out = dict(self.headers)
        if self.token_env is not None:
            token = env.get(self.token_env)
            if not token:
                raise Invalid(f"${self.token_env} (token_env) is not set", ("token_env",))
            out["Authorization"] = f"Bearer {token}"
        return out

    def basic_credentials(self, env: Mapping[str, str] | None = None) -> tuple[str, str] | None:
        """(user, password) for HTTP basic auth, or None; raises ``Invalid`` when the
        password variable is unset."""
        if self.basic_auth is None:
            return None
        env = os.environ if env is None else env
        password = env.get(self.basic_auth.password_env)
        if password is None:
            var = self.basic_auth.password_env
            raise Invalid(f"${var} (basic_auth.password_env) is not set", ("basic_auth",))
        return self.basic_auth.user, password


_LABEL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEADER = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")  # an HTTP token (RFC 9110)
# One matcher: label, operator, a double-quoted PromQL string (escapes allowed).
_MATCHER = r'\s*[A-Za-z_][A-Za-z0-9_]*\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*'
_SELECTOR = re.compile(rf"(?:{_MATCHER})(?:,(?:{_MATCHER}))*,?\s*")


def _selector(v: object) -> str:
    """Label matchers as PromQL writes them inside braces: ``cluster="a",rack=~"r1.*"``
    (braces around them are accepted and dropped)."""
    if not isinstance(v, str):
        raise TypeError
    s = limited(v.strip(), URL_MAX)
    if s.startswith("{") and s.endswith("}"):
        s = s[1:-1].strip()
    if s and not _SELECTOR.fullmatch(s):
        raise ValueError
    return s.rstrip(", ")


def _label(v: object) -> tuple[str, ...]:
    if not isinstance(v, str) or not _LABEL.fullmatch(v):
        raise ValueError
    return (limited(v, HOST_MAX),)


def _headers(v: object) -> Mapping[str, str]:
    if not isinstance(v, dict):
        raise TypeError
    out: dict[str, str] = {}
    for k, val in v.items():
        if not _HEADER.fullmatch(k):
            raise Invalid(f"not an HTTP header name: {show(k)}", (k,))
        if not isinstance(val, str) or not val.isprintable():
            raise Invalid(f"expected a header value of printable text, got {show(val)}", (k,))
        out[k] = limited(val, URL_MAX)
    return MappingProxyType(out)


def _user(v: object) -> str:
    if not isinstance(v, str) or not v or ":" in v or not v.isprintable():
        raise ValueError
    return limited(v, HOST_MAX)


BASIC_AUTH_KEYS: tuple[KeySpec, ...] = (
    KeySpec("user", _user, "a user name without ':'", REQUIRED),
    KeySpec("password_env", env_name, "an environment variable name", REQUIRED),
)


def _basic_auth(v: object) -> BasicAuth:
    return BasicAuth(**check_table(v, BASIC_AUTH_KEYS))


def _ssh_template(v: object) -> str:
    if not isinstance(v, str) or "{node}" not in v or not v.isprintable():
        raise ValueError
    try:
        v.format(node="n")
    except (KeyError, IndexError, ValueError):
        raise Invalid("only {node} may appear in braces") from None
    return limited(v, HOST_MAX)


FLEET_KEYS: tuple[KeySpec, ...] = (
    KeySpec("prometheus", base_url, "an http(s) URL of a Prometheus server", REQUIRED),
    KeySpec("headers", _headers, "a table of HTTP header names and values"),
    KeySpec("token_env", env_name, "an environment variable name holding a bearer token"),
    KeySpec("basic_auth", _basic_auth, "a table with user and password_env"),
    KeySpec("selector", _selector, 'PromQL label matchers, e.g. cluster="a",rack=~"r1.*"'),
    KeySpec("node_label", _label, "a Prometheus label name", attr="node_labels"),
    KeySpec("ssh_template", _ssh_template, 'an SSH target with {node}, e.g. "root@{node}"'),
    KeySpec("container", integer(100, 999_999_999), "a Proxmox container id 100..999999999"),
    KeySpec("refresh", number(1, 3600), "a number of seconds between 1 and 3600"),
    KeySpec("timeout", number(0.5, 600), "a number of seconds between 0.5 and 600"),
)
_FLEET_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


def fleet_tables(raw: object) -> dict[str, FleetConfig]:
    """The ``[fleet.NAME]`` tables, checked (``source`` is set by the loader). Raises
    ``Invalid`` naming NAME and the key."""
    return named_tables(
        raw,
        _FLEET_NAME,
        "a fleet name of letters, digits, '.', '_' and '-'",
        "a table of fleet settings",
        lambda name, table: FleetConfig(name=name, **check_table(table, FLEET_KEYS)),
    )
