"""The stand-in pynvml (``fake_nvml/pynvml.py``) loaded in this process, for the tests
that call the agent's NVML code directly; it reads its ``FAKE_NVML_*`` environment as it
is loaded and called."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

FAKE_NVML = Path(__file__).parent / "fake_nvml" / "pynvml.py"


def load_fake_nvml(name: str) -> ModuleType:
    """A fresh copy of the stand-in, as module ``name``."""
    spec = importlib.util.spec_from_file_location(name, FAKE_NVML)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
