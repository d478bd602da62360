"""What the PyTorch wheel indexes serve, for tests/fixtures/upstream/torch-index/.

Run by ``scripts/capture-upstream torch-index`` with the project's own environment:
``python torch_index.py OUT_DIR``. It reads, for Linux x86_64 and torch 2.9 or later:

- each variant index's torch page (``https://download.pytorch.org/whl/<variant>/torch/``,
  PEP 503, read by the same code the agent's index probe uses): the releases it lists;
- PyPI's torch releases (``https://pypi.org/pypi/torch/json``): the un-suffixed build
  each release publishes there;
- for each of those builds (one cp312 wheel each), the wheel's own metadata
  (``*.dist-info/METADATA``: the CUDA it requires, its triton pin) and the arch list
  compiled into it (``torch.cuda.get_arch_list()``'s source, the ``CUDA_ARCH_FLAGS`` string in
  ``torch/lib/libtorch_python.so``, fetched alone from the wheel with HTTP range requests:
  about 10 MB of a 0.5 GB wheel; the metadata the same way);
- the torchvision and torchaudio releases on PyPI with the torch each pins.

It writes ``listing.json`` (what was read, and for each source that could not be read,
why) and prints the README's body. Nothing here runs at test time.
"""

from __future__ import annotations

import json
import re
import struct
import sys
import urllib.error
import urllib.parse
import urllib.request
import zlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpumon.backends.remote.index_probe import read_page
from gpumon.backends.torchenv.index import version_key, wheel_of

INDEX = "https://download.pytorch.org/whl"
PYPI = "https://pypi.org/pypi/{project}/json"
VARIANTS = ("cu126", "cu128", "cu129", "cu130", "cu132", "cu134", "cpu")
OLDEST = "2.9.0"
OLDEST_COMPANION = {"torchvision": "0.24.0", "torchaudio": "2.9.0"}  # paired with 2.9.0
PYTHON = "cp312"
TIMEOUT = 60.0
_ARCH_FLAGS = re.compile(rb"(?:(?:sm|compute)_[0-9]+[af]? )*(?:sm|compute)_[0-9]+[af]?")
_PIN = re.compile(r"^(?P<name>[A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?\s*(?P<spec>[^;]*)")


def get(url: str, headers: dict[str, str] | None = None) -> bytes:
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=TIMEOUT) as resp:
        body: bytes = resp.read()
        return body


def _range(url: str, start: int, end: int) -> bytes:
    return get(url, {"Range": f"bytes={start}-{end}"})


def wheel_member(url: str, wanted: str) -> bytes:
    """The first file of a remote wheel (a zip) whose name ends with ``wanted``, read
    through the zip's central directory: only that file's bytes are fetched."""
    head = urllib.request.Request(url, headers={"Range": "bytes=0-0"})
    with urllib.request.urlopen(head, timeout=TIMEOUT) as resp:
        size = int(resp.headers["Content-Range"].rsplit("/", 1)[1])
    tail = _range(url, max(0, size - 70_000), size - 1)
    end = tail.rfind(b"PK\x05\x06")
    count, cd_size, cd_off = struct.unpack("<HII", tail[end + 10 : end + 20])
    if 0xFFFFFFFF in (cd_size, cd_off) or count == 0xFFFF:  # zip64
        end64 = tail.rfind(b"PK\x06\x06")
        cd_size, cd_off = struct.unpack("<QQ", tail[end64 + 40 : end64 + 56])
    cd, p = _range(url, cd_off, cd_off + cd_size - 1), 0
    while cd[p : p + 4] == b"PK\x01\x02":
        method = struct.unpack("<H", cd[p + 10 : p + 12])[0]
        csize, usize = struct.unpack("<II", cd[p + 20 : p + 28])
        nlen, elen, clen = struct.unpack("<HHH", cd[p + 28 : p + 34])
        offset = struct.unpack("<I", cd[p + 42 : p + 46])[0]
        name = cd[p + 46 : p + 46 + nlen].decode()
        extra = cd[p + 46 + nlen : p + 46 + nlen + elen]
        if name.endswith(wanted):
            big = _zip64(extra, usize == 0xFFFFFFFF, csize == 0xFFFFFFFF, offset == 0xFFFFFFFF)
            csize, offset = big.get("csize", csize), big.get("offset", offset)
            local = _range(url, offset, offset + 29)
            start = offset + 30 + sum(struct.unpack("<HH", local[26:30]))
            data = _range(url, start, start + csize - 1)
            return zlib.decompress(data, -15) if method == 8 else data
        p += 46 + nlen + elen + clen
    raise KeyError(wanted)


def _zip64(extra: bytes, usize: bool, csize: bool, offset: bool) -> dict[str, int]:
    q = 0
    while q + 4 <= len(extra):
        kind, length = struct.unpack("<HH", extra[q : q + 4])
        if kind == 1:
            values = list(struct.unpack(f"<{length // 8}Q", extra[q + 4 : q + 4 + length]))
            out = {}
            for key, present in (("usize", usize), ("csize", csize), ("offset", offset)):
                if present:
                    out[key] = values.pop(0)
            return out
        q += 4 + length
    return {}


def arch_flags(url: str) -> list[str]:
    """The ``CUDA_ARCH_FLAGS`` string the build compiled in (``sm_75 ... compute_120``)."""
    lib = wheel_member(url, "torch/lib/libtorch_python.so")
    found = [m.group(0).decode() for m in _ARCH_FLAGS.finditer(lib) if b" " in m.group(0)]
    if not found:
        return []
    return max(found, key=len).split()


def requirements(url: str) -> dict[str, str]:
    """``Requires-Dist`` of the wheel's own ``*.dist-info/METADATA``, name -> pin, for the
    requirements that say which CUDA the build runs on, its triton, the torch it pairs with."""
    text = wheel_member(url, ".dist-info/METADATA").decode("utf-8", "replace")
    out = {}
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        m = _PIN.match(line.partition(":")[2].strip())
        if m and re.match(r"(cuda-toolkit|nvidia-cuda-runtime|triton|torch$)", m.group("name")):
            out[m.group("name")] = m.group("spec").strip().strip("()").strip()
    return out


def build(url: str, file: str) -> dict[str, Any]:
    row: dict[str, Any] = {"file": file}
    try:
        row["requires"] = requirements(url)
    except (urllib.error.URLError, OSError, ValueError, KeyError, struct.error, zlib.error) as e:
        row["requires_error"] = f"{type(e).__name__}: {e}"
    try:
        row["archs"] = arch_flags(url)
    except (urllib.error.URLError, OSError, ValueError, KeyError, struct.error, zlib.error) as e:
        row["archs_error"] = f"{type(e).__name__}: {e}"
    return row


def _ours(file: str) -> bool:
    wheel = wheel_of(file)
    return (
        wheel is not None
        and PYTHON in wheel.python
        and wheel.runs_on(PYTHON, "x86_64")
        and version_key(wheel.public) >= version_key(OLDEST)
    )


def read_indexes() -> tuple[dict[str, Any], dict[str, Any]]:
    indexes: dict[str, Any] = {}
    builds: dict[str, Any] = {}
    for variant in VARIANTS:
        page = read_page(f"{INDEX}/{variant}/torch/", TIMEOUT)
        files = [f for f in page["files"] if _ours(f)]
        versions = sorted({w.public for f in files if (w := wheel_of(f))}, key=version_key)
        indexes[variant] = {"url": page["url"], "error": page["error"], "versions": versions}
        for file in files:
            wheel = wheel_of(file)
            assert wheel is not None
            quoted = urllib.parse.quote(file)
            builds[f"{wheel.public}+{wheel.label or variant}"] = build(
                f"{INDEX}/{variant}/{quoted}", file
            )
    return indexes, builds


def pypi_files(project: str) -> dict[str, list[tuple[str, str, str]]]:
    """Release -> (file, URL, upload day) of ``project``'s Linux x86_64 wheels that a cp312
    interpreter can install."""
    base = PYPI.format(project=project)
    doc = json.loads(get(base))
    out: dict[str, list[tuple[str, str, str]]] = {}
    for release, files in doc["releases"].items():
        for f in files:
            name = str(f["filename"])
            wheel = wheel_of(name)
            if wheel is None or f.get("yanked") or not wheel.runs_on(PYTHON, "x86_64"):
                continue
            if re.search(r"[a-z]", release):  # pre-releases
                continue
            url = urllib.parse.urljoin(base, f["url"])
            out.setdefault(release, []).append((name, url, str(f["upload_time"])[:10]))
    return out


def read_pypi() -> dict[str, Any]:
    releases = pypi_files("torch")
    out: dict[str, Any] = {}
    for release in sorted(releases, key=version_key):
        if version_key(release) < version_key(OLDEST):
            continue
        picks = [f for f in releases[release] if f"-{PYTHON}-{PYTHON}-" in f[0]]
        if picks:
            out[release] = {**build(picks[0][1], picks[0][0]), "uploaded": picks[0][2]}
    return out


def read_companions() -> dict[str, Any]:
    """torchvision / torchaudio release -> the torch requirement of its wheel and the day
    it was uploaded (PyTorch uploads a torch release and its companions the same day)."""
    out: dict[str, Any] = {}
    for project in ("torchvision", "torchaudio"):
        rows: dict[str, Any] = {}
        try:
            releases = pypi_files(project)
        except (urllib.error.URLError, OSError, ValueError) as e:
            out[project] = {"error": f"{type(e).__name__}: {e}"}
            continue
        for release in sorted(releases, key=version_key):
            if version_key(release) < version_key(OLDEST_COMPANION[project]):
                continue
            file, url, uploaded = releases[release][0]
            try:
                torch = requirements(url).get("torch")
            except (urllib.error.URLError, OSError, ValueError, KeyError, struct.error) as e:
                rows[release] = {"file": file, "error": f"{type(e).__name__}: {e}"}
                continue
            rows[release] = {"file": file, "torch": torch, "uploaded": uploaded}
        out[project] = {"releases": rows}
    return out


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    indexes, index_builds = read_indexes()
    pypi = read_pypi()
    doc = {
        "read": datetime.now(UTC).strftime("%Y-%m-%d"),
        "platform": f"Linux x86_64, {PYTHON}",
        "oldest": OLDEST,
        "indexes": indexes,
        "index_builds": index_builds,
        "pypi": pypi,
        "companions": read_companions(),
    }
    (out / "listing.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    read = [v for v, i in indexes.items() if not i["error"]]
    unread = {v: i["error"] for v, i in indexes.items() if i["error"]}
    print(f"- `listing.json`: torch {OLDEST} and later for {doc['platform']}.")
    print(f"- PyPI: {', '.join(pypi)} (each wheel's metadata and compiled arch list).")
    print(f"- variant indexes read: {', '.join(read) or 'none'}.")
    for variant, why in unread.items():
        print(f"- `{INDEX}/{variant}/torch/` could not be read: {why}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
