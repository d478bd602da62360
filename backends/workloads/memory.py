"""What a job was seen to need of its GPUs' memory, for its restart's free-GPU check.

``JobMemory.observe`` follows the job's own processes on each of its GPUs (another
container's or the host's are not the job's: CT 201's jupyter on GPU 6 is not the
drafter's need); ``oom`` notes the GPU its CUDA OOM named, what it tried to allocate
there and what PyTorch's line said the job held then. ``need_mib(gpu)`` is then the most
it held there, seen or said, plus what it failed to get where it ran out: a restart that
gets less walks back into the OOM. Samples come seconds apart and a job's peak is the
instant before its OOM, so the OOM line's own figure is often the only one that saw it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gpumon.backends.alerts.facts import MIB
from gpumon.backends.model import GpuProcess

__all__ = ["JobMemory"]


@dataclass
class JobMemory:
    """One job's memory as gpumon saw it (MiB). ``peak``: the most its own processes held
    on each GPU; ``tried``: where it ran out, what its OOM said it tried to allocate;
    ``ran_out``: the GPU its last OOM named, until it is restarted (the GPU where its
    incident's cause may still be); ``pids``: the PIDs its processes were seen under on
    each GPU (the container's and the host's), to find its own in an OOM line."""

    peak: dict[int, int] = field(default_factory=dict)
    tried: dict[int, int] = field(default_factory=dict)
    ran_out: int | None = None
    pids: dict[int, set[int]] = field(default_factory=dict)

    def observe(self, gpu: int, own: Iterable[GpuProcess]) -> None:
        """The job's own processes on ``gpu`` now (their memory, where reported)."""
        own = list(own)
        self.pids.setdefault(gpu, set()).update(
            pid for p in own for pid in (p.pid, p.host_pid) if pid is not None
        )
        known = [p.memory_mib for p in own if p.memory_mib is not None]
        if known:
            self._held(gpu, sum(known))

    def oom(
        self,
        gpu: int,
        tried_mib: int | None,
        in_use_bytes: int | None = None,
        in_use_by_pid: Iterable[tuple[int, int]] = (),
    ) -> None:
        """Its CUDA OOM named ``gpu``, said it tried to allocate ``tried_mib`` and what
        its own process held (``in_use_bytes``: PyTorch's "this process has"; inside an
        LXC its own process is one of ``in_use_by_pid``, (PID, bytes), under its host
        PID)."""
        self.ran_out = gpu
        if tried_mib:
            self.tried[gpu] = max(self.tried.get(gpu, 0), tried_mib)
        mine = self.pids.get(gpu, set())
        reported = [size for pid, size in in_use_by_pid if pid in mine]
        if in_use_bytes is not None:
            reported.append(in_use_bytes)
        if reported:  # PyTorch's 2-decimal GiB, rounded up: a restart never needs less
            self._held(gpu, -(-sum(reported) // MIB))

    def _held(self, gpu: int, mib: int) -> None:
        self.peak[gpu] = max(self.peak.get(gpu, 0), mib)

    def restarted(self) -> None:
        """Restarted: its OOM's GPU is no longer where its cause is (what it needed stays)."""
        self.ran_out = None

    def need_mib(self, gpu: int) -> int | None:
        """What the job needs on ``gpu`` as seen: the most it held there (sampled, or
        said by its OOM line), and where it ran out what it failed to get on top (the
        log's line may come before the sample of its peak, so the two are added when
        asked); None when it was never seen there."""
        held = self.peak.get(gpu)
        return None if held is None else held + self.tried.get(gpu, 0)
