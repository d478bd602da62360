"""Which files a package index serves, read from the target (standard library only,
Python 3.8): ``swap-torch`` plans against the index the install will use, from where the
install runs. gpumon ships it through ``bootstrap`` like the doctor's probe.

argv[1] is a JSON object: ``urls`` (project pages, ``<index>/<project>/``) and
``timeout``. One JSON line on stdout: the interpreter's wheel tag (``cp311``), the
machine (``x86_64``) and per URL its HTTP status, the error when it could not be read,
and the file names it lists. Both index APIs are read: PEP 691 JSON
(``application/vnd.pypi.simple.v1+json``, ``files[].filename``, ``yanked``) when the
server offers it, else the PEP 503 HTML page (each ``<a>``: its text, else the last path
segment of its ``href`` unquoted; ``data-yanked`` ones left out). A ``file:`` URL of a
directory is read as pip reads it: its ``index.html`` (pip's ``_get_index_content``).
"""

from __future__ import annotations

import json
import platform
import sys
from html.parser import HTMLParser
from typing import Any

MAX_PAGE = 64 << 20  # download.pytorch.org's torch page is a few hundred KiB
ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.files: list[str] = []
        self._href: str | None = None
        self._yanked = False
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            found = dict(attrs)
            self._href = found.get("href") or ""
            self._yanked = "data-yanked" in found
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag != "a" or self._href is None:
            return
        from urllib.parse import unquote, urlsplit

        name = "".join(self._text).strip()
        if not name:
            name = unquote(urlsplit(self._href).path.rstrip("/").rsplit("/", 1)[-1])
        if name and not self._yanked:
            self.files.append(name)
        self._href = None


def on_disk(url: str) -> str:
    """A ``file:`` URL of a directory -> the URL of its ``index.html`` (what pip reads
    there); any other URL as it is."""
    import os
    import urllib.parse
    import urllib.request

    parts = urllib.parse.urlparse(url)
    if parts.scheme != "file" or not os.path.isdir(urllib.request.url2pathname(parts.path)):
        return url
    return urllib.parse.urljoin(url if url.endswith("/") else url + "/", "index.html")


def read_page(url: str, timeout: float) -> dict[str, Any]:
    import http.client
    import urllib.error
    import urllib.request

    request = urllib.request.Request(on_disk(url), headers={"Accept": ACCEPT})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            body = resp.read(MAX_PAGE)
            kind = resp.headers.get("Content-Type", "")
            status = resp.status
    except urllib.error.HTTPError as e:
        return {"url": url, "status": e.code, "error": f"HTTP {e.code}", "files": []}
    except (OSError, ValueError, http.client.HTTPException) as e:  # refused, DNS, timeout, TLS
        return {"url": url, "status": None, "error": f"{type(e).__name__}: {e}", "files": []}
    try:
        files = files_of(body.decode("utf-8", "replace"), kind)
    except (ValueError, AttributeError, TypeError) as e:
        return {"url": url, "status": status, "error": f"unreadable page: {e}", "files": []}
    return {"url": url, "status": status, "error": None, "files": files, "api": kind}


def files_of(text: str, content_type: str) -> list[str]:
    """The file names a project page lists, yanked ones left out (raises ValueError on
    a JSON page that is not JSON)."""
    if "json" in content_type:  # PEP 691
        doc = json.loads(text)
        return [
            str(f.get("filename"))
            for f in doc.get("files", [])
            if isinstance(f, dict) and f.get("filename") and not f.get("yanked")
        ]
    links = _Links()  # PEP 503
    links.feed(text)
    return links.files


def main(argv: list[str]) -> None:
    opts = json.loads(argv[1]) if len(argv) > 1 else {}
    timeout = float(opts.get("timeout", 20))
    pages = [read_page(str(u), timeout) for u in opts.get("urls") or []]
    out = {
        "python_tag": f"cp{sys.version_info[0]}{sys.version_info[1]}",
        "machine": platform.machine(),
        "pages": pages,
    }
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv)
