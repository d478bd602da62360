"""The [notify.NAME] and [watch] tables: defaults, filters, and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpumon.backends.config import ConfigError, load_config
from gpumon.backends.config.notify import DEFAULT_METRICS_PORT, PAGERDUTY_URL
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
    ],
)
def test_bad_tables_name_the_key(tmp_path: Path, text: str, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as e:
        load(tmp_path, text)
    assert e.value.key == key and words in str(e.value)
