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


def _key_columns(s: System) -> dict:
    c = s.cols
    return {"days": c["days"], "cost": c["cost_usd"], "gpus": s.space.x.num_gpus.astype(float),
            "energy": c["energy_kwh"], "neg_mfu": -c["mfu"]}


def _best_kept_out(systems, ms, key, out: dict) -> dict:
    """Per constraint but memory, the best ``key`` (a tuple) among the candidates of ``systems`` that meet
    every other constraint and not this one, kept as the least in ``out``: what the reason line compares the
    pick with. Taken before a framework's rules keep its fastest runnable plans only (a limit that keeps a
    better plan out binds whichever plans the rules then keep); memory's is read from the plans the search
    keeps (their over-memory plans are timed for it)."""
    for name in CONSTRAINTS:
        if name == "memory":
            continue
        for s, m in zip(systems, ms):
            relaxed = _relaxed(m, name) & ~m[name]
            if not relaxed.any():
                continue
            cols = _key_columns(s)
            j = int(group_argmin(np.zeros(len(relaxed), dtype=np.int64), 1, tuple(cols[k] for k in key), relaxed)[0])
            best = tuple(float(cols[k][j]) for k in key)
            if name not in out or best < out[name]:
                out[name] = best
    return out


def _recommend_reason(rule: str, t: Table, rec: int, systems, ms, request, key, cap: float | None = None,
                      kept_out: dict | None = None) -> str:
    """The reason line: which rule picked the plan, the plan's days/dollars/GPUs, and why it and
    not its neighbours (the efficiency figures, or the limits that keep a better plan out: among the plans
    of ``systems``, and ``kept_out``'s, :func:`_best_kept_out`)."""
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
        many = len({s.name for s in systems}) > 1  # across GPU types the ratio is of dollars (prices differ)
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
        if kept_out and name in kept_out and kept_out[name] < cur:
            binds.append(name)
            continue
        for sys, m in zip(systems, ms):
            relaxed = _relaxed(m, name) & ~m[name]
            if not relaxed.any():
                continue
            cols = _key_columns(sys)
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


def framework_reason(req, rule: str, key, t: Table, rec: int, systems, rec_fws: list[str], refused: list[str],
                     out_rules: list) -> str:
    """The reason line's framework clause: the framework-free what-if said as such; under one framework, which;
    spanning them, which framework runs the pick and the best plan of each other framework under the same rule
    (its days and dollars: why not it), and the frameworks that sat out (a knob pinned they cannot run)."""
    from plan_search.planner.search.pick import pick_exhaustive

    if req.framework == "none":
        return "; framework: none (a framework-free what-if: the plan's knobs as given, run by no framework named)"
    names = " and ".join(rec_fws) if rec_fws else "none"
    if req.framework is not None:
        return f"; framework: {names}"
    fw_of = np.array([s.framework or "" for s in systems])[t.system]
    others = []
    for fw in dict.fromkeys(s.framework for s in systems):
        if fw is None or fw in rec_fws:
            continue
        idx = np.flatnonzero(fw_of == fw)
        if not len(idx):
            continue
        j, _ = pick_exhaustive(t.take(idx), rule, key, req)
        if j is not None:
            i = int(idx[j])
            others.append(f"{fw}'s best {float(t.days[i]):,.1f} days, {_short_money(float(t.cost[i]))} on "
                          f"{int(t.gpus[i]):,} {systems[int(t.system[i])].name}")
    searched = list(dict.fromkeys(s.framework for s in systems if s.framework))
    text = f"; framework: {names}, the best of the frameworks searched ({', '.join(searched)}) by the same rule"
    if others:
        text += f" ({'; '.join(others)})"
    beaten = [fw for fw in searched if fw not in rec_fws and not (fw_of == fw).any()]
    if beaten:
        text += (f"; {' and '.join(beaten)}: no plan that another framework does not match or beat with "
                 "as few GPUs")
    sat_out = [str(e).split(":", 1)[0] for e in refused]
    if sat_out:
        text += f"; {', '.join(sat_out)} cannot run the knobs given"
    if out_rules:
        text += f"; {len(out_rules)} framework(s) ran none of the feasible plans"
    return text
