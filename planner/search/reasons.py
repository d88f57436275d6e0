"""The reason line of a recommendation (:func:`_recommend_reason`): which rule picked it, its days,
dollars and GPUs, why it and not its neighbours (the efficiency figures, or the limits that keep a
better plan out), and its bottleneck."""

from __future__ import annotations

import numpy as np

from plan_search.planner.costmodel import goodput
from plan_search.planner.costmodel.evaluate import evaluate
from plan_search.planner.search.binding import CONSTRAINTS, _relaxed
from plan_search.planner.search.objective import OBJECTIVE_KEYS, OBJECTIVE_TEXT
from plan_search.planner.search.oracle import exhaustive_pick
from plan_search.planner.search.pricing import System
from plan_search.planner.search.table import Table, group_argmin

def _pct(x: float, threshold: float) -> str:
    """A percentage, with a decimal when it would round onto the threshold's."""
    return f"{100 * x:.1f}%" if round(100 * x) == round(100 * threshold) and abs(x - threshold) > 1e-9 \
        else f"{100 * x:.0f}%"


def _short_money(x: float) -> str:
    return f"${x / 1e6:,.2f}M" if x >= 1e6 else (f"${x / 1e3:,.0f}k" if x >= 1e4 else f"${x:,.0f}")


def _recommend_reason(rule: str, t: Table, rec: int, systems, ms, request, key, cap: float | None = None) -> str:
    """The reason line: which rule picked the plan, the plan's days/dollars/GPUs, and why it and
    not its neighbours (the efficiency figures, or the limits that keep a better plan out)."""
    s = systems[int(t.system[rec])]
    row = int(t.row[rec])
    days, cost, n = float(t.days[rec]), float(t.cost[rec]), int(t.gpus[rec])
    what = f"{days:,.1f} days, {_short_money(cost)}, {n:,} {s.name} GPUs"
    bottleneck = f"; bottleneck {evaluate_one_bottleneck(s, row, request)}"
    if rule == "efficiency":
        thr = request.min_scaling_efficiency
        c = exhaustive_pick(t, OBJECTIVE_KEYS["cheapest"])
        c_cost = float(t.cost[c])
        eff = c_cost / cost if cost > 0 else 1.0
        many = len(systems) > 1  # across GPU types the ratio is of dollars (prices differ), not GPU-hours
        where = (lambda i: f"{int(t.gpus[i]):,} {systems[int(t.system[i])].name}") if many else \
            (lambda i: f"{int(t.gpus[i]):,}")
        measure = (lambda e: f"{1 / e:.2f}x the cheapest plan's cost") if many else \
            (lambda e: f"efficiency {_pct(e, thr)}")
        text = (f"balanced: the fastest plan with scaling efficiency >= {thr:.0%} (no more than {1 / thr:.2f}x "
                f"the cost of the cheapest plan) - {what}, {measure(eff)} (cheapest: "
                f"{where(c)} GPUs, {float(t.days[c]):,.1f} days, {_short_money(c_cost)})")
        faster = t.days < days
        if faster.any():
            j = exhaustive_pick(t, OBJECTIVE_KEYS["cheapest"], faster)
            e_j = c_cost / float(t.cost[j])
            text += ((f"; anything faster costs at least {1 / e_j:.2f}x the cheapest" if many else
                      f"; anything faster is at most {_pct(e_j, thr)} efficient")
                     + f" ({where(j)} GPUs, {float(t.days[j]):,.1f} days, {_short_money(float(t.cost[j]))})")
        else:
            text += "; it is also the fastest plan"
        return text + bottleneck
    if rule == "deadline":
        head = (f"balanced, with a deadline: the cheapest plan that finishes within {request.deadline_days:g} days"
                + (f" and {_short_money(request.budget_usd)}" if request.budget_usd is not None else "")
                + f" - {what}")
    elif rule == "budget":
        head = f"balanced, with a budget: the fastest plan within {_short_money(request.budget_usd)} - {what}"
    else:
        head = f"{rule}: {OBJECTIVE_TEXT[rule]} among the feasible plans - {what}"
    # which limits keep a better plan out (checked over every evaluated candidate)
    cur = tuple(float(t.column(k)[rec]) for k in key)
    binds = []
    for name in CONSTRAINTS:
        for sys, m in zip(systems, ms):
            relaxed = _relaxed(m, name) & ~m[name]
            if not relaxed.any():
                continue
            c = sys.cols
            cols = {"days": c["days"], "cost": c["cost_usd"], "gpus": sys.space.x.num_gpus.astype(float),
                    "energy": c["energy_kwh"], "neg_mfu": -c["mfu"]}
            j = int(group_argmin(np.zeros(len(relaxed), dtype=np.int64), 1, tuple(cols[k] for k in key), relaxed)[0])
            if tuple(float(cols[k][j]) for k in key) < cur:
                binds.append(name)
                break
    names = {"memory": "GPU memory", "comm_ratio": "the comm-ratio limit", "power": "the power cap",
             "deadline": "the deadline", "budget": "the budget", "gpus": "the GPU-count bounds"}
    better = {"cheapest": "a cheaper", "deadline": "a cheaper", "fastest": "a faster", "budget": "a faster",
              "fewest-gpus": "a smaller"}.get(rule, "a better")
    tail = (f"; binding: {', '.join(names[b] for b in binds)} ({better} plan exists without "
            f"{'it' if len(binds) == 1 else 'them'})") if binds else "; no constraint binds"
    return head + tail + bottleneck


def evaluate_one_bottleneck(s: System, row: int, request) -> str:
    r = evaluate(s.space.model, s.cluster, s.space.x.take([row]), memory_headroom=request.memory_headroom,
                 tokens=request.tokens, checkpoint_interval_h=request.checkpoint_interval_h,
                 recovery=goodput.of_request(request))
    return str(r["bottleneck"][0])
