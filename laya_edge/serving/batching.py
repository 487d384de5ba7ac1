"""Dynamic batching for the HTTP service: single requests that arrive together, with the same
questions and controls, answered by one `Router.predict_batch`.

Each request still gets exactly its own result: the Router answers every request of a batch as
`predict` would (its own routing, usage and hook events), and if the batch fails, each request is
answered alone, so a bad one fails only itself. Ray Serve deployments gather requests with Ray's
own `@serve.batch` and answer them with the same `answer_batch`.
"""
from __future__ import annotations

import asyncio
import json
from typing import Any, Callable, Dict, List, Optional, Sequence

# Requests per batch where the Router runs on a GPU: batching is the main throughput lever there.
GPU_MAX_BATCH = 16
# Router calls at once on a GPU (one fills its batch while another runs); a CPU session already
# uses every core, so calls there take turns (docs/serving.md, "Under load").
GPU_CALLS = 4
GPU_PROVIDERS = ("CUDAExecutionProvider", "TensorrtExecutionProvider")


def answer_batch(router: Any, requests: List[Dict[str, Any]]) -> List[Any]:
    """One `Router.predict_batch` per `min_confidence` value (a call-level option there); each
    request's slot holds its result, or the exception it alone raised."""
    results: List[Any] = [None] * len(requests)
    groups: Dict[str, List[int]] = {}
    for i, request in enumerate(requests):
        groups.setdefault(json.dumps(request.get("min_confidence"), sort_keys=True), []).append(i)
    for indices in groups.values():
        gate = requests[indices[0]].get("min_confidence")
        batch = [{k: v for k, v in requests[i].items() if k != "min_confidence"} for i in indices]
        answers = answer_each(lambda part: router.predict_batch(part, min_confidence=gate), batch)
        for i, answer in zip(indices, answers):
            results[i] = answer
    return results


def answer_each(answer: Callable[[List[Any]], List[Any]], batch: List[Any]) -> List[Any]:
    """`answer(batch)` in one pass; if that fails, each request alone, so a bad one fails only
    itself (the others' hooks then run a second time). A slot holds the answer, or the
    exception its request alone raised."""
    try:
        return answer(batch)
    except Exception as exc:
        if len(batch) == 1:
            return [exc]
        return [result for request in batch for result in answer_each(answer, [request])]


def on_gpu(device: Optional[str], available: Optional[Sequence[str]] = None) -> bool:
    """Whether a Router with `device` answers on CUDA or TensorRT; `auto` (or None) follows the
    providers onnxruntime offers (`available`, read from onnxruntime when not given)."""
    kind = (device or "auto").split(":", 1)[0].strip().lower()
    if kind == "auto":
        if available is None:
            import onnxruntime

            available = onnxruntime.get_available_providers()
        return any(name in available for name in GPU_PROVIDERS)
    return kind in ("cuda", "tensorrt")


def default_max_batch(device: Optional[str], available: Optional[Sequence[str]] = None) -> int:
    """Requests per batch when the operator does not say: 1 (no batching) on a CPU, where
    merging requests measured no faster (docs/serving.md), GPU_MAX_BATCH on a GPU."""
    return GPU_MAX_BATCH if on_gpu(device, available) else 1


def default_calls(device: Optional[str], available: Optional[Sequence[str]] = None) -> int:
    """Router calls at once when the operator does not say: 1 on a CPU, GPU_CALLS on a GPU."""
    return GPU_CALLS if on_gpu(device, available) else 1


def batch_key(request: Dict[str, Any]) -> str:
    """What requests must share to be merged: everything but the state (questions, model,
    task, lang, budgets, min_confidence), in a canonical form."""
    return json.dumps({key: value for key, value in request.items() if key != "state"},
                      sort_keys=True, ensure_ascii=False, default=repr)


class _Group:
    """Requests gathered under one key, and whether their Router call has been started."""

    def __init__(self, timer: Any):
        self.requests: List[Dict[str, Any]] = []
        self.futures: List[asyncio.Future] = []
        self.timer, self.started = timer, False


class Batcher:
    """Gathers requests by `batch_key` and answers each group with one `answer` call (the
    Router's `answer_batch`) in a worker thread, under `calls` (the service's limit on Router
    calls at once).

    A group's call starts when it holds `max_batch` requests or `max_wait_s` after its first;
    until the call gets its turn under `calls`, later requests still join the group, so while
    one batch runs the next one fills. Lives on the server's event loop: every change to the
    open groups happens on that loop, so no lock is needed."""

    def __init__(self, answer: Callable[[List[Dict[str, Any]]], List[Any]], max_batch: int,
                 max_wait_s: float, calls: asyncio.Semaphore,
                 on_batch: Optional[Callable[[int], None]] = None):
        self._answer, self.max_batch, self.max_wait_s = answer, max_batch, max_wait_s
        self._calls, self._on_batch = calls, on_batch
        self._open: Dict[str, _Group] = {}

    async def submit(self, request: Dict[str, Any]) -> Any:
        """The request's own result (or its exception raised), once its group is answered."""
        loop = asyncio.get_running_loop()
        key = batch_key(request)
        group = self._open.get(key)
        if group is None:
            group = self._open[key] = _Group(None)
            group.timer = loop.call_later(self.max_wait_s, self._start, key, group)
        future = loop.create_future()
        group.requests.append(request)
        group.futures.append(future)
        if len(group.requests) >= self.max_batch:
            self._close(key, group)
            self._start(key, group)
        answer = await future
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def _close(self, key: str, group: _Group) -> None:
        """No more requests join `group`: the next one under `key` opens a new group."""
        if self._open.get(key) is group:
            del self._open[key]

    def _start(self, key: str, group: _Group) -> None:
        if not group.started:
            group.started = True
            group.timer.cancel()
            asyncio.get_running_loop().create_task(self._run(key, group))

    async def _run(self, key: str, group: _Group) -> None:
        async with self._calls:
            self._close(key, group)
            if self._on_batch is not None:
                self._on_batch(len(group.requests))
            try:
                answers = await asyncio.to_thread(self._answer, group.requests)
            except BaseException as exc:  # answer_batch catches per request: the worst case
                answers = [exc] * len(group.requests)
        for future, answer in zip(group.futures, answers):
            if not future.done():
                future.set_result(answer)
