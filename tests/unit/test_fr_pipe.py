"""Which debug pipe a rank reads, as PyTorch names it: ``DumpPipe(rank)`` in
torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp (2.5 onwards) makes ``STEM<rank>.pipe``
from TORCH_NCCL_DEBUG_INFO_PIPE_FILE only while the trace buffer is over 0, for the
default group's rank (the global one); ProcessGroupXCCL's reads TORCH_FR_DEBUG_INFO_PIPE_FILE."""

from __future__ import annotations

from gpumon.backends.torchenv.flight_recorder import FrSetup

ON = {"TORCH_FR_BUFFER_SIZE": "2000", "RANK": "3"}


def test_the_pipe_is_the_stem_and_the_global_rank() -> None:
    setup = FrSetup(1, {**ON, "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": "/var/tmp/fr/pipe_"})
    assert setup.pipe == "/var/tmp/fr/pipe_3.pipe"
    older = FrSetup(
        1,
        {"TORCH_NCCL_TRACE_BUFFER_SIZE": "20", "RANK": "0", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": "p"},
    )
    assert older.pipe == "p0.pipe"
    assert FrSetup(1, {**ON, "TORCH_FR_DEBUG_INFO_PIPE_FILE": "x_"}).pipe == "x_3.pipe"


def test_no_pipe_without_a_stem_a_buffer_or_a_rank() -> None:
    assert FrSetup(1, ON).pipe is None
    stem = {"TORCH_NCCL_DEBUG_INFO_PIPE_FILE": "/tmp/p_"}
    assert FrSetup(1, {**stem, "RANK": "0"}).pipe is None  # recorder off: torch makes none
    assert FrSetup(1, {**stem, "TORCH_FR_BUFFER_SIZE": "0", "RANK": "0"}).pipe is None
    assert FrSetup(1, {**stem, "TORCH_FR_BUFFER_SIZE": "5"}).pipe is None  # the launcher
    assert FrSetup(1, {**stem, **ON, "RANK": "x"}).pipe is None
