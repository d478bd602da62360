"""Headless Chromium (Debian's ``chromium``, which ``.ci/run`` installs) driven over the
DevTools protocol on a pipe (``--remote-debugging-pipe``: JSON messages ended by a NUL,
read on the browser's fd 3 and written on its fd 4), so a test needs no WebSocket client
and opens no port.

A test loads a page at a viewport size, reads what the page shows in one script run
(``Tab.read``: one evaluation sees one document, even when the page's meta refresh
reloads it meanwhile), takes a screenshot, and is told of everything a hostile page would
do: a dialog opening (``alert(1)`` ran), an uncaught exception, an error on the console
(the Content-Security-Policy refusing an inline script or handler says so there) and a
request the page made (an ``<img src=x>`` that became an element asks for ``/x``).

The protocol: https://chromedevtools.github.io/devtools-protocol/ (Target, Page,
Runtime, Log, Network, Emulation); the pipe is chromium's ``DevToolsPipeHandler``
(content/browser/devtools/devtools_pipe_handler.cc)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["SIZES", "Chromium", "Tab", "artefact_dir", "browser", "fits"]

# Where the screenshots stay: $GPUMON_TEST_ARTEFACTS/<test> when set (CI keeps that
# folder), else the test's own tmp_path (pytest keeps the last three runs' folders).
ARTEFACTS_ENV = "GPUMON_TEST_ARTEFACTS"


# What a page shows, read in one run of the browser's script engine: its text, its plots,
# and each element that reaches beyond the viewport's width (its right edge past the
# document's client width, or its left edge before 0), by tag, class and edges.
LAYOUT = """(() => {
  const root = document.documentElement;
  const width = root.clientWidth;
  const wide = [];
  for (const e of document.querySelectorAll("body, body *")) {
    const r = e.getBoundingClientRect();
    if (r.width > 0 && (r.right > width + 0.5 || r.left < -0.5)) {
      const cls = e.getAttribute("class");
      wide.push(`${e.tagName.toLowerCase()}${cls ? "." + cls.split(" ").join(".") : ""}`
        + ` ${Math.round(r.left)}..${Math.round(r.right)}`);
    }
  }
  return {
    text: document.body.innerText,
    plots: [...document.querySelectorAll("svg.plot")].map(p => p.getAttribute("class")),
    scrollWidth: root.scrollWidth,
    clientWidth: width,
    wide: wide,
  };
})()"""
SIZES = ((360, 740), (1280, 800))  # a phone's, a desktop's


def fits(shown: dict[str, Any], width: int) -> None:
    """Nothing is wider than the viewport: the document does not scroll sideways and no
    element's box reaches past its edges."""
    # A desktop's scroll bar takes its width from the viewport; a phone's lies over it.
    assert width - 20 <= shown["clientWidth"] <= width, shown["clientWidth"]
    assert shown["scrollWidth"] <= shown["clientWidth"], shown["scrollWidth"]
    assert shown["wide"] == [], shown["wide"]


def browser() -> str | None:
    """Debian's chromium, else None (the tests that need it skip)."""
    return shutil.which("chromium")


def artefact_dir(tmp_path: Path, test: str) -> Path:
    """The folder a test's screenshots go to (see ``ARTEFACTS_ENV``)."""
    root = os.environ.get(ARTEFACTS_ENV)
    folder = Path(root) / test if root else tmp_path / "artefacts"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class Chromium:
    """One headless browser; ``with Chromium(profile) as c: tab = c.tab(360, 740)``."""

    def __init__(self, profile: Path, timeout: float = 60.0) -> None:
        path = browser()
        assert path is not None, "chromium is not installed"
        self.timeout = timeout
        profile.mkdir(parents=True, exist_ok=True)
        self.log = profile / "chromium.log"  # what it said, for a failure's message
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # The browser wants the pipe on its fds 3 and 4: bash puts it there (dash takes
        # only one-digit descriptors in a redirection).
        redirect = f'exec "$@" 3<&{to_browser_r} 4>&{from_browser_w}'
        self.proc = subprocess.Popen(
            [
                "bash",
                "-c",
                redirect,
                "bash",
                path,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--remote-debugging-pipe",
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            pass_fds=(to_browser_r, from_browser_w),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("ab"),
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self._answers: dict[int, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError, AssertionError):  # gone already
            self.send("Browser.close")
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)

    def send(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        """Send one command and wait for its answer; the events meanwhile are kept."""
        sent = self._write(method, session, params)
        self._pump(lambda: sent in self._answers, f"the answer to {method}")
        got = self._answers.pop(sent)
        assert "error" not in got, f"{method}: {got['error']}"
        return dict(got.get("result", {}))

    def wait_event(self, method: str, session: str, after: int, what: str) -> None:
        """Until an event ``method`` of ``session`` came, at ``events[after:]`` or later."""
        self._pump(
            lambda: any(
                e.get("method") == method and e.get("sessionId") == session
                for e in self.events[after:]
            ),
            what,
        )

    def said(self) -> str:
        """The end of what the browser wrote on its stderr."""
        return self.log.read_text(errors="replace")[-2000:]

    def _write(self, method: str, session: str | None, params: dict[str, Any]) -> int:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        return self._next_id

    def _pump(self, done: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + self.timeout
        while not done():
            while b"\0" not in self._buffer:
                left = deadline - time.monotonic()
                assert left > 0 and self.proc.poll() is None, f"chromium: no {what}: {self.said()}"
                ready, _, _ = select.select([self._from_browser], [], [], left)
                if ready:
                    chunk = os.read(self._from_browser, 1 << 16)
                    assert chunk, f"chromium closed its pipe before {what}: {self.said()}"
                    self._buffer += chunk
            raw, _, self._buffer = self._buffer.partition(b"\0")
            message = json.loads(raw)
            if "id" in message:
                self._answers[message["id"]] = message
                continue
            self.events.append(message)
            if message.get("method") == "Page.javascriptDialogOpening":
                # An open dialog holds the page (its load, any script): dismiss it at
                # once; the test fails on it having opened.
                self._write(
                    "Page.handleJavaScriptDialog", message.get("sessionId"), {"accept": False}
                )

    def tab(self, width: int, height: int) -> Tab:
        """A new tab with a ``width`` x ``height`` viewport; a phone's (touch, the page's
        viewport meta honoured) below 600 px."""
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable", session)
        self.send(
            "Emulation.setDeviceMetricsOverride",
            session,
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=width < 600,
        )
        return Tab(self, session)


class Tab:
    """One tab of a ``Chromium``: load a page, read it, take its picture, and what it did."""

    def __init__(self, browser: Chromium, session: str) -> None:
        self.browser = browser
        self.session = session

    def load(self, url: str) -> None:
        """Open ``url`` and wait for its load event (a dialog is answered as it opens)."""
        mark = len(self.browser.events)
        self.browser.send("Page.navigate", self.session, url=url)
        self.browser.wait_event("Page.loadEventFired", self.session, mark, f"load of {url}")

    def read(self, expression: str) -> Any:
        """The value of ``expression`` (a JSON-able result) in the loaded document, taken
        once the document is complete (a meta refresh may be reloading it)."""
        deadline = time.monotonic() + self.browser.timeout
        wrapped = f"document.readyState === 'complete' ? {{value: ({expression})}} : null"
        while True:
            got = self.browser.send(
                "Runtime.evaluate", self.session, expression=wrapped, returnByValue=True
            )
            assert "exceptionDetails" not in got, got["exceptionDetails"]
            value = got["result"].get("value")
            if value is not None:
                return value["value"]
            assert time.monotonic() < deadline, "the document never completed"
            time.sleep(0.2)

    def layout(self) -> dict[str, Any]:
        """The page's text, its plots' classes and its width (``LAYOUT``)."""
        return dict(self.read(LAYOUT))

    def screenshot(self, path: Path) -> Path:
        """The whole page, at the viewport's width, as a PNG at ``path``."""
        size = self.browser.send("Page.getLayoutMetrics", self.session)["cssContentSize"]
        whole = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        got = self.browser.send(
            "Page.captureScreenshot",
            self.session,
            format="png",
            clip=whole,
            captureBeyondViewport=True,
        )
        path.write_bytes(base64.b64decode(got["data"]))
        return path

    def events(self, method: str) -> list[dict[str, Any]]:
        return [
            e
            for e in self.browser.events
            if e.get("method") == method and e.get("sessionId") == self.session
        ]

    def dialogs(self) -> list[str]:
        """The messages of the dialogs that opened (a script of the page ran)."""
        return [e["params"].get("message", "") for e in self.events("Page.javascriptDialogOpening")]

    def errors(self) -> list[str]:
        """Uncaught exceptions and errors said on the console (a refused script, a failed
        load), as text."""
        said = [
            f"{e['params']['entry'].get('text', '')} ({e['params']['entry'].get('url', '')})"
            for e in self.events("Log.entryAdded")
            if e["params"]["entry"].get("level") == "error"
        ]
        said += [
            " ".join(str(a.get("value", a.get("description", ""))) for a in e["params"]["args"])
            for e in self.events("Runtime.consoleAPICalled")
            if e["params"].get("type") in ("error", "assert")
        ]
        said += [
            e["params"]["exceptionDetails"].get("text", "")
            for e in self.events("Runtime.exceptionThrown")
        ]
        return said

    def requested(self) -> list[str]:
        """Every URL the tab asked for (the pages, and anything a page's markup loads)."""
        return [e["params"]["request"]["url"] for e in self.events("Network.requestWillBeSent")]
