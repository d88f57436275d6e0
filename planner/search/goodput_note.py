"""What pricing failures did to the pick (issue 25): the reason line's goodput clause.

The search's days and dollars are goodput-adjusted (:mod:`planner.costmodel.goodput`: the training
time over the share of wall time that trains). Here the same rule is applied once more to the same
candidates priced without failures or checkpoint saves -- each row's days, dollars and energy times its
goodput, the deadline and budget masks recomputed on them -- and the clause says what failures cost the
recommended plan and whether the goodput-blind pick would differ. O(candidates) numpy and one oracle
pick (:func:`pick.pick_exhaustive`): no search of its own.
"""

from __future__ import annotations

import numpy as np

from plan_search.planner.costmodel import goodput
from plan_search.planner.search.pick import pick_exhaustive
from plan_search.planner.search.pricing import System
from plan_search.planner.search.table import Table, build_table

#: masks that do not read days or dollars: a row failing one stays out of the blind pick too
_OTHER_MASKS = ("memory", "done", "comm_ratio", "power", "gpus")


def _blind(s: System, m: dict, req, framework_checked: bool) -> tuple[System, np.ndarray]:
    g = s.cols["goodput"]
    cols = dict(s.cols)
    for k in ("days", "cost_usd", "energy_kwh"):
        cols[k] = np.where(np.isfinite(g), s.cols[k] * g, s.cols[k])
    keep = m["feasible"].copy()
    if not framework_checked:  # rows out only for days or dollars may come back
        other = np.ones(len(keep), bool)
        for k in _OTHER_MASKS:
            other &= m[k]
        keep |= other
    if req.deadline_days:
        keep &= cols["days"] <= req.deadline_days
    if req.budget_usd:
        keep &= cols["cost_usd"] <= req.budget_usd
    if not framework_checked:
        keep &= np.isfinite(g)
    return System(s.index, s.cluster, s.space, cols, s.counts), keep


def goodput_clause(systems: list[System], ms: list[dict], groups: list[np.ndarray], table: Table, rec: int,
                   rule: str, key, req) -> str:
    """``; failures priced: ...`` for the reason line, or '' when no system prices failures."""
    rates = [goodput.failure_rate_of(s.cluster, goodput.of_request(req))[0] for s in systems]
    if not any(r > 0 for r in rates):
        return ""
    k, row = int(table.system[rec]), int(table.row[rec])
    s = systems[k]
    g = float(s.cols["goodput"][row])
    days, cost = float(table.days[rec]), float(table.cost[rec])
    text = (f"; failures priced: goodput {g:.1%} ({days * (1 - g):,.1f} of its {days:,.1f} days to checkpoint "
            f"saves, lost work, restarts and restores at {rates[k]:.2g} failures per 1,000 GPU-days)")
    blind = [_blind(s_, m, req, bool(req.framework)) for s_, m in zip(systems, ms)]
    feasible = [kp for _, kp in blind]
    if not any(f.any() for f in feasible):
        return text
    t_b = build_table([b for b, _ in blind], feasible, groups)
    b, _ = pick_exhaustive(t_b, rule, key, req)
    if b is None:
        return text
    kb, rb = int(t_b.system[b]), int(t_b.row[b])
    if (kb, rb) == (k, row):
        return text + "; the goodput-blind pick is the same plan"
    sb = systems[kb]
    same_count = sb.name == s.name and int(t_b.gpus[b]) == int(table.gpus[rec])
    return (text + f"; goodput changed the pick: priced without failures the rule picks "
            f"{int(t_b.gpus[b]):,} {sb.name} GPUs{' (another layout)' if same_count else ''}, "
            f"{float(t_b.days[b]):,.1f} days without failures, {float(sb.cols['days'][rb]):,.1f} with them")
