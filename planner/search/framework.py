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
#: 8 (was 32): the same fronts and recommendations (Llama-2-70B on
#: H200+A100, Mixtral on H100, Llama-3.1-8B, under each framework), with a quarter of the checks (GPT-3 175B on
#: three GPU types: 1.66 -> 0.59 s CPU of rule checks), now that the rules most candidates break are tested on the
#: columns first (rules.unrunnable_rows) and a chunk holds few that fail.
FRAMEWORK_TOP_K = 8
FRAMEWORK_MAX_CHECKS = 4096


def restrict_to_framework(model: ModelSpec, systems: list[System], ms: list[dict], req: SearchRequest,
                          lo: int, deadline: float = math.inf,
                          cut: list[str] | None = None, hard_deadline: float = math.inf,
                          beaten: dict | None = None) -> tuple[list[System], list[dict]]:
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

    ``beaten`` (a search spanning the frameworks, for the frameworks after the first): ``{GPU type: (GPUs,
    days, dollars)}`` of the plans other frameworks run; a (GPU count, batch) whose fastest and cheapest
    candidates one of them matches or beats with no more GPUs is not checked (its plans could reach neither
    the front, nor that GPU type's own front, nor a pick by GPUs, days and dollars). The bound is the
    candidates' price before conforming: conforming rarely makes a plan faster, so this is a prune, not a proof.
    """
    from plan_search.planner.frameworks.rules import runnable
    from plan_search.planner.search.space import space_of_plans

    from plan_search.planner.frameworks.rules import allowed, unrunnable_rows
    from plan_search.planner.search.request import knob_values

    # the knobs the framework decides (conform) that the user pinned: a plan it runs with another value is not
    # the plan asked for (it was silently replaced: issue 24)
    given = getattr(req.knobs, "_user_given", frozenset())
    pinned = {k: set(knob_values(req.knobs, k)) for k in allowed(req.framework).decides
              if k in given and hasattr(req.knobs, k)}
    out_sys, out_ms = [], []
    timed_out = False
    first = None  # (system, row) of the fastest candidate checked: the rule it breaks names a refusal
    for s, m in zip(systems, ms):
        x = s.space.x
        # the rules most fast candidates break, tested on the columns at once; the rest plan by plan
        rows = np.flatnonzero(m["feasible"] & ~unrunnable_rows(req.framework, x))
        if not len(rows) and first is None and m["feasible"].any():  # its rule names the refusal
            first = (s, int(np.flatnonzero(m["feasible"])[np.argmin(s.cols["days"][m["feasible"]])]))
        rows = rows[np.lexsort((s.cols["days"][rows], x.gb[rows], x.num_gpus[rows]))]
        keys = np.stack([x.num_gpus[rows], x.gb[rows]], axis=1)
        starts = np.flatnonzero(np.r_[True, np.any(keys[1:] != keys[:-1], axis=1)])
        ends = np.r_[starts[1:], len(rows)]
        plans, seen = [], set()
        stopped = False
        others = (beaten or {}).get(s.name)
        for a, b in zip(starts, ends):
            if others is not None and len(others[0]) and b > a:
                g = rows[a:b]
                n, d, c = keys[a, 0], float(s.cols["days"][g].min()), float(s.cols["cost_usd"][g].min())
                if np.any((others[0] <= n) & (others[1] <= d) & (others[2] <= c)):
                    continue
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
                    if q is not None and any(getattr(q, k) not in v for k, v in pinned.items()):
                        q = None
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
    if beaten is not None and not any(m["feasible"].any() for m in out_ms) and not timed_out:
        return out_sys, out_ms  # every plan it could run is beaten by another framework's (or it runs none)
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


def run_by(framework: str | None, plan, model: ModelSpec, cluster) -> list[str]:
    """The frameworks that run ``plan`` (one of ``framework``'s conformed plans) as it is, priced as it is:
    ``framework`` and every other framework of its efficiency profile whose rules pass the plan unchanged
    (NeMo beside Megatron-LM); [] for the framework-free what-if (``framework`` None)."""
    if framework is None:
        return []
    from plan_search.hardware.profiles import FRAMEWORK_PROFILE
    from plan_search.planner.frameworks.rules import FRAMEWORKS, runnable

    out = [framework]
    for other in FRAMEWORKS:
        if other != framework and FRAMEWORK_PROFILE[other] == FRAMEWORK_PROFILE[framework] \
                and runnable(other, plan, model, cluster) == plan:
            out.append(other)
    return out
