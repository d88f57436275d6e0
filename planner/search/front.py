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
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, fields

import numpy as np

from plan_search.hardware.catalog import load_catalog
from plan_search.hardware.resolve import resolve_cluster
from plan_search.hardware.spec import ClusterSpec
from plan_search.models import counting
from plan_search.models.io import InputError
from plan_search.models.resolve import resolve_model
from plan_search.models.spec import ModelSpec

from plan_search.planner.costmodel.arrays import PlanArrays
from plan_search.planner.costmodel.estimate import pack
from plan_search.planner.costmodel.plan import expert_grid_problem
from plan_search.planner.costmodel.evaluate import GIB, LayoutTerms, evaluate, memory_fit, search_figures
from plan_search.planner.search.request import (
    MAX_GPUS,
    Alternative,
    FrontPoint,
    Knobs,
    NoFeasiblePlan,
    ResolvedInputs,
    SearchRequest,
    SearchResult,
    knob_combinations,
    knob_values,
    SearchStats,
)
from plan_search.planner.search.command import estimate_command
from plan_search.planner.search.space import Space, concat_columns, enumerate_space

#: Rows per cost-model call. Measured (search CPU, 2026-12-01): DeepSeek-V3 on H100 (665,868 candidates)
#: 0.79 / 0.70 / 0.66 / 0.57 / 0.59 / 0.72 s at 8K / 16K / 32K / 64K / 128K / 256K rows; GPT-3 175B
#: (251,532) 0.27 -> 0.25 s from 16K to 64K.
EVAL_CHUNK = 65536
#: Columns of evaluate() the search keeps for every candidate.
COLUMNS = ("memory_peak_gib", "memory_usable_gib", "fits", "comm_ratio", "days", "cost_usd", "energy_kwh",
           "power_kw", "mfu")
#: The columns that come from the step time (:func:`search_figures`), for the plans that are timed.
TIMED_COLUMNS = ("comm_ratio", "days", "cost_usd", "energy_kwh", "power_kw", "mfu")
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
#: Default GPU-count rule: start at this many nodes, double while doubling the GPUs still
#: shortens the fastest run by at least DOUBLING_GAIN (a 1.5x speed-up for 2x the GPUs, 75 %
#: marginal scaling efficiency); never beyond DEFAULT_MAX_GPUS.
DEFAULT_START_NODES = 8
DOUBLING_GAIN = 1.0 / 3.0
DEFAULT_MAX_GPUS = 1 << 20

#: Lexicographic keys of the objectives (all minimised; the stable order breaks what is left).
OBJECTIVE_KEYS = {
    "fastest": ("days", "cost", "gpus"),
    "cheapest": ("cost", "days", "gpus"),
    "fewest-gpus": ("gpus", "days", "cost"),
    "least-energy": ("energy", "days", "cost", "gpus"),
    "best-mfu": ("neg_mfu", "days", "cost", "gpus"),
}
FRONT_KEY = OBJECTIVE_KEYS["fastest"]
OBJECTIVE_TEXT = {
    "balanced": "the fastest plan at or above the scaling-efficiency threshold",
    "fastest": "the shortest run",
    "cheapest": "the lowest cost",
    "fewest-gpus": "the fewest GPUs",
    "least-energy": "the least energy",
    "best-mfu": "the highest MFU",
}


# ------------------------------------------------------------------ inputs
def resolve_inputs(request: SearchRequest, model: ModelSpec | None = None
                   ) -> tuple[ModelSpec, list[ClusterSpec], list[int], int]:
    model = model or resolve_model(request.model)
    clusters = []
    from plan_search.hardware.overrides import apply_overrides
    from plan_search.hardware.profiles import for_framework

    for ref in request.gpu:
        # the framework's kernel-efficiency profile, then the what-if overrides
        c = apply_overrides(for_framework(resolve_cluster(ref), request.framework), request.sets)
        if c.name in [k.name for k in clusters]:
            continue
        clusters.append(c)
    seq = request.seq_len or model.seq_len
    gbs = request.global_batch or [model.global_batch]
    return model, clusters, gbs, seq


def _upper_cap(cluster: ClusterSpec, request: SearchRequest) -> int | None:
    caps = [c for c in (request.max_gpus,) if c]
    if request.max_nodes:  # nodes x GPUs per node can pass a Plan's GPU bound
        caps.append(min(request.max_nodes * cluster.node.gpus_per_node, MAX_GPUS))
    return min(caps) if caps else None


def gpu_counts(cluster: ClusterSpec, request: SearchRequest, upper: int | None = None) -> np.ndarray:
    """The GPU counts of one system: ``gpus`` if given, else multiples of ``gpus_step`` (default
    the GPUs per node) from ``min_gpus`` to ``upper`` (default the request's cap)."""
    hi = upper if upper is not None else _upper_cap(cluster, request)
    lo = request.min_gpus or 1
    if request.gpus:
        vals = [n for n in request.gpus if lo <= n and (hi is None or n <= hi)]
        return np.asarray(vals, dtype=np.int64)
    step = request.gpus_step or cluster.node.gpus_per_node
    if hi is None:
        raise ValueError("gpu_counts: no upper bound")
    first = max(step, -(-lo // step) * step)
    return np.arange(first, hi + 1, step, dtype=np.int64)


# ------------------------------------------------------------------ evaluation
@dataclass
class System:
    """One GPU type: its candidates and their evaluated columns."""

    index: int
    cluster: ClusterSpec
    space: Space
    cols: dict
    counts: np.ndarray

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
    for a in range(0, n, EVAL_CHUNK):
        if a and time.perf_counter() > deadline:
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
                               None if group is None else shared.step(group[a + idx]))
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
        if time.perf_counter() > deadline:
            return False
        rr = rows[a:a + EVAL_CHUNK]
        r = search_figures(model, cluster, x.take(rr), request.tokens, request.checkpoint_interval_h,
                           None if shared is None else shared.step(cols["group"][rr]))
        for k in TIMED_COLUMNS:
            cols[k][rr] = r[k]
        cols["timed"][rr] = True
    return True


_PLAN_COLUMNS = frozenset(f.name for f in fields(PlanArrays))


class _JoinedArrays(PlanArrays):
    """The :class:`PlanArrays` of several pieces end to end, without copying them up front: a column
    is joined (:func:`concat_columns`) the first time it is read, and :meth:`take` gathers its rows
    from the pieces. The search reads few whole columns of a system's space once it is priced (the
    GPU count, the recomputation) and otherwise a few rows (the front's, the plans it times for the
    "memory binds" figure): joining the ~17 enumerated columns of GPT-3 175B's 250K candidates up front
    copied 32 MB (~13 ms, plus the page faults of the copy) that were never read. The same values as
    the joined columns (every read goes through them or gathers the same rows)."""

    def __init__(self, pieces: list[PlanArrays]) -> None:  # noqa: D107 (no dataclass fields set: read lazily)
        object.__setattr__(self, "_pieces", list(pieces))
        object.__setattr__(self, "_starts", np.cumsum([0] + [len(p) for p in pieces]))
        for name in _PLAN_COLUMNS:  # a field with a default is a class attribute: reads would not get here
            if hasattr(type(self), name):
                object.__setattr__(self, name, concat_columns([getattr(p, name) for p in pieces]))

    def __getattr__(self, name: str):  # a column not read yet (set on the instance once joined)
        if name not in _PLAN_COLUMNS:
            raise AttributeError(name)
        col = concat_columns([getattr(p, name) for p in self._pieces])
        object.__setattr__(self, name, col)
        return col

    def __len__(self) -> int:
        return int(self._starts[-1])

    def take(self, idx) -> PlanArrays:
        idx = np.arange(len(self))[idx] if isinstance(idx, slice) else np.asarray(idx)
        if idx.dtype == bool:
            idx = np.flatnonzero(idx)
        idx = idx.astype(np.int64, copy=False)
        idx = np.where(idx < 0, idx + len(self), idx)  # numpy's negative indices, as a column's take
        piece = np.searchsorted(self._starts, idx, side="right") - 1
        sel = [(k, np.flatnonzero(piece == k)) for k in np.unique(piece).tolist()]
        out = {}
        for name in _PLAN_COLUMNS:
            if name in self.__dict__:  # joined already
                out[name] = self.__dict__[name][idx]
                continue
            cols = [getattr(p, name) for p in self._pieces]
            res = np.empty(len(idx), dtype=np.result_type(*cols))
            for k, rows in sel:
                res[rows] = cols[k][idx[rows] - self._starts[k]]
            out[name] = res
        return PlanArrays(**out)


def _concat_spaces(spaces: list[Space], lazy: bool = False) -> Space:
    """The pieces as one space. ``lazy``: its columns joined when read (:class:`_JoinedArrays`), for
    a space whose pieces are priced already (the default GPU range's); a space still to be priced is
    read whole, column by column, and is joined up front."""
    if len(spaces) == 1:
        return spaces[0]
    first = spaces[0]
    x = _JoinedArrays([s.x for s in spaces]) if lazy else \
        PlanArrays(**{f.name: concat_columns([getattr(s.x, f.name) for s in spaces]) for f in fields(PlanArrays)})
    return Space(first.model, first.cluster, x, np.concatenate([s.rc_kind for s in spaces]),
                 np.concatenate([s.uneven for s in spaces]), first.combos, np.concatenate([s.combo for s in spaces]))


#: Explicit GPU counts, when there are more than this, are enumerated in pieces of doubling size
#: (1, 1, 2, 4, ... counts, smallest first: small counts have the most layouts, as more data-parallel
#: degrees divide the batch), so the time limit can stop the enumeration between two of them.
ENUM_PIECES = 8
#: Share of the time limit after which no further piece is enumerated (evaluation, solve and
#: the report need the rest).
ENUM_SHARE = 0.5


def _enumerate_until(model, cluster, counts, gbs, seq, request, t0: float,
                     share: float = ENUM_SHARE) -> tuple[Space, str | None]:
    """The space of ``counts``, enumerated piece by piece (:data:`ENUM_PIECES`) while less than
    ``share`` of the time limit (:func:`search` passes its evaluation share x :data:`ENUM_SHARE`) has
    passed since ``t0``, and within ``max_candidates``
    over all pieces. Returns the space and what cut it short (``"time_limit"`` or
    ``"max_candidates"``: the larger GPU counts were not enumerated), or None. The first piece is
    always enumerated, and its InputError (max_candidates included) is the request's."""
    if len(counts) <= ENUM_PIECES:
        return _enumerate(model, cluster, counts, gbs, seq, request), None
    stop = t0 + share * request.time_limit_s
    pieces: list[Space] = []
    bounds = [0] + [min(2 ** k, len(counts)) for k in range(int(math.log2(len(counts))) + 2)]
    last_s = 0.0
    for i, j in zip(bounds, bounds[1:]):
        if j <= i:
            continue
        # the next piece is twice the last one's counts: stop unless it is expected to end in time
        if pieces and time.perf_counter() + 2 * last_s > stop:
            return _concat_spaces(pieces), "time_limit"
        left = request.max_candidates - sum(len(p) for p in pieces)
        a = time.perf_counter()
        try:
            pieces.append(_enumerate(model, cluster, counts[i:j], gbs, seq, request, max_candidates=max(left, 1)))
        except InputError as exc:
            if not pieces or "max_candidates" not in str(exc):
                raise
            raise InputError(f"search: more than {request.max_candidates:,} candidates (max_candidates) on "
                             f"{cluster.name} by {int(counts[j - 1]):,} GPUs; bound some knobs (--tp, --pp, "
                             "--micro-batch ...) or give fewer GPU counts") from None
        last_s = time.perf_counter() - a
    return _concat_spaces(pieces), None


def _enumerate(model, cluster, counts, gbs, seq, request, knobs=None, max_candidates=None) -> Space:
    return enumerate_space(model, cluster, counts, gbs, seq, knobs or request.knobs,
                           max_candidates or request.max_candidates, request.global_batch_tolerance)


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


def default_max_gpus(model, cluster, gbs, seq, request, deadline: float = math.inf,
                     timing: dict | None = None) -> tuple[int, list[Space], list[dict]]:
    """The default top of the GPU range for one system: from DEFAULT_START_NODES nodes, double
    the range while doubling the GPUs shortens the fastest feasible run by at least
    DOUBLING_GAIN (a third: a 1.5x speed-up, 75 % marginal scaling efficiency); the last
    doubling, which shows the flattening, stays in the range. When nothing is feasible yet
    (the model does not fit), keep doubling. Capped by ``max_gpus``/``max_nodes`` or 2**20.

    ``max_candidates`` bounds the pieces together, as it bounds one system's space elsewhere.

    Returns the cap and the evaluated pieces (so nothing is evaluated twice); ``timing["cut"]``
    says what stopped the doubling early, ``"time_limit"`` or ``"max_candidates"`` (the range
    may then be short of the rule's: not proven)."""
    step = request.gpus_step or cluster.node.gpus_per_node
    cap_limit = _upper_cap(cluster, request) or DEFAULT_MAX_GPUS
    cap = min(DEFAULT_START_NODES * step, cap_limit)
    pieces: list[Space] = []
    cols: list[dict] = []
    shared = LayoutTerms.build(model, cluster)  # the pieces' per-layout terms (a layout recurs at each count)
    lo_done = 0
    best_prev = math.inf
    next_min_s = 0.0  # what the next doubling takes before its pricing can stop: see below
    while True:
        counts = gpu_counts(cluster, request, upper=cap)
        new = counts[counts > lo_done]
        if len(new):
            a = time.perf_counter()
            left = request.max_candidates - sum(len(p) for p in pieces)
            try:
                sp = _enumerate(model, cluster, new, gbs, seq, request, max_candidates=max(left, 1))
            except InputError:
                if not pieces:  # the other InputErrors do not depend on the counts
                    raise
                if timing is not None:
                    timing["cut"] = "max_candidates"
                return lo_done, pieces, cols
            b = time.perf_counter()
            pieces.append(sp)
            cols.append(evaluate_columns(model, cluster, sp.x, request, deadline, shared))
            priced = time.perf_counter()
            # twice this piece's enumeration and its first chunk's pricing (as many new GPU counts as all before)
            next_min_s = 2 * (b - a) + (priced - b) * min(1.0, EVAL_CHUNK / max(len(sp), 1))
            if timing is not None:
                timing["enumerate"] = timing.get("enumerate", 0.0) + b - a
                timing["evaluate"] = timing.get("evaluate", 0.0) + time.perf_counter() - b
        lo_done = cap
        best = math.inf
        for sp, c in zip(pieces, cols):
            ok = c["fits"] & ((c["comm_ratio"] <= request.max_comm_ratio) if request.max_comm_ratio else True)
            if request.max_power_kw:
                ok &= c["power_kw"] <= request.max_power_kw
            if ok.any():
                best = min(best, float(c["days"][ok].min()))
        if cap >= cap_limit:
            break
        # a doubling's enumeration cannot stop midway and its pricing only between chunks (the rows it leaves
        # are not evaluated, and said so): the next is not started unless its enumeration and first chunk are
        # expected to end before the deadline
        if time.perf_counter() + next_min_s > deadline:
            if timing is not None:
                timing["cut"] = "time_limit"
            break
        if math.isfinite(best_prev) and best > (1.0 - DOUBLING_GAIN) * best_prev:
            break
        best_prev = best
        cap = min(cap * 2, cap_limit)
    return cap, pieces, cols


# ------------------------------------------------------------------ the table
@dataclass
class Table:
    """Candidates handed to the solver (or the oracle): one row each, in stable order."""

    system: np.ndarray
    row: np.ndarray
    group: np.ndarray  # dense id of (system, GPU count)
    gpus: np.ndarray
    days: np.ndarray
    cost: np.ndarray
    energy: np.ndarray
    power: np.ndarray
    mfu: np.ndarray

    def __len__(self) -> int:
        return len(self.system)

    def take(self, idx) -> "Table":
        return Table(**{f.name: getattr(self, f.name)[idx] for f in fields(self)})

    def column(self, key: str) -> np.ndarray:
        return -self.mfu if key == "neg_mfu" else getattr(self, key)


def group_ids(systems: list[System]) -> tuple[list[np.ndarray], int]:
    """Dense (system, GPU count) group id of every candidate of every system, and their number."""
    out, offset = [], 0
    for s in systems:
        counts = np.unique(s.space.x.num_gpus)
        out.append(offset + np.searchsorted(counts, s.space.x.num_gpus))
        offset += len(counts)
    return out, offset


def group_argmin(group: np.ndarray, n_groups: int, keys, mask=None) -> np.ndarray:
    """Per group, the row minimising the lexicographic ``keys`` among ``mask`` (ties: the lowest
    row index; a NaN ranks last, and a group whose tied rows are all NaN on a key keeps them all
    tied, as a sort would); -1 for a group without rows. O(rows still tied) per key, no sort;
    ``keys`` may be a generator (a key is read only while more than one row is left)."""
    n = len(group)
    rows = np.arange(n) if mask is None else np.flatnonzero(mask)
    for k in keys:
        if len(rows) <= 1:
            break
        col = k[rows]
        if n_groups == 1:  # one reduction, no scatter (exhaustive_pick's case)
            b = np.fmin.reduce(col)
            keep = (col == b) | (b != b)
        else:
            g = group[rows]
            best = np.full(n_groups, np.nan)
            np.fmin.at(best, g, col)  # NaN only where every row of the group is NaN
            b = best[g]
            keep = (col == b) | np.isnan(b)
        rows = rows[keep]
    first = np.full(n_groups, n, dtype=np.int64)
    np.minimum.at(first, group[rows], rows)
    return np.where(first < n, first, -1)


def build_table(systems: list[System], feasible: list[np.ndarray], groups: list[np.ndarray]) -> Table:
    parts = []
    for s, f, g in zip(systems, feasible, groups):
        idx = np.nonzero(f)[0]
        c = s.cols
        parts.append(Table(np.full(len(idx), s.index, dtype=np.int64), idx, g[idx], s.space.x.num_gpus[idx],
                           c["days"][idx], c["cost_usd"][idx], c["energy_kwh"][idx], c["power_kw"][idx],
                           c["mfu"][idx]))
    return Table(**{f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(Table)})


def positions(t: Table, key: tuple[str, ...]) -> np.ndarray:
    """Rank of every row under the lexicographic ``key`` (ties: table order). A permutation of
    0..len-1: the integer objective coefficients."""
    order = np.lexsort((np.arange(len(t)),) + tuple(t.column(k) for k in reversed(key)))
    pos = np.empty(len(t), dtype=np.int64)
    pos[order] = np.arange(len(t))
    return pos


def ordinal(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rank of each value among the distinct values, the sorted distinct values)."""
    uniq, inv = np.unique(values, return_inverse=True)
    return inv.astype(np.int64), uniq


def prune(t: Table, n_groups: int) -> np.ndarray:
    """Rows that may matter (exactly safe, see the module docstring): per (system, GPU count)
    group its (days, dollars) front, its least-energy and its highest-MFU row; sorted."""
    if not len(t):
        return np.zeros(0, dtype=np.int64)
    g = t.group
    # the group's fastest row (then cheapest, then first): on the group front; every other row
    # with no lower dollars is weakly dominated by it
    q = group_argmin(g, n_groups, (t.days, t.cost))
    q = q[q >= 0]
    q_cost = np.full(n_groups, np.inf)
    q_cost[g[q]] = t.cost[q]
    sub = np.union1d(q, np.nonzero(t.cost < q_cost[g])[0])
    # exact (days, dollars) front per group among those few rows
    o = sub[np.lexsort((sub, t.cost[sub], t.days[sub], g[sub]))]
    cost_r = np.unique(t.cost[o], return_inverse=True)[1].astype(np.int64)
    key = cost_r - g[o] * (len(o) + 1)  # decreasing offsets: the running minimum restarts per group
    prev = np.concatenate([[np.iinfo(np.int64).max], np.minimum.accumulate(key)[:-1]])
    keep = [o[key < prev]]
    for k in (("energy", "days", "cost"), ("neg_mfu", "days", "cost")):
        r = group_argmin(g, n_groups, tuple(t.column(c) for c in k))
        keep.append(r[r >= 0])
    return np.unique(np.concatenate(keep))


# ------------------------------------------------------------------ CP-SAT
@functools.cache  # looked up once: build_model, solver_parameters and _solve each ask, on every solve
def _cpsat():
    """OR-Tools' CP-SAT without ``ortools.sat.python.cp_model``: that module imports pandas (~0.25 s
    of a 0.4 s import) for its DataFrame helpers, which the search does not use. The model is a
    CpModelProto built here and solved by the helper's SolveWrapper, the two things cp_model's
    CpModel and CpSolver wrap (the same proto, the same solver: the same answer). From OR-Tools
    9.15 the protos are the helper's own (pybind11) classes; before, the protobuf messages of
    ``cp_model_pb2``/``sat_parameters_pb2`` (same field names). Returns (model proto class,
    parameters class, SolveWrapper class, {"optimal", "feasible", "infeasible"} -> status)."""
    from ortools.sat.python import cp_model_helper as cmh

    if hasattr(cmh, "CpModelProto"):
        status = {k: getattr(cmh.CpSolverStatus, k.upper()) for k in ("optimal", "feasible", "infeasible")}
        return cmh.CpModelProto, cmh.SatParameters, cmh.SolveWrapper, status
    from ortools.sat import cp_model_pb2, sat_parameters_pb2

    status = {k: getattr(cp_model_pb2, k.upper()) for k in ("optimal", "feasible", "infeasible")}
    return cp_model_pb2.CpModelProto, sat_parameters_pb2.SatParameters, cmh.SolveWrapper, status


def solver_parameters(request: SearchRequest, time_left: float):
    """Every CP-SAT parameter of the search, in one place (a SatParameters)."""
    p = _cpsat()[1]()
    p.max_time_in_seconds = max(time_left, 1e-3)
    p.num_workers = request.solver_threads
    p.random_seed = request.seed
    p.log_search_progress = False
    p.catch_sigint_signal = False  # Ctrl-C stays Python's KeyboardInterrupt
    # The models are one exactly-one over a few dozen Booleans with a linear objective of distinct
    # ranks: presolve's probing and symmetry detection find nothing to use and cost ~40% of each
    # solve (GPT-3 175B's 67-solve walk: 17.4 -> 10.8 ms CPU); the optimum (unique) is unchanged.
    p.cp_model_probing_level = 0
    p.symmetry_level = 0
    return p


@dataclass
class Model:
    """A CP-SAT model over a :class:`Table` (see :func:`build_model`): its CpModelProto, whose
    variable ``i`` is the Boolean "row ``i`` is chosen"."""

    cp: object
    pos: np.ndarray
    order: np.ndarray  # order[p] = row whose objective coefficient is p

    def forbid(self, rows) -> None:
        """Constraint: none of ``rows`` is chosen (their Booleans' domains become {0}, so the
        model does not grow along the walk)."""
        variables = self.cp.variables
        for i in rows:
            variables[int(i)].domain[1] = 0

    def hint(self, row: int | None) -> None:
        if hasattr(self.cp, "clear_solution_hint"):  # OR-Tools 9.15+'s protos
            self.cp.clear_solution_hint()
        else:  # a protobuf message
            self.cp.ClearField("solution_hint")
        if row is not None:
            self.cp.solution_hint.vars.append(int(row))
            self.cp.solution_hint.values.append(1)


def build_model(t: Table, request: SearchRequest, labels: list[str], key: tuple[str, ...],
                node_sizes: np.ndarray) -> Model:
    """CP-SAT: choose exactly one candidate of ``t`` under the request's limits, minimising the
    lexicographic ``key`` (ordinal scaling, see the module docstring)."""
    m = _cpsat()[0]()
    m.name = "plan-search"
    for i in range(len(t)):
        v = m.variables.add()
        v.name = f"pick[{i}]:{labels[int(t.system[i])]}x{int(t.gpus[i])}#{int(t.row[i])}"
        v.domain.extend((0, 1))
    m.constraints.add().exactly_one.literals.extend(range(len(t)))

    # Limits on the chosen candidate. With exactly one Boolean true, "attribute of the choice
    # <= limit" is exactly "no candidate over the limit is chosen": stated that way (one named
    # clause per limit: the negations of the Booleans over it) rather than as a weighted sum, whose
    # presolve costs ~8 ms per solve on a few hundred distinct coefficients against ~0.5 ms for the
    # whole model.
    nodes = -(-t.gpus // node_sizes[t.system])
    limits = (
        ("deadline", t.days, request.deadline_days, 1),
        ("budget", t.cost, request.budget_usd, 1),
        ("power_cap", t.power, request.max_power_kw, 1),
        ("max_gpus", t.gpus, request.max_gpus, 1),
        ("max_nodes", nodes, request.max_nodes, 1),
        ("min_gpus", t.gpus, request.min_gpus, -1),
    )
    for name, col, limit, sign in limits:
        if limit is None:
            continue
        over = np.nonzero(col > limit if sign > 0 else col < limit)[0]
        c = m.constraints.add()
        c.name = name
        if hasattr(c.bool_and, "SetInParent"):  # a protobuf message: an empty list still sets the field
            c.bool_and.SetInParent()
        c.bool_and.literals.extend((-over - 1).tolist())  # literal -i-1: "not variable i"
    pos = positions(t, key)
    # objective sum(pos[i] * pick[i]); a zero coefficient is left out, as cp_model writes it
    nz = np.nonzero(pos)[0]
    m.objective.vars.extend(nz.tolist())
    m.objective.coeffs.extend(pos[nz].tolist())
    m.objective.scaling_factor = 1.0
    order = np.empty(len(t), dtype=np.int64)
    order[pos] = np.arange(len(t))
    return Model(m, pos, order)


def _solve(model: Model, request: SearchRequest, deadline: float) -> tuple[str, int | None]:
    """Solve; (status, chosen row)."""
    _, _, solve_wrapper, status = _cpsat()
    w = solve_wrapper()
    w.set_parameters(solver_parameters(request, deadline - time.perf_counter()))
    r = w.solve(model.cp)
    if r.status in (status["optimal"], status["feasible"]):
        row = int(model.order[int(round(r.objective_value))])
        return ("optimal" if r.status == status["optimal"] else "feasible"), row
    if r.status == status["infeasible"]:
        return "infeasible", None
    return "unknown", None


def weakly_dominated_by(t: Table, q: int) -> np.ndarray:
    """Rows with GPUs >= q's, days >= q's and dollars >= q's (q included)."""
    return np.nonzero((t.gpus >= t.gpus[q]) & (t.days >= t.days[q]) & (t.cost >= t.cost[q]))[0]


def cpsat_front(t: Table, request: SearchRequest, labels, node_sizes, deadline: float) -> tuple[list[int], bool, int]:
    """Front rows of ``t`` by epsilon-constraint re-solves; (rows, proven, solves)."""
    if not len(t):
        return [], True, 0
    model = build_model(t, request, labels, FRONT_KEY, node_sizes)
    allowed = np.ones(len(t), dtype=bool)
    front: list[int] = []
    solves = 0
    proven = True
    while True:
        if time.perf_counter() >= deadline:
            proven = False
            break
        model.hint(front[-1] if front else None)
        status, row = _solve(model, request, deadline)
        solves += 1
        if status == "infeasible":
            break
        if status != "optimal":
            proven = False
            break
        front.append(row)
        dom = weakly_dominated_by(t, row)
        model.forbid(dom[allowed[dom]])
        allowed[dom] = False
    return front, proven, solves


def cpsat_pick(t: Table, request: SearchRequest, labels, key, node_sizes, deadline: float) -> tuple[int | None, bool]:
    model = build_model(t, request, labels, key, node_sizes)
    status, row = _solve(model, request, deadline)
    return row, status in ("optimal", "infeasible")


# ------------------------------------------------------------------ the oracle
def exhaustive_front(t: Table, deadline: float = math.inf, cut: list[str] | None = None) -> list[int]:
    """Non-dominated rows of (GPUs, days, dollars), by a plain skyline: rows sorted by (days,
    dollars, GPUs, order); a row is on the front unless an earlier one has no more GPUs and no
    higher dollars. Processed by GPU count: a staircase of (days, dollars) over all smaller
    counts, and a running minimum within the count. Past ``deadline`` no further count is taken
    (one count per loop: thousands of explicit counts take seconds): the rows returned are then
    the front of the counts taken, exact for them (a larger count never dominates a smaller
    one's point), and ``cut`` gets a line saying so."""
    if not len(t):
        return []
    out: list[int] = []
    stair_d = np.zeros(0)
    stair_c = np.zeros(0)
    stable = np.arange(len(t))
    for n in np.unique(t.gpus):
        if out and time.perf_counter() > deadline:
            if cut is not None:
                cut.append(f"front: GPU counts from {int(n):,} up not compared (time limit)")
            break
        idx = np.nonzero(t.gpus == n)[0]
        o = idx[np.lexsort((stable[idx], t.cost[idx], t.days[idx]))]
        d, c = t.days[o], t.cost[o]
        # dominated by a smaller count: the staircase point with the largest days <= d has the
        # lowest dollars among those
        if len(stair_d):
            j = np.searchsorted(stair_d, d, side="right") - 1
            beaten = (j >= 0) & (stair_c[np.maximum(j, 0)] <= c)
        else:
            beaten = np.zeros(len(o), dtype=bool)
        prev = np.concatenate([[np.inf], np.minimum.accumulate(c)[:-1]])
        alive = (~beaten) & (c < prev)
        out.extend(o[alive].tolist())
        # merge into the staircase: days ascending, dollars strictly descending
        d_all = np.concatenate([stair_d, d[alive]])
        c_all = np.concatenate([stair_c, c[alive]])
        so = np.lexsort((c_all, d_all))
        d_all, c_all = d_all[so], c_all[so]
        pm = np.concatenate([[np.inf], np.minimum.accumulate(c_all)[:-1]])
        k = c_all < pm
        stair_d, stair_c = d_all[k], c_all[k]
    return out


def exhaustive_pick(t: Table, key, mask: np.ndarray | None = None) -> int | None:
    """The row minimising ``key`` (ties: table order; NaNs last), among ``mask`` if given: the row
    ranked first by :func:`positions`; :func:`group_argmin` over one group (no sort: a table of a
    million candidates took ~60 ms per pick sorted, past the time limit's end)."""
    if not len(t):
        return None
    row = int(group_argmin(np.zeros(len(t), dtype=np.int64), 1, (t.column(k) for k in key), mask)[0])
    return None if row < 0 else row


# ------------------------------------------------------------------ the recommendation
def resolve_objective(req: SearchRequest) -> tuple[str, tuple[str, ...]]:
    """(rule, lexicographic key) of the request's objective. ``balanced`` is the default and
    follows how a team decides: with a deadline, the cheapest plan that meets it (``deadline``);
    else with a budget, the fastest plan within it (``budget``); else the fastest plan whose
    scaling efficiency is at least ``min_scaling_efficiency`` (``efficiency``: its dollars at most
    the cheapest plan's / the threshold). The other objectives are their own rule."""
    if req.objective != "balanced":
        return req.objective, OBJECTIVE_KEYS[req.objective]
    if req.deadline_days is not None:
        return "deadline", OBJECTIVE_KEYS["cheapest"]
    if req.budget_usd is not None:
        return "budget", OBJECTIVE_KEYS["fastest"]
    return "efficiency", OBJECTIVE_KEYS["fastest"]


def efficiency_cap(cheapest_cost: float, threshold: float) -> float:
    """Dollars a plan may cost under the efficiency rule: the cheapest plan's / the threshold
    (a hair above, so the cheapest plan itself passes at threshold 1 whatever the rounding)."""
    return cheapest_cost / threshold * (1.0 + 1e-12)


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


def system_fronts(t: Table, front_rows: list[int], n_systems: int, deadline: float = math.inf,
                  cut: list[str] | None = None, labels: list[str] | None = None) -> list[list[int]]:
    """Each system's own front (rows of ``t``), when there are several systems (else empty).
    Exact on the pruned table: pruning keeps every (system, GPU count) group's front. Past
    ``deadline`` a system's front holds the counts taken so far (:func:`exhaustive_front`; ``cut``
    gets the line, named by the system's label)."""
    if n_systems < 2:
        return []
    out = []
    for k in range(n_systems):
        idx = np.nonzero(t.system == k)[0]
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


# ------------------------------------------------------------------ the search
def _fits_anything(model, cluster, counts, gbs, seq, request, knobs,
                   deadline: float = math.inf) -> tuple[bool, float, object]:
    """(fits, peak GiB, plan) of a variant of the space, actually evaluated: the fitting plan on
    the fewest GPUs (then the least memory), or, when none fits, the smallest footprint. Past
    ``deadline`` nothing is tried (not fitting, infinite footprint, no plan)."""
    if time.perf_counter() > deadline:
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


def _describe_plan(p) -> str:
    rc = p.recompute + (f"({p.recompute_layers})" if p.recompute_layers else "")
    return (f"tp{p.tp} pp{p.pp} dp{p.dp} cp{p.cp} vpp{p.vpp} mb{p.micro_batch} zero{p.zero} {rc} "
            f"on {p.num_gpus} GPUs")


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
        why = _forced_expert_problem(request.knobs, counts) or _expert_group_problem(
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
        if not near or time.perf_counter() > deadline:
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
           + ("; the time limit stopped these checks: some were not tried" if time.perf_counter() > deadline else ""))
    return NoFeasiblePlan(msg, reason="memory", smallest_gib=gib, smallest_plan=plan, usable_gib=usable,
                          capacity_gib=cap, system=s.name, alternatives=alts)


CONSTRAINTS = ("memory", "comm_ratio", "power", "deadline", "budget", "gpus")


def _relaxed(m: dict, name: str) -> np.ndarray:
    """Evaluated candidates meeting every constraint but ``name``."""
    out = m["done"].copy()
    for k in CONSTRAINTS:
        if k != name:
            out &= m[k]
    return out


#: The lazy "memory binds" check times the over-memory plans of a group this many at a time in its
#: first round, eight times more in each next one, until one is faster than the group's point.
BIND_ROUND = 16
#: False: time every over-memory plan of the front's GPU counts (the long way; tests compare the two).
LAZY_BINDING = True


def binding_days(systems, ms, groups, n_groups, request=None, want=None,
                 deadline: float = math.inf, below: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Per group, the fastest run when one per-plan constraint (memory, comm ratio) is lifted.
    ``want`` (groups): price the over-memory plans of those groups only (memory-first evaluation
    left them untimed); the other groups' memory figure is then a lower bound of inf. Past
    ``deadline`` the over-memory plans are no longer timed (``out["complete"]`` False).

    ``below`` (per group, days; -inf for a group nobody reads): the memory figure of group ``g``
    is read only as ``figure < t`` for days ``t >= below[g]`` (the front points of the group).
    Its over-memory plans are then timed a round at a time (:data:`BIND_ROUND`, less recomputation
    first) until one runs faster than ``below[g]`` -- the figure is then below every such ``t``,
    as the full minimum is -- or every one is timed (the figure is then the full minimum). Each
    comparison gives what timing them all gives; None: all of them are timed. (A plan that fits
    is no faster than its group's point, the group's fastest feasible plan: it is not timed here.)"""
    out: dict = {"complete": True}
    wanted = np.ones(n_groups, dtype=bool)
    if want is not None:
        wanted[:] = False
        wanted[np.asarray(want, dtype=np.int64)] = True
    if below is not None:  # a group nobody reads (-inf) is left alone: its figure is not compared
        wanted &= np.isfinite(below)
    for name in ("memory", "comm_ratio"):
        best = np.full(n_groups, np.inf)
        for s, m, g in zip(systems, ms, groups):
            r = _relaxed(m, name)
            if name == "memory" and request is not None and "timed" in s.cols:
                if below is None:
                    done = time_rows(s.space.model, s.cluster, s.space.x, s.cols, np.flatnonzero(r & wanted[g]),
                                     request, deadline)
                else:  # the untimed ones (a timed plan can stop a group early, never change an answer)
                    need = np.flatnonzero(r & wanted[g] & ~s.cols["timed"])
                    done = _time_until_below(s, need, g, below, request, deadline)
                if not done:
                    out["complete"] = False
                r = r & s.cols["timed"]
            np.minimum.at(best, g[r], s.cols["days"][r])
        out[name] = best
    return out


def _time_until_below(s: System, rows: np.ndarray, g: np.ndarray, below: np.ndarray, request,
                      deadline: float) -> bool:
    """Time ``rows`` (candidates of ``s``; ``g`` their groups) group by group, :data:`BIND_ROUND`
    of each group first (less recomputation first, then the stable order), then eight times more
    per round, until each group has a timed row faster than ``below`` of its group or none left;
    False when the deadline stopped it. ``rows`` are untimed and of groups whose ``below`` is finite
    (the caller's selection)."""
    days, timed = s.cols["days"], s.cols["timed"]
    hit = np.zeros(len(below), dtype=bool)
    gr = g[rows]
    if not len(rows):
        return True
    # grouped; within a group the plans that recompute less first (the likeliest to be faster than a
    # point that fits: GPT-3 175B's answered groups need ~3,000 plans timed instead of ~9,000 in the
    # stable order), then the stable order; a radix sort on small keys. Any order gives the same answer.
    key = gr * 4 + np.clip(s.space.x.recompute[rows], 0, 3)
    o = np.argsort(key.astype(np.int16) if 4 * len(below) < 2**15 else key, kind="stable")
    rows, gr = rows[o], gr[o]
    starts = np.flatnonzero(np.r_[True, gr[1:] != gr[:-1]])
    ends = np.r_[starts[1:], len(rows)]
    lo, size = 0, BIND_ROUND
    while True:
        live = ~hit[gr[starts]] & (starts + lo < ends)  # groups not answered, with rows left
        if not live.any():
            return True
        a, b = starts[live] + lo, np.minimum(starts[live] + lo + size, ends[live])
        pick = rows[np.concatenate([np.arange(i, j) for i, j in zip(a.tolist(), b.tolist())])]
        if not time_rows(s.space.model, s.cluster, s.space.x, s.cols, pick, request, deadline):
            return False
        pg = g[pick]
        hit[pg[days[pick] < below[pg]]] = True
        lo, size = lo + size, size * 8


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
                 tokens=request.tokens, checkpoint_interval_h=request.checkpoint_interval_h)
    return str(r["bottleneck"][0])


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
                now = time.perf_counter()
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


def search(request: SearchRequest | dict | None = None, *, model: ModelSpec | str | None = None,
           **fields) -> SearchResult:
    """Search the plans of a request; raises :class:`NoFeasiblePlan` when nothing qualifies.

    The request is a :class:`SearchRequest`, a dict of its fields, or keyword arguments
    (``search(model="gpt3", gpu="a100", tokens="300B", tp=[4, 8])``; plan knobs may be given at
    the top level). ``model`` as a :class:`ModelSpec` is a spec to use instead of resolving
    ``request.model`` (which then only labels the run); as a string it is the request's model."""
    t0 = time.perf_counter()
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
    if req.framework:
        from plan_search.planner.frameworks.rules import allowed

        caps = allowed(req.framework)
        for precision in knob_values(req.knobs, "precision"):
            if precision not in caps.precision:
                raise InputError(f"precision: {req.framework} {caps.version} cannot train in {precision}; "
                                 f"use one of {', '.join(caps.precision)}")
        req = req.model_copy(update={"knobs": caps.knobs(req.knobs)})
    # the search's phases (enumeration, evaluation, framework checks, solve) stop at WORK_SHARE of the limit:
    # the rest is for the front's figures, the "memory binds" timing and the report, bounded by the limit itself
    hard_deadline = t0 + req.time_limit_s
    deadline = t0 + WORK_SHARE * req.time_limit_s
    # enumeration and evaluation: the phases' share, half of it when the framework's rules are checked next
    eval_share = FRAMEWORK_EVAL_SHARE if req.framework else 1.0
    eval_deadline = t0 + eval_share * WORK_SHARE * req.time_limit_s
    model, clusters, gbs, seq = resolve_inputs(req, model)
    if req.framework:  # a knob every plan breaks a rule with: refused now, as plan-estimate refuses it
        from plan_search.planner.frameworks.rules import refuse_up_front

        refuse_up_front(req.framework, knob_combinations(req.knobs), model, clusters, min(req.knobs.etp or [1]))
    systems: list[System] = []
    t_enum = t_eval = 0.0
    cut = None  # what stopped a default GPU range short (time_limit, max_candidates), if anything
    skipped: list[str] = []  # systems the time limit left unsearched (the first one is always searched)
    enum_cut: list[str] = []  # systems whose explicit GPU counts were enumerated only in part
    cut_by_limit = False  # ... because the time limit passed
    for k, c in enumerate(clusters):
        # no further GPU type past the phases' share; none at all once the limit itself has passed
        if time.perf_counter() > (eval_deadline if k else hard_deadline):
            skipped.append(c.name)
            counts, sp = np.zeros(0, dtype=np.int64), None
        elif req.gpus or _upper_cap(c, req):
            counts = gpu_counts(c, req)
            a = time.perf_counter()
            sp, stopped = _enumerate_until(model, c, counts, gbs, seq, req, t0, eval_share * ENUM_SHARE) \
                if len(counts) else (None, None)
            if stopped:
                cut_by_limit = cut_by_limit or stopped == "time_limit"
                enum_cut.append(f"{c.name}: GPU counts above {int(sp.x.num_gpus.max()) if len(sp) else 0:,} not "
                                f"enumerated ({stopped.replace('_', ' ')})")
            b = time.perf_counter()
            cols = evaluate_columns(model, c, sp.x, req, eval_deadline) if sp is not None else None
            t_enum += b - a
            t_eval += time.perf_counter() - b
        else:
            timing: dict = {}
            cap, pieces, parts = default_max_gpus(model, c, gbs, seq, req, eval_deadline, timing)
            cut = cut or timing.get("cut")
            t_enum += timing.get("enumerate", 0.0)
            t_eval += timing.get("evaluate", 0.0)
            counts = gpu_counts(c, req, upper=cap)
            sp = _concat_spaces(pieces, lazy=True) if pieces else None
            cols = {key: np.concatenate([p[key] for p in parts]) for key in parts[0] if key != LAYOUT_TERMS} \
                if parts else None
            if parts and LAYOUT_TERMS in parts[0]:  # one object for every piece: its groups span them
                cols[LAYOUT_TERMS] = parts[0][LAYOUT_TERMS]
        if sp is None:
            sp = _enumerate(model, c, [1], gbs, seq, req).take(np.zeros(0, dtype=np.int64))
            cols = evaluate_columns(model, c, sp.x, req)
        systems.append(System(k, c, sp, cols, counts))
    lo = req.min_gpus or 1
    ms = [masks(s.cols, s.space.x, req, lo, req.max_gpus) for s in systems]
    if req.framework and any(m["feasible"].any() for m in ms):  # else why nothing is feasible is not the framework
        systems, ms = restrict_to_framework(model, systems, ms, req, lo, deadline, enum_cut, hard_deadline)
    feasible = [m["feasible"] for m in ms]
    n_feas = int(sum(f.sum() for f in feasible))
    if n_feas == 0:
        raise explain_infeasible(model, systems, gbs, seq, req, ms,
                                 cut or ("time_limit" if skipped or cut_by_limit else None), deadline)

    labels = [s.name for s in systems]
    groups, n_groups = group_ids(systems)
    full = build_table(systems, feasible, groups)
    rule, key = resolve_objective(req)
    if req.solver == "cpsat":
        _cpsat()  # imported lazily (~0.06 s), not counted in solve_s
    t_solve0 = time.perf_counter()
    front_cut: list[str] = []
    # past the phases' share CP-SAT is not started: its walk and pick would stop at once (the pick then
    # falls back to the rule applied to the table); the oracle's skyline and pick on the same table are
    # the answer it would give, in O(rows)
    late = req.solver == "cpsat" and time.perf_counter() > deadline
    if req.solver == "exhaustive" or late:
        table = full
        front_rows = exhaustive_front(table, hard_deadline, front_cut)
        rec, cap = pick_exhaustive(table, rule, key, req)
        proven, solves = True, 0
    else:
        keep = prune(full, n_groups)
        table = full.take(keep)
        node_sizes = np.array([s.cluster.node.gpus_per_node for s in systems], dtype=np.int64)
        rec, cap, proven_rec, rec_solves = pick_cpsat(table, rule, key, req, labels, node_sizes, deadline)
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
            rec, cap = pick_exhaustive(table, rule, key, req)
            proven = False
    t_solve = time.perf_counter() - t_solve0

    own = system_fronts(table, front_rows, len(systems), hard_deadline, front_cut, labels)
    want = np.unique(table.group[np.asarray(front_rows + [rec], dtype=np.int64)]) if front_rows else None
    below = None
    if rule == "efficiency" and LAZY_BINDING:  # only the points' flags read the memory figure (the other rules' reason reads
        below = np.full(n_groups, -np.inf)  # every over-memory plan of the wanted groups: all timed)
        pts = np.asarray(front_rows + [i for rr in own for i in rr], dtype=np.int64)
        below[table.group[pts]] = np.inf
        np.minimum.at(below, table.group[pts], table.days[pts])
    bind = binding_days(systems, ms, groups, n_groups, req, want, hard_deadline, below)
    front, others = _front_points(systems, table, front_rows, req, bind, own, hard_deadline, front_cut)
    rec_sys = systems[int(table.system[rec])]
    rec_row = int(table.row[rec])
    rec_plan = rec_sys.space.take(np.array([rec_row])).plan(0)
    r = evaluate(model, rec_sys.cluster, PlanArrays.from_plans([rec_plan], model.num_layers),
                 memory_headroom=req.memory_headroom, tokens=req.tokens,
                 checkpoint_interval_h=req.checkpoint_interval_h)
    recommended = pack(model, rec_sys.cluster, rec_plan, r, 0, req.tokens)
    rec_index = next((i for i, fp in enumerate(front) if fp.gpu == rec_sys.name and fp.plan == rec_plan), None)
    reason = _recommend_reason(rule, table, rec, systems, ms, req, key, cap)
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
        gpu_counts=int(sum(len(s.counts) for s in systems)), solves=solves, enumerate_s=t_enum, evaluate_s=t_eval,
        solve_s=t_solve, total_s=time.perf_counter() - t0, proven_optimal=bool(proven),
        solver="exhaustive" if late else req.solver,  # the solver that answered (CP-SAT not started: see cut)
        solver_threads=req.solver_threads, cut=what_cut,
    )
    inputs = ResolvedInputs(model=model.name, params=counting.total_params(model), systems=labels,
                            gpu_counts={s.name: s.counts for s in systems},  # long ranges echoed as LO..HI:STEP
                            global_batch=list(gbs), seq_len=seq, tokens=req.tokens)
    return SearchResult(front=front, recommended=recommended, recommended_index=rec_index, objective=req.objective,
                        reason=reason, landmarks=marks, other_fronts=others, stats=stats, inputs=inputs, request=req,
                        recommended_command=estimate_command(req, _gpu_ref(req, rec_sys.name), rec_plan))


def _import_cp_model() -> None:
    try:
        _cpsat()
    except Exception:  # noqa: BLE001  (the solve imports it again and reports the error)
        pass


def preload_cp_model() -> None:
    """Import OR-Tools' CP-SAT (:func:`_cpsat`) in a background thread while the candidates are
    enumerated and priced. The solve's own import finds the module loaded (or waits for the thread:
    one module lock). A no-op once it is loaded. Called by the ``plan-search`` command, a process that
    never forks (a fork while the thread holds an import lock would leave the child waiting on it: the
    API's :func:`search` starts no thread)."""
    import sys
    import threading

    if "ortools.sat.python.cp_model_helper" not in sys.modules:
        threading.Thread(target=_import_cp_model, name="import-cp-sat", daemon=True).start()


def _gpu_ref(req: SearchRequest, system_name: str) -> str:
    """The request's GPU reference (catalog name or file) that resolved to ``system_name``."""
    for ref in req.gpu:
        if resolve_cluster(ref, req.sets).name == system_name:
            return ref
    return system_name


#: Front points built between two looks at the clock (:func:`_front_points`).
POINTS_PER_CLOCK = 64


def _front_points(systems, table: Table, rows: list[int], req, bind: dict,
                  own: list[list[int]] | None = None, deadline: float = math.inf,
                  cut: list[str] | None = None) -> tuple[list[FrontPoint], list[FrontPoint]]:
    """Front rows as FrontPoints, sorted by GPU count, then days, then system order; figures
    re-evaluated (one evaluate() call per system) so they are exactly plan-estimate's. With
    ``own`` (each system's own front), also the points of those fronts that are not on the joint
    one. Scaling efficiency: GPU-hours of the system's most efficient point on its own front
    (its cheapest feasible plan) over the point's. Past ``deadline`` (looked at every
    :data:`POINTS_PER_CLOCK` points, ~0.25 ms each) no further point is built: the front reported
    is then its points of the smaller GPU counts, and ``cut`` gets a line saying from which count."""
    order = lambda rr: sorted(rr, key=lambda i: (int(table.gpus[i]), float(table.days[i]),  # noqa: E731
                                                  int(table.system[i]), int(table.row[i])))
    rows = order(rows)
    on_front = set(rows)
    extra = order({i for rr in (own or []) for i in rr} - on_front)
    by_sys: dict[int, list[int]] = {}
    for i in rows + extra:
        by_sys.setdefault(int(table.system[i]), []).append(int(table.row[i]))
    evals = {}
    for k, rr in by_sys.items():
        s = systems[k]
        sub = s.space.take(np.array(rr))  # the rows read: their plans and figures
        r = evaluate(s.space.model, s.cluster, sub.x, memory_headroom=req.memory_headroom,
                     tokens=req.tokens, checkpoint_interval_h=req.checkpoint_interval_h)
        evals[k] = (r, {row: j for j, row in enumerate(rr)}, sub)
    ref: dict[int, float] = {}  # least GPU-hours per system among its points (its cheapest plan)
    for i in rows + extra:
        k = int(table.system[i])
        r, where, _ = evals[k]
        ref[k] = min(ref.get(k, math.inf), float(r["gpu_hours"][where[int(table.row[i])]]))
    refs: dict[int, str] = {}

    def point(i: int) -> FrontPoint:
        k, row = int(table.system[i]), int(table.row[i])
        s = systems[k]
        r, where, sub = evals[k]
        j = where[row]
        f = lambda name: float(r[name][j])  # noqa: E731
        plan = sub.plan(j)  # validated: the Plan's rules hold for every point
        # the point's other fields are this function's own floats, ints and strings: built without
        # re-walking the validated plan (FrontPoint's checks took ~0.35 ms a point, 0.35 s of a
        # 1,000-point front, past a short time limit's end)
        return FrontPoint.model_construct(
            gpu=s.name, num_gpus=plan.num_gpus, nodes=plan.num_gpus / s.cluster.node.gpus_per_node, plan=plan,
            grad_accum=plan.grad_accum, step_time_s=f("step_s"), tokens_per_s=f("tokens_per_s"),
            tokens_per_s_per_gpu=f("tokens_per_s_per_gpu"), mfu=f("mfu"), memory_gib=f("memory_peak_gib"),
            memory_usable_gib=f("memory_usable_gib"), comm_ratio=f("comm_ratio"), days=f("days"),
            gpu_hours=f("gpu_hours"), cost_usd=f("cost_usd"), energy_kwh=f("energy_kwh"), power_kw=f("power_kw"),
            scaling_efficiency=ref[k] / f("gpu_hours") if f("gpu_hours") > 0 else 1.0,
            bottleneck=str(r["bottleneck"][j]),
            binding=[b for b in ("memory", "comm_ratio") if bind[b][int(table.group[i])] < float(table.days[i])],
            estimate_command=estimate_command(req, refs.setdefault(k, _gpu_ref(req, s.name)), plan),
        )

    def points(rr: list[int], what: str) -> list[FrontPoint]:
        out = []
        for a, i in enumerate(rr):
            if a and a % POINTS_PER_CLOCK == 0 and time.perf_counter() > deadline:
                if cut is not None:
                    cut.append(f"{what}: {len(rr) - a:,} points from {int(table.gpus[i]):,} GPUs up not reported "
                               "(time limit)")
                break
            out.append(point(i))
        return out

    return points(rows, "front"), points(extra, "other systems' fronts")
