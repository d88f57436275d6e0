"""Pricing the candidates: every candidate's memory, then the step-time figures of those that fit
(:func:`evaluate_columns`, in chunks of :data:`EVAL_CHUNK`); the over-memory ones later, on demand
(:func:`time_rows`); and the per-candidate constraint masks (:func:`masks`). One GPU type's candidates
and their columns are a :class:`System`. Every figure comes from :mod:`planner.costmodel.evaluate`."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from plan_search.hardware.spec import ClusterSpec
from plan_search.models.spec import ModelSpec
from plan_search.planner.costmodel import goodput
from plan_search.planner.costmodel.arrays import PlanArrays
from plan_search.planner.costmodel.evaluate import GIB, LayoutTerms, memory_fit, search_figures
from plan_search.planner.search import clock
from plan_search.planner.search.request import SearchRequest
from plan_search.planner.search.space import Space

#: Rows per cost-model call. Measured (search CPU, 2026-12-01): DeepSeek-V3 on H100 (665,868 candidates)
#: 0.79 / 0.70 / 0.66 / 0.57 / 0.59 / 0.72 s at 8K / 16K / 32K / 64K / 128K / 256K rows; GPT-3 175B
#: (251,532) 0.27 -> 0.25 s from 16K to 64K.
EVAL_CHUNK = 65536
#: Columns of evaluate() the search keeps for every candidate.
COLUMNS = ("memory_peak_gib", "memory_usable_gib", "fits", "comm_ratio", "days", "cost_usd", "energy_kwh",
           "power_kw", "mfu", "goodput")
#: The columns that come from the step time (:func:`search_figures`), for the plans that are timed.
TIMED_COLUMNS = ("comm_ratio", "days", "cost_usd", "energy_kwh", "power_kw", "mfu", "goodput")


@dataclass
class System:
    """One GPU type: its candidates and their evaluated columns."""

    index: int
    cluster: ClusterSpec
    space: Space
    cols: dict
    counts: np.ndarray
    framework: str | None = None  # whose rules and profile gave these candidates (None: the what-if's)

    @property
    def name(self) -> str:
        return self.cluster.name


def evaluate_columns(model: ModelSpec, cluster: ClusterSpec, x: PlanArrays, request: SearchRequest,
                     deadline: float = math.inf, shared: LayoutTerms | None = None) -> dict:
    """:data:`COLUMNS` for every row of ``x``, in chunks of EVAL_CHUNK, plus ``done`` (False for
    rows left unevaluated because the time limit passed: they count as infeasible and the result
    is flagged not proven) and ``timed``.

    Memory first: every row's memory is priced (the same :func:`memory.peak_memory` that
    :func:`evaluate` calls), and only the rows that fit are timed by :func:`evaluate`; a row over
    memory keeps ``days`` etc. at ``inf`` and ``timed`` False until :func:`time_rows` prices it
    (the "memory binds" figure of a front point needs the fastest over-memory plan of its count)."""
    parts: dict[str, list] = {k: [] for k in (*COLUMNS, "timed")}
    n = len(x)
    stop = n
    # the per-layout terms, priced once per group of rows that differ only in dp (``shared``: those of
    # the search's earlier pieces on this system, whose groups recur here)
    shared = shared if shared is not None else LayoutTerms.build(model, cluster)
    group = shared.add(x) if shared is not None else None
    recovery = goodput.of_request(request)
    for a in range(0, n, EVAL_CHUNK):
        if a and clock.now() > deadline:
            stop = a
            break
        sl = slice(a, a + EVAL_CHUNK)
        chunk = x.take(sl)
        mem, usable, fits = memory_fit(model, cluster, chunk, request.memory_headroom, total_only=True,
                                       _terms=None if group is None else shared.memory(group[sl]))
        cols = {k: np.full(len(chunk), np.inf) for k in COLUMNS}
        cols["memory_peak_gib"] = mem["total"] / GIB
        cols["memory_usable_gib"] = np.full(len(chunk), usable / GIB)
        cols["fits"] = fits
        idx = np.flatnonzero(fits)
        if len(idx):
            r = search_figures(model, cluster, chunk.take(idx), request.tokens, request.checkpoint_interval_h,
                               None if group is None else shared.step(group[a + idx]), recovery=recovery)
            for k in TIMED_COLUMNS:
                cols[k][idx] = r[k]
        for k in COLUMNS:
            parts[k].append(np.asarray(cols[k]))
        parts["timed"].append(fits)
    if stop < n:
        for k in COLUMNS:
            fill = False if k == "fits" else (np.nan if k in ("memory_usable_gib",) else np.inf)
            parts[k].append(np.full(n - stop, fill, dtype=bool if k == "fits" else float))
        parts["timed"].append(np.zeros(n - stop, dtype=bool))
    out = {k: (np.concatenate(v) if v else np.zeros(0, dtype=bool if k in ("fits", "timed") else float))
           for k, v in parts.items()}
    out["done"] = np.arange(n) < stop
    if group is not None:  # for time_rows: each row's group and the terms (one object for all pieces)
        out["group"], out[LAYOUT_TERMS] = group, shared
    return out


#: The key of :func:`evaluate_columns`' answer holding its :class:`LayoutTerms` (not a column).
LAYOUT_TERMS = "layout_terms"


def time_rows(model: ModelSpec, cluster: ClusterSpec, x: PlanArrays, cols: dict, rows: np.ndarray,
              request: SearchRequest, deadline: float = math.inf) -> bool:
    """Price (in place) the step-time columns of ``rows`` that memory-first evaluation skipped;
    False when the deadline stopped it (the rows left untimed keep ``timed`` False)."""
    rows = rows[~cols["timed"][rows]]
    if not len(rows):
        return True
    shared = cols.get(LAYOUT_TERMS)
    for a in range(0, len(rows), EVAL_CHUNK):
        if clock.now() > deadline:
            return False
        rr = rows[a:a + EVAL_CHUNK]
        r = search_figures(model, cluster, x.take(rr), request.tokens, request.checkpoint_interval_h,
                           None if shared is None else shared.step(cols["group"][rr]), recovery=goodput.of_request(request))
        for k in TIMED_COLUMNS:
            cols[k][rr] = r[k]
        cols["timed"][rr] = True
    return True


def masks(sys_cols: dict, x: PlanArrays, request: SearchRequest, lo: int, hi: int | None) -> dict:
    """Per-candidate constraint masks (True = satisfied)."""
    c = sys_cols
    n = x.num_gpus
    out = {
        "memory": c["fits"].astype(bool) | ~c["done"],  # unevaluated rows are excluded by "done"
        "done": c["done"],
        "comm_ratio": (c["comm_ratio"] <= request.max_comm_ratio) if request.max_comm_ratio else np.ones(len(n), bool),
        "power": (c["power_kw"] <= request.max_power_kw) if request.max_power_kw else np.ones(len(n), bool),
        "deadline": (c["days"] <= request.deadline_days) if request.deadline_days else np.ones(len(n), bool),
        "budget": (c["cost_usd"] <= request.budget_usd) if request.budget_usd else np.ones(len(n), bool),
        "gpus": (n >= lo) & ((n <= hi) if hi else True),
    }
    feas = np.ones(len(n), bool)
    for v in out.values():
        feas &= v
    out["feasible"] = feas
    return out
