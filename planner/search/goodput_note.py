"""What pricing failures did to the pick (issue 25): the reason line's goodput clause.

The search's days and dollars are goodput-adjusted (:mod:`planner.costmodel.goodput`: the training
time over the share of wall time that trains). Here the same rule is applied once more to the same
candidates priced without failures or checkpoint saves -- each row's days, dollars and energy times its
goodput, the deadline and budget masks recomputed on them -- and the clause says what failures cost the
recommended plan and whether the goodput-blind pick would differ. O(candidates) numpy and one oracle
pick (:func:`pick.pick_exhaustive`): no search of its own.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from plan_search.planner.costmodel import goodput
from plan_search.planner.search.pick import pick_exhaustive
from plan_search.planner.search.pricing import System
from plan_search.planner.search.table import Table

#: masks that do not read days or dollars: a row failing one stays out of the blind pick too
_OTHER_MASKS = ("memory", "done", "comm_ratio", "power", "gpus")


def _blind(s: System, m: dict, group: np.ndarray, req, framework_checked: bool) -> Table:
    """The rows of ``s`` the rule may pick when priced without failures, their days, dollars and energy
    times their goodput (rows out only for days or dollars come back when the framework's rules were not
    checked on them)."""
    keep = m["feasible"].copy()
    if not framework_checked:
        other = np.ones(len(keep), bool)
        for k in _OTHER_MASKS:
            other &= m[k]
        keep |= other & np.isfinite(s.cols["goodput"])
    idx = np.flatnonzero(keep)
    g = s.cols["goodput"][idx]
    days, cost = s.cols["days"][idx] * g, s.cols["cost_usd"][idx] * g
    ok = np.ones(len(idx), bool)
    if req.deadline_days:
        ok &= days <= req.deadline_days
    if req.budget_usd:
        ok &= cost <= req.budget_usd
    idx, g, days, cost = idx[ok], g[ok], days[ok], cost[ok]
    return Table(np.full(len(idx), s.index, dtype=np.int64), idx, group[idx], s.space.x.num_gpus[idx], days, cost,
                 s.cols["energy_kwh"][idx] * g, s.cols["power_kw"][idx], s.cols["mfu"][idx])


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
    lost = days * (1 - g)
    lost_text = f"{lost:,.1f} of its {days:,.1f} days" if lost >= 1 else f"{lost * 24:,.1f} h of its {days:,.1f} days"
    text = (f"; failures priced: goodput {g:.1%} ({lost_text} to checkpoint saves, lost work, restarts and "
            f"restores at {rates[k]:.2g} failures per 1,000 GPU-days)")
    if any(getattr(s_, "framework", None) not in (None, "none") for s_ in systems):
        # a framework's systems hold only the rows its rules were checked on (restrict_to_framework): the
        # goodput-blind pick among all candidates is not known here, so nothing is said of it (the
        # framework-free what-if, --framework none, compares it)
        return text
    checked = req.framework not in (None, "none")  # "none" is the framework-free what-if: no rules checked
    parts = [_blind(s_, m, g_, req, checked) for s_, m, g_ in zip(systems, ms, groups)]
    if not any(len(p) for p in parts):
        return text
    t_b = Table(**{f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(Table)})
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
