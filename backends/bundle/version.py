"""gpumon's version in words (``--version``, a bundle's ``version.txt``); a module of its
own so that ``--version`` imports nothing else of the bundle."""

from __future__ import annotations

__all__ = ["gpumon_version"]


def gpumon_version() -> str:
    """``gpumon X.Y.Z``, or says it is not installed (importlib.metadata costs ~12 ms:
    looked up only when asked)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"gpumon {version('gpumon-tui')}"
    except PackageNotFoundError:  # run from a source tree that is not installed
        return "gpumon (version unknown: not installed)"
