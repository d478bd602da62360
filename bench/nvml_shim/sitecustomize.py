# ruff: noqa
# mypy: ignore-errors
"""The benches' NVML shim (nvml_fake.py) at start-up, at no cost until ``pynvml`` is imported.

Python imports ``sitecustomize`` at every start; here it only puts a finder first on
``sys.meta_path`` that, when the process imports ``pynvml``, lets the normal finders load
it and then hands the module to ``nvml_fake.install``. Importing pynvml here, as the shim
did before, charged every process on PYTHONPATH for pynvml, ctypes and uuid (about 25 ms
of CPU and 2 MiB), processes that never use NVML included (gpumon's dashboard and its
one-shots, whose agent is the one that imports pynvml): on a real GPU host libnvidia-ml.so
costs nothing to a process that does not load it, so neither does the shim.
"""

import sys


class _PatchPynvml:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "pynvml":
            return None
        sys.meta_path.remove(_PatchPynvml)  # the normal finders find the real module
        try:
            import importlib.util

            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, _PatchPynvml)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            import nvml_fake

            nvml_fake.install(module)

        # a loader per spec (SourceFileLoader): patching it touches no other module
        loader.exec_module = exec_and_patch
        return spec


sys.meta_path.insert(0, _PatchPynvml)
