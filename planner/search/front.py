"""``planner.search``: the Pareto front of GPU count, training days and dollars, and a
recommended plan, over every candidate of :mod:`planner.space`.

Pipeline (one copy of every formula: candidates are priced only by
:func:`planner.evaluate.evaluate`):

1. **Enumerate** every valid candidate per GPU type (:func:`planner.space.enumerate_space`),
   all GPU counts and global batches at once.
2. **Evaluate** them in large numpy batches (chunks of :data:`EVAL_CHUNK` rows: a cost-model call
   has ~1 ms of fixed cost, and much larger chunks fall out of the cache), keeping the columns the
   search needs. Memory first: every candidate's peak memory is priced, and only those that fit
   are timed (:func:`evaluate_columns`). What does not depend on the data-parallel degree (a
   stage's parameters and stored activations, its per-micro-batch times) is priced once per
   group of candidates that differ only in dp and how it shards (:class:`evaluate.LayoutTerms`,
   shared by one system's pieces of the GPU range; the same figures as pricing each candidate).
   The "memory binds" flag of a front point, which needs
   the fastest plan of its GPU count that does not fit, times those a round at a time until one
   beats the point (:func:`binding_days`; ``LAZY_BINDING`` off times them all, same answer).
3. **Mask** what breaks a constraint: memory over ``capacity * (1 - headroom)`` (evaluate's
   ``fits``), ``comm_ratio > max_comm_ratio``, ``days > deadline_days``, ``cost_usd >
   budget_usd``, ``power_kw > max_power_kw``, GPU counts outside the bounds.
4. **Prune** with numpy, only what is exactly safe. Within one group (same GPU type, same GPU
   count) every candidate has the same GPU count, so a candidate is dominated for the front
   when another one of the group is no slower *and* no dearer (one of them strictly, or equal
   and earlier in the stable order). The group keeps its (days, dollars) front — under the
   present cost model dollars grow with days at a fixed count and price, so that is the
   fastest plan — plus the candidate that is best for each objective that is not a function of
   (count, days, dollars): the least energy, the highest MFU. Constraints are applied before
   this step, so a kept candidate is never replaced by one that breaks a limit. Nothing is
   pruned across groups: that is the solver's job. What is *not* exact is the space itself:
   its default domains (``Knobs``: micro-batch up to 8, cp while ``seq_len/cp >= 1024``)
   bound what is searched; ``--micro-batch``/``--cp``/``--max-*`` widen them.
5. **Solve** with CP-SAT (:func:`build_model`): one named Boolean per surviving candidate,
   exactly one chosen; the limits (deadline, budget, power cap, GPU-count and node bounds)
   stated again on the chosen candidate, each as one named clause forbidding the candidates
   over it (with exactly one choice this is the same constraint as a bound on the chosen
   value, and it keeps presolve at ~0.5 ms per solve where a weighted-sum bound with a few
   hundred distinct coefficients costs ~8 ms); the objective, stated once per objective in
   :data:`OBJECTIVE_KEYS`, is lexicographic (fastest = days, then dollars, then GPUs, then the
   stable candidate order). *Scaling*: the lexicographic key is replaced by its ordinal rank
   (:func:`positions`: a permutation of ``0..n-1``), so the objective coefficients are
   integers below the table size whatever the magnitudes — a 10T-parameter model on a million
   GPUs cannot overflow — and no two distinct values are merged by rounding (which a
   fixed-point scaling would do, making ties the oracle does not see). The optimum is unique
   (the stable order breaks every tie), so the answer does not depend on the worker count.
6. **Walk the front** by epsilon-constraint re-solves: minimise (days, dollars, GPUs, order);
   after each optimum ``q`` add the constraint "GPUs < q.GPUs or days < q.days or dollars <
   q.dollars" (linearised: the candidates it excludes, all known constants, get the domain
   {0}) and solve again, hinted with the previous optimum, until infeasible. Each optimum is
   non-dominated (a dominating candidate would either come first in the key or have been cut
   by a point that then dominates this one too), so the walk takes one solve per front point
   plus one; its model therefore holds only the table's non-dominated rows (the recommended
   pick's model keeps the whole table). The time limit (``time_limit_s``, from the start of the search) stops the
   evaluation between chunks and the walk between solves; what was found so far is returned
   with ``proven_optimal = False``.

``solver="exhaustive"`` computes the front from *all* feasible candidates, without step 4,
with a plain numpy skyline (:func:`exhaustive_front`) — the oracle the tests compare with.

Modules, by what they do (this one holds :func:`search`, the orchestration):
:mod:`~planner.search.candidates` (enumeration and the default GPU range), :mod:`~planner.search.pricing`
(steps 2 and 3), :mod:`~planner.search.table` (the table and step 4), :mod:`~planner.search.cpsat`
(steps 5 and 6), :mod:`~planner.search.oracle` (the exhaustive front), :mod:`~planner.search.objective`
and :mod:`~planner.search.pick` (the recommendation), :mod:`~planner.search.framework` (a framework's
rules), :mod:`~planner.search.binding` (what binds a point), :mod:`~planner.search.reasons` (the reason
line), :mod:`~planner.search.explain` (why nothing is feasible), :mod:`~planner.search.points` (the
front's points), :mod:`~planner.search.clock` (the one clock every phase reads).
"""


from __future__ import annotations

import numpy as np

from plan_search.hardware.resolve import resolve_cluster
from plan_search.hardware.spec import ClusterSpec
from plan_search.models import counting
from plan_search.models.io import InputError
from plan_search.models.resolve import resolve_model
from plan_search.models.spec import ModelSpec
from plan_search.planner.costmodel import goodput
from plan_search.planner.search.goodput_note import goodput_clause
from plan_search.planner.costmodel.arrays import PlanArrays
from plan_search.planner.costmodel.estimate import pack
from plan_search.planner.costmodel.evaluate import evaluate
from plan_search.planner.search import binding, clock
from plan_search.planner.search.candidates import (
    ENUM_SHARE,
    _concat_spaces,
    _enumerate,
    _enumerate_until,
    _upper_cap,
    default_max_gpus,
    gpu_counts,
)
from plan_search.planner.search.command import estimate_command
from plan_search.planner.search.cpsat import _cpsat, cpsat_front, preload_cp_model  # noqa: F401 (cli/search.py's)
from plan_search.planner.search.explain import explain_infeasible
from plan_search.planner.search.fitted import UNFITTED_BAND, is_fitted
from plan_search.planner.search.framework import restrict_to_framework, run_by
from plan_search.planner.search.low_precision import low_precision_line
from plan_search.planner.search.objective import OBJECTIVE_KEYS, resolve_objective  # noqa: F401 (the tests')
from plan_search.planner.search.oracle import exhaustive_front
from plan_search.planner.search.pick import landmarks, pick_cpsat, pick_exhaustive, system_fronts
from plan_search.planner.search.points import _front_points, _gpu_ref
from plan_search.planner.search.pricing import LAYOUT_TERMS, System, evaluate_columns, masks
from plan_search.planner.search.reasons import _best_kept_out, _recommend_reason, framework_reason
from plan_search.planner.search.request import (
    NoFeasiblePlan,
    ResolvedInputs,
    SearchRequest,
    SearchResult,
    SearchStats,
    knob_combinations,
    knob_values,
)
from plan_search.planner.search.table import Table, build_table, group_ids, prune

#: Share of ``time_limit_s`` the search's phases (enumeration, evaluation, framework checks, CP-SAT)
#: may use; the rest is for what follows them on the candidates they kept (the table, the front, the
#: pick, the "memory binds" timing, the front's figures) and the command's report. That work grows with
#: the candidates as the phases' own does: DeepSeek-V3 on H100, exhaustive, 1.2M candidates: 0.3 s
#: after 0.85 s of phases (2026-12-01, 2 loaded cores; 0.55 s after 1.9 s at load 2.4), a ratio of
#: ~0.3-0.35, so the phases stop at 1 / 1.4 of the limit and the whole search ends within it.
WORK_SHARE = 0.7
#: With ``framework``, the share of WORK_SHARE that enumeration and evaluation may use: the rest is for the
#: framework's rule checks (:func:`restrict_to_framework`: Python, ~0.1 ms a plan; DeepSeek-V3 on H100 under
#: Megatron checks 17,152 plans in 2.9 s over its whole default range).
FRAMEWORK_EVAL_SHARE = 0.5
#: The frameworks a search without ``framework`` spans, one per efficiency profile (hardware/profiles.py):
#: each one's knob space, rules and profile give its plans. NeMo runs Megatron-Core with the megatron profile:
#: its rules are checked on every point the megatron search shows (a point names every framework that runs
#: it as it is), not searched apart.
SPAN_FRAMEWORKS = ("megatron", "torchtitan", "deepspeed")


# ------------------------------------------------------------------ inputs
def resolve_inputs(request: SearchRequest, model: ModelSpec | None = None
                   ) -> tuple[ModelSpec, list[ClusterSpec], list[int], int]:
    model = model or resolve_model(request.model)
    clusters = []
    from plan_search.hardware.overrides import apply_overrides
    from plan_search.hardware.profiles import for_framework

    for ref in request.gpu:
        # the framework's kernel-efficiency profile, then the what-if overrides
        fw = request.framework if request.framework not in (None, "none") else None
        c = apply_overrides(for_framework(resolve_cluster(ref), fw), request.sets)
        if c.name in [k.name for k in clusters]:
            continue
        clusters.append(c)
    seq = request.seq_len or model.seq_len
    gbs = request.global_batch or [model.global_batch]
    return model, clusters, gbs, seq


def search(request: SearchRequest | dict | None = None, *, model: ModelSpec | str | None = None,
           **fields) -> SearchResult:
    """Search the plans of a request; raises :class:`NoFeasiblePlan` when nothing qualifies.

    The request is a :class:`SearchRequest`, a dict of its fields, or keyword arguments
    (``search(model="gpt3", gpu="a100", tokens="300B", tp=[4, 8])``; plan knobs may be given at
    the top level). ``model`` as a :class:`ModelSpec` is a spec to use instead of resolving
    ``request.model`` (which then only labels the run); as a string it is the request's model."""
    t0 = clock.now()
    if isinstance(model, str):
        fields["model"] = model
        model = None
    elif model is not None and request is None and "model" not in fields:
        fields["model"] = model.name  # a spec given alone labels the run with its name
    if model is not None and not isinstance(model, ModelSpec):
        from plan_search.models.io import short_repr

        raise InputError(f"model: {short_repr(model)} is not a ModelSpec or a model name/file")
    if fields:
        base = request.model_dump(exclude_unset=True) if isinstance(request, SearchRequest) else dict(request or {})
        request = {**base, **fields}
    if isinstance(request, dict) and "from" in request:  # a launch file's plan (planner/frameworks/read/request.py)
        from plan_search.planner.frameworks.read.request import expand_from

        request = expand_from(request)
    if request is None:
        raise InputError("search: give a request (SearchRequest or dict) or its fields as keyword arguments")
    if isinstance(request, SearchRequest):
        req = request
    else:  # bad fields are one line, as plan_search.estimate's and the CLI's (was pydantic's multi-line error)
        from pydantic import ValidationError

        from plan_search.models.io import validation_message

        try:
            req = SearchRequest.model_validate(request)
        except ValidationError as exc:
            raise InputError(f"request: {validation_message(exc)}") from None
    # None spans the frameworks (SPAN_FRAMEWORKS: each one's rules filter, its profile prices); one framework
    # narrows to it; "none" is the framework-free what-if (the Plan's knobs, the catalog's terms, no rules)
    span = req.framework is None
    named = () if req.framework == "none" else (SPAN_FRAMEWORKS if span else (req.framework,))
    # the search's phases (enumeration, evaluation, framework checks, solve) stop at WORK_SHARE of the limit:
    # the rest is for the front's figures, the "memory binds" timing and the report, bounded by the limit itself
    hard_deadline = t0 + req.time_limit_s
    deadline = t0 + WORK_SHARE * req.time_limit_s
    # enumeration and evaluation: the phases' share, half of it when the framework's rules are checked next
    eval_share = FRAMEWORK_EVAL_SHARE if named else 1.0
    eval_deadline = t0 + eval_share * WORK_SHARE * req.time_limit_s
    model, base_clusters, gbs, seq = resolve_inputs(req, model)
    rule, key = resolve_objective(req)
    runs, refused = [], []
    for fw in named or (None,):
        if fw is None:
            runs.append((None, req, base_clusters))
            continue
        try:
            runs.append((fw, *_narrowed(req, fw, model)))
        except InputError as exc:  # spanning: a framework that cannot run the request's pinned knobs sits out
            if not span:
                raise
            refused.append(str(exc))
    if not runs:  # no framework runs what the user pinned: the first one's rule, as --framework X says it
        raise InputError(refused[0] + (f" (and every other framework: {'; '.join(refused[1:])})" if refused[1:]
                                       else ""))
    ph = _Phases()
    lo = req.min_gpus or 1
    prunable = rule not in ("least-energy", "best-mfu")  # the other rules pick by GPUs, days and dollars only
    ranges: dict[str, int] = {}  # GPU type -> top of its GPU range, as the first framework searched it
    systems: list[System] = []
    ms: list[dict] = []
    held = None  # the first framework's candidates before its rules, while nothing is feasible (the explanation)
    out_rules: list[NoFeasiblePlan] = []
    alternatives: dict = {}  # per constraint, the best key among the plans only it keeps out (the reason line)
    for j, (fw, req_f, clusters_f) in enumerate(runs):
        # the first framework has the phases' time as a search under it alone has (the same answer); each next
        # one an even share of what it left: its enumeration and evaluation eval_share of its turn, its rule
        # checks the rest
        start = clock.now() if j else t0
        end = deadline if not j else start + (deadline - start) / (len(runs) - j)
        if j and start > end:
            ph.skipped.append(f"{fw} plans")
            continue
        eval_end = eval_deadline if not j else start + eval_share * (end - start)
        share = eval_share if not j else (eval_end - start) / req.time_limit_s  # of the limit, from start
        sys_f = _priced_systems(model, clusters_f, gbs, seq, req_f, start, share, eval_end, hard_deadline, ph,
                                len(systems), fw, ranges)
        for s in sys_f:  # the first framework's default GPU range is every framework's (one range per GPU type)
            ranges.setdefault(s.name, int(s.counts.max()) if len(s.counts) else 0)
        ms_f = [masks(s.cols, s.space.x, req_f, lo, req_f.max_gpus) for s in sys_f]
        _best_kept_out(sys_f, ms_f, key, alternatives)
        if held is None and not any(m["feasible"].any() for m in ms_f):
            held = (sys_f, ms_f, req_f)
        if fw is not None and any(m["feasible"].any() for m in ms_f):  # else why nothing is feasible is not fw
            try:
                sys_f, ms_f = restrict_to_framework(model, sys_f, ms_f, req_f, lo, end,
                                                    ph.enum_cut, hard_deadline,
                                                    _found(systems, ms) if span and systems and prunable else None)
            except NoFeasiblePlan as exc:
                if not span:
                    raise
                out_rules.append(exc)
                continue
        for s in sys_f:
            s.framework = fw
        systems += sys_f
        ms += ms_f
    feasible = [m["feasible"] for m in ms]
    n_feas = int(sum(f.sum() for f in feasible))
    if n_feas == 0:
        if held is None and out_rules:  # feasible plans, none a framework can run: the first framework's rule
            raise out_rules[0]
        sys_x, ms_x, req_x = held if held is not None else (systems, ms, req)
        raise explain_infeasible(model, sys_x, gbs, seq, req_x, ms_x,
                                 ph.cut or ("time_limit" if ph.skipped or ph.cut_by_limit else None), deadline)
    held = None
    cut, skipped, enum_cut, t_enum, t_eval = ph.cut, ph.skipped, ph.enum_cut, ph.t_enum, ph.t_eval

    labels = [s.name + (f"/{s.framework}" if s.framework else "") for s in systems]
    gpu_types = [s.name for s in systems]
    gpu_of = np.array([list(dict.fromkeys(gpu_types)).index(g) for g in gpu_types], dtype=np.int64)
    groups, n_groups = group_ids(systems)
    full = build_table(systems, feasible, groups)
    if req.solver == "cpsat":
        _cpsat()  # imported lazily (~0.06 s), not counted in solve_s
    t_solve0 = clock.now()
    front_cut: list[str] = []
    # past the phases' share CP-SAT is not started: its walk and pick would stop at once (the pick then
    # falls back to the rule applied to the table); the oracle's skyline and pick on the same table are
    # the answer it would give, in O(rows)
    late = req.solver == "cpsat" and clock.now() > deadline
    # a GPU type priced on priors is on the front, marked, but not recommended over a fitted one unless asked
    fit = np.array([is_fitted(s.cluster) for s in systems], dtype=bool)
    unfitted_out = sorted({s.name for s, f in zip(systems, fit) if not f}) \
        if fit.any() and not fit.all() and not req.allow_unfitted else []

    def pickable(tab: Table) -> np.ndarray:  # the table's rows the pick may take
        return np.flatnonzero(fit[tab.system]) if unfitted_out else np.arange(len(tab))

    if req.solver == "exhaustive" or late:
        table = full
        front_rows = exhaustive_front(table, hard_deadline, front_cut)
        ok = pickable(table)
        rec, cap = pick_exhaustive(table.take(ok), rule, key, req)
        rec = None if rec is None else int(ok[rec])
        proven, solves = True, 0
    else:
        keep = prune(full, n_groups)
        table = full.take(keep)
        node_sizes = np.array([s.cluster.node.gpus_per_node for s in systems], dtype=np.int64)
        ok = pickable(table)
        rec, cap, proven_rec, rec_solves = pick_cpsat(table.take(ok), rule, key, req, labels, node_sizes, deadline)
        rec = None if rec is None else int(ok[rec])
        # the walk's model holds the table's non-dominated rows only (the others can never be a step of
        # it: each step is a non-dominated row, see the module docstring); its objective ranks, limits and
        # proof are the same, on ~2/3 of the rows
        sky = np.asarray(exhaustive_front(table, hard_deadline, front_cut), dtype=np.int64)  # the limit holds here too
        walk, proven_front, solves = cpsat_front(table.take(sky), req, labels, node_sizes, deadline)
        front_rows = [int(sky[i]) for i in walk]
        if not front_rows and len(table):  # the limit stopped the walk before its first point:
            front_rows = sky.tolist()  # the skyline of the same table (the front the walk finds)
        solves += rec_solves
        proven = proven_rec and proven_front
        if rec is None:  # time limit before any solution: the same rule applied to the table directly
            rec, cap = pick_exhaustive(table.take(ok), rule, key, req)
            rec = None if rec is None else int(ok[rec])
            proven = False
    t_solve = clock.now() - t_solve0

    own = system_fronts(table, front_rows, gpu_of, hard_deadline, front_cut, list(dict.fromkeys(gpu_types)))
    want = np.unique(table.group[np.asarray(front_rows + [rec], dtype=np.int64)]) if front_rows else None
    below = None
    # only the points' flags read the memory figure (the other rules' reason reads every over-memory plan
    # of the wanted groups: all timed)
    if rule == "efficiency" and binding.LAZY_BINDING:
        below = np.full(n_groups, -np.inf)
        pts = np.asarray(front_rows + [i for rr in own for i in rr], dtype=np.int64)
        below[table.group[pts]] = np.inf
        np.minimum.at(below, table.group[pts], table.days[pts])
    bind = binding.binding_days(systems, ms, groups, n_groups, req, want, hard_deadline, below)
    front, others = _front_points(systems, table, front_rows, req, bind, own, hard_deadline, front_cut)
    rec_sys = systems[int(table.system[rec])]
    rec_row = int(table.row[rec])
    rec_plan = rec_sys.space.take(np.array([rec_row])).plan(0)
    rec_fws = run_by(rec_sys.framework, rec_plan, model, rec_sys.cluster)
    r = evaluate(model, rec_sys.cluster, PlanArrays.from_plans([rec_plan], model.num_layers),
                 memory_headroom=req.memory_headroom, tokens=req.tokens,
                 checkpoint_interval_h=req.checkpoint_interval_h, recovery=goodput.of_request(req))
    recommended = pack(model, rec_sys.cluster, rec_plan, r, 0, req.tokens)
    # issue 23: a 16-bit answer says what the GPU's best low-precision recipe gives the same layout
    low = low_precision_line(model, rec_sys.cluster, rec_plan, rec_fws[0] if rec_fws else None, req.tokens,
                             req.memory_headroom, req.checkpoint_interval_h, float(r["days"][0]),
                             float(r["cost_usd"][0]))
    rec_index = next((i for i, fp in enumerate(front) if fp.gpu == rec_sys.name and fp.plan == rec_plan
                      and fp.framework == rec_fws), None)
    reason = _recommend_reason(rule, table.take(ok), int(np.searchsorted(ok, rec)), systems, ms, req, key, cap,
                               alternatives) + goodput_clause(systems, ms, groups, table, rec, rule, key, req) \
        + framework_reason(req, rule, key, table, rec, systems, rec_fws, refused, out_rules)
    if unfitted_out:
        reason += (f"; not recommended: {', '.join(unfitted_out)} (efficiency terms not fitted, figures +-"
                   f"{UNFITTED_BAND:.0%}; --allow-unfitted to let it be)")
    marks = landmarks(front, rec_index, req.min_scaling_efficiency)
    total = sum(len(s.space) for s in systems)
    evaluated = int(sum(m["done"].sum() for m in ms))
    mem_rej = int(sum((~m["memory"]).sum() for m in ms))
    comm_rej = int(sum((m["done"] & m["memory"] & ~m["comm_ratio"]).sum() for m in ms))
    solved = proven
    proven = proven and evaluated == total and not cut and not skipped and not enum_cut and not front_cut
    what_cut = [f"{name}: not searched (time limit)" for name in skipped] + enum_cut + front_cut
    if late:  # exact on the candidates evaluated: not a cut of its own
        what_cut.append("solve: CP-SAT not started (time limit): the front and the pick computed directly on "
                        "the candidates evaluated")
    if cut:
        what_cut.append(f"default GPU range: stopped by {cut.replace('_', ' ')}")
    if evaluated < total:
        what_cut.append(f"evaluation: {total - evaluated:,} of {total:,} candidates not evaluated (time limit)")
    if not solved:
        what_cut.append("solve: stopped by the time limit (not proven optimal)")
    if not bind["complete"]:
        what_cut.append("binding: over-memory plans of some GPU counts not timed (time limit): "
                        "'memory' may be missing from their binding")
    stats = SearchStats(
        candidates=total, memory_rejected=mem_rej, evaluated=evaluated, comm_rejected=comm_rej, feasible=n_feas,
        pruned=n_feas - len(table), solver_candidates=len(table),
        gpu_counts=int(sum(len(c) for c in {s.name: s.counts for s in systems}.values())), solves=solves,
        enumerate_s=t_enum, evaluate_s=t_eval,
        solve_s=t_solve, total_s=clock.now() - t0, proven_optimal=bool(proven),
        solver="exhaustive" if late else req.solver,  # the solver that answered (CP-SAT not started: see cut)
        solver_threads=req.solver_threads, cut=what_cut,
    )
    inputs = ResolvedInputs(model=model.name, params=counting.total_params(model), moe=bool(model.is_moe),
                            systems=list(dict.fromkeys(gpu_types)),
                            gpu_counts={s.name: s.counts for s in systems},  # long ranges echoed as LO..HI:STEP
                            global_batch=list(gbs), seq_len=seq, tokens=req.tokens,
                            seq_len_source=None if req.seq_len else model.seq_len_source)
    return SearchResult(front=front, recommended=recommended, recommended_index=rec_index, objective=req.objective,
                        reason=reason, landmarks=marks, other_fronts=others, stats=stats, inputs=inputs, request=req,
                        recommended_framework=rec_fws,
                        recommended_command=estimate_command(req, _gpu_ref(req, rec_sys.name), rec_plan,
                                                             rec_fws[0] if rec_fws else "none"),
                        low_precision=low)


def _found(systems: list[System], ms: list[dict]) -> dict:
    """``{GPU type: (GPUs, days, dollars)}`` of the feasible plans of ``systems`` (frameworks searched already)."""
    out: dict = {}
    for s, m in zip(systems, ms):
        f = m["feasible"]
        a = out.get(s.name, (np.zeros(0), np.zeros(0), np.zeros(0)))
        out[s.name] = (np.concatenate([a[0], s.space.x.num_gpus[f]]), np.concatenate([a[1], s.cols["days"][f]]),
                       np.concatenate([a[2], s.cols["cost_usd"][f]]))
    return out


class _Phases:
    """What the enumeration and pricing of the systems took and what stopped them short (over frameworks)."""

    def __init__(self) -> None:
        self.t_enum = self.t_eval = 0.0
        self.cut: str | None = None  # what stopped a default GPU range short (time_limit, max_candidates)
        self.skipped: list[str] = []  # systems the time limit left unsearched (the first one is always searched)
        self.enum_cut: list[str] = []  # systems whose explicit GPU counts were enumerated only in part
        self.cut_by_limit = False  # ... because the time limit passed


def _narrowed(req: SearchRequest, fw: str, model: ModelSpec) -> tuple[SearchRequest, list[ClusterSpec]]:
    """The request as framework ``fw`` runs it (its knob space: :meth:`Capabilities.knobs`, which refuses a knob
    the user pinned that ``fw`` cannot run) and its GPU types priced with ``fw``'s profile; InputError naming the
    rule when ``fw`` cannot run the request (a precision, a pinned knob, a rule every plan breaks)."""
    from plan_search.planner.frameworks.rules import allowed, refuse_up_front

    caps = allowed(fw)
    for precision in knob_values(req.knobs, "precision"):
        if precision not in caps.precision:
            raise InputError(f"precision: {fw} {caps.version} cannot train in {precision}; "
                             f"use one of {', '.join(caps.precision)}")
    req_f = req.model_copy(update={"knobs": caps.knobs(req.knobs, model), "framework": fw})
    clusters = resolve_inputs(req_f, model)[1]
    # a knob every plan breaks a rule with: refused now, as plan-estimate refuses it
    refuse_up_front(fw, knob_combinations(req_f.knobs), model, clusters, min(req_f.knobs.etp or [1]))
    return req_f, clusters


def _priced_systems(model, clusters, gbs, seq, req, t0: float, eval_share: float, eval_deadline: float,
                    hard_deadline: float, ph: _Phases, first_index: int, fw: str | None,
                    ranges: dict | None = None) -> list[System]:
    """Each GPU type's candidates under ``req`` (one framework's knob space), enumerated and priced; a GPU type
    in ``ranges`` takes the node multiples up to its value (another framework's default range) as given."""
    systems = []
    for k, c in enumerate(clusters):
        top = (ranges or {}).get(c.name)
        # no further GPU type past the phases' share; none at all once the limit itself has passed
        if clock.now() > (eval_deadline if k or first_index else hard_deadline):
            ph.skipped.append(c.name + (f" ({fw})" if fw else ""))
            counts, sp = np.zeros(0, dtype=np.int64), None
        elif req.gpus or _upper_cap(c, req) or top is not None:
            counts = gpu_counts(c, req, upper=top) if top is not None and not req.gpus else gpu_counts(c, req)
            a = clock.now()
            sp, stopped = _enumerate_until(model, c, counts, gbs, seq, req, t0, eval_share * ENUM_SHARE) \
                if len(counts) else (None, None)
            if stopped:
                ph.cut_by_limit = ph.cut_by_limit or stopped == "time_limit"
                ph.enum_cut.append(f"{c.name}: GPU counts above {int(sp.x.num_gpus.max()) if len(sp) else 0:,} not "
                                   f"enumerated ({stopped.replace('_', ' ')})")
            b = clock.now()
            cols = evaluate_columns(model, c, sp.x, req, eval_deadline) if sp is not None else None
            ph.t_enum += b - a
            ph.t_eval += clock.now() - b
        else:
            timing: dict = {}
            cap, pieces, parts = default_max_gpus(model, c, gbs, seq, req, eval_deadline, timing)
            ph.cut = ph.cut or timing.get("cut")
            ph.t_enum += timing.get("enumerate", 0.0)
            ph.t_eval += timing.get("evaluate", 0.0)
            counts = gpu_counts(c, req, upper=cap)
            sp = _concat_spaces(pieces, lazy=True) if pieces else None
            cols = {key: np.concatenate([p[key] for p in parts]) for key in parts[0] if key != LAYOUT_TERMS} \
                if parts else None
            if parts and LAYOUT_TERMS in parts[0]:  # one object for every piece: its groups span them
                cols[LAYOUT_TERMS] = parts[0][LAYOUT_TERMS]
        if sp is None:
            sp = _enumerate(model, c, [1], gbs, seq, req).take(np.zeros(0, dtype=np.int64))
            cols = evaluate_columns(model, c, sp.x, req)
        systems.append(System(first_index + k, c, sp, cols, counts))
    return systems
