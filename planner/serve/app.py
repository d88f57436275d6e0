"""The Starlette application of ``plan-serve``: routes, admission, the worker pool, the page.

Admission: a request is read (its body bounded in bytes and in time), validated (in the event loop:
pydantic, ~1 ms), then admitted if fewer than ``Limits.admitted`` requests are running or waiting,
else answered 503 at once. An admitted request runs in a worker process (:mod:`.work`), the event
loop awaiting it, so a slow client, a dropped one, or a long search never holds up another
request's reading, validation or answer. A slot is freed when the worker finishes, not when the
client goes away: the admission count is the work the pool really has.
"""

from __future__ import annotations

import asyncio
import functools
import json
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Callable
from concurrent.futures.process import BrokenProcessPool
from importlib import resources

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from plan_search import __version__
from plan_search.planner.serve import work
from plan_search.planner.serve.inputs import BadRequest, estimate_request, parse_json_object, search_request, \
    sweep_document
from plan_search.planner.serve.limits import Limits

JSON = "application/json"
#: The page's files: fixed names, read once from the package (nothing from a request names a file).
STATIC = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
          "style.css": "text/css; charset=utf-8", "favicon.svg": "image/svg+xml"}
#: Seconds beyond a request's time limit before the server answers 504 (the search honours its
#: limit itself; this only guards against a worker that does not answer).
GRACE_S = 30.0


def _json(body, status: int = 200) -> Response:
    return Response(json.dumps(body, indent=None).encode(), status_code=status, media_type=JSON)


def _error(exc: BadRequest) -> Response:
    return _json(exc.body(), exc.status)


class Pool:
    """The worker processes and the admission count (touched only from the event loop)."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.active = 0  # admitted and not finished: running or waiting for a worker
        self.executor: ProcessPoolExecutor | None = None
        self.served = 0
        self.refused_busy = 0
        self.restarts = 0  # pools started again after a worker died

    def start(self) -> None:
        # spawn: a worker imports the planner afresh; forking a process that runs an event loop and
        # threads would copy their locks
        self.executor = ProcessPoolExecutor(max_workers=self.limits.workers,
                                            mp_context=multiprocessing.get_context("spawn"),
                                            initializer=work.warm_up)
        for f in [self.executor.submit(time.sleep, 0) for _ in range(self.limits.workers)]:
            f.result()  # every worker started and warmed up before the first request

    def stop(self) -> None:
        if self.executor is not None:
            procs = list((getattr(self.executor, "_processes", None) or {}).values())
            self.executor.shutdown(wait=False, cancel_futures=True)
            for p in procs:
                if p.is_alive():
                    p.terminate()
            for p in procs:
                p.join(timeout=5)
            self.executor = None

    async def run(self, limit_s: float, job, *args, **kwargs) -> Response:
        """``job(*args, **kwargs)`` in a worker, or 503 at once when the pool is full (or being
        started again after a worker died)."""
        executor = self.executor
        if self.active >= self.limits.admitted or executor is None:
            self.refused_busy += 1
            what = (f"{self.active} requests running or waiting, its limit" if executor is not None
                    else "its workers are starting again after one died")
            return _json({"error": "busy", "field": None,
                          "message": f"the server is busy: {what}; retry in a moment"}, 503)
        queued_since = time.time() if self.active >= self.limits.workers else None
        try:
            fut = executor.submit(work.run_job, job, queued_since, *args, **kwargs)
        except BrokenProcessPool:
            await self._restart(executor)
            return _json({"error": "internal", "field": None, "message": "a worker process died; retry"}, 500)
        self.active += 1

        def done(_f):
            self.active -= 1
        loop = asyncio.get_running_loop()
        fut.add_done_callback(lambda f: loop.call_soon_threadsafe(done, f))
        try:
            status, ctype, body, waited = await asyncio.wait_for(asyncio.wrap_future(fut), limit_s + GRACE_S)
        except asyncio.TimeoutError:
            return _json({"error": "timeout", "field": "time_limit_s",
                          "message": f"time_limit_s: no answer within {limit_s:g} s + {GRACE_S:g} s"}, 504)
        except BrokenProcessPool:
            await self._restart(executor)
            return _json({"error": "internal", "field": None,
                          "message": "a worker process died (killed, or out of memory?); retry"}, 500)
        self.served += 1
        return Response(body, status_code=status, media_type=ctype,
                        headers={"X-Queue-Wait": f"{waited:.3f}"} if waited else None)

    async def _restart(self, broken: ProcessPoolExecutor) -> None:
        """A new pool in place of ``broken`` (once, whichever request saw it first), started in a
        thread: the event loop keeps answering (503 until the new workers are up)."""
        if self.executor is not broken:
            return
        self.executor = None
        self.restarts += 1
        old = broken

        def replace():
            procs = list((getattr(old, "_processes", None) or {}).values())
            old.shutdown(wait=False, cancel_futures=True)
            for p in procs:
                if p.is_alive():
                    p.terminate()
                p.join(timeout=5)
            self.start()

        await asyncio.get_running_loop().run_in_executor(None, replace)


async def read_body(request: Request, limits: Limits) -> bytes:
    """The body, at most ``max_body_bytes`` (413 past it, from Content-Length before reading), within
    ``body_timeout_s`` (408: a slow client is cut off, holding no worker)."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limits.max_body_bytes:
        raise BadRequest(413, f"body: {int(length):,} bytes; at most {limits.max_body_bytes:,}", "body", "too-large")

    async def collect() -> bytes:
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limits.max_body_bytes:
                raise BadRequest(413, f"body: over {limits.max_body_bytes:,} bytes", "body", "too-large")
            chunks.append(chunk)
        return b"".join(chunks)

    try:
        return await asyncio.wait_for(collect(), limits.body_timeout_s)
    except asyncio.TimeoutError:
        raise BadRequest(408, f"body: not received within {limits.body_timeout_s:g} s", "body", "timeout") from None


def _emit(request: Request) -> bool:
    v = request.query_params.get("emit", "0").strip().lower()
    if v not in ("0", "1", "true", "false", ""):
        raise BadRequest(422, f"emit: {v[:20]!r}; use 1 or 0", "emit")
    return v in ("1", "true")


@functools.lru_cache(maxsize=None)
def _static(name: str) -> bytes:
    return resources.files("plan_search.planner.serve").joinpath("static", name).read_bytes()


@dataclass(frozen=True)
class Views:
    """The commands' own formatting functions the API answers with (the interface layer, ``cli``,
    gives them: the planner imports nothing from it): ``plan-catalog models|gpus --format json``'s
    record of a catalog entry, ``plan-search --format csv``'s table of a result."""

    model_record: Callable  # (name, ModelSpec) -> dict
    gpu_record: Callable  # (name, ClusterSpec) -> dict
    front_csv: Callable  # (SearchResult) -> str


def _catalog(views: Views, kind: str) -> bytes:
    if kind == "models":
        from plan_search.models.catalog import load_catalog

        records = [views.model_record(name, m) for name, m in load_catalog().items()]
    else:
        from plan_search.hardware.catalog import load_catalog

        records = [views.gpu_record(name, c) for name, c in load_catalog().items()]
    return json.dumps(records).encode()


def create_app(views: Views, limits: Limits | None = None, start_pool: bool = True) -> Starlette:
    """The application; its worker pool starts with it (lifespan) and stops with it."""
    limits = limits or Limits()
    pool = Pool(limits)
    catalogs = {kind: _catalog(views, kind) for kind in ("models", "gpus")}

    async def post(request: Request, parse) -> Response:
        try:
            emit = _emit(request)
            doc = parse_json_object(await read_body(request, limits), limits)
            job, limit_s, args = parse(doc, emit)
        except BadRequest as exc:
            return _error(exc)
        except ClientDisconnect:
            return Response(b"", status_code=400)
        return await pool.run(limit_s, job, *args)

    def parse_search(doc, emit):
        req, model = search_request(doc, limits)
        return work.search_job, req.time_limit_s, (req, model, emit, views.front_csv)

    def parse_estimate(doc, emit):
        req, model = estimate_request(doc, limits)
        return work.estimate_job, limits.max_time_limit_s, (req, model, emit)

    def parse_sweep(doc, emit):
        from plan_search.planner.serve.inputs import resolve_model

        if emit:
            raise BadRequest(422, "emit: plan-sweep writes no launch configuration", "emit")
        sweep = sweep_document(doc, limits)
        models = {s.request.model: resolve_model(s.request.model) for s in sweep.scenarios}
        return work.sweep_job, sum(s.request.time_limit_s for s in sweep.scenarios), (sweep, models)

    async def search(request):
        return await post(request, parse_search)

    async def estimate(request):
        return await post(request, parse_estimate)

    async def sweep(request):
        return await post(request, parse_sweep)

    async def catalog(request):
        kind = request.path_params["kind"]
        if kind not in ("models", "gpus"):
            return _json({"error": "bad-input", "field": "kind", "message": f"catalog: {kind[:40]!r}; use models or gpus"},
                         404)
        return Response(catalogs[kind], media_type=JSON)

    async def schema(request):
        from plan_search.planner.serve.openapi import SCHEMAS, schema_text

        name = request.path_params["name"]
        if name not in SCHEMAS:
            return _json({"error": "bad-input", "field": "name",
                          "message": f"schema: {name[:40]!r}; use one of {', '.join(sorted(SCHEMAS))}"}, 404)
        return Response(schema_text(name), media_type="application/schema+json")

    async def openapi(request):
        from plan_search.planner.serve.openapi import openapi_text

        return Response(openapi_text(__version__), media_type=JSON)

    async def version(request):
        return _json({"name": "plan-search", "version": __version__})

    async def health(request):
        return _json({"status": "ok", "version": __version__, "workers": limits.workers, "queue": limits.queue,
                      "active": pool.active, "served": pool.served, "refused_busy": pool.refused_busy,
                      "restarts": pool.restarts})

    async def page(request):
        return Response(_static("index.html"), media_type=STATIC["index.html"],
                        headers={"Cache-Control": "no-cache"})

    async def static(request):
        name = request.path_params["name"]
        if name not in STATIC:
            return Response(b"not found", status_code=404, media_type="text/plain")
        return Response(_static(name), media_type=STATIC[name], headers={"Cache-Control": "no-cache"})

    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app):
        if start_pool:
            await asyncio.get_running_loop().run_in_executor(None, pool.start)
        try:
            yield
        finally:
            pool.stop()

    routes = [
        Route("/", page), Route("/static/{name}", static),
        Route("/v1/search", search, methods=["POST"]), Route("/v1/estimate", estimate, methods=["POST"]),
        Route("/v1/sweep", sweep, methods=["POST"]),
        Route("/v1/catalog/{kind}", catalog), Route("/v1/schema/{name}", schema),
        Route("/openapi.json", openapi), Route("/v1/version", version), Route("/v1/health", health),
        Route("/healthz", health),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.pool = pool
    app.state.limits = limits
    return app
