"""The recommendation and the fronts around it: the objective's rule applied by the oracle
(:func:`pick_exhaustive`) or CP-SAT (:func:`pick_cpsat`), each GPU type's own front
(:func:`system_fronts`) and the landmarks of the front (:func:`landmarks`)."""

from __future__ import annotations

import math

import numpy as np

from plan_search.planner.search.cpsat import cpsat_pick
from plan_search.planner.search.objective import OBJECTIVE_KEYS, efficiency_cap
from plan_search.planner.search.oracle import exhaustive_front, exhaustive_pick
from plan_search.planner.search.request import FrontPoint, SearchRequest
from plan_search.planner.search.table import Table

def pick_exhaustive(t: Table, rule: str, key, req: SearchRequest) -> tuple[int | None, float | None]:
    """The oracle's recommendation: (row, dollar cap of the efficiency rule or None)."""
    if rule != "efficiency":
        return exhaustive_pick(t, key), None
    cheap = exhaustive_pick(t, OBJECTIVE_KEYS["cheapest"])
    if cheap is None:
        return None, None
    cap = efficiency_cap(float(t.cost[cheap]), req.min_scaling_efficiency)
    return exhaustive_pick(t, key, t.cost <= cap), cap


def pick_cpsat(t: Table, rule: str, key, req: SearchRequest, labels, node_sizes, deadline: float
               ) -> tuple[int | None, float | None, bool, int]:
    """CP-SAT's recommendation: (row, dollar cap or None, proven, solves). The efficiency rule
    is two solves: the cheapest plan, then the fastest under the cap it sets (a budget)."""
    if rule != "efficiency":
        row, proven = cpsat_pick(t, req, labels, key, node_sizes, deadline)
        return row, None, proven, 1
    cheap, proven = cpsat_pick(t, req, labels, OBJECTIVE_KEYS["cheapest"], node_sizes, deadline)
    if cheap is None:
        return None, None, False, 1
    cap = efficiency_cap(float(t.cost[cheap]), req.min_scaling_efficiency)
    capped = req.model_copy(update={"budget_usd": cap})
    row, proven2 = cpsat_pick(t, capped, labels, key, node_sizes, deadline)
    return (row if row is not None else cheap), cap, proven and proven2, 2


def system_fronts(t: Table, front_rows: list[int], gpu_of, deadline: float = math.inf,
                  cut: list[str] | None = None, labels: list[str] | None = None) -> list[list[int]]:
    """Each GPU type's own front (rows of ``t``; ``gpu_of[system]`` is the system's GPU type, one system per
    GPU type and framework), when there are several GPU types (else empty). Exact on the pruned table: pruning
    keeps every (system, GPU count) group's front. Past ``deadline`` a type's front holds the counts taken so
    far (:func:`exhaustive_front`; ``cut`` gets the line, named by the type's label)."""
    gpu_of = np.asarray(gpu_of, dtype=np.int64)
    n_types = int(gpu_of.max()) + 1 if len(gpu_of) else 0
    if n_types < 2:
        return []
    out = []
    row_type = gpu_of[t.system]
    for k in range(n_types):
        idx = np.nonzero(row_type == k)[0]
        own: list[str] = []
        out.append(idx[exhaustive_front(t.take(idx), deadline, own)].tolist() if len(idx) else [])
        if cut is not None:
            cut += [f"{labels[k] if labels else k} {c}" for c in own]
    return out


def landmarks(front: list[FrontPoint], rec_index: int | None, threshold: float) -> dict[str, int]:
    """Indices in ``front`` of the points a person looks at first (see SearchResult.landmarks)."""
    if not front:
        return {}
    idx = range(len(front))
    out = {
        "fewest-gpus": min(idx, key=lambda i: (front[i].num_gpus, front[i].days, front[i].cost_usd)),
        "cheapest": min(idx, key=lambda i: (front[i].cost_usd, front[i].days, front[i].num_gpus)),
    }
    cap = efficiency_cap(front[out["cheapest"]].cost_usd, threshold)
    out["balanced"] = min((i for i in idx if front[i].cost_usd <= cap),
                          key=lambda i: (front[i].days, front[i].cost_usd, front[i].num_gpus))
    out["fastest"] = min(idx, key=lambda i: (front[i].days, front[i].cost_usd, front[i].num_gpus))
    if rec_index is not None:
        out["recommended"] = rec_index
    return out
