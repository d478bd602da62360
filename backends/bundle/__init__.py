"""``gpumon bundle``: an incident's evidence in one scrubbed, bounded ``.tar.gz`` for the
hand-over (see ``build``; what it holds: ``collect``; scrubbing: ``scrub``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpumon.backends.lazy import lazy_exports

if TYPE_CHECKING:
    from .build import (
        DEMO_PAST_S,
        BundleOptions,
        BundleResult,
        HostUnreachable,
        bundle_host,
        bundle_incident,
        bundle_monitor,
        bundle_recording,
        bundle_unreachable,
        default_name,
    )
    from .process_env import read_environment
    from .scrub import REDACTED, Scrubber
    from .timeline import NoIncident

__all__ = [
    "DEMO_PAST_S",
    "REDACTED",
    "BundleOptions",
    "BundleResult",
    "HostUnreachable",
    "NoIncident",
    "Scrubber",
    "bundle_host",
    "bundle_incident",
    "bundle_monitor",
    "bundle_recording",
    "bundle_unreachable",
    "default_name",
    "read_environment",
]

# Not seen by mypy: a module __getattr__ would make every unknown name Any; mypy checks
# the names against the TYPE_CHECKING imports above instead.
if not TYPE_CHECKING:
    __getattr__ = lazy_exports(
        __name__,
        {
            "read_environment": "process_env",
            "REDACTED": "scrub",
            "Scrubber": "scrub",
            "NoIncident": "timeline",
            "DEMO_PAST_S": "build",
            "BundleOptions": "build",
            "BundleResult": "build",
            "HostUnreachable": "build",
            "bundle_host": "build",
            "bundle_incident": "build",
            "bundle_monitor": "build",
            "bundle_recording": "build",
            "bundle_unreachable": "build",
            "default_name": "build",
        },
    )
