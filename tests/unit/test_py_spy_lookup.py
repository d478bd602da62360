"""The bundle's look for py-spy (``collect.py_spy_dumps``) says what it found: a machine
that answered "not here" and one that did not answer at all are different lines in the
index. Before, a Proxmox host whose link failed during the bundle was reported as having
no py-spy, beside the line that said the link failed."""

from __future__ import annotations

from collections.abc import Sequence

from memory_stream import memory_stream

from gpumon.backends.bundle.archive import BundleArchive
from gpumon.backends.bundle.collect import Budget, _Deadlined, py_spy_dumps
from gpumon.backends.bundle.scrub import Scrubber
from gpumon.backends.config import HostConfig
from gpumon.backends.transport import ProcessStream, Transport, TransportError

JUPYTER = {4242: "CT 201 jupyter-lab"}  # another container's process: its host PID only
NOT_THERE = (1, "")  # `command -v py-spy` where there is none
LINK_LOST = TransportError("ct200: the SSH link to pve1 was lost")


class Ct200(Transport):
    """CT 200 on a Proxmox host: each side answers ``command -v py-spy`` as the test
    says (an exit code and stdout), or fails as a lost link does."""

    def __init__(
        self, inside: tuple[int, str] | Exception, host: tuple[int, str] | Exception
    ) -> None:
        super().__init__(HostConfig(name="ct200", kind="ssh", ssh_host="pve1", container=200))
        self.inside, self.host_side = inside, host
        self.asked: list[tuple[str, list[str]]] = []

    def _answer(self, side: str, argv: Sequence[str]) -> ProcessStream:
        self.asked.append((side, list(argv)))
        answer = self.inside if side == "inside" else self.host_side
        if isinstance(answer, Exception):
            raise answer
        return memory_stream(lambda _: answer)

    async def open_stream(self, argv: Sequence[str]) -> ProcessStream:
        return self._answer("inside", argv)

    async def open_host_stream(self, argv: Sequence[str]) -> ProcessStream:
        return self._answer("host", argv)


async def index_of(
    ct: Ct200, pids: Sequence[int] = (), host_pids: dict[int, str] | None = None
) -> dict[str, str]:
    archive = BundleArchive(Scrubber(), "title")
    target = _Deadlined(ct, Budget.of(60.0), ends_itself=False)
    kept = await py_spy_dumps(
        archive, target, pids, 5.0, "a test", container=200, host_pids=host_pids
    )
    assert kept == 0
    assert all(argv == ["sh", "-c", "command -v py-spy"] for _, argv in ct.asked), ct.asked
    return dict(archive.missing_files)


async def test_a_host_that_answers_without_py_spy_is_said_to_have_none() -> None:
    missing = await index_of(Ct200(NOT_THERE, NOT_THERE), host_pids=JUPYTER)
    assert missing == {
        "py-spy-4242.txt": "CT 201 jupyter-lab, host PID 4242: not dumped: no py-spy was "
        "found on the Proxmox host (gpumon installs nothing there)"
    }


async def test_a_host_that_does_not_answer_is_not_said_to_lack_py_spy() -> None:
    ct = Ct200(NOT_THERE, LINK_LOST)
    missing = await index_of(ct, host_pids=JUPYTER)
    assert [side for side, _ in ct.asked] == ["host"]  # no PID of CT 200's own to dump
    assert missing == {
        "py-spy (Proxmox host)": "failed: ct200: the SSH link to pve1 was lost",
        "py-spy-4242.txt": "CT 201 jupyter-lab, host PID 4242: not dumped: the Proxmox host "
        "did not answer when gpumon looked for it (a look for py-spy got no answer: see its "
        "line in this index)",
    }


async def test_the_containers_own_pids_say_which_look_went_unanswered() -> None:
    """CT 200's own PIDs: py-spy is looked for inside, then on the host (the fallback)."""
    answered = await index_of(Ct200(NOT_THERE, NOT_THERE), pids=[1510])
    assert answered == {
        "py-spy": "not on the target nor on its Proxmox host (gpumon installs nothing there)"
    }
    ct = Ct200(NOT_THERE, LINK_LOST)
    unanswered = await index_of(ct, pids=[1510], host_pids=JUPYTER)
    assert [side for side, _ in ct.asked] == ["inside", "host"]
    assert unanswered["py-spy"] == (
        "the stacks were not taken (a look for py-spy got no answer: see its line in this index)"
    )
    assert unanswered["py-spy (Proxmox host)"] == "failed: ct200: the SSH link to pve1 was lost"
    assert "did not answer when gpumon looked for it" in unanswered["py-spy-4242.txt"]
