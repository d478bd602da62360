"""The incident page of ``gpumon watch``: HTML, SVG plots and JSON on the exporter's listener."""

from gpumon.backends.web.access import allowed, is_loopback
from gpumon.backends.web.site import IncidentSite

__all__ = ["IncidentSite", "allowed", "is_loopback"]
