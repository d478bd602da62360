"""On the PYTHONPATH of every child process a test starts (tests/conftest.py): the real
nvidia-ml-py is a gpumon dependency, so an agent run on gpumon's interpreter would read the
machine's real GPUs where there are some; the tests' GPUs are the stand-ins (fake_smi.py,
fake_nvml/, which a test puts before this on the path when it wants NVML)."""

raise ImportError("pynvml is kept out of the tests' child processes (tests/support/no_nvml)")
