"""Under ``--framework``: keep only the plans the framework can run, as it would run them
(:func:`restrict_to_framework`: per GPU count and batch, the fastest candidates conformed and checked
against its rules, a chunk at a time, then priced again as conformed)."""

from __future__ import annotations

import math

import numpy as np

from plan_search.models.spec import ModelSpec
from plan_search.planner.search import clock
from plan_search.planner.search.pricing import System, evaluate_columns, masks
from plan_search.planner.search.request import NoFeasiblePlan, SearchRequest

#: With ``framework``: per (system, GPU count, batch), candidates are conformed and checked in
#: order of run time, this many at a time, until one is runnable (at most FRAMEWORK_MAX_CHECKS).
FRAMEWORK_TOP_K = 32
FRAMEWORK_MAX_CHECKS = 4096


def restrict_to_framework(model: ModelSpec, systems: list[System], ms: list[dict], req: SearchRequest,
                          lo: int, deadline: float = math.inf,
                          cut: list[str] | None = None, hard_deadline: float = math.inf
                          ) -> tuple[list[System], list[dict]]:
    """Keep only plans ``req.framework`` can run, as it would run them.

    The knob space was already narrowed to the framework's capabilities
    (:func:`plan_search.planner.frameworks.rules.allowed`); here, per (system, GPU count, global batch), feasible
    candidates are taken in order of run time, ``FRAMEWORK_TOP_K`` at a time, conformed (the knobs
    the framework decides set its way) and checked against its remaining rules
    (:func:`plan_search.planner.frameworks.rules.runnable`), until a chunk holds a runnable one (or
    ``FRAMEWORK_MAX_CHECKS`` were checked); the runnable ones are evaluated again as conformed and
    replace the system's candidates. Both solvers then work on the same set, so their fronts
    agree. Not exhaustive: conforming can make a plan slower than a slower-ranked one it overtook,
    so a count's optimum is exact only among its checked candidates. Past ``deadline`` a system
    that has a runnable plan checks no further candidates (said in ``cut``); past ``hard_deadline``
    (the limit itself) no system checks any, and when none was found the refusal is the time limit's.
    Both are checked every ``FRAMEWORK_TOP_K`` candidates (each check conforms a plan: ~0.1 ms).
    """
    from plan_search.planner.frameworks.rules import runnable
    from plan_search.planner.search.space import space_of_plans

    out_sys, out_ms = [], []
    timed_out = False
    first = None  # (system, row) of the fastest candidate checked: the rule it breaks names a refusal
    for s, m in zip(systems, ms):
        rows = np.flatnonzero(m["feasible"])
        x = s.space.x
        rows = rows[np.lexsort((s.cols["days"][rows], x.gb[rows], x.num_gpus[rows]))]
        keys = np.stack([x.num_gpus[rows], x.gb[rows]], axis=1)
        starts = np.flatnonzero(np.r_[True, np.any(keys[1:] != keys[:-1], axis=1)])
        ends = np.r_[starts[1:], len(rows)]
        plans, seen = [], set()
        stopped = False
        for a, b in zip(starts, ends):
            for c0 in range(a, min(b, a + FRAMEWORK_MAX_CHECKS), FRAMEWORK_TOP_K):
                now = clock.now()
                # the time limit (was outside it: +1-2 s); past the phases' share only once some system has a
                # plan; at least one chunk is checked (as one piece is always evaluated: a minimal answer)
                if first is not None and (now > hard_deadline or
                                          ((plans or any(len(o.space) for o in out_sys)) and now > deadline)):
                    stopped = True
                    break
                found = False
                for i in rows[c0:min(b, c0 + FRAMEWORK_TOP_K)]:
                    first = first or (s, int(i))
                    q = runnable(req.framework, s.space.plan(int(i)), model, s.cluster)
                    if q is not None:
                        found = True
                        if q not in seen:
                            seen.add(q)
                            plans.append(q)
                if found:
                    break
            if stopped:
                if cut is not None:
                    cut.append(f"{s.name}: {req.framework} rules checked below {int(keys[a, 0]):,} GPUs (time limit)")
                timed_out = True
                break
        if not plans:
            plans_space = s.space.take(np.zeros(0, dtype=np.int64))
            cols = evaluate_columns(model, s.cluster, plans_space.x, req)
            out_sys.append(System(s.index, s.cluster, plans_space, cols, s.counts))
            out_ms.append(masks(cols, plans_space.x, req, lo, req.max_gpus))
            continue
        sp = space_of_plans(model, s.cluster, plans)
        cols = evaluate_columns(model, s.cluster, sp.x, req)
        out_sys.append(System(s.index, s.cluster, sp, cols, s.counts))
        out_ms.append(masks(cols, sp.x, req, lo, req.max_gpus))
    if not any(m["feasible"].any() for m in out_ms):
        n = sum(int(m["feasible"].sum()) for m in ms)
        if timed_out:
            raise NoFeasiblePlan(
                f"no plan {req.framework} can run found within the time limit of {req.time_limit_s:g} s (its rules "
                f"checked on part of the {n:,} feasible plans); raise --time-limit (time_limit_s) or bound the "
                "space (--gpus, --tp, --pp ...)", reason="time_limit")
        why = ""
        if first is not None:  # name the rule (as plan-estimate --framework does), not only the file
            from plan_search.planner.frameworks.rules import check, conform

            bad = check(req.framework, conform(req.framework, first[0].space.plan(first[1]), model.num_layers),
                        model, first[0].cluster)
            why = (f"; the fastest breaks {bad[0]}" + (f" (and {', '.join(v.rule.id for v in bad[1:])})"
                                                        if len(bad) > 1 else "")) if bad else ""
        raise NoFeasiblePlan(
            f"framework: none of the {n:,} feasible plans is one {req.framework} can run "
            f"(its rules: planner/frameworks/rules.py; checked up to {FRAMEWORK_MAX_CHECKS} per GPU count){why}; "
            "try another --framework, more GPU counts, or other knob bounds", reason="framework")
    return out_sys, out_ms
