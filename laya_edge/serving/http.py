"""HTTP service: upstream laya's `POST /v1/systemone` wire format, answered by a Router.

Install with `pip install "laya-edge[serve]"` (Starlette and uvicorn). Routes:

- `GET /health`: liveness, always open; with a valid token (or no auth) also what is loaded.
- `POST /v1/systemone`: `{"state", "questions", ...controls}` -> one result, as `Router.predict`.
- `POST /v1/systemone/batch`: `{"states", "questions", ...controls}` ->
  `{"results", "total_usage"}`, as `Router.predict_batch` (one forward pass per question group).

Controls a body may carry: `model`, `task`, `lang`, `lang_guess`, `max_len`, `head_max_len`,
`min_confidence`. Anything else is refused (422) rather than ignored, hooks included: hooks are
the operator's, installed on the Router (or process-wide) before `create_app`. Choice and score
answers gain `x_jev_confidence` (`confidence.jev_confidence`), as upstream's server adds.

Every error is JSON `{"detail": "..."}`: 400 malformed body, 401 missing or wrong bearer token,
408 body too slow, 413 over a size limit, 422 invalid question or control (the message names
it), 503 over `max_concurrent` requests at once, 500 inference failed (details only in the log).
Limits are checked before any inference; inference runs in worker threads (the Router and its
agents are thread-safe), so a slow request does not block `/health`.
"""
from __future__ import annotations

import asyncio
import hmac
import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..confidence import jev_confidence
from ..encode import serialise_state

API_KEY_ENV = "LAYA_EDGE_API_KEY"
CONTROLS = ("model", "task", "lang", "lang_guess", "max_len", "head_max_len", "min_confidence")
# the name the service has always logged under, kept so existing log filters still match
_log = logging.getLogger("laya_edge.serve")


@dataclass(frozen=True)
class Limits:
    """What one request may ask for; over a limit is a 413 before any work is done."""

    max_body_bytes: int = 1 << 20
    max_state_chars: int = 50_000
    max_questions: int = 64
    max_options: int = 100
    max_batch_states: int = 64
    max_concurrent: int = 8
    body_timeout_s: float = 10.0


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


def check_request(state: Any, questions: Any, limits: Limits) -> None:
    """Shape and size checks the Router does not make: a missing state, oversize input."""
    if state is None:
        raise HTTPError(400, "'state' is required")
    if not isinstance(questions, dict) or not questions:
        raise HTTPError(400, "'questions' must be a non-empty object")
    if len(questions) > limits.max_questions:
        raise HTTPError(413, f"too many questions ({len(questions)} > {limits.max_questions})")
    for qid, question in questions.items():
        criteria = question.get("criteria") if isinstance(question, dict) else None
        if isinstance(criteria, (list, dict)) and len(criteria) > limits.max_options:
            raise HTTPError(413, f"question {qid!r} has too many options "
                                 f"({len(criteria)} > {limits.max_options})")
    try:
        size = len(serialise_state(state))
    except ValueError as exc:
        raise HTTPError(400, str(exc)) from None
    if size > limits.max_state_chars:
        raise HTTPError(413, f"state too large ({size} > {limits.max_state_chars} characters)")


def controls_from(body: Dict[str, Any], fields: tuple) -> Dict[str, Any]:
    """The request's controls; an unknown field is refused by name rather than ignored."""
    unknown = sorted(set(body) - set(fields) - set(CONTROLS))
    if unknown:
        raise HTTPError(422, f"unknown field(s) {', '.join(map(repr, unknown))}; a body takes "
                             f"{', '.join(fields + CONTROLS)}")
    return {key: body[key] for key in CONTROLS if body.get(key) is not None}


def _validate_questions(questions: Dict[str, Any]) -> None:
    from ..questions import parse_questions

    try:
        parse_questions(questions)
    except (TypeError, ValueError) as exc:
        raise HTTPError(422, str(exc)) from None


class Admission:
    """At most `limit` requests inside at once; the next one is told to come back (503)."""

    def __init__(self, limit: int):
        self._free = limit
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        with self._lock:
            if self._free <= 0:
                raise HTTPError(503, "server busy, try again later", {"Retry-After": "1"})
            self._free -= 1

    def __exit__(self, *exc_info: Any) -> None:
        with self._lock:
            self._free += 1


def create_app(router: Any, api_key: Optional[str] = None, limits: Limits = Limits()) -> Any:
    """A Starlette app answering with `router` (a `laya_edge.Router`, hooks and all).

    `api_key`: when set, every route but `/health`'s liveness needs `Authorization: Bearer
    <api_key>`.
    """
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException as StarletteHTTPException
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    admission = Admission(limits.max_concurrent)
    started = time.time()

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

    async def read_body(request: Request) -> Dict[str, Any]:
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
            body = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise HTTPError(400, f"request body must be valid JSON ({exc})") from None
        except RecursionError:
            raise HTTPError(400, "request body is nested too deeply") from None
        if not isinstance(body, dict):
            raise HTTPError(400, "request body must be a JSON object")
        return body

    async def infer(work: Callable[[], Any]) -> Any:
        try:
            return await run_in_threadpool(work)
        except (TypeError, ValueError) as exc:
            raise HTTPError(422, str(exc)) from None
        except Exception:
            _log.exception("inference failed")
            raise HTTPError(500, "inference failed") from None

    def timed(content: Any, began: float) -> JSONResponse:
        elapsed = (time.perf_counter() - began) * 1000.0
        return JSONResponse(content, headers={"X-Inference-Time-Ms": f"{elapsed:.2f}",
                                              "Server-Timing": f"inference;dur={elapsed:.2f}"})

    async def health(request: Request) -> JSONResponse:
        if not authorised(request):
            return JSONResponse({"status": "ok"})
        from .. import __version__

        return JSONResponse({"status": "ok", "version": __version__, "loaded": router.loaded,
                             "models": sorted(router.models),
                             "uptime_s": round(time.time() - started, 1)})

    async def parse(request: Request, field: str) -> Tuple[Any, Any, Dict[str, Any]]:
        """`(body[field], body["questions"], controls)` of a decision request."""
        body = await read_body(request)
        controls = controls_from(body, (field, "questions"))
        return body.get(field), body.get("questions"), controls

    async def systemone(request: Request) -> JSONResponse:
        require_auth(request)
        with admission:
            state, questions, controls = await parse(request, "state")
            check_request(state, questions, limits)
            _validate_questions(questions)
            began = time.perf_counter()
            result = await infer(lambda: router.predict(state, questions, **controls))
            return timed(with_jev_confidence(result), began)

    async def systemone_batch(request: Request) -> JSONResponse:
        require_auth(request)
        with admission:
            states, questions, controls = await parse(request, "states")
            if not isinstance(states, list) or not states:
                raise HTTPError(400, "'states' must be a non-empty list")
            if len(states) > limits.max_batch_states:
                raise HTTPError(413, f"too many states ({len(states)} > "
                                     f"{limits.max_batch_states})")
            for state in states:
                check_request(state, questions, limits)
            _validate_questions(questions)
            gate = controls.pop("min_confidence", None)
            requests = [dict(controls, state=state, questions=questions) for state in states]
            began = time.perf_counter()
            results = await infer(lambda: router.predict_batch(requests, min_confidence=gate))
            usage = {key: sum(r.get("usage", {}).get(key, 0) for r in results)
                     for key in ("input_tokens", "output_tokens")}
            return timed({"results": [with_jev_confidence(r) for r in results],
                          "total_usage": usage}, began)

    async def http_error(request: Request, exc: HTTPError) -> JSONResponse:
        return JSONResponse({"detail": exc.detail}, status_code=exc.status, headers=exc.headers)

    async def starlette_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    return Starlette(routes=[Route("/health", health, methods=["GET"]),
                             Route("/v1/systemone", systemone, methods=["POST"]),
                             Route("/v1/systemone/batch", systemone_batch, methods=["POST"])],
                     exception_handlers={HTTPError: http_error,
                                         StarletteHTTPException: starlette_error})


def run(router: Any, host: str = "127.0.0.1", port: int = 8000, api_key: Optional[str] = None,
        limits: Limits = Limits(), log_level: str = "info") -> None:
    """Serve `router` with uvicorn until interrupted."""
    import uvicorn

    uvicorn.run(create_app(router, api_key, limits), host=host, port=port, log_level=log_level)
