"""What a worker process of ``plan-serve`` runs: the functions the commands call, nothing of its own.

- :func:`search_job` — :func:`plan_search.search` (``plan-search``), the result's JSON as
  ``plan-search --format json`` prints it (``launch``, with ``emit``, as ``--emit`` adds it; the
  CSV of ``--format csv`` when the request says so).
- :func:`estimate_job` — :func:`plan_search.estimate` (``plan-estimate``), the estimate's JSON as
  ``plan-estimate --format json`` prints it.
- :func:`sweep_job` — :func:`planner.sweep.run_scenario` per scenario, then
  :func:`planner.sweep.build_frame` (``plan-sweep``'s table) as JSON columns and rows.

Each returns ``(status, content type, body bytes)``: the body is serialised here, in the worker,
so the server's event loop only copies bytes. Statuses: 200 a result; 409 nothing feasible
(``plan-search``'s exit 3: ``{"error": "infeasible", "message", "reason", ...}``; an estimate that
does not fit is 409 with the estimate itself, as ``plan-estimate`` prints it and exits 3); 422 bad
input found while running (a rule a framework breaks, a plan the model cannot take); 503 a request
that waited for a worker past its whole time limit.

A request that waited in the queue has the wait taken off its time limit (``waited_s``): the limit
is the request's from the moment it was admitted, as ``--time-limit`` is the command's. The result
echoes the request as given; what a shortened limit cut is in ``stats.cut`` as for any time limit,
and the wait in the answer's ``X-Queue-Wait`` header (seconds).
"""

from __future__ import annotations

import json
import time

JSON = "application/json"


def _error(status: int, kind: str, message: str, field: str | None = None, **extra) -> tuple[int, str, bytes]:
    body = {"error": kind, "message": " ".join(str(message).split()), "field": field, **extra}
    return status, JSON, json.dumps(body).encode()


#: The question a worker answers once at start (a second or less): every module a search imports, the
#: solver's binding included, and the catalogs are loaded before the first request.
WARM_UP = {"model": "llama3.1-8b", "gpu": "h100-sxm", "gpus": [8, 16], "tokens": "1B", "time_limit_s": 30}


def warm_up() -> None:
    """A worker's initializer: one small search and estimate, so the first request of a worker pays
    no import."""
    import plan_search.planner.frameworks.emit  # noqa: F401
    from plan_search.planner.estimate import estimate
    from plan_search.planner.search.front import search

    try:
        search(WARM_UP)
        estimate("llama3.1-8b", "h100-sxm", num_gpus=8)
    except Exception:  # noqa: BLE001 - a warm-up that fails leaves the request to report the error
        pass


def run_job(job, queued_since: float | None, *args, **kwargs) -> tuple[int, str, bytes, float]:
    """``job(*args, waited_s=..., **kwargs)`` in the worker, and the wait: since ``queued_since`` (a
    wall clock time; None for a request a free worker took at once), measured here, when it starts."""
    waited = max(0.0, time.time() - queued_since) if queued_since is not None else 0.0
    return (*job(*args, waited_s=waited, **kwargs), waited)


def _bad(exc: BaseException) -> tuple[int, str, bytes]:
    from plan_search.planner.serve.inputs import BadRequest, one_line

    return _error(422, "bad-input", one_line(exc), BadRequest(422, one_line(exc)).field)


def _limit_after_wait(request, waited_s: float):
    """The request with the wait in the queue taken off its time limit, or None when nothing is left."""
    if waited_s <= 0:
        return request
    left = request.time_limit_s - waited_s
    if left <= 0.05 * request.time_limit_s:
        return None
    return request.model_copy(update={"time_limit_s": left})


def recommended_launch(request, result, model):
    """``plan-search --emit``'s launch configuration of the recommended plan (cli/search.py's calls)."""
    from plan_search.hardware.resolve import resolve_cluster
    from plan_search.planner.frameworks.emit import emit as emit_config

    rec = result.recommended
    ref = next((g for g in request.gpu if resolve_cluster(g, request.sets).name == rec.cluster), request.gpu[0])
    from plan_search.planner.frameworks.emit import with_checkpointing

    return with_checkpointing(emit_config(request.framework, rec.plan, model, resolve_cluster(ref, request.sets)),
                              rec.checkpoint_interval_steps, rec.recovery.async_checkpoint)


def search_job(request, model, emit: bool = False, front_csv=None, waited_s: float = 0.0) -> tuple[int, str, bytes]:
    """``plan-search --request`` of ``request`` (a validated :class:`SearchRequest`) on ``model``;
    ``front_csv(result)``: the CSV of ``--format csv`` (the command's own function, given by the caller)."""
    from plan_search.planner.search.front import search
    from plan_search.planner.search.request import NoFeasiblePlan

    run = _limit_after_wait(request, waited_s)
    if run is None:
        return _error(503, "busy", f"time_limit_s: the request waited {waited_s:.1f} s for a worker, its whole time "
                                   f"limit of {request.time_limit_s:g} s; retry when the server is less busy",
                      "time_limit_s")
    try:
        result = search(run, model=model)
        if run is not request:  # the request echoed as given; stats.cut says what a shortened limit cut
            result = result.model_copy(update={"request": request})
    except NoFeasiblePlan as exc:
        return _error(409, "infeasible", str(exc), None, reason=exc.reason, system=exc.system,
                      smallest_gib=exc.smallest_gib, usable_gib=exc.usable_gib, capacity_gib=exc.capacity_gib,
                      alternatives=[json.loads(a.model_dump_json()) for a in exc.alternatives])
    except (ValueError, OverflowError, RecursionError) as exc:
        return _bad(exc)
    if (request.format or "json") == "csv":
        return 200, "text/csv; charset=utf-8", (front_csv(result) + "\n").encode()
    if emit and request.framework:
        try:
            launch = recommended_launch(run, result, model)
        except (ValueError, OverflowError) as exc:
            return _bad(exc)
        doc = json.loads(result.model_dump_json())
        doc["launch"] = launch.as_json()
        return 200, JSON, json.dumps(doc).encode()
    return 200, JSON, result.model_dump_json().encode()


def estimate_job(request, model, emit: bool = False, waited_s: float = 0.0) -> tuple[int, str, bytes]:
    """``plan-estimate --format json`` of an :class:`~.inputs.EstimateRequest` on ``model``:
    :func:`plan_search.estimate`, the function ``plan-estimate`` calls (the plan as the named
    framework runs it, refused with the rule it breaks)."""
    from plan_search.planner.estimate import estimate

    if emit and request.framework is None:
        return _error(422, "bad-input", "emit: needs framework megatron|deepspeed|torchtitan|nemo", "emit")
    try:
        est = estimate(model, request.gpu, dict(request.plan), framework=request.framework,
                       memory_headroom=request.memory_headroom, tokens=request.tokens,
                       checkpoint_interval_h=request.checkpoint_interval_h, sets=list(request.sets),
                       failure_rate=request.failure_rate, restart_minutes=request.restart_minutes,
                       async_checkpoint=request.async_checkpoint)
        doc = None
        if emit:
            from plan_search.hardware.overrides import apply_overrides
            from plan_search.hardware.profiles import for_framework
            from plan_search.hardware.resolve import resolve_cluster
            from plan_search.planner.frameworks.emit import emit as emit_config

            cluster = apply_overrides(for_framework(resolve_cluster(request.gpu), request.framework), request.sets)
            doc = json.loads(est.model_dump_json())
            from plan_search.planner.frameworks.emit import with_checkpointing

            doc["launch"] = with_checkpointing(emit_config(request.framework, est.plan, model, cluster),
                                               est.checkpoint_interval_steps, est.recovery.async_checkpoint).as_json()
    except (ValueError, OverflowError, RecursionError) as exc:
        return _bad(exc)
    body = json.dumps(doc).encode() if doc is not None else est.model_dump_json().encode()
    return (200 if est.feasible else 409), JSON, body


def sweep_job(sweep, models: dict, waited_s: float = 0.0) -> tuple[int, str, bytes]:
    """``plan-sweep`` of ``sweep`` (a :class:`planner.sweep.Sweep`), one scenario after another in
    this worker: ``{"columns": [...], "rows": [[...], ...]}``, the table ``plan-sweep -o out.csv``
    writes (:func:`planner.sweep.build_frame`), missing cells null. 409 when no scenario is
    feasible (``plan-sweep``'s exit 3; the table still says why for each)."""
    from plan_search.planner.sweep import build_frame, run_scenario

    t0 = time.monotonic()
    total = sum(s.request.time_limit_s for s in sweep.scenarios)
    if waited_s > 0 and total - waited_s <= 0.05 * total:
        return _error(503, "busy", f"time_limit_s: the sweep waited {waited_s:.1f} s for a worker, its whole time "
                                   f"limit of {total:g} s; retry when the server is less busy", "time_limit_s")
    results = {}
    for s in sweep.scenarios:
        res = run_scenario(s.index, s.request.model_dump(mode="json"), model=models[s.request.model])
        results[s.key] = res["rows"]
    df = build_frame(sweep, results)
    rows = [[None if _isna(v) else _plain(v) for v in row] for row in df.astype(object).itertuples(index=False)]
    ok = any(r["status"] == "ok" for rows_ in results.values() for r in rows_)
    body = {"columns": list(df.columns), "rows": rows, "elapsed_s": time.monotonic() - t0}
    return (200 if ok else 409), JSON, json.dumps(body).encode()


def _isna(v) -> bool:
    import pandas as pd

    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def _plain(v):
    if hasattr(v, "item"):  # numpy scalars
        return v.item()
    return v
