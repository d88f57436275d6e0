"""Why nothing is feasible (:func:`explain_infeasible`): an empty space (the expert-grid and group
rules, the nearest GPU counts that work), the time limit, the candidate cap, or the first constraint
that leaves nothing, with memory's changes that would fit each evaluated (:func:`_explain_memory`)."""

from __future__ import annotations

import math

import numpy as np

from plan_search.hardware.catalog import load_catalog
from plan_search.models.io import InputError
from plan_search.planner.costmodel.plan import expert_grid_problem
from plan_search.planner.search import clock
from plan_search.planner.search.candidates import DEFAULT_MAX_GPUS, _enumerate
from plan_search.planner.search.pricing import System, evaluate_columns
from plan_search.planner.search.request import MAX_GPUS, Alternative, Knobs, NoFeasiblePlan

def _fits_anything(model, cluster, counts, gbs, seq, request, knobs,
                   deadline: float = math.inf) -> tuple[bool, float, object]:
    """(fits, peak GiB, plan) of a variant of the space, actually evaluated: the fitting plan on
    the fewest GPUs (then the least memory), or, when none fits, the smallest footprint. Past
    ``deadline`` nothing is tried (not fitting, infinite footprint, no plan)."""
    if clock.now() > deadline:
        return False, math.inf, None
    try:
        sp = _enumerate(model, cluster, counts, gbs, seq, request, knobs)
    except InputError:
        return False, math.inf, None
    if not len(sp):
        return False, math.inf, None
    c = evaluate_columns(model, cluster, sp.x, request, deadline)
    mem = c["memory_peak_gib"]
    if c["fits"].any():
        idx = np.nonzero(c["fits"])[0]
        i = int(idx[np.lexsort((idx, mem[idx], sp.x.num_gpus[idx]))[0]])
        return True, float(mem[i]), sp.plan(i)
    i = int(np.argmin(mem))
    return False, float(mem[i]), sp.plan(i)


#: Plan fields _describe_plan writes in its head (the degrees) or never (the run's shape).
_DESCRIBED = frozenset({"num_gpus", "tp", "pp", "dp", "cp", "vpp", "ep", "etp", "micro_batch", "zero", "recompute",
                        "recompute_layers", "global_batch", "seq_len"})


def _describe_plan(p) -> str:
    """The plan, every knob that makes its figures: the degrees (ep and etp on an expert-parallel plan: the
    'smallest footprint' of DeepSeek-V3 on 64 H100s named tp8 ... zero2 full, which re-estimated without
    its ep 64 takes 1,407 GiB, not the 187 GiB stated), then each knob off the Plan's default."""
    from plan_search.planner.costmodel.knobs import knob_specs

    rc = p.recompute + (f"({p.recompute_layers})" if p.recompute_layers else "")
    experts = f" ep{p.ep} etp{p.etp}" if p.ep * p.etp > 1 else ""
    others = [f"{k.name} {('on' if v else 'off') if k.kind == 'bool' else v}" for k in knob_specs()
              if k.name not in _DESCRIBED and (v := getattr(p, k.name)) is not None and v != k.default]
    return (f"tp{p.tp} pp{p.pp} dp{p.dp} cp{p.cp} vpp{p.vpp}{experts} mb{p.micro_batch} zero{p.zero} {rc}"
            + (f" ({', '.join(others)})" if others else "") + f" on {p.num_gpus} GPUs")


def explain_infeasible(model, systems: list[System], gbs, seq, request, ms: list[dict], cut: str | None = None,
                       deadline: float = math.inf) -> NoFeasiblePlan:
    """Why nothing is feasible, with the cheapest changes that would make a plan fit (each
    evaluated, until ``deadline``). The constraints are taken in order memory, comm ratio,
    power, deadline, budget; the first one that leaves nothing is reported, with the best value
    among what was left. When the time limit left candidates unevaluated (or ``cut`` the
    default GPU range short) nothing is proven infeasible, and the message says so."""
    total = sum(len(s.space) for s in systems)
    if total == 0 and cut == "time_limit":
        if not any(len(s.counts) for s in systems):  # the limit passed before the first candidate
            return NoFeasiblePlan(
                f"no feasible plan found within the time limit of {request.time_limit_s:g} s (it passed before "
                "the first candidate was enumerated); raise --time-limit (time_limit_s)", reason="time_limit")
        # the smaller GPU counts enumerated hold no valid plan; the limit stopped before the larger ones
        return NoFeasiblePlan(
            f"no feasible plan found within the time limit of {request.time_limit_s:g} s: the GPU counts "
            "enumerated before it passed hold no valid plan and the larger ones were not enumerated; raise "
            "--time-limit (time_limit_s) or give fewer GPU counts (--gpus, --min-gpus)", reason="time_limit")
    if total == 0:
        counts = sorted({int(n) for s in systems for n in s.counts})
        shown = ", ".join(map(str, counts[:6])) + (" ..." if len(counts) > 6 else "")
        near = _nearest_working(model, systems, counts, gbs, seq, request, deadline)
        why = _forced_expert_problem(request.knobs, counts) or _default_expert_problem(
            model, systems, request, counts) or _expert_group_problem(
            model, systems, request, counts, gbs, seq) or _schedule_problem(
            model, systems, request, counts, gbs, seq) or (
            "tp x pp x cp x dp must equal the GPU count, with tp inside the NVLink domain, pp splitting the "
            "layers and dp x micro-batch dividing the batch")
        return NoFeasiblePlan(
            f"no valid plan at {shown or 'no GPU count'} GPUs with global batch {'/'.join(map(str, gbs))}: "
            f"{why}; {near}", reason="space")
    evaluated = int(sum(m["done"].sum() for m in ms))
    if evaluated < total or cut == "time_limit":
        part = f"{evaluated:,} of {total:,} candidates evaluated" + (
            ", the larger GPU counts not enumerated" if cut else "")
        return NoFeasiblePlan(
            f"no feasible plan found within the time limit of {request.time_limit_s:g} s ({part}); "
            "raise --time-limit (time_limit_s) or bound the space (--gpus, --tp, --pp ...)", reason="time_limit")
    if cut == "max_candidates":
        top = max((int(s.counts.max()) for s in systems if len(s.counts)), default=0)
        return NoFeasiblePlan(
            f"no feasible plan among the {total:,} candidates up to {top:,} GPUs, where the default GPU range "
            f"reached max_candidates {request.max_candidates:,}; give --gpus/--max-gpus beyond it, or bound "
            "the knobs (--tp, --pp, --micro-batch ...)", reason="max_candidates")
    order = ["memory", "comm_ratio", "power", "deadline", "budget", "gpus"]
    alive = [m["done"].copy() for m in ms]
    for name in order:
        nxt = [a & m[name] for a, m in zip(alive, ms)]
        if not any(n.any() for n in nxt):
            break
        alive = nxt
    if name == "memory":
        return _explain_memory(model, systems, gbs, seq, request, deadline)
    # best value of the failing metric among the survivors
    col, unit, what, fix = {
        "comm_ratio": ("comm_ratio", "", "exposed communication share", "raise --max-comm-ratio or allow other knobs"),
        "power": ("power_kw", " kW", "power", "raise --max-power-kw or use fewer or lower-power GPUs"),
        "deadline": ("days", " days", "run time", "raise --deadline-days or --max-gpus, or lower --tokens"),
        "budget": ("cost_usd", " USD", "cost", "raise --budget-usd, or lower --tokens"),
        "gpus": ("num_gpus", " GPUs", "GPU count", "widen --gpus"),
    }[name]
    best, where = math.inf, None
    for s, a in zip(systems, alive):
        if not a.any():
            continue
        vals = s.space.x.num_gpus if col == "num_gpus" else s.cols[col]
        idx = np.nonzero(a)[0]
        i = int(idx[np.argmin(vals[idx])])
        if float(vals[i]) < best:
            best, where = float(vals[i]), (s, i)
    limit = {"comm_ratio": request.max_comm_ratio, "power": request.max_power_kw,
             "deadline": request.deadline_days, "budget": request.budget_usd, "gpus": request.max_gpus}[name]
    s, i = where
    p = s.space.plan(i)
    prior = ", ".join(order[: order.index(name)])
    return NoFeasiblePlan(
        f"no plan meets the {name.replace('_', ' ')} limit: the best {what} among the plans that satisfy "
        f"{prior} is {best:.4g}{unit} ({_describe_plan(p)}, {s.name}) against a limit of {limit:g}{unit}; {fix}",
        reason=name)


def _forced_expert_problem(knobs: Knobs, counts: list[int]) -> str | None:
    """The expert-grid rule (:func:`expert_grid_problem`, Plan's) when the given ``ep``/``etp``
    (an unbound one at its least, 1; the given ``pp``, else 1) fit the stage of no GPU count: then
    that is why the space is empty. None when some count could hold them."""
    if not (knobs.ep or knobs.etp) or not counts:
        return None
    pairs = sorted({(e, t) for e in (knobs.ep or [1]) for t in (knobs.etp or [1])}, key=lambda q: (q[0] * q[1], q))
    stages = sorted({(n // p, n, p) for n in counts for p in (knobs.pp or [1]) if n % p == 0}, reverse=True)
    if not stages or any(g % (e * t) == 0 for g, _, _ in stages for e, t in pairs):
        return None
    (e, t), (g, n, p) = pairs[0], stages[0]
    where = (f"of a pipeline stage ({n} GPUs / pp {p})" if p > 1 else
             "asked" if len(counts) == 1 else "(the most asked)")
    return expert_grid_problem(e, t, g, where,
                               f"or use a multiple of {e * t * p} GPUs" + (" or a lower pp" if p > 1 else ""))


def _default_expert_problem(model, systems: list[System], request, counts: list[int]) -> str | None:
    """Why the default expert-parallel degrees empty the space (no ``--ep`` given): ``ep`` defaults to the
    powers of two dividing ``num_experts`` that leave at most MAX_LOCAL_EXPERTS experts per rank, else to
    ``num_experts`` itself; when none of them divides any GPU count asked (33 experts: ep 33; 100,000
    experts: ep 100,000), that is why, not the layout. Names ep, the domain, and the ep values that would
    divide a count. None when some default ep divides some count."""
    from plan_search.planner.search.space import MAX_LOCAL_EXPERTS, _divisors, expert_domain

    knobs = request.knobs
    if not model.is_moe or knobs.ep or not counts:
        return None
    try:
        eps = sorted({int(e) for s in systems for e in expert_domain(model, s.cluster, knobs)[0]})
    except InputError:
        return None
    if any(n % e == 0 for n in counts for e in eps):
        return None
    E = model.num_experts
    how = (f"the powers of two dividing it with at most {MAX_LOCAL_EXPERTS} experts per rank: "
           f"{', '.join(f'{e:,}' for e in eps)}" if eps != [E] else
           f"ep {E:,} itself, as no power of two dividing {E:,} leaves at most {MAX_LOCAL_EXPERTS} experts per rank")
    fit = [int(d) for d in _divisors(E).tolist() if any(n % d == 0 for n in counts)]
    e = max(fit)
    return (f"ep: the default expert-parallel degrees of {model.name}'s {E:,} experts ({how}) divide none of the "
            f"GPU counts asked; give --ep from the divisors of {E:,} that divide a count ({', '.join(map(str, fit))}: "
            f"--ep {e} keeps {E // e:,} experts per GPU), or GPU counts that ep {eps[0]:,} divides")


def _schedule_problem(model, systems: list[System], request, counts: list[int], gbs, seq) -> str | None:
    """Why ``pp_schedule dualpipe`` empties the space: it needs an even pp, vpp 1 and an even number of
    micro-batches per step (Plan's rule); when the same space under 1f1b holds plans, that is why, and the
    message names the schedule (it blamed the layout). None otherwise."""
    sched = list(request.knobs.pp_schedule or [])
    if not sched or "1f1b" in sched:
        return None
    knobs = request.knobs.model_copy(update={"pp_schedule": ["1f1b"]})
    for s in systems:
        try:
            if len(_enumerate(model, s.cluster, counts, gbs, seq, request, knobs)):
                return (f"pp_schedule: dualpipe needs an even pp, vpp 1 and an even number of micro-batches per "
                        f"step (global batch / (dp x micro-batch)), and no layout at these GPU counts has all three, "
                        f"while 1f1b layouts exist; use pp_schedule 1f1b (or add it: --pp-schedule 1f1b,dualpipe), "
                        f"or a global batch with an even number of micro-batches")
        except InputError:
            continue
    return None


def _expert_group_problem(model, systems: list[System], request, counts: list[int], gbs, seq) -> str | None:
    """Why the given ``ep``/``etp`` empty the space when some GPU count could hold them
    (:func:`_forced_expert_problem` passed): ``etp * ep`` must divide a pipeline stage's ``tp*cp*dp``
    GPUs (parallel folding), and the groups the space can form are bounded by its tp and cp domains
    and by dp dividing the global batch (DeepSeek-V3's 15360 = 2^10 x 15 with tp <= 8 and cp 1 has no
    group of 16,384: ``--ep 8 --etp 2048``). One line naming the field at fault and the values that
    fit; None when some formable group holds a given pair (the space is empty for another reason)
    or when a batch tolerance frees dp."""
    from plan_search.planner.search.space import _divisors, cp_domain, pp_domain, tp_domain

    knobs = request.knobs
    if not model.is_moe or not (knobs.ep or knobs.etp) or not counts or request.global_batch_tolerance > 0:
        return None
    try:
        tps = np.unique(np.concatenate([tp_domain(model, s.cluster, knobs) for s in systems]))
        cps = cp_domain(seq, knobs)
        pps = np.unique(pp_domain(model, knobs)[0])
    except InputError:
        return None
    dps = np.unique(np.concatenate([_divisors(int(b)) for b in gbs]))
    asked = np.asarray(counts, dtype=np.int64)

    def formable(cp_values) -> np.ndarray:
        """The tp*cp*dp groups of these cp values that some pp makes a GPU count asked."""
        g = np.unique((tps[:, None, None] * np.asarray(cp_values)[None, :, None] * dps[None, None, :]).ravel())
        return g[np.isin(g[:, None] * pps[None, :], asked).any(axis=1)]

    groups = formable(cps)
    if not groups.size:
        return None
    eps, etps = list(knobs.ep or [1]), list(knobs.etp or [1])

    def fits(e: int, t: int, among=None) -> bool:
        return bool(((groups if among is None else among) % (e * t) == 0).any())

    if any(fits(e, t) for e in eps for t in etps):
        return None
    e, t = min(((e, t) for e in eps for t in etps), key=lambda q: (q[0] * q[1], q))
    field = "etp" if knobs.etp and t > 1 and any(fits(e2, 1) for e2 in eps) else "ep"
    if field == "etp":
        good = [d for d in _divisors(model.expert_ffn_hidden_size or 1).tolist() if any(fits(e2, d) for e2 in eps)]
        use = f"use etp of {', '.join(map(str, good))} (dividing expert_ffn_hidden_size {model.expert_ffn_hidden_size})"
    else:
        good = [d for d in _divisors(model.num_experts).tolist() if any(fits(d, t2) for t2 in etps)]
        use = (f"use ep of {', '.join(map(str, good))} (dividing num_experts {model.num_experts})" if good else
               "lower ep or etp")
    cp_txt = ", ".join(map(str, cps.tolist()))
    more = ""
    if not knobs.cp:  # a wider cp than the default domain's (seq_len / MIN_CP_TOKENS) may form the group
        wider = [c for c in (2 ** np.arange(1, 11)).tolist() if c not in cps.tolist() and seq % (2 * c) == 0]
        for c in wider:
            g = formable([c])
            if any(fits(e2, t2, g) for e2 in eps for t2 in etps):
                more = f", or --cp {c}"
                break
    return (f"{field}: etp*ep = {t}*{e} = {t * e} divides no pipeline stage's tp*cp*dp GPUs this space can form "
            f"(tp {', '.join(map(str, tps.tolist()))}, cp {cp_txt}, dp dividing the global batch "
            f"{'/'.join(map(str, gbs))}, at the GPU counts asked), which the expert "
            f"layers regroup as etp x ep x edp; {use}, or a global batch more data-parallel degrees divide{more}")


def _nearest_working(model, systems, counts: list[int], gbs, seq, request, deadline: float,
                     span: int = 32) -> str:
    """The nearest GPU counts (node multiples, up to ``span`` each side of the requested ones)
    with a plan that fits in memory, and whether a 5% batch tolerance would make the requested
    count work -- each checked by evaluating it. The text that ends the "no valid plan" message."""
    found: list[str] = []
    tips: list[str] = []
    for s in systems:
        step = s.cluster.node.gpus_per_node
        near = set()
        for n in counts[:4]:
            base = n // step * step
            near |= {base - k * step for k in range(span)} | {base + k * step for k in range(1, span + 1)}
        near = sorted(c for c in near if c > 0 and c not in counts and c <= MAX_GPUS)
        if not near or clock.now() > deadline:
            continue
        try:
            sp = _enumerate(model, s.cluster, near, gbs, seq, request)
        except InputError:
            continue
        if not len(sp):
            continue
        cols = evaluate_columns(model, s.cluster, sp.x, request, deadline)
        ok = np.unique(sp.x.num_gpus[cols["fits"].astype(bool)])
        for n in counts[:4]:
            below, above = ok[ok < n], ok[ok > n]
            pick = ([f"{int(below.max()):,}"] if len(below) else []) + ([f"{int(above.min()):,}"] if len(above) else [])
            if pick:
                found.append(f"{' or '.join(pick)} {s.name} GPUs")
        if request.global_batch_tolerance < 0.05:
            try:
                tol = request.model_copy(update={"global_batch_tolerance": 0.05})
                sp = _enumerate(model, s.cluster, counts[:4], gbs, seq, tol)
                if len(sp):
                    c = evaluate_columns(model, s.cluster, sp.x, request, deadline)
                    if c["fits"].any():
                        b = int(sp.x.gb[np.flatnonzero(c["fits"])[0]])
                        tips.append(f"--global-batch {gbs[0]}~5% (batch {b:,} at {counts[0]:,} GPUs)")
            except InputError:
                pass
    out = ("nearest counts that work: " + ", ".join(dict.fromkeys(found))) if found else \
        "no count within a few nodes works either"
    out += "; or " + tips[0] if tips else ""
    return out + "; or loosen the knob bounds"


def _explain_memory(model, systems, gbs, seq, request, deadline: float = math.inf) -> NoFeasiblePlan:
    best = (math.inf, None, None)
    for s in systems:
        m = s.cols["memory_peak_gib"]
        i = int(np.argmin(m))
        if m[i] < best[0]:
            best = (float(m[i]), s, i)
    gib, s, i = best
    plan = s.space.plan(i)
    usable = float(s.cols["memory_usable_gib"][i])
    cap = s.cluster.gpu.memory_gib
    kn: Knobs = request.knobs
    alts: list[Alternative] = []
    variants = []
    if 3 not in kn.zero:
        variants.append(("ZeRO-3 with --zero 3", kn.model_copy(update={"zero": sorted(set(kn.zero) | {3})})))
    if "full" not in kn.recompute:
        variants.append(("full recomputation with --recompute full",
                         kn.model_copy(update={"recompute": list(kn.recompute) + ["full"]})))
    if len(variants) == 2:
        variants.append(("ZeRO-3 and full recomputation",
                         kn.model_copy(update={"zero": sorted(set(kn.zero) | {3}),
                                               "recompute": list(kn.recompute) + ["full"]})))
    for label, k in variants:
        ok, g, p = _fits_anything(model, s.cluster, s.counts, gbs, seq, request, k, deadline)
        alts.append(Alternative(change=label, fits=ok, peak_gib=g if math.isfinite(g) else None,
                                usable_gib=usable, plan=p))
    # more GPUs (same system, same knobs): node multiples beyond the largest count considered
    top = int(max(s.counts)) if len(s.counts) else s.cluster.node.gpus_per_node
    gpn = s.cluster.node.gpus_per_node
    for mult in (2, 4, 8, 16, 32, 64):
        stride = gpn * max(1, (top * (mult - 1)) // (2048 * gpn))  # at most ~2048 counts per try
        counts = np.arange(top + stride, top * mult + 1, stride)
        counts = counts[counts <= DEFAULT_MAX_GPUS]
        if not len(counts):
            break
        ok, g, p = _fits_anything(model, s.cluster, counts, gbs, seq, request, kn, deadline)
        if ok:
            alts.append(Alternative(change=f"{p.num_gpus:,} {s.name} GPUs" if p else "more GPUs",
                                    fits=True, peak_gib=g, usable_gib=usable, plan=p))
            break
    else:
        alts.append(Alternative(change=f"more GPUs, up to {top * 64:,}", fits=False))
    # a larger-memory GPU at the same counts
    bigger = sorted((c for c in load_catalog().values() if c.gpu.memory_gib > cap),
                    key=lambda c: (c.price_per_gpu_hour_usd, c.name))
    for c in bigger:
        counts = s.counts if len(s.counts) else np.array([top])
        ok, g, p = _fits_anything(model, c, counts, gbs, seq, request, kn, deadline)
        if ok:
            alts.append(Alternative(change=f"a larger-memory GPU, {c.name} with {c.gpu.memory_gib:g} GiB", fits=True,
                                    peak_gib=g, usable_gib=c.gpu.memory_gib * (1 - request.memory_headroom), plan=p))
            break
    else:
        if bigger:
            top_gpu = max(bigger, key=lambda c: c.gpu.memory_gib)
            alts.append(Alternative(change=f"a larger-memory GPU at the same counts, up to {top_gpu.name} with "
                                           f"{top_gpu.gpu.memory_gib:g} GiB", fits=False))
    # one level of brackets at most: clauses are separated by ';', alternatives by ', or '
    fixes = [f"{a.change}, {a.peak_gib:.1f} GiB" if a.peak_gib is not None else a.change for a in alts if a.fits]
    tried = [a.change for a in alts if not a.fits]
    msg = (f"no plan fits in memory: the smallest footprint is {gib:.1f} GiB per GPU, {_describe_plan(plan)} "
           f"of {s.name}, against {usable:.1f} GiB usable ({cap:g} GiB less {request.memory_headroom:.0%} "
           "headroom); "
           + (f"would fit: {', or '.join(fixes)}" if fixes else "nothing tried fits")
           + (f"; not enough: {', nor '.join(tried)}" if tried else "")
           + ("; the time limit stopped these checks: some were not tried" if clock.now() > deadline else ""))
    return NoFeasiblePlan(msg, reason="memory", smallest_gib=gib, smallest_plan=plan, usable_gib=usable,
                          capacity_gib=cap, system=s.name, alternatives=alts)
