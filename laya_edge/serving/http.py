"""HTTP service: upstream laya's `POST /v1/systemone` wire format, answered by a Router.

Install with `pip install "laya-edge[serve]"` (Starlette, uvicorn, pydantic, prometheus_client).
Routes:

- `GET /health/live`: liveness, always open: the process is up.
- `GET /health/ready` (and `GET /health`, for upstream's clients): 200 when a model can load
  (with `preload`, when all of them are loaded), else 503 with the reason; with a valid token
  (or no auth) also what is loaded and, per model, whether it can load (laya_edge.serving.health).
- `GET /openapi.json`: the OpenAPI document of these routes and their request bodies.
- `GET /metrics`: this app's Prometheus metrics (laya_edge.serving.metrics), token as /openapi.json.
- `POST /v1/systemone`: `{"state", "questions", ...controls}` -> one result, as `Router.predict`.
- `POST /v1/systemone/batch`: `{"states", "questions", ...controls}` ->
  `{"results", "total_usage"}`, as `Router.predict_batch` (one forward pass per question group).

Bodies are validated by their schema (laya_edge.serving.schema) before anything else reads them:
a wrong type, a missing field or an unknown one (hooks included: hooks are the operator's,
installed on the Router) is a 422 naming the field and the type it takes. Choice and score answers
gain `x_jev_confidence` (`confidence.jev_confidence`), as upstream's server adds; a question key
that nothing reads (a misspelt `"critera"`) is ignored, as upstream does, and named in an
`X-Laya-Warning` response header, one per key.

Every error is JSON `{"detail": "..."}`: 400 malformed body, 401 missing or wrong bearer token,
408 body too slow, 413 over a size limit, 422 invalid field, question or control (the message
names it), 503 queue full or wait expired (laya_edge.serving.admission) or the model failed to
load, 500 inference failed (details only in the log). Limits are checked before any inference;
Router calls run in worker threads, at most `max_concurrent` at once, merged by
laya_edge.serving.batching when batching is on, so a slow request does not block the health
routes. Every answer, errors included, carries `X-Request-ID` (the client's, or a new
one), and every error logged names it: `request <id>: inference failed`.
"""
from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Dict, List, Optional, Sequence

from ..confidence import jev_confidence
from ..encode import serialise_state

API_KEY_ENV = "LAYA_EDGE_API_KEY"
WARNING_HEADER = "X-Laya-Warning"
MAX_WARNING_HEADERS = 8
MAX_WARNING_CHARS = 300
# the name the service has always logged under, kept so existing log filters still match
_log = logging.getLogger("laya_edge.serve")


@dataclass(frozen=True)
class Limits:
    """What one request may ask for; over a size limit is a 413 before any work is done, a
    `max_len`/`head_max_len` over `max_token_budget` a 422 (upstream's server limit)."""

    max_body_bytes: int = 1 << 20
    max_state_chars: int = 50_000
    max_questions: int = 64
    max_options: int = 100
    max_batch_states: int = 64
    # Router calls at once (None: 1 on a CPU, batching.GPU_CALLS on a GPU); each carries up to
    # `max_batch` requests, and up to `max_queue` more wait, each for `queue_timeout_s` at most
    max_concurrent: Optional[int] = None
    body_timeout_s: float = 10.0
    max_token_budget: int = 8192
    max_queue: int = 64
    queue_timeout_s: float = 10.0
    max_batch: Optional[int] = None  # None: batching.default_max_batch for the Router's device
    max_wait_ms: float = 5.0
    drain_timeout_s: float = 30.0


class HTTPError(Exception):
    """An error answer: its status code and the one-line `detail` the client sees."""

    def __init__(self, status: int, detail: str, headers: Optional[Dict[str, str]] = None):
        super().__init__(detail)
        self.status, self.detail, self.headers = status, detail, headers


def with_jev_confidence(result: Dict[str, Any]) -> Dict[str, Any]:
    """A copy of `result` whose choice and score answers carry `x_jev_confidence`."""
    answers = {}
    for qid, answer in (result.get("answers") or {}).items():
        value = jev_confidence(answer)
        answers[qid] = answer if value is None else dict(answer, x_jev_confidence=round(value, 4))
    return dict(result, answers=answers)


def check_request(state: Any, questions: Dict[str, Any], limits: Limits) -> None:
    """Size checks the Router does not make, on a body the schema has accepted."""
    if len(questions) > limits.max_questions:
        raise HTTPError(413, f"too many questions ({len(questions)} > {limits.max_questions})")
    for qid, question in questions.items():
        criteria = question.get("criteria")
        if isinstance(criteria, (list, dict)) and len(criteria) > limits.max_options:
            raise HTTPError(413, f"question {qid!r} has too many options "
                                 f"({len(criteria)} > {limits.max_options})")
    try:
        size = len(serialise_state(state))
    except ValueError as exc:
        raise HTTPError(400, str(exc)) from None
    if size > limits.max_state_chars:
        raise HTTPError(413, f"state too large ({size} > {limits.max_state_chars} characters)")


def check_budget(controls: Dict[str, Any], limits: Limits) -> None:
    """Upstream's server limit on the token budgets a request may ask for (422)."""
    for key in ("max_len", "head_max_len"):
        if controls.get(key, 0) > limits.max_token_budget:
            raise HTTPError(422, f"{key} exceeds server limit ({controls[key]} > "
                                 f"{limits.max_token_budget})")


def _validate_questions(questions: Dict[str, Any]) -> List[str]:
    """Refuse an invalid question (422); the warnings about keys nothing reads."""
    from ..questions import parse_questions, unknown_key_warnings

    try:
        parse_questions(questions)
    except (TypeError, ValueError) as exc:
        raise HTTPError(422, str(exc)) from None
    return unknown_key_warnings(questions)


def warning_values(messages: Sequence[str]) -> List[str]:
    """Header values for `messages`: ASCII (a header is Latin-1 and a question id may be any
    text), each cut to MAX_WARNING_CHARS, at most MAX_WARNING_HEADERS of them."""
    values = [message.encode("ascii", "backslashreplace").decode("ascii")[:MAX_WARNING_CHARS]
              for message in messages[:MAX_WARNING_HEADERS]]
    if len(messages) > MAX_WARNING_HEADERS:
        values.append(f"and {len(messages) - MAX_WARNING_HEADERS} more warnings like these")
    return values


def parse_json(raw: bytes) -> Dict[str, Any]:
    """The body as a JSON object, or 400 saying what is wrong with it in words."""
    try:
        body = json.loads(raw)
    except UnicodeDecodeError as exc:
        raise HTTPError(400, f"request body must be UTF-8 JSON (not valid {exc.encoding} at "
                             f"byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise HTTPError(400, f"request body must be valid JSON: {exc.msg} (line {exc.lineno}, "
                             f"column {exc.colno})") from None
    except ValueError:  # an integer too long for Python's int-from-text limit
        raise HTTPError(400, "request body must be valid JSON with numbers of at most 4300 "
                             "digits") from None
    except RecursionError:
        raise HTTPError(400, "request body is nested too deeply") from None
    if not isinstance(body, dict):
        raise HTTPError(400, "request body must be a JSON object")
    return body


def create_app(router: Any, api_key: Optional[str] = None, limits: Limits = Limits(),
               preload: Sequence[str] = ()) -> Any:
    """A Starlette app answering with `router` (a `laya_edge.Router`, hooks and all).

    `api_key`: when set, every route but liveness needs `Authorization: Bearer <api_key>`
    (readiness still answers its status without it). `preload`: models loaded in the background
    when the app starts; until all of them are loaded the service is live but not ready. The
    app adds a hook to `router` that counts model loads and evictions for `/metrics`.
    """
    from contextlib import asynccontextmanager

    from prometheus_client import CONTENT_TYPE_LATEST
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException as StarletteHTTPException
    from starlette.middleware import Middleware
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    from .. import __version__
    from .admission import Admission, Busy
    from .batching import Batcher, answer_batch, default_calls, default_max_batch
    from .health import Health
    from .metrics import Observed, ServiceMetrics, request_id, route_path
    from .schema import BatchRequest, SchemaError, SystemOneRequest, openapi_document, validate

    health = Health(router, preload)
    metrics = ServiceMetrics(router)
    device = getattr(router, "device", None)
    max_batch = limits.max_batch or default_max_batch(device)
    max_calls = limits.max_concurrent or default_calls(device)
    calls = asyncio.Semaphore(max_calls)
    batcher = (Batcher(lambda requests: answer_batch(router, requests), max_batch,
                       limits.max_wait_ms / 1000.0, calls, metrics.batch)
               if max_batch > 1 else None)
    # every call may carry a full batch: requests beyond those wait in the queue
    admission = Admission(max_calls * max_batch, limits.max_queue, limits.queue_timeout_s,
                          metrics)

    def authorised(request: Request) -> bool:
        if not api_key:
            return True
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(),
                                                                   api_key.encode())

    def require_auth(request: Request) -> None:
        if not authorised(request):
            raise HTTPError(401, "missing or invalid bearer token", {"WWW-Authenticate": "Bearer"})

    async def read_body(request: Request, schema: Any) -> Any:
        """The body, size-capped, timed, parsed and validated by `schema`."""
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limits.max_body_bytes:
            raise HTTPError(413, f"request body too large ({declared} > {limits.max_body_bytes} "
                                 "bytes)")

        async def collect() -> bytes:
            chunks: List[bytes] = []
            size = 0
            async for chunk in request.stream():
                size += len(chunk)
                if size > limits.max_body_bytes:
                    raise HTTPError(413, f"request body too large (over {limits.max_body_bytes} "
                                         "bytes)")
                chunks.append(chunk)
            return b"".join(chunks)

        try:
            raw = await asyncio.wait_for(collect(), limits.body_timeout_s)
        except asyncio.TimeoutError:
            raise HTTPError(408, f"request body not received within {limits.body_timeout_s:g} s")
        try:
            body = validate(schema, parse_json(raw))
        except SchemaError as exc:
            raise HTTPError(422, str(exc)) from None
        check_budget(body.controls(), limits)
        return body

    def failure(exc: Exception) -> HTTPError:
        """The answer to a Router call that raised: a model that failed to load is the
        server's trouble (503), a TypeError/ValueError the request's (422), else 500."""
        name = health.failed_load(exc)
        if name is not None:
            _log.error("request %s: model %r failed to load", request_id(), name, exc_info=exc)
            return HTTPError(503, f"model {name!r} failed to load; GET /health/ready says why")
        if isinstance(exc, (TypeError, ValueError)):
            return HTTPError(422, str(exc))
        _log.error("request %s: inference failed", request_id(), exc_info=exc)
        return HTTPError(500, "inference failed")

    async def infer(request: Request, work: Callable[[], Awaitable[Any]]) -> Any:
        """`work()` (a Router call in a worker thread, or a batched one) in one of the queue's
        slots; its failure as the HTTP error it means."""
        try:
            async with admission.admitted():
                began = time.perf_counter()
                try:
                    return await work()
                except Exception as exc:
                    raise failure(exc) from None
                finally:
                    metrics.inference(route_path(request.scope), time.perf_counter() - began)
        except Busy as exc:
            raise HTTPError(503, str(exc), {"Retry-After": "1"}) from None

    def predict(state: Any, questions: Dict[str, Any], controls: Dict[str, Any]) -> Awaitable:
        """One request's Router call: merged with others by the batcher when batching is on."""
        if batcher is not None:
            return batcher.submit(dict(controls, state=state, questions=questions))
        metrics.batch(1)
        return call(lambda: router.predict(state, questions, **controls))

    async def call(work: Callable[[], Any]) -> Any:
        """A Router call in a worker thread, when `calls` gives it a turn."""
        async with calls:
            return await run_in_threadpool(work)

    def answer(content: Any, began: float, warnings: Sequence[str]) -> JSONResponse:
        elapsed = (time.perf_counter() - began) * 1000.0
        response = JSONResponse(content, headers={"X-Inference-Time-Ms": f"{elapsed:.2f}",
                                                  "Server-Timing": f"inference;dur={elapsed:.2f}"})
        for value in warning_values(warnings):
            response.headers.append(WARNING_HEADER, value)
        return response

    async def live(request: Request) -> JSONResponse:
        """Liveness: the process is up (always open)."""
        return JSONResponse({"status": "ok"})

    async def ready(request: Request) -> JSONResponse:
        """Readiness: 503 with the reason until a model can load (with preload: all loaded)."""
        status, body = await run_in_threadpool(health.report, authorised(request))
        return JSONResponse(body, status_code=status)

    async def openapi(request: Request) -> JSONResponse:
        """This document."""
        require_auth(request)
        return JSONResponse(document)

    async def prometheus(request: Request) -> Response:
        """Prometheus metrics of this app, in the text format."""
        require_auth(request)
        return Response(metrics.exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def systemone(request: Request) -> JSONResponse:
        """Answer the questions about one state."""
        require_auth(request)
        body = await read_body(request, SystemOneRequest)
        check_request(body.state, body.questions, limits)
        warnings = _validate_questions(body.questions)
        began = time.perf_counter()
        result = await infer(request, lambda: predict(body.state, body.questions,
                                                      body.controls()))
        return answer(with_jev_confidence(result), began, warnings)

    async def systemone_batch(request: Request) -> JSONResponse:
        """Answer the same questions about many states."""
        require_auth(request)
        body = await read_body(request, BatchRequest)
        if len(body.states) > limits.max_batch_states:
            raise HTTPError(413, f"too many states ({len(body.states)} > "
                                 f"{limits.max_batch_states})")
        for state in body.states:
            check_request(state, body.questions, limits)
        warnings = _validate_questions(body.questions)
        controls = body.controls()
        gate = controls.pop("min_confidence", None)
        requests = [dict(controls, state=state, questions=body.questions)
                    for state in body.states]
        began = time.perf_counter()
        metrics.batch(len(requests))
        results = await infer(request, lambda: call(
            lambda: router.predict_batch(requests, min_confidence=gate)))
        usage = {key: sum(r.get("usage", {}).get(key, 0) for r in results)
                 for key in ("input_tokens", "output_tokens")}
        return answer({"results": [with_jev_confidence(r) for r in results],
                       "total_usage": usage}, began, warnings)

    async def http_error(request: Request, exc: HTTPError) -> JSONResponse:
        return JSONResponse({"detail": exc.detail}, status_code=exc.status, headers=exc.headers)

    async def starlette_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @asynccontextmanager
    async def lifespan(app: Any) -> Any:
        health.start_preload()
        yield

    endpoints = [("GET", "/health/live", live, None), ("GET", "/health/ready", ready, None),
                 ("GET", "/health", ready, None), ("GET", "/openapi.json", openapi, None),
                 ("GET", "/metrics", prometheus, None),
                 ("POST", "/v1/systemone", systemone, SystemOneRequest),
                 ("POST", "/v1/systemone/batch", systemone_batch, BatchRequest)]
    document = openapi_document("laya_edge", __version__, [
        (method, path, endpoint.__doc__.strip(), schema)
        for method, path, endpoint, schema in endpoints])
    return Starlette(routes=[Route(path, endpoint, methods=[method])
                             for method, path, endpoint, _ in endpoints],
                     exception_handlers={HTTPError: http_error,
                                         StarletteHTTPException: starlette_error},
                     middleware=[Middleware(Observed, metrics=metrics,
                                            routes=[path for _, path, _, _ in endpoints])],
                     lifespan=lifespan)


def run(router: Any, host: str = "127.0.0.1", port: int = 8000, api_key: Optional[str] = None,
        limits: Limits = Limits(), log_level: str = "info", preload: Sequence[str] = ()) -> None:
    """Serve `router` with uvicorn until SIGTERM or SIGINT; `preload` as `create_app` takes it.

    On the signal uvicorn drains: the listening socket closes, every request already accepted
    (answering or queued) is answered, for up to `limits.drain_timeout_s`, then the process
    ends (by the signal, as uvicorn re-raises it)."""
    import uvicorn

    uvicorn.run(create_app(router, api_key, limits, preload), host=host, port=port,
                log_level=log_level, timeout_graceful_shutdown=limits.drain_timeout_s)
