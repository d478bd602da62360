"""The [notify.NAME] and [watch] tables: defaults, filters, and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpumon.backends.alerts.incident import INCIDENT_GAP_S
from gpumon.backends.config import ConfigError, load_config
from gpumon.backends.config.notify import DEFAULT_METRICS_PORT, PAGERDUTY_URL, SETTLE_S
from gpumon.backends.model import Health


def load(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "config.toml"
    path.write_text(text)
    return load_config(path)


def test_notifiers_and_watch_settings_are_read(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        """
[watch]
min_open_s = 5
[notify.oncall]
kind = "pagerduty"
routing_key_env = "PD_KEY"
min_severity = "critical"
hosts = ["ct200"]
kinds = ["cuda_oom", "oom_death"]
""",
    )
    settings = config.notify_settings()
    pd = settings.notifiers["oncall"]
    assert pd.url == PAGERDUTY_URL and pd.routing_key_env == "PD_KEY"
    assert settings.min_open_s == 5 and settings.metrics_port == DEFAULT_METRICS_PORT
    assert pd.wants("ct200", "cuda_oom", Health.CRITICAL)
    assert not pd.wants("ct200", "cuda_oom", Health.WARNING)
    assert not pd.wants("gpu2", "cuda_oom", Health.CRITICAL)
    assert not pd.wants("ct200", "memory", Health.CRITICAL)


def test_the_settle_times_are_read_and_default_by_kind(tmp_path: Path) -> None:
    """A new incident's first message waits a few seconds where a person reads it, not
    where Alertmanager (its own group_wait) or a program gets it; an incident resolves
    once its alerts have been over the dashboard's grouping window, or as configured."""
    text = ""
    for kind in ("pagerduty", "ntfy", "slack", "terminal", "alertmanager", "webhook"):
        text += f'[notify.{kind}]\nkind = "{kind}"\nurl = "http://x"\nrouting_key = "k"\n'
    default = load(tmp_path, text).notify_settings()
    waits = {name: n.settle_window for name, n in default.notifiers.items()}
    assert waits == {
        "pagerduty": SETTLE_S, "ntfy": SETTLE_S, "slack": SETTLE_S, "terminal": SETTLE_S,
        "alertmanager": 0.0, "webhook": 0.0,
    }  # fmt: skip
    assert default.resolve_after_s == INCIDENT_GAP_S == 120.0
    text += "settle_s = 0\n[watch]\nresolve_after_s = 45\n"  # the webhook's table
    configured = load(
        tmp_path, text.replace('kind = "webhook"', 'kind = "slack"')
    ).notify_settings()
    assert configured.notifiers["webhook"].settle_window == 0.0
    assert configured.resolve_after_s == 45.0


def test_no_tables_means_defaults(tmp_path: Path) -> None:
    settings = load(tmp_path, "").notify_settings()
    assert settings.notifiers == {} and settings.dashboard_delivery == "auto"
    assert DEFAULT_METRICS_PORT not in (9400, 9090, 9093, 9094, 9100)


@pytest.mark.parametrize(
    ("text", "key", "words"),
    [
        ('[notify.a]\nkind = "slak"', "notify.a.kind", "expected one of pagerduty"),
        ('[notify.a]\nkind = "slack"', "notify.a.url", "needs url"),
        ('[notify.a]\nkind = "pagerduty"', "notify.a.routing_key", "routing_key_env"),
        ('[notify.a]\nkind = "command"', "notify.a.command", "missing"),
        (
            '[notify.a]\nkind = "command"\ncommand = "/bin/page-me --urgent"',
            "notify.a.command",
            'got the string "/bin/page-me --urgent"; write ["/bin/page-me", "--urgent"]',
        ),
        ("[notify.a]\nkind = 3", "notify.a.kind", "expected one of pagerduty"),
        ("[notify]\na = 3", "notify.a", "expected a table of notifier settings, got 3"),
        ('[notify.a]\nkind = "webhook"\nurl = "http://x"\nhost = ["h"]', "notify.a.host", "hosts"),
        ('[notify.a]\nkind = "ntfy"\nurl = "ftp://x"', "notify.a.url", "http(s) URL"),
        (
            '[notify.a]\nkind = "webhook"\nurl = "http://x"\nsecret_env = "1X"',
            "notify.a.secret_env",
            "environment variable",
        ),
        (
            '[notify.a]\nkind = "webhook"\nurl = "http://x"\nkinds = ["oom"]',
            "notify.a.kinds",
            "unknown alert kind",
        ),
        (
            '[notify.a]\nkind = "webhook"\nurl = "http://x"\nmin_severity = "info"',
            "notify.a.min_severity",
            "warning",
        ),
        (
            '[notify.a]\nkind = "webhook"\nurl = "http://x"\ncolour = 1',
            "notify.a.colour",
            "unknown key",
        ),
        ("[watch]\nmetrics_port = 70000", "watch.metrics_port", "0 for no exporter"),
        ('[watch]\ndashboard_delivery = "sometimes"', "watch.dashboard_delivery", '"auto"'),
        ("[watch]\nretry_first_s = 10\nretry_max_s = 1", "watch.retry_max_s", "retry_first_s"),
        ("[watch]\nresolve_after_s = -1", "watch.resolve_after_s", "from 0 to 86400"),
        (
            '[notify.a]\nkind = "ntfy"\nurl = "http://x"\nsettle_s = 900',
            "notify.a.settle_s",
            "from 0 to 300",
        ),
    ],
)
def test_bad_tables_name_the_key(tmp_path: Path, text: str, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as e:
        load(tmp_path, text)
    assert e.value.key == key and words in str(e.value)
