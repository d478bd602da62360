"""The bundle file: a ``.tar.gz`` created mode 0600, bounded in size, with ``index.txt``.

``BundleArchive.add(name, data, about)`` scrubs ``data`` and keeps it (cut to the per-file
cap); ``missing(name, why)`` notes what could not be had (a timeout, a refusal);
``write(path)`` writes every file and, last, ``index.txt``, which lists each file with what
it is and notes what was cut or is missing. The file is opened with ``O_CREAT | O_EXCL``
and mode 0600, so it is never readable by others, not even for a moment, and an existing
file is never overwritten.

Bounds: each file at most ``file_cap`` bytes (its tail is kept: the end of a log is what
matters), all files at most ``total_cap`` bytes before compression; what does not fit is
left out and said in the index. A ``.gz`` file is scrubbed inside (decompressed,
scrubbed, compressed again) and left out whole when over the cap. Scrubbing happens
before the cut, so a secret is never split by it into a piece the patterns no longer see.
"""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from gpumon.backends.bundle.scrub import Scrubber
from gpumon.backends.untrusted import printable

__all__ = ["FILE_CAP", "TOTAL_CAP", "BundleArchive", "BundleFile"]

TOTAL_CAP = 50 * 1024 * 1024  # bytes of all files, before compression
FILE_CAP = 16 * 1024 * 1024  # bytes of one file
INDEX = "index.txt"
CUT_NOTE = "[gpumon bundle: the start of this file was cut to fit the size cap]\n"


@dataclass(frozen=True, slots=True)
class BundleFile:
    name: str
    data: bytes
    about: str
    cut: int = 0  # bytes left out by the per-file cap
    binary: bool = False  # kept byte for byte (``add``'s ``binary``)


@dataclass
class BundleArchive:
    """The files of one bundle, scrubbed and bounded, until ``write``."""

    scrubber: Scrubber
    title: str
    total_cap: int = TOTAL_CAP
    file_cap: int = FILE_CAP
    files: list[BundleFile] = field(default_factory=list)
    missing_files: list[tuple[str, str]] = field(default_factory=list)  # (name, why)
    _size: int = 0

    @property
    def size(self) -> int:
        return self._size

    def names(self) -> list[str]:
        return [f.name for f in self.files]

    def room(self) -> int:
        """The most bytes one more file may hold: the per-file cap, or what the total
        cap leaves (what is read from the target is bounded by it before it is read)."""
        return max(min(self.file_cap, self.total_cap - self._size), 0)

    def add(self, name: str, data: bytes | str, about: str, *, binary: bool = False) -> bool:
        """Keep ``data`` (scrubbed, its tail when over ``file_cap``) as ``name``; False
        (and the reason noted) when the total cap leaves no room for it. ``binary``: kept
        byte for byte, whole or not at all (left out when it holds a secret, or is over
        the per-file cap)."""
        raw = data.encode("utf-8") if isinstance(data, str) else data
        if binary or name.endswith(".gz"):  # whole or not at all (a cut one is no use)
            if binary:
                whole = self.scrubber.binary(raw)
            else:  # scrubbed inside
                whole = gzip.compress(self.scrubber.data(gzip.decompress(raw)), mtime=0)
            if whole is None:
                self.missing(name, "left out: it holds a secret, and scrubbing would break it")
                return False
            if len(whole) > self.file_cap:
                self.missing(
                    name,
                    f"left out: {len(whole)} bytes, over the per-file cap of {self.file_cap} bytes",
                )
                return False
            clean = whole
        else:
            clean = self.scrubber.data(raw)
        cut = 0
        if len(clean) > self.file_cap:
            keep = max(self.file_cap - len(CUT_NOTE), 0)
            cut = len(clean) - keep
            tail = clean[len(clean) - keep :] if keep else b""
            clean = CUT_NOTE.encode() + tail.decode("utf-8", "ignore").encode()
        if self._size + len(clean) > self.total_cap:
            self.missing(
                name,
                f"left out: {len(clean)} bytes would pass the bundle's cap of "
                f"{self.total_cap} bytes",
            )
            return False
        self._size += len(clean)
        self.files.append(BundleFile(name, clean, about, cut, binary))
        return True

    def learn(self, values: Iterable[str]) -> None:
        """Secrets found while the bundle is made (a server's ``--api-key`` on its command
        line): scrubbed by value from every file to come and from those kept already (a
        binary one that holds one is taken out again, as ``add`` leaves it out)."""
        scrubber = self.scrubber.knowing(values)
        new = scrubber.secrets - self.scrubber.secrets
        if not new:
            return
        self.scrubber = scrubber
        only = Scrubber(frozenset(new))
        kept: list[BundleFile] = []
        for f in self.files:
            data: bytes | None = f.data
            if f.name.endswith(".gz"):
                inner = gzip.decompress(f.data)
                clean = only.data(inner)
                data = f.data if clean == inner else gzip.compress(clean, mtime=0)
            elif f.binary:
                data = only.binary(f.data)
            else:
                data = only.data(f.data)
            if data is None:
                self.missing(f.name, "left out: it holds a secret, and scrubbing would break it")
                self._size -= len(f.data)
                continue
            self._size += len(data) - len(f.data)
            kept.append(replace(f, data=data))
        self.files = kept

    def missing(self, name: str, why: str) -> None:
        """Note that ``name`` is not in the bundle, and why (said in the index)."""
        self.missing_files.append((name, self.scrubber.text(why)))

    def index_text(self) -> str:
        """The index: one line per file and per part left out. Names, paths and reasons
        quote the target (a log named with an ESC or a newline): each entry is made
        printable on one line here, so the index never carries a control character."""
        lines = [printable(self.title), "", "Files:"]
        width = max((len(f.name) for f in self.files), default=0)
        for f in self.files:
            cut = f" (cut to its last {len(f.data)} bytes: {f.cut} left out)" if f.cut else ""
            lines.append(printable(f"  {f.name.ljust(width)}  {f.about}{cut}"))
        if self.missing_files:
            lines += ["", "Not in this bundle:"]
            lines += [printable(f"  {name}: {why}") for name, why in self.missing_files]
        lines += [
            "",
            "Secrets of the config and of the environment, and anything shaped like one "
            "(tokens in URLs, Authorization headers, Bearer tokens, private keys), are "
            "replaced by <redacted> in every file.",
        ]
        return "\n".join(lines) + "\n"

    def write(self, path: Path, *, root: str = "") -> Path:
        """Write the bundle to ``path`` (created 0600; an existing file is an error:
        FileExistsError). ``root``: a folder name every file goes under in the archive.
        Raises OSError when it cannot be written (a partial file is removed)."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        now = time.time()
        # The index quotes headlines and paths from the target: scrubbed like the files.
        index = BundleFile(INDEX, self.scrubber.text(self.index_text()).encode(), "this list")
        try:
            with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
                for f in [index, *self.files]:
                    info = tarfile.TarInfo(f"{root}/{f.name}" if root else f.name)
                    info.size, info.mtime, info.mode = len(f.data), int(now), 0o600
                    tar.addfile(info, io.BytesIO(f.data))
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        return path
