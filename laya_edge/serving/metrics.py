"""What the HTTP service tells its operator: Prometheus metrics and a request id per request.

Each app keeps its metrics in its own `CollectorRegistry` (never prometheus_client's global one),
so several apps live in one process without sharing counts. `Observed` is the ASGI middleware
that times and counts every request, errors included, and gives each one an id: the client's
`X-Request-ID` when it is short printable ASCII, else a new one; the answer echoes it and every
error the service logs names it (`request_id()` reads it, in worker threads too, since
Starlette's `run_in_threadpool` copies the context). The metrics are listed in
docs/serving.md#metrics-and-request-ids.
"""
from __future__ import annotations

import contextvars
import logging
import time
import uuid
from typing import Any, Collection, Dict, Optional

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.datastructures import Headers
from starlette.responses import JSONResponse

REQUEST_ID_HEADER = "X-Request-ID"
MAX_REQUEST_ID_CHARS = 128
OTHER_ROUTE = "other"  # every unknown path, so a scanner cannot grow the label set
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
_request_id: contextvars.ContextVar[Optional[str]] = contextvars.ContextVar(
    "laya_edge_request_id", default=None)
_log = logging.getLogger("laya_edge.serve")


def request_id() -> Optional[str]:
    """The id of the request being answered, or None outside any request."""
    return _request_id.get()


def accepted_request_id(value: Optional[str]) -> str:
    """The client's id when it is safe to echo and log (1 to 128 printable ASCII characters),
    else a new uuid4 hex: a header value must not smuggle line breaks into logs."""
    if value and len(value) <= MAX_REQUEST_ID_CHARS and value.isascii() and value.isprintable():
        return value
    return uuid.uuid4().hex


def route_path(scope: Dict[str, Any]) -> str:
    """The path a route matches: the request's path without the app's `root_path`."""
    path, root = scope["path"], scope.get("root_path", "")
    return (path[len(root):] or "/") if root and path.startswith(root) else path


class LoadCounter:
    """A Router hook counting model loads and evictions; it only reads `ctx.model`, so the
    Router's other hooks see the same context, and it never raises (with the Router's
    `hooks_raise` a raising hook would fail the load it observes)."""

    def __init__(self, loads: Counter, evictions: Counter):
        self._loads, self._evictions = loads, evictions

    def on_load(self, ctx: Any) -> None:
        self._count(self._loads, ctx)

    def on_evict(self, ctx: Any) -> None:
        self._count(self._evictions, ctx)

    @staticmethod
    def _count(counter: Counter, ctx: Any) -> None:
        try:
            counter.labels(model=str(ctx.model)).inc()
        except Exception:  # a metric must never cost a model load
            _log.warning("counting a model load or eviction failed", exc_info=True)


class ServiceMetrics:
    """The metrics of one app, in their own registry; the service and its request queue report
    to them through these methods (all thread-safe)."""

    def __init__(self, router: Any):
        self.registry = CollectorRegistry()
        registry = self.registry
        self._requests = Counter("laya_edge_requests", "HTTP requests answered, by route and "
                                 "status", ["route", "status"], registry=registry)
        self._request_seconds = Histogram("laya_edge_request_seconds", "Time from a request's "
                                          "arrival to its response's start", ["route"],
                                          registry=registry)
        self._inference_seconds = Histogram("laya_edge_inference_seconds", "Time inside the "
                                            "Router call", ["route"], registry=registry)
        self._queue_depth = Gauge("laya_edge_queue_depth", "Requests waiting for a slot now",
                                  registry=registry)
        self._queue_wait = Histogram("laya_edge_queue_wait_seconds", "Time a request waited "
                                     "for a slot", registry=registry)
        self._batch_size = Histogram("laya_edge_batch_size", "Requests merged into one Router "
                                     "call", buckets=BATCH_SIZE_BUCKETS, registry=registry)
        loaded = Gauge("laya_edge_models_loaded", "Checkpoints resident in the Router now",
                       registry=registry)
        loaded.set_function(lambda: len(router.loaded))
        router.add_hook(LoadCounter(
            Counter("laya_edge_model_loads", "Checkpoints built, by model", ["model"],
                    registry=registry),
            Counter("laya_edge_model_evictions", "Checkpoints freed, by model", ["model"],
                    registry=registry)))

    def request(self, route: str, status: int, seconds: float) -> None:
        """One answered request (`route` as the app matched it, or OTHER_ROUTE)."""
        self._requests.labels(route=route, status=str(status)).inc()
        self._request_seconds.labels(route=route).observe(seconds)

    def inference(self, route: str, seconds: float) -> None:
        """One Router call made for `route`, and how long it took."""
        self._inference_seconds.labels(route=route).observe(seconds)

    def queue_entered(self) -> None:
        """A request started waiting for a slot."""
        self._queue_depth.inc()

    def queue_left(self, waited_s: float) -> None:
        """A request stopped waiting (admitted or turned away) after `waited_s` seconds."""
        self._queue_depth.dec()
        self._queue_wait.observe(waited_s)

    def batch(self, size: int) -> None:
        """`size` requests were answered by one Router call."""
        self._batch_size.observe(size)

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format."""
        return generate_latest(self.registry)


class Observed:
    """ASGI middleware: per HTTP request, set its id, echo it in `X-Request-ID` and count the
    answer in `metrics`; an error nothing else handled is logged with the id and answered with
    a JSON 500, like every other error."""

    def __init__(self, app: Any, metrics: ServiceMetrics, routes: Collection[str]):
        self.app, self.metrics, self.routes = app, metrics, frozenset(routes)

    async def __call__(self, scope: Dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        ident = accepted_request_id(Headers(scope=scope).get(REQUEST_ID_HEADER))
        path = route_path(scope)
        route = path if path in self.routes else OTHER_ROUTE
        began = time.perf_counter()
        started = False

        async def observed_send(message: Dict[str, Any]) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                self.metrics.request(route, message["status"], time.perf_counter() - began)
                message = dict(message, headers=[*message.get("headers", ()),
                                                  (REQUEST_ID_HEADER.lower().encode(),
                                                   ident.encode())])
            await send(message)

        token = _request_id.set(ident)
        try:
            await self.app(scope, receive, observed_send)
        except Exception:
            if started:
                raise
            _log.exception("request %s: unhandled error", ident)
            await JSONResponse({"detail": "internal error"}, status_code=500)(
                scope, receive, observed_send)
        finally:
            _request_id.reset(token)
