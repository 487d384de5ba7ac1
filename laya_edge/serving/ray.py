"""laya_edge's HTTP service on Ray Serve: replicas, and Ray Serve's request batching.

Each replica holds one Router and serves the same app as `laya-edge serve`
(`laya_edge.serving.http`: `POST /v1/systemone`, `/v1/systemone/batch`, `/health`, the same
limits, errors and auth).
Single requests are not answered one by one: Ray Serve's `@serve.batch` gathers the requests
that arrive together at a replica into one `Router.predict_batch` call, so the Router still
groups them by checkpoint and question set, and its hooks still run once per request.

    from laya_edge.serving.ray import deployment
    serve.run(deployment({"english": "./bundles/english"}, replicas=2), route_prefix="/")

Needs the `ray` extra (`pip install "laya-edge[ray]"`). `laya-edge serve --engine ray` starts
it on a local Ray instance, or on a cluster with `--ray-address`.
"""
from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, Dict, List, Optional

from .batching import answer_batch
from .http import Limits, create_app

NAME = "laya_edge"


class BatchedRouter:
    """What `create_app` needs of a Router, with `predict` routed through the replica's batch
    queue. The app calls `predict` from a worker thread; the queue lives on the replica's event
    loop, so the call is handed to that loop and the thread waits for its answer."""

    def __init__(self, router: Any, loop: asyncio.AbstractEventLoop, submit: Any):
        self._router, self._loop, self._submit = router, loop, submit

    def predict(self, state: Any, questions: Dict[str, Any], **controls: Any) -> Dict[str, Any]:
        request = dict(controls, state=state, questions=questions)
        answer = asyncio.run_coroutine_threadsafe(self._submit(request), self._loop).result()
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def __getattr__(self, name: str) -> Any:  # predict_batch, loaded, models: the Router's own
        return getattr(self._router, name)


def deployment(models: Dict[str, Any], replicas: int = 1, num_cpus: float = 1.0,
               num_gpus: float = 0.0, max_batch_size: int = 16,
               batch_wait_timeout_s: float = 0.01, api_key: Optional[str] = None,
               limits: Limits = Limits(), router_kwargs: Optional[Dict[str, Any]] = None) -> Any:
    """A Ray Serve application: `replicas` copies of the service over `models` (Router
    `models=`), each with `num_cpus`/`num_gpus` (a GPU replica gives its Router
    `device="auto"`, which picks CUDA), batching up to `max_batch_size` requests that arrive
    within `batch_wait_timeout_s`."""
    from ray import serve

    from ..router import Router

    options = dict(router_kwargs or {})

    @serve.deployment(name=NAME, num_replicas=replicas,
                      ray_actor_options={"num_cpus": num_cpus, "num_gpus": num_gpus},
                      max_ongoing_requests=limits.max_concurrent or max_batch_size)
    @serve.ingress()
    class LayaEdge:
        def __init__(self) -> None:
            self.router = Router(models=models, **options)
            self.batch_sizes: List[int] = []
            self.answer.set_max_batch_size(max_batch_size)
            self.answer.set_batch_wait_timeout_s(batch_wait_timeout_s)

        async def __serve_build_asgi_app__(self) -> Any:
            loop = asyncio.get_running_loop()
            # Ray's @serve.batch below gathers the requests: the app does not batch, and lets
            # a full batch's worth of requests reach that queue at once
            calls = max(limits.max_concurrent or 1, max_batch_size)
            return create_app(BatchedRouter(self.router, loop, self.answer), api_key,
                              dataclasses.replace(limits, max_batch=1, max_concurrent=calls))

        @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.01)
        async def answer(self, requests: List[Dict[str, Any]]) -> List[Any]:
            self.batch_sizes.append(len(requests))
            results = await asyncio.to_thread(answer_batch, self.router, requests)
            return results

        def stats(self) -> Dict[str, Any]:
            """This replica's id and the size of every batch it answered."""
            return {"replica": serve.get_replica_context().replica_id.unique_id,
                    "batch_sizes": list(self.batch_sizes)}

    return LayaEdge.bind()
