"""Asking Prometheus: its HTTP query API over httpcore, values and errors as gpumon reports them.

The client is httpcore, the connection pool under httpx: async on the asyncio loop
Textual already runs (no thread per request, no second loop), pooled keep-alive
connections to the one server between refreshes, per-request timeouts, typed. httpx
itself would be the usual pick, but ``import httpx`` also imports its command-line module,
which loads Rich, click and Pygments wherever they are installed (Rich always is, beside
Textual): the headless ``gpumon fleet --check`` would start with the UI libraries and the
library layer would load Rich. httpcore is the same engine without that (its only
dependencies: h11, certifi, anyio); the little httpx adds here (query strings, form
bodies, basic auth) is a few lines of the standard library.

The API (https://prometheus.io/docs/prometheus/latest/querying/api/) answers JSON with
``status`` "success" or "error" (``errorType``, ``error``), and optionally ``warnings``
(a partial answer: say so, use the data). Sample values are strings: ``"NaN"``,
``"+Inf"``, ``"-Inf"`` included. 400 is a bad query, 422 one that cannot be executed,
503 a timeout or an overloaded server.
"""

from __future__ import annotations

import asyncio
import base64
import math
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpcore

from gpumon.backends.errors import GpumonError
from gpumon.backends.untrusted import loads, printable

GET_MAX = 1500  # longer expressions are POSTed (form-encoded): URLs have length limits
ERROR_MAX = 300  # characters of a server's error message quoted
MAX_CONNECTIONS = 4  # queries at once: more only made a 2-core Prometheus slower (bench_fleet)
KEEPALIVE_S = 120.0  # longer than the default refresh: one connection set is reused


class PrometheusError(GpumonError):
    """A query Prometheus answered with an error. ``status`` is the HTTP status (0: none),
    ``kind`` Prometheus' ``errorType`` (``bad_data``, ``execution``, ``timeout``...)."""

    def __init__(self, message: str, *, status: int = 0, kind: str = "") -> None:
        super().__init__(message)
        self.status, self.kind = status, kind


class PrometheusUnreachable(PrometheusError):
    """No answer at all: refused, timed out, DNS, TLS."""


@dataclass(frozen=True, slots=True)
class Series:
    """One series of a result: its labels and its (time, value) points, oldest first."""

    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]

    @property
    def value(self) -> float:
        """The last point's value (an instant vector has one point)."""
        return self.points[-1][1]

    @property
    def time(self) -> float:
        return self.points[-1][0]


@dataclass(slots=True)
class QueryStats:
    """What one refresh cost: requests, bytes received, seconds spent waiting."""

    requests: int = 0
    bytes: int = 0
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)


def parse_value(text: object) -> float:
    """A sample value as Prometheus sends it (a string): ``"12.5"``, ``"NaN"``, ``"+Inf"``,
    ``"-Inf"``. Raises ``ValueError`` for anything else."""
    if not isinstance(text, str):
        raise ValueError(f"sample value {text!r} is not a string")
    return float(text)  # Python reads NaN, +Inf, -Inf as Prometheus writes them


def finite(v: float | None) -> float | None:
    """``v``, or None for NaN and infinities (a value that says nothing about a GPU)."""
    return v if v is not None and math.isfinite(v) else None


def _short(text: str) -> str:
    text = printable(text)
    return text if len(text) <= ERROR_MAX else text[: ERROR_MAX - 1] + "…"


def parse_response(status: int, body: bytes, what: str) -> tuple[list[Series], list[str]]:
    """The series and warnings of one API answer. Raises ``PrometheusError`` saying the
    HTTP status, Prometheus' error type and message (or that the body is not its JSON)."""
    try:
        doc = loads(body)  # label values are a target's text: made printable
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        snippet = _short(body[:200].decode("utf-8", "replace"))
        raise PrometheusError(
            f"{what}: HTTP {status}, not a Prometheus API answer: {snippet!r}", status=status
        )
    if doc.get("status") != "success":
        kind = str(doc.get("errorType", "")) or "error"
        message = _short(str(doc.get("error", "no error message")))
        meaning = {400: "bad query", 422: "cannot be executed", 503: "timed out or overloaded"}
        why = meaning.get(status, "")
        raise PrometheusError(
            f"{what}: HTTP {status}{f' ({why})' if why else ''}: {kind}: {message}",
            status=status,
            kind=kind,
        )
    warnings = [_short(str(w)) for w in doc.get("warnings") or ()]
    data = doc.get("data") or {}
    result_type: Any = data.get("resultType")
    result: Any = data.get("result")
    try:
        if result_type == "vector":
            series = [_series(r["metric"], [r["value"]]) for r in result]
        elif result_type == "matrix":
            series = [_series(r["metric"], r["values"]) for r in result]
        elif result_type == "scalar":
            series = [_series({}, [result])]
        else:
            raise PrometheusError(f"{what}: unexpected result type {result_type!r}", status=status)
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise PrometheusError(f"{what}: malformed result: {_short(str(e))}", status=status) from e
    return series, warnings


def _series(metric: Mapping[str, Any], points: Sequence[Sequence[Any]]) -> Series:
    labels = {str(k): str(v) for k, v in metric.items()}
    return Series(labels, tuple((float(t), parse_value(v)) for t, v in points))


class QueryClient(Protocol):
    """What ``FleetSource`` asks of a client: ``PrometheusClient``, or the demo fleet's
    simulated answers (``fleet.demo``)."""

    async def query(self, expr: str, at: float | None = None) -> list[Series]: ...

    async def query_range(
        self, expr: str, start: float, end: float, step: float
    ) -> list[Series]: ...

    def take_stats(self) -> QueryStats: ...

    async def close(self) -> None: ...


class PrometheusClient:
    """Instant and range queries against one Prometheus; pooled HTTP connections.

    ``stats`` collects the cost of the queries since the last ``take_stats()``.
    """

    def __init__(
        self,
        base_url: str,
        *,
        headers: Mapping[str, str] | None = None,
        basic_auth: tuple[str, str] | None = None,
        timeout: float = 10.0,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        sent = {"Accept": "application/json", "User-Agent": "gpumon", **(headers or {})}
        if basic_auth is not None:
            pair = f"{basic_auth[0]}:{basic_auth[1]}".encode()
            sent["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
        self._headers = [(k.encode(), v.encode()) for k, v in sent.items()]
        self._timeouts = dict.fromkeys(("connect", "read", "write", "pool"), timeout)
        self._pool = httpcore.AsyncConnectionPool(
            max_connections=max_connections, keepalive_expiry=KEEPALIVE_S
        )
        self.stats = QueryStats()

    async def close(self) -> None:
        await self._pool.aclose()

    def take_stats(self) -> QueryStats:
        out, self.stats = self.stats, QueryStats()
        return out

    async def query(self, expr: str, at: float | None = None) -> list[Series]:
        """An instant query (``/api/v1/query``) at ``at`` (server time when None)."""
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return await self._call("/api/v1/query", params, expr)

    async def query_range(self, expr: str, start: float, end: float, step: float) -> list[Series]:
        """A range query (``/api/v1/query_range``): points every ``step`` seconds."""
        params = {
            "query": expr,
            "start": f"{start:.3f}",
            "end": f"{end:.3f}",
            "step": f"{max(step, 0.001):.3f}",
        }
        return await self._call("/api/v1/query_range", params, expr)

    async def _call(self, path: str, params: dict[str, str], expr: str) -> list[Series]:
        what = f"query {_short(expr) if len(expr) < 80 else _short(expr[:77]) + '…'}"
        form = urllib.parse.urlencode(params)
        url, method, body, headers = f"{self.base_url}{path}?{form}", "GET", b"", self._headers
        if len(expr) > GET_MAX:  # the form in the body: URLs have length limits
            url, method, body = f"{self.base_url}{path}", "POST", form.encode()
            headers = [*headers, (b"Content-Type", b"application/x-www-form-urlencoded")]
        started = time.perf_counter()
        try:
            response = await self._pool.request(
                method, url, headers=headers, content=body, extensions={"timeout": self._timeouts}
            )
        except httpcore.TimeoutException:
            raise PrometheusUnreachable(
                f"Prometheus at {self.base_url} did not answer within {self.timeout:g} s"
            ) from None
        except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol,
                OSError) as e:  # fmt: skip
            reason = _short(str(e) or type(e).__name__)
            raise PrometheusUnreachable(
                f"Prometheus at {self.base_url} unreachable: {reason}"
            ) from None
        finally:
            self.stats.seconds += time.perf_counter() - started
        self.stats.requests += 1
        self.stats.bytes += len(response.content)
        if response.status in (401, 403):
            raise PrometheusError(
                f"Prometheus at {self.base_url}: HTTP {response.status}: "
                "not allowed (check headers, token_env, basic_auth)",
                status=response.status,
            )
        # Off the event loop: a fleet's answer is a megabyte of JSON (tens of ms to decode).
        series, warnings = await asyncio.to_thread(
            parse_response, response.status, response.content, what
        )
        self.stats.warnings += warnings
        return series
