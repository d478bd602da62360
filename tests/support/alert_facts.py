"""The typed facts gpumon's rules give an alert (``backends/alerts/facts.py``), for a test
that builds its alerts by hand (an incident, a page, a strip at one moment): a hand-made
alert carries what the raised one would, so that what renders it (the headline, the
strip, the notifiers) reads the facts it reads in gpumon, never the message.

``log_facts`` runs the engine itself over the log line; the others say what its rule
sets (``AlertEngine._foreign``, ``_kernel_line``, ``AutoRestarter``)."""

from __future__ import annotations

from dataclasses import replace

from gpumon.backends.alerts.engine import AlertEngine, AlertRules
from gpumon.backends.alerts.facts import AlertFacts, Held, Holder, Restart, XidFacts
from gpumon.backends.parsers.xid import xid_action, xid_info

__all__ = ["held_facts", "log_facts", "restart_facts", "xid_facts"]


def log_facts(line: str) -> AlertFacts:
    """The facts of the alert the engine raises for a job log's ``line`` (a CUDA OOM's
    bytes tried and free, its words), but its GPU: the hand-made alert's own."""
    engine = AlertEngine("h", AlertRules(), clock=lambda: 0.0)
    (alert,) = engine.on_log_lines("/job.log", [line])
    return replace(alert.facts, gpu=None, names_gpu=False)


def held_facts(
    gib: float, container: str | None = "201", program: str = "jupyter-lab"
) -> AlertFacts:
    """A ``foreign_process`` alert's: ``gib`` held by ``program`` of ``container`` (CT 201's
    jupyter-lab, the demo's holder), the only holder; its text names the GPU."""
    return AlertFacts(held=Held(gib * 1024, Holder(container, None, program)), names_gpu=True)


def xid_facts(code: int, whose: str | None = None) -> AlertFacts:
    """An Xid alert's: the code, its meaning and NVIDIA's action from the Xid table."""
    return AlertFacts(xid=XidFacts(code, xid_info(code).meaning, xid_action(code), whose))


def restart_facts(step: str, attempt: int | None = None, attempts: int | None = None,
                  delay_s: float | None = None) -> AlertFacts:  # fmt: skip
    """An ``auto_restart`` alert's: what the automatic restart decided (``Restart``)."""
    return AlertFacts(restart=Restart(step, attempt, attempts, delay_s))
