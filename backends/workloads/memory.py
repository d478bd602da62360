"""What a job was seen to need of its GPUs' memory, for its restart's free-GPU check.

``JobMemory.observe`` follows the job's own processes on each of its GPUs (another
container's or the host's are not the job's: CT 201's jupyter on GPU 6 is not the
drafter's need); ``oom`` notes the GPU its CUDA OOM named and what it tried to allocate
there. ``need_mib(gpu)`` is then the most it held there, plus what it failed to get where
it ran out: a restart that gets less walks back into the OOM.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gpumon.backends.model import GpuProcess

__all__ = ["JobMemory"]


@dataclass
class JobMemory:
    """One job's memory as gpumon saw it (MiB). ``peak``: the most its own processes held
    on each GPU; ``tried``: where it ran out, what its OOM said it tried to allocate;
    ``ran_out``: the GPU its last OOM named, until it is restarted (the GPU where its
    incident's cause may still be)."""

    peak: dict[int, int] = field(default_factory=dict)
    tried: dict[int, int] = field(default_factory=dict)
    ran_out: int | None = None

    def observe(self, gpu: int, own: Iterable[GpuProcess]) -> None:
        """The job's own processes on ``gpu`` now (their memory, where reported)."""
        known = [p.memory_mib for p in own if p.memory_mib is not None]
        if known:
            self.peak[gpu] = max(self.peak.get(gpu, 0), sum(known))

    def oom(self, gpu: int, tried_mib: int | None) -> None:
        """Its CUDA OOM named ``gpu`` and said it tried to allocate ``tried_mib``."""
        self.ran_out = gpu
        if tried_mib:
            self.tried[gpu] = max(self.tried.get(gpu, 0), tried_mib)

    def restarted(self) -> None:
        """Restarted: its OOM's GPU is no longer where its cause is (what it needed stays)."""
        self.ran_out = None

    def need_mib(self, gpu: int) -> int | None:
        """What the job needs on ``gpu`` as seen: the most it held there, and where it ran
        out what it failed to get on top (the log's line may come before the sample of
        its peak, so the two are added when asked); None when it was never seen there."""
        held = self.peak.get(gpu)
        return None if held is None else held + self.tried.get(gpu, 0)
