"""Enumerating the candidates: the GPU counts of a system (:func:`gpu_counts`), explicit counts in
pieces the time limit can stop between (:func:`_enumerate_until`), and the default GPU range, doubled
while doubling still pays (:func:`default_max_gpus`, which prices each piece as it goes). Pieces are
joined lazily (:class:`_JoinedArrays`)."""

from __future__ import annotations

import math
from dataclasses import fields

import numpy as np

from plan_search.hardware.spec import ClusterSpec
from plan_search.models.io import InputError
from plan_search.planner.costmodel.arrays import PlanArrays
from plan_search.planner.costmodel.evaluate import LayoutTerms
from plan_search.planner.search import clock
from plan_search.planner.search.pricing import EVAL_CHUNK, evaluate_columns
from plan_search.planner.search.request import MAX_GPUS, SearchRequest
from plan_search.planner.search.space import Space, concat_columns, enumerate_space

#: Default GPU-count rule: start at this many nodes, double while doubling the GPUs still
#: shortens the fastest run by at least DOUBLING_GAIN (a 1.5x speed-up for 2x the GPUs, 75 %
#: marginal scaling efficiency); never beyond DEFAULT_MAX_GPUS.
DEFAULT_START_NODES = 8
DOUBLING_GAIN = 1.0 / 3.0
DEFAULT_MAX_GPUS = 1 << 20


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
        if pieces and clock.now() + 2 * last_s > stop:
            return _concat_spaces(pieces), "time_limit"
        left = request.max_candidates - sum(len(p) for p in pieces)
        a = clock.now()
        try:
            pieces.append(_enumerate(model, cluster, counts[i:j], gbs, seq, request, max_candidates=max(left, 1)))
        except InputError as exc:
            if not pieces or "max_candidates" not in str(exc):
                raise
            raise InputError(f"search: more than {request.max_candidates:,} candidates (max_candidates) on "
                             f"{cluster.name} by {int(counts[j - 1]):,} GPUs; bound some knobs (--tp, --pp, "
                             "--micro-batch ...) or give fewer GPU counts") from None
        last_s = clock.now() - a
    return _concat_spaces(pieces), None


def _enumerate(model, cluster, counts, gbs, seq, request, knobs=None, max_candidates=None) -> Space:
    # the recipe knobs the user left unset span what the framework's performance recipes search on this GPU
    # (issue 23: space.recipe_knobs; resolved per row where a value never slows a plan)
    fw = request.framework if request.framework not in (None, "none") else None
    sp = enumerate_space(model, cluster, counts, gbs, seq, knobs or request.knobs,
                         max_candidates or request.max_candidates, request.global_batch_tolerance,
                         framework=fw, recipes=True)
    if fw is not None and len(sp):  # pruned before they are priced: the rows the framework's rules never run
        from plan_search.planner.frameworks.rules import unrunnable_rows

        bad = unrunnable_rows(fw, sp.x)
        if bad.any() and not bad.all():  # all: kept, so the refusal names the rule they break
            sp = sp.take(np.flatnonzero(~bad))
    return sp


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
            a = clock.now()
            left = request.max_candidates - sum(len(p) for p in pieces)
            try:
                sp = _enumerate(model, cluster, new, gbs, seq, request, max_candidates=max(left, 1))
            except InputError:
                if not pieces:  # the other InputErrors do not depend on the counts
                    raise
                if timing is not None:
                    timing["cut"] = "max_candidates"
                return lo_done, pieces, cols
            b = clock.now()
            pieces.append(sp)
            cols.append(evaluate_columns(model, cluster, sp.x, request, deadline, shared))
            priced = clock.now()
            # twice this piece's enumeration and its first chunk's pricing (as many new GPU counts as all before)
            next_min_s = 2 * (b - a) + (priced - b) * min(1.0, EVAL_CHUNK / max(len(sp), 1))
            if timing is not None:
                timing["enumerate"] = timing.get("enumerate", 0.0) + b - a
                timing["evaluate"] = timing.get("evaluate", 0.0) + clock.now() - b
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
        if clock.now() + next_min_s > deadline:
            if timing is not None:
                timing["cut"] = "time_limit"
            break
        if math.isfinite(best_prev) and best > (1.0 - DOUBLING_GAIN) * best_prev:
            break
        best_prev = best
        cap = min(cap * 2, cap_limit)
    return cap, pieces, cols
