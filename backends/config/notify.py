"""The ``[notify.NAME]`` and ``[watch]`` tables: where alerts are delivered, and how
``gpumon watch`` runs.

    [watch]
    metrics_port = 9947          # gpumon watch's listener: /metrics and the page (0: off)
    listen = "127.0.0.1"         # its address; beyond loopback the page needs token_env
    public_url = "https://gpu.example.org/gpumon"  # the page as the team reaches it
    token_env = "GPUMON_PAGE_TOKEN"
    min_open_s = 30              # an incident stays open at least this long
    resolve_after_s = 120        # ... and resolves once its alerts have been over this long
    dashboard_delivery = "auto"  # auto | always | never

    [notify.oncall]
    kind = "pagerduty"
    routing_key_env = "PD_KEY"   # secrets from the environment: configs can be committed
    min_severity = "critical"
    hosts = ["ct200"]            # optional filters
    kinds = ["cuda_oom", "oom_death"]

Checked like every other table (``FILE: notify.oncall.kind: expected ...``). Standard
library only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpumon.backends.alerts.incident import INCIDENT_GAP_S
from gpumon.backends.alerts.kinds import KINDS, alert_kind
from gpumon.backends.config.files import regular_file, terminal
from gpumon.backends.config.limits import show
from gpumon.backends.config.schema import (
    REQUIRED,
    Invalid,
    KeySpec,
    base_url,
    boolean,
    check_table,
    did_you_mean,
    env_name,
    integer,
    limited,
    named_tables,
    number,
    text,
    url,
)
from gpumon.backends.model import Health

__all__ = [
    "DEFAULT_METRICS_PORT",
    "NOTIFIER_KINDS",
    "NotifierConfig",
    "NotifySettings",
    "notify_settings",
]

# Not dcgm-exporter's 9400 (the other GPU exporter likely on the same machine), not
# Prometheus's 9090 / Alertmanager's 9093-9094 / node_exporter's 9100, nor the NVIDIA GPU
# exporters' 9445 and 9835: 9947, in the 9100-9999 range Prometheus reserves for exporters.
DEFAULT_METRICS_PORT = 9947
NOTIFIER_KINDS = ("pagerduty", "alertmanager", "ntfy", "slack", "webhook", "command", "terminal")
PAGERDUTY_URL = "https://events.pagerduty.com/v2/enqueue"
_NEEDS_URL = frozenset({"alertmanager", "ntfy", "slack", "webhook"})
# Kinds a person reads as they come (a phone, a chat, a desktop): a new incident's first
# message waits ``SETTLE_S`` for the cause that follows its first alert. Alertmanager
# waits by itself (its route's group_wait); webhooks and commands are programs that get
# every event as it happens.
READ_BY_PEOPLE = frozenset({"pagerduty", "ntfy", "slack", "terminal"})
SETTLE_S = 5.0
_SEVERITIES = {"warning": Health.WARNING, "critical": Health.CRITICAL}


@dataclass(frozen=True, slots=True)
class NotifierConfig:
    """One ``[notify.NAME]`` table, checked. Secrets are either given (``routing_key``) or
    named (``routing_key_env``) and read from the environment when a message is sent."""

    name: str
    kind: str
    min_severity: Health = Health.WARNING
    hosts: tuple[str, ...] = ()  # empty: every host
    kinds: tuple[str, ...] = ()  # empty: every alert kind notified by default (not notes)
    url: str | None = None
    url_env: str | None = None
    routing_key: str | None = None
    routing_key_env: str | None = None
    token: str | None = None
    token_env: str | None = None
    secret: str | None = None
    secret_env: str | None = None
    command: tuple[str, ...] = ()
    tty: str = "/dev/tty"
    group_s: float | None = None  # see group_window
    settle_s: float | None = None  # see settle_window
    max_per_minute: int = 20  # per notifier; beyond it messages wait (nothing is dropped)
    resend_s: float = 60.0  # alertmanager: re-send the active alerts this often
    timeout_s: float = 10.0

    @property
    def group_window(self) -> float:
        """Seconds in which a host's further alerts wait and go out as one message after
        the first went at once: ``group_s``, by default 30, but 0 for Alertmanager (it
        groups by itself: ``group_by`` / ``group_wait`` in its route)."""
        if self.group_s is not None:
            return self.group_s
        return 0.0 if self.kind == "alertmanager" else 30.0

    @property
    def settle_window(self) -> float:
        """Seconds a new incident's first message waits, so that a cause following its
        first alert (the CUDA OOM 2 s after the memory warning) is in it: one message with
        the cause's headline, as Alertmanager's ``group_wait`` does. ``settle_s``, by
        default ``SETTLE_S`` for the kinds a person reads, else 0."""
        if self.settle_s is not None:
            return self.settle_s
        return SETTLE_S if self.kind in READ_BY_PEOPLE else 0.0

    def wants(self, host: str, kind: str, severity: Health) -> bool:
        """Whether an alert of ``kind`` and ``severity`` on ``host`` goes to this notifier:
        a note (``Health.INFO``, below every ``min_severity``) only where ``kinds`` names
        its kind."""
        if self.hosts and host not in self.hosts:
            return False
        named = kind in self.kinds
        if not (named if self.kinds else _by_default(kind)):
            return False
        return severity.rank >= self.min_severity.rank if severity.alarming else named


@dataclass(frozen=True, slots=True)
class NotifySettings:
    """The ``[notify.*]`` notifiers and the ``[watch]`` settings, defaults applied."""

    notifiers: Mapping[str, NotifierConfig] = field(default_factory=dict)
    metrics_port: int = DEFAULT_METRICS_PORT
    # The listener's address (/metrics and the incident page); ``metrics_host`` in the
    # config is its older name. Beyond loopback the page answers only with ``token_env``'s
    # token; /metrics answers as it always did.
    listen: str = "127.0.0.1"
    public_url: str | None = None  # the page as the team reaches it: links in messages
    token_env: str | None = None  # the variable holding the page's token
    link_token: bool = False  # the messages' links carry the token (?token=)
    min_open_s: float = 30.0
    # An incident resolves once its alerts have been over this long; one that comes back
    # sooner continues it. The dashboard's grouping window: alerts of one failure within
    # it are one incident there too.
    resolve_after_s: float = INCIDENT_GAP_S
    dashboard_delivery: str = "auto"  # auto: only while no `gpumon watch` runs
    retry_first_s: float = 2.0
    retry_max_s: float = 300.0
    outbox: str | None = None  # None: $XDG_STATE_HOME/gpumon/outbox.sqlite3
    bundle_on_critical: bool = False  # a `gpumon bundle` of each critical incident


def _severity(v: object) -> Health:
    if not isinstance(v, str) or v not in _SEVERITIES:
        raise ValueError
    return _SEVERITIES[v]


def _names(v: object) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
        raise ValueError
    return tuple(limited(text(x), 200) for x in v)


def _by_default(kind: str) -> bool:
    """Whether a notifier without ``kinds`` gets alerts of ``kind``: every kind but the
    notes (``server_idle``), and a kind gpumon does not declare (never left out)."""
    declared = alert_kind(kind)
    return declared is None or declared.notified_by_default


def _alert_kinds(v: object) -> tuple[str, ...]:
    kinds = _names(v)
    for kind in kinds:
        if kind not in KINDS:
            raise Invalid(
                f"unknown alert kind {kind!r}{did_you_mean(kind, KINDS)}; "
                f"expected some of: {', '.join(KINDS)}"
            )
    return kinds


def _kind(v: object) -> str:
    if not isinstance(v, str) or v not in NOTIFIER_KINDS:
        raise ValueError
    return v


def _command(v: object) -> tuple[str, ...]:
    """A program and its arguments, run without a shell: a string would be one program
    named with its spaces (``"page-me --urgent"``), so it is refused with the list form."""
    if isinstance(v, str):
        words = v.split() or [v]
        shown = "[" + ", ".join(show(w) for w in words) + "]"
        raise Invalid(
            f"expected a list of strings, the program and its arguments (no shell), "
            f"got the string {show(v)}; write {shown}"
        )
    if not isinstance(v, list) or not v:
        raise ValueError
    return tuple(text(x) for x in v)


def _secret(v: object) -> str:
    if not isinstance(v, str) or not v or not v.isprintable():
        raise ValueError
    return limited(v, 1000)


_CHOICE_DELIVERY = ("auto", "always", "never")


def _delivery(v: object) -> str:
    if v not in _CHOICE_DELIVERY:
        raise ValueError
    return str(v)


SECONDS = "a number of seconds"
NOTIFIER_KEYS: tuple[KeySpec, ...] = (
    KeySpec("kind", _kind, f"one of {', '.join(NOTIFIER_KINDS)}", REQUIRED),
    KeySpec("min_severity", _severity, '"warning" or "critical"'),
    KeySpec("hosts", _names, "a list of host names"),
    KeySpec("kinds", _alert_kinds, "a list of alert kinds"),
    KeySpec("url", url, "an http(s) URL"),
    KeySpec("url_env", env_name, "an environment variable name"),
    KeySpec("routing_key", _secret, "a string"),
    KeySpec("routing_key_env", env_name, "an environment variable name"),
    KeySpec("token", _secret, "a string"),
    KeySpec("token_env", env_name, "an environment variable name"),
    KeySpec("secret", _secret, "a string"),
    KeySpec("secret_env", env_name, "an environment variable name"),
    KeySpec("command", _command, "a program and its arguments (a list of strings)"),
    KeySpec("tty", terminal, "a terminal device path"),
    KeySpec("group_s", number(0, 3600), f"{SECONDS} from 0 to 3600"),
    KeySpec("settle_s", number(0, 300), f"{SECONDS} from 0 to 300"),
    KeySpec("max_per_minute", integer(1, 10_000), "an integer from 1 to 10000"),
    KeySpec("resend_s", number(1, 3600), f"{SECONDS} from 1 to 3600"),
    KeySpec("timeout_s", number(0.1, 600), f"{SECONDS} from 0.1 to 600"),
)
WATCH_KEYS: tuple[KeySpec, ...] = (
    KeySpec("metrics_port", integer(0, 65535), "a port 1..65535, or 0 for no exporter"),
    KeySpec("listen", text, "an address to listen on"),
    KeySpec("metrics_host", text, "an address to listen on (listen's older name)"),
    KeySpec("public_url", base_url, "an http(s) URL"),
    KeySpec("token_env", env_name, "an environment variable name"),
    KeySpec("link_token", boolean, "true or false"),
    KeySpec("min_open_s", number(0, 86400), f"{SECONDS} from 0 to 86400"),
    KeySpec("resolve_after_s", number(0, 86400), f"{SECONDS} from 0 to 86400"),
    KeySpec("dashboard_delivery", _delivery, '"auto", "always" or "never"'),
    KeySpec("retry_first_s", number(0.01, 3600), f"{SECONDS} from 0.01 to 3600"),
    KeySpec("retry_max_s", number(0.01, 86400), f"{SECONDS} from 0.01 to 86400"),
    KeySpec("outbox", regular_file, "a file path"),
    KeySpec("bundle_on_critical", boolean, "true or false"),
)


def _notifier(name: str, raw: dict[str, Any]) -> NotifierConfig:
    table = check_table(raw, NOTIFIER_KEYS)
    kind = table["kind"]
    if kind in _NEEDS_URL and "url" not in table and "url_env" not in table:
        raise Invalid(f"a {kind} notifier needs url (or url_env)", ("url",))
    if kind == "pagerduty":
        if "routing_key" not in table and "routing_key_env" not in table:
            raise Invalid("pagerduty needs routing_key or routing_key_env", ("routing_key",))
        table.setdefault("url", PAGERDUTY_URL)
    if kind == "command" and "command" not in table:
        raise Invalid("missing; a command notifier runs this program", ("command",))
    return NotifierConfig(name=name, **table)


_NOTIFIER_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def notify_tables(raw: object) -> dict[str, NotifierConfig]:
    """``[notify.NAME]`` tables -> notifiers by name; raises Invalid naming the key."""
    return named_tables(
        raw,
        _NOTIFIER_NAME,
        "a notifier name of letters, digits, '_' and '-'",
        "a table of notifier settings",
        _notifier,
    )


def watch_table(raw: object) -> dict[str, Any]:
    """The ``[watch]`` table, checked (keys present only)."""
    table = check_table(raw, WATCH_KEYS)
    if table.get("retry_max_s", 300.0) < table.get("retry_first_s", 2.0):
        raise Invalid("must be >= retry_first_s", ("retry_max_s",))
    if "metrics_host" in table:
        if "listen" in table:
            raise Invalid("listen and metrics_host are one setting: keep listen", ("metrics_host",))
        table["listen"] = table.pop("metrics_host")
    if table.get("link_token") and "token_env" not in table:
        raise Invalid("the link's token is token_env's: set token_env", ("link_token",))
    return table


def notify_settings(
    notifiers: Mapping[str, NotifierConfig] | None, watch: Mapping[str, Any] | None
) -> NotifySettings:
    """The settings from the checked tables (missing ones: defaults)."""
    values = dict(watch or {})
    return NotifySettings(notifiers=dict(notifiers or {}), **values)
