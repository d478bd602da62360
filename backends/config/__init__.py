"""Configuration: the TOML file, its checks, and the resolved hosts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpumon.backends.lazy import lazy_exports

if TYPE_CHECKING:
    from .fleet import FleetConfig
    from .load import (
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
    from .schema import Invalid, KeySpec
    from .workloads import JobConfig, SglangConfig

__all__ = [
    "HOST_KEYS",
    "HOST_SETTINGS",
    "Config",
    "ConfigError",
    "FleetConfig",
    "HostConfig",
    "Invalid",
    "JobConfig",
    "KeySpec",
    "SglangConfig",
    "config_path",
    "format_hosts",
    "load_config",
    "resolve_host",
]

# Not seen by mypy: a module __getattr__ would make every unknown name Any; mypy checks
# the names against the TYPE_CHECKING imports above instead.
if not TYPE_CHECKING:
    __getattr__ = lazy_exports(
        __name__,
        {
            "Config": "load",
            "ConfigError": "load",
            "FleetConfig": "fleet",
            "HOST_KEYS": "load",
            "HOST_SETTINGS": "load",
            "HostConfig": "load",
            "Invalid": "schema",
            "JobConfig": "workloads",
            "KeySpec": "schema",
            "SglangConfig": "workloads",
            "config_path": "load",
            "format_hosts": "load",
            "load_config": "load",
            "resolve_host": "load",
        },
    )
