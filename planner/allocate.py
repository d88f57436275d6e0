"""``planner.allocate``: share a pool of free GPUs among several training jobs (``plan-allocate``).

The problem is a multiple-choice packing problem. Every job gets at most one *option* — a GPU
type, a GPU count and a parallel plan, with the run's days and dollars — and the options
chosen must fit in the pool: for every GPU type, the GPUs (and, when the pool gives nodes, the
nodes) of the options on that type add up to no more than what is free.

**All chosen jobs run concurrently**, starting now, each on its own GPUs until it finishes; a
job's completion time is its run's days. (No time-indexed schedule: a job that is not chosen
waits for the next allocation.) Nodes: when the pool gives a type's free *nodes*, jobs do not
share nodes — an option of ``n`` GPUs takes ``ceil(n / gpus_per_node)`` of them.

Options
    For every job and every GPU type it allows that the pool has, :func:`planner.search.search`
    (the same cost model as ``plan-search``) computes the Pareto front of GPU count, days and
    dollars, with the GPU counts capped by the pool and the job's ``max_gpus``; each front point
    is an option. Restricting a job to its per-type front loses nothing: an option off the front
    is dominated by one on the same type with no more GPUs (hence no more nodes), no more days
    and no more dollars, and swapping it in keeps the pool feasible and no objective worse. The
    fronts are computed per type, not across types, because types draw on different pools.
    Jobs that differ only in their tokens share one search (:func:`_rescaled`: when every
    candidate trains on the same tokens per step, a run's days, dollars and energy are the step
    count times a per-step figure, so the front at another token count is this one rescaled).
    The searches share the time limit (:data:`SEARCH_SHARE`, heaviest jobs first); a job the limit
    left unsearched is reported as such (``solver.time_limited_jobs``).
    Options past a job's deadline are dropped; a job left with none is reported with the reason
    (its fastest option's days against the deadline, or that no type it allows has a plan that
    fits, with the search's message per type).

Objectives (``OBJECTIVE_TIERS``, all minimised lexicographically, tier after tier)
    - ``weighted-completion``: sum over scheduled jobs of weight x days; then dollars.
    - ``cost``: sum of dollars; then weighted completion.
    - ``makespan``: the largest days of a scheduled job; then weighted completion, then dollars.

    With ``allow_unscheduled`` a job may be left out; every objective would then be best with
    nothing scheduled, so a first tier minimises the total weight of the jobs left out: the
    penalty of leaving a job out is lexicographic — larger than any objective value. Without it
    every job that has an option must get one, and a pool too small for all of them is
    infeasible (:class:`AllocationInfeasible`).

Integer scaling (CP-SAT needs integer coefficients; :func:`integer_terms`)
    - weights: ``round(weight / 1e-3)`` (weights are validated in ``[1e-3, 1e6]``);
    - weight x days: ``round(weight * days / q)`` with ``q = max(1e-6, B / 2**40)`` and ``B`` the
      sum over jobs of their largest weight x days, so any solution's objective is at most
      ``2**40 + jobs`` — far from int64 overflow whatever the magnitudes;
    - dollars: the same with ``q = max(0.01, B / 2**40)`` (a cent);
    - makespan: the ordinal rank of the option's days among the distinct days of all options
      (exact: ``max`` preserves order, so nothing is rounded).

    The rounding of the two sums moves a solution's value by at most ``jobs x q / 2``; the
    optimum of the integer objective is exact (the tests compare it with brute force).

Solver: one CP-SAT model (:func:`build_model`: a named Boolean per option, one per job for
"left out"), one exactly-one per job, one capacity row per type (and per node pool); the tiers
are solved in turn, each optimum fixed as a bound before the next, hinted with the last
solution (the first with a greedy allocation, :func:`greedy`). When the time limit stops a
tier, the best allocation found so far is returned, flagged not proven (``status`` feasible;
``greedy`` when not even the first tier found one and the greedy start is a valid answer). Parameters in :func:`solver_parameters` (one worker, seed 0: deterministic).
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from typing import Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from plan_search.models.io import NoBoolNumbers
from plan_search.planner.costmodel.plan import Plan

Objective = Literal["weighted-completion", "cost", "makespan"]
OBJECTIVES: tuple[str, ...] = ("weighted-completion", "cost", "makespan")

#: Tiers of each objective, minimised in order (``unscheduled`` first when jobs may be left out).
OBJECTIVE_TIERS: dict[str, tuple[str, ...]] = {
    "weighted-completion": ("weighted_days", "cost"),
    "cost": ("cost", "weighted_days"),
    "makespan": ("makespan", "weighted_days", "cost"),
}

WEIGHT_QUANTUM = 1e-3
DAYS_QUANTUM = 1e-6
USD_QUANTUM = 0.01
SCALE_BITS = 40
MAX_JOBS = 1000
MAX_TYPES = 32
#: Share of :func:`allocate`'s time limit the searches may take; the CP-SAT solve gets the rest.
SEARCH_SHARE = 0.7
#: Share of the time limit left after the solve for the result (and the command's start-up).
REPORT_RESERVE_SHARE = 0.05
#: A search or a solve is not started with less time than this (seconds).
MIN_SEARCH_S = 0.05
MIN_SOLVE_S = 0.05

#: SearchRequest fields a job sets itself (or the allocator does); not allowed under ``search:``.
_MANAGED = ("model", "gpu", "tokens", "deadline_days", "global_batch", "seq_len", "max_gpus", "min_gpus",
            "max_nodes", "objective")


class _Doc(NoBoolNumbers):
    model_config = ConfigDict(frozen=True, extra="forbid")



# ------------------------------------------------------------------ input documents
class Capacity(_Doc):
    """Free capacity of one GPU type: GPUs, whole nodes, or both (both bind)."""

    gpus: int | None = Field(default=None, ge=0, le=10_000_000, description="free GPUs")
    nodes: int | None = Field(default=None, ge=0, le=1_000_000,
                              description="free whole nodes (jobs do not share nodes)")


class Pool(_Doc):
    """The free GPUs by type: ``free: {h100-sxm: 64, a100-80gb: {nodes: 4}}`` (a number is GPUs).
    Keys are catalog names/aliases or cluster files, as ``--gpu`` takes them."""

    free: dict[str, Capacity | int] = Field(min_length=1, max_length=MAX_TYPES,
                                            description="GPU type -> free GPUs, or {gpus: N, nodes: N}")

    @field_validator("free")
    @classmethod
    def _shorthand(cls, v):
        out = {}
        for k, c in v.items():
            if isinstance(c, int):
                if not 0 <= c <= 10_000_000:
                    raise ValueError(f"{k}: {c} free GPUs is not a count in [0, 10000000]")
                c = Capacity(gpus=c)
            if c.gpus is None and c.nodes is None:
                raise ValueError(f"{k}: give gpus: N and/or nodes: N")
            out[k] = c
        return out


def parse_tokens(value) -> float:
    """``2e12``, ``"300B"``, ``"1.5T"`` -> tokens (:func:`plan_search.models.io.parse_token_count`)."""
    from plan_search.models.io import parse_token_count

    return parse_token_count(value, "tokens")


class Job(_Doc):
    """One training job to place."""

    name: str = Field(min_length=1, max_length=64)
    model: str = Field(min_length=1, description="catalog model name or model file")
    tokens: float | str = Field(description="training tokens: a number, or a string like 300B or 1.5T")
    deadline_days: float | None = Field(default=None, gt=0, le=1e6, description="must finish within (from now)")
    weight: float | None = Field(default=None, ge=WEIGHT_QUANTUM, le=1e6, description="default 1")
    priority: float | None = Field(default=None, ge=WEIGHT_QUANTUM, le=1e6,
                                   description="an alias of weight (higher = more important); give one of them")
    gpu: list[str] | str | None = Field(default=None, description="GPU types allowed (default: every type "
                                        "of the pool)")
    global_batch: list[int] | int | None = Field(default=None, description="sequences per step, one or a list "
                                                 "(default the model's)")
    seq_len: int | None = Field(default=None, gt=0, le=100_000_000)
    max_gpus: int | None = Field(default=None, gt=0, le=10_000_000)
    min_gpus: int | None = Field(default=None, gt=0, le=10_000_000)
    search: dict = Field(default_factory=dict, description="other SearchRequest fields (knobs, memory_headroom, "
                         "precision, sets, budget_usd, time_limit_s, ...)")

    @model_validator(mode="before")
    @classmethod
    def _search_fields_go_under_search(cls, data):
        if isinstance(data, dict):
            from plan_search.planner.search.request import SearchRequest

            for key in data:
                if key not in cls.model_fields and key in SearchRequest.model_fields:
                    raise ValueError(f"{key}: a search setting, not a job field; give it under the job's "
                                     f"search: mapping (search: {{{key}: ...}})")
        return data

    @field_validator("tokens", mode="before")
    @classmethod
    def _no_bool(cls, v):
        if isinstance(v, bool):
            raise ValueError("a number like 300e9 or a string like 300B")
        return v

    @field_validator("tokens")
    @classmethod
    def _tokens(cls, v):
        t = parse_tokens(v)
        if not (math.isfinite(t) and 0 < t < 1e18):
            raise ValueError(f"{v!r} must be a positive token count below 1e18")
        return t

    @field_validator("gpu", "global_batch")
    @classmethod
    def _listify(cls, v, info):
        if v is None:
            return None
        v = [v] if isinstance(v, (str, int)) else v
        if not v or len(v) > MAX_TYPES * (1 if info.field_name == "gpu" else 1000):
            raise ValueError(f"{info.field_name}: give one value or a non-empty list")
        if info.field_name == "global_batch" and any(b <= 0 for b in v):
            raise ValueError(f"global_batch: sizes must be positive (got {v})")
        return v

    @field_validator("search")
    @classmethod
    def _search(cls, v):
        bad = [k for k in v if k in _MANAGED]
        if bad:
            raise ValueError(f"search: {bad[0]} is a job field (or set by the allocator); give it on the job")
        return v

    @model_validator(mode="after")
    def _one_weight(self):
        if self.weight is not None and self.priority is not None and self.weight != self.priority:
            raise ValueError(f"job {self.name}: give weight or priority, not both")
        if self.min_gpus and self.max_gpus and self.min_gpus > self.max_gpus:
            raise ValueError(f"job {self.name}: min_gpus {self.min_gpus} exceeds max_gpus {self.max_gpus}")
        return self

    @property
    def effective_weight(self) -> float:
        return self.weight if self.weight is not None else (self.priority if self.priority is not None else 1.0)


class Jobs(_Doc):
    """``jobs:`` a list of :class:`Job` with distinct names."""

    jobs: list[Job] = Field(min_length=1, max_length=MAX_JOBS)

    @field_validator("jobs")
    @classmethod
    def _unique(cls, v):
        seen = set()
        for j in v:
            if j.name in seen:
                raise ValueError(f"job names must be distinct: {j.name!r} appears twice")
            seen.add(j.name)
        return v


# ------------------------------------------------------------------ result document
class Assignment(_Doc):
    """A scheduled job: where it runs, on which plan, how long and at what cost."""

    job: str
    weight: float
    gpu: str
    num_gpus: int
    nodes: int = Field(description="whole nodes the job occupies: ceil(num_gpus / gpus_per_node)")
    plan: Plan | None
    days: float
    cost_usd: float
    deadline_days: float | None
    step_time_s: float | None = None
    mfu: float | None = None
    memory_gib: float | None = None


class Unscheduled(_Doc):
    """A job left without GPUs, and why."""

    job: str
    weight: float
    reason: str
    deadline_days: float | None
    fastest_days: float | None = Field(default=None, description="its fastest option (before the deadline cut)")
    fastest_gpu: str | None = None
    fastest_num_gpus: int | None = None


class PoolUsage(_Doc):
    gpu: str
    gpus_per_node: int
    gpus_free: int | None = Field(description="free GPUs in the pool document (None: only nodes given)")
    gpus_used: int = Field(description="GPUs the scheduled jobs take")
    nodes_free: int | None = Field(description="free whole nodes in the pool document (None: only GPUs given)")
    nodes_used: int = Field(description="nodes the scheduled jobs take (ceil(GPUs / gpus_per_node) each)")


class Totals(_Doc):
    jobs: int
    scheduled: int
    unscheduled: int
    unscheduled_weight: float
    weighted_completion_days: float = Field(description="sum of weight x days over scheduled jobs")
    cost_usd: float
    makespan_days: float = Field(description="largest days of a scheduled job (0 with none)")


class SolverInfo(_Doc):
    status: str = Field(description="optimal | feasible (the time limit stopped a tier) | greedy (the time "
                        "limit stopped the first tier: the greedy start, see planner.allocate.greedy)")
    proven_optimal: bool = Field(description="every tier proven optimal and every job's search proven")
    searches_proven: bool
    time_limited_jobs: list[str] = Field(default_factory=list, description="jobs whose search on some type the "
                                         "time limit stopped or skipped: their options may be incomplete")
    tiers: list[str]
    tier_values: list[int] = Field(description="the integer optimum of each tier (see scaling)")
    options: int
    scaling: dict[str, str]
    search_s: float
    solve_s: float


class AllocationResult(_Doc):
    """``plan-allocate`` output (``--format json``)."""

    objective: str
    allow_unscheduled: bool
    assignments: list[Assignment]
    unscheduled: list[Unscheduled]
    pool: list[PoolUsage]
    totals: Totals
    solver: SolverInfo

    def to_dataframe(self):
        """One row per job (scheduled first, in job order), plan knobs flattened as columns."""
        import pandas as pd

        rows = []
        for a in self.assignments:
            d = a.model_dump()
            plan = d.pop("plan") or {}
            d.update({k: v for k, v in plan.items() if k != "num_gpus"})
            d["scheduled"] = True
            rows.append(d)
        for u in self.unscheduled:
            rows.append(dict(u.model_dump(), scheduled=False))
        return pd.DataFrame(rows)


class AllocationInfeasible(Exception):
    """The pool cannot run every job that has an option (and jobs may not be left out), or no
    job has any option. ``str()`` is one line."""


# ------------------------------------------------------------------ the problem
@dataclass(frozen=True)
class Option:
    """One way to run one job: a front point of its search on one GPU type."""

    gpu: str
    num_gpus: int
    nodes: int
    days: float
    cost_usd: float
    plan: Plan | None = None
    step_time_s: float | None = None
    mfu: float | None = None
    memory_gib: float | None = None


@dataclass
class TypeCap:
    gpu: str
    gpus_per_node: int
    gpus: int | None
    nodes: int | None

    @property
    def gpu_cap(self) -> int:
        caps = [c for c in (self.gpus, None if self.nodes is None else self.nodes * self.gpus_per_node)
                if c is not None]
        return min(caps)


@dataclass
class JobEntry:
    name: str
    weight: float
    deadline_days: float | None
    options: list[Option]  # within the deadline: what the solver chooses from
    reason: str | None = None  # why there is no option (set when options is empty)
    fastest: Option | None = None  # fastest option before the deadline cut
    cut: list[str] = field(default_factory=list)  # types whose search the time limit stopped or skipped


@dataclass
class Problem:
    types: dict[str, TypeCap]
    jobs: list[JobEntry]
    search_s: float = 0.0
    searches_proven: bool = True
    notes: list[str] = field(default_factory=list)


def _short(msg, n: int = 600) -> str:
    msg = " ".join(str(msg).split())
    return msg if len(msg) <= n else msg[: n - 3] + "..."


def resolve_pool(pool: Pool) -> dict[str, tuple[str, TypeCap]]:
    """Pool keys -> (the reference to pass to the search, its capacity), keyed by system name."""
    from plan_search.hardware.resolve import resolve_cluster
    from plan_search.models.io import InputError

    out: dict[str, tuple[str, TypeCap]] = {}
    for ref, cap in pool.free.items():
        c = resolve_cluster(ref)
        if c.name in out:
            raise InputError(f"pool: {ref!r} and {out[c.name][0]!r} are the same system {c.name}")
        out[c.name] = (ref, TypeCap(c.name, c.node.gpus_per_node, cap.gpus, cap.nodes))
    return out


def job_options(job: Job, types: dict[str, tuple[str, TypeCap]], cache: dict | None = None,
                until: float = math.inf) -> tuple[JobEntry, float, bool]:
    """Every option of ``job`` on the pool's types (the per-type fronts, see the module doc),
    the seconds spent searching and whether every search was proven optimal. ``cache`` maps a
    request's JSON to its result (or its NoFeasiblePlan), so equal searches run once.

    ``until`` (a ``time.perf_counter()`` instant) bounds the searches: each gets the time left
    (or its own ``time_limit_s`` when shorter); a type not searched before it, or whose search
    the time limit stopped with nothing found, is recorded in the entry's ``cut``."""
    cache = {} if cache is None else cache
    from plan_search.hardware.resolve import resolve_cluster
    from plan_search.models.io import InputError
    from plan_search.models.resolve import resolve_model

    from plan_search.planner.search.request import NoFeasiblePlan, SearchRequest
    from plan_search.planner.search.front import search

    spec = resolve_model(job.model)
    allowed: list[str] = []
    missing: list[str] = []
    if job.gpu is None:
        allowed = list(types)
    else:
        for g in job.gpu:
            try:
                name = resolve_cluster(g).name
            except InputError:
                raise InputError(f"job {job.name}: gpu: {g!r} is not a known system") from None
            if name in types:
                if name not in allowed:
                    allowed.append(name)
            else:
                missing.append(name)
    options: list[Option] = []
    why: list[str] = [f"{m}: not in the pool" for m in missing]
    cut: list[str] = []
    t0 = time.perf_counter()
    proven = True
    for name in allowed:
        ref, cap = types[name]
        left = until - time.perf_counter()
        hi = cap.gpu_cap if job.max_gpus is None else min(cap.gpu_cap, job.max_gpus)
        if hi <= 0:
            why.append(f"{name}: no free GPUs")
            continue
        if job.min_gpus and job.min_gpus > hi:
            why.append(f"{name}: min_gpus {job.min_gpus} exceeds the {hi} GPUs available")
            continue
        fields = dict(job.search)
        fields.update(model=job.model, gpu=[ref], tokens=job.tokens, max_gpus=hi, objective="fastest")
        if cap.nodes is not None:
            fields["max_nodes"] = cap.nodes
        if job.min_gpus:
            fields["min_gpus"] = job.min_gpus
        if hi < cap.gpus_per_node and "gpus" not in fields and "gpus_step" not in fields:
            fields["gpus_step"] = 1  # less than a node free: every count up to it
        for key in ("global_batch", "seq_len"):
            if getattr(job, key) is not None:
                fields[key] = getattr(job, key)
        own = fields.get("time_limit_s")
        own = own if isinstance(own, (int, float)) and not isinstance(own, bool) else 10.0
        fields["time_limit_s"] = max(MIN_SEARCH_S, min(own, left))
        try:
            req = SearchRequest(**fields)
        except ValueError as exc:
            from plan_search.models.io import error_text

            raise InputError(f"job {job.name}: search: {error_text(exc)}") from None
        key = req.model_copy(update={"time_limit_s": 0.0}).model_dump_json()  # the same search, any budget
        # the same search at another token count: its front, rescaled (exact: see _rescaled)
        skey = req.model_copy(update={"time_limit_s": 0.0, "tokens": 1.0}).model_dump_json() \
            if _token_scalable(req) else None
        if key not in cache and skey in cache:
            cache[key] = _rescaled(cache[skey], req.tokens)
        if key not in cache and left <= MIN_SEARCH_S:
            cut.append(name)
            why.append(f"{name}: not searched (the time limit ran out)")
            proven = False
            continue
        if key not in cache:
            try:
                cache[key] = search(req, model=spec)
            except NoFeasiblePlan as exc:
                cache[key] = exc
            except InputError as exc:
                raise InputError(f"job {job.name} on {name}: {_short(exc, 400)}") from None
            if skey is not None and not (isinstance(cache[key], NoFeasiblePlan)
                                         and cache[key].reason in ("time_limit", "max_candidates", "deadline",
                                                                   "budget")):
                cache.setdefault(skey, cache[key])
        res = cache[key]
        if isinstance(res, NoFeasiblePlan):
            if res.reason in ("time_limit", "max_candidates"):
                cut.append(name)
                proven = False
                why.append(f"{name}: its search was stopped by the {res.reason.replace('_', ' ')} before a plan "
                           "was found")
            else:
                why.append(f"{name}: {_short(res)}")
            continue
        proven = proven and res.stats.proven_optimal
        for fp in res.front:
            options.append(Option(gpu=name, num_gpus=fp.num_gpus, nodes=-(-fp.num_gpus // cap.gpus_per_node),
                                  days=fp.days, cost_usd=fp.cost_usd, plan=fp.plan, step_time_s=fp.step_time_s,
                                  mfu=fp.mfu, memory_gib=fp.memory_gib))
    dt = time.perf_counter() - t0
    entry = make_entry(job.name, job.effective_weight, job.deadline_days, options, why, cut)
    return entry, dt, proven


def _token_scalable(req) -> bool:
    """Whether the search's answer at another token count is this one's rescaled: every candidate
    trains on the same tokens per step (one global batch, no batch tolerance, one sequence
    length), and no constraint depends on the run's length (deadline, budget). Then a plan's days,
    GPU-hours, dollars and energy are ceil(tokens / tokens per step) times a per-step figure, the
    same factor for every candidate, so the front and its order are the same."""
    gbs = req.global_batch
    return ((gbs is None or len(gbs) == 1) and not getattr(req, "global_batch_tolerance", 0.0)
            and req.deadline_days is None and req.budget_usd is None)


def _rescaled(res, tokens: float):
    """A search result (or its NoFeasiblePlan) for ``tokens`` from one at another token count
    (:func:`_token_scalable`): run figures scaled by the ratio of the step counts."""
    from plan_search.planner.search.request import NoFeasiblePlan

    if isinstance(res, NoFeasiblePlan):
        return res  # what does not fit in memory does not fit at any token count
    old = res.request.tokens
    front = []
    for fp in res.front:
        per_step = fp.plan.global_batch * fp.plan.seq_len
        f = math.ceil(tokens / per_step) / math.ceil(old / per_step)
        front.append(fp.model_copy(update={k: getattr(fp, k) * f for k in ("days", "gpu_hours", "cost_usd",
                                                                            "energy_kwh")}))
    return res.model_copy(update={"front": front, "request": res.request.model_copy(update={"tokens": tokens})})


def make_entry(name: str, weight: float, deadline_days: float | None, options: list[Option],
               why: list[str] = (), cut: list[str] = ()) -> JobEntry:
    """A job's entry: its options within the deadline, and the reason when there are none
    (``cut``: the types the time limit kept from being searched to the end)."""
    if not options:
        detail = "; ".join(why) if why else "no GPU type to try"
        if cut:
            return JobEntry(name, weight, deadline_days, [], f"not planned: the time limit stopped its search on "
                            f"{', '.join(cut)} before a plan was found; raise --time-limit (time_limit_s) "
                            f"({detail})", cut=list(cut))
        return JobEntry(name, weight, deadline_days, [], f"no type allowed has a plan that fits ({detail})")
    fastest = min(options, key=lambda o: (o.days, o.cost_usd, o.num_gpus))
    kept = options if deadline_days is None else [o for o in options if o.days <= deadline_days]
    reason = None
    if not kept:
        reason = (f"misses its deadline: its fastest option in the pool takes {fastest.days:.2f} days "
                  f"({fastest.num_gpus} x {fastest.gpu}) against a deadline of {deadline_days:g} days")
    return JobEntry(name, weight, deadline_days, kept, reason, fastest, cut=list(cut))


def build_problem(pool: Pool, jobs: Jobs, until: float = math.inf) -> Problem:
    """Resolve the pool, search every job on every type it allows (the options), the searches
    ending by ``until`` (a ``time.perf_counter()`` instant; see :func:`job_options`)."""
    types = resolve_pool(pool)
    entries: dict[int, JobEntry] = {}
    total, proven, cache = 0.0, True, {}
    # the heaviest jobs are searched first: when the time limit cuts the searches short, the jobs
    # left unsearched are the least important ones (and are reported)
    order = sorted(range(len(jobs.jobs)), key=lambda i: (-jobs.jobs[i].effective_weight, i))
    for i in order:
        e, dt, pr = job_options(jobs.jobs[i], types, cache, until)
        entries[i] = e
        total += dt
        proven = proven and pr
    return Problem(types={k: v[1] for k, v in types.items()}, jobs=[entries[i] for i in range(len(jobs.jobs))],
                   search_s=total, searches_proven=proven)


# ------------------------------------------------------------------ integer terms
@dataclass
class Terms:
    """Integer coefficients of the tiers (see the module docstring's scaling)."""

    weight: list[int]  # per job
    weighted_days: list[list[int]]  # per job, per option
    cost: list[list[int]]
    makespan: list[list[int]]  # ordinal rank + 1 of the option's days
    quanta: dict[str, float]


def _quantum(values: list[list[float]], floor: float) -> float:
    bound = sum(max(v) for v in values if v)
    return max(floor, bound / 2.0 ** SCALE_BITS)


def integer_terms(problem: Problem) -> Terms:
    jobs = problem.jobs
    wd = [[j.weight * o.days for o in j.options] for j in jobs]
    usd = [[o.cost_usd for o in j.options] for j in jobs]
    q_wd, q_usd = _quantum(wd, DAYS_QUANTUM), _quantum(usd, USD_QUANTUM)
    distinct = sorted({o.days for j in jobs for o in j.options})
    rank = {d: i + 1 for i, d in enumerate(distinct)}
    return Terms(
        weight=[max(1, round(j.weight / WEIGHT_QUANTUM)) for j in jobs],
        weighted_days=[[round(v / q_wd) for v in row] for row in wd],
        cost=[[round(v / q_usd) for v in row] for row in usd],
        makespan=[[rank[o.days] for o in j.options] for j in jobs],
        quanta={"weighted_days": q_wd, "cost": q_usd, "weight": WEIGHT_QUANTUM},
    )


def tiers_of(objective: str, allow_unscheduled: bool) -> tuple[str, ...]:
    if objective not in OBJECTIVE_TIERS:
        raise ValueError(f"objective: {objective!r} is not one of {', '.join(OBJECTIVES)}")
    return (("unscheduled",) if allow_unscheduled else ()) + OBJECTIVE_TIERS[objective]


# ------------------------------------------------------------------ CP-SAT
@dataclass
class AllocModel:
    cp: object
    pick: list[list]  # pick[j][k]: job j runs option k
    left_out: list  # left_out[j]: job j unscheduled (None when it must be scheduled)
    tiers: dict[str, object]  # tier name -> linear expression (minimised)


def solver_parameters(time_left: float):
    """Every CP-SAT parameter of the allocation, in one place: one worker and a fixed seed
    (deterministic), the time left."""
    from ortools.sat.python import cp_model

    s = cp_model.CpSolver()
    s.parameters.max_time_in_seconds = max(time_left, 1e-3)
    s.parameters.num_workers = 1
    s.parameters.random_seed = 0
    s.parameters.log_search_progress = False
    return s


def build_model(problem: Problem, terms: Terms, tiers: tuple[str, ...], allow_unscheduled: bool) -> AllocModel:
    """The CP-SAT model: Booleans ``<job>@<gpu>x<count>#k`` (job runs option k) and
    ``left_out[<job>]``; one exactly-one per job; ``gpus[<type>]`` and ``nodes[<type>]``
    capacity rows; the expressions of ``tiers`` (the objective), each stated once here."""
    from ortools.sat.python import cp_model

    m = cp_model.CpModel()
    m.SetName("plan-allocate")
    pick: list[list] = []
    left: list = []
    for j, job in enumerate(problem.jobs):
        row = [m.NewBoolVar(f"{job.name}@{o.gpu}x{o.num_gpus}#{k}") for k, o in enumerate(job.options)]
        pick.append(row)
        if not row:
            left.append(None)
            continue
        if allow_unscheduled:
            u = m.NewBoolVar(f"left_out[{job.name}]")
            m.AddExactlyOne(row + [u]).WithName(f"one[{job.name}]")
            left.append(u)
        else:
            m.AddExactlyOne(row).WithName(f"one[{job.name}]")
            left.append(None)
    for name, cap in problem.types.items():
        use = [(pick[j][k], o) for j, job in enumerate(problem.jobs) for k, o in enumerate(job.options)
               if o.gpu == name]
        if not use:
            continue
        if cap.gpus is not None:
            m.Add(sum(o.num_gpus * v for v, o in use) <= cap.gpus).WithName(f"gpus[{name}]")
        if cap.nodes is not None:
            m.Add(sum(o.nodes * v for v, o in use) <= cap.nodes).WithName(f"nodes[{name}]")

    def weighted(coefs):
        return cp_model.LinearExpr.WeightedSum(
            [v for row in pick for v in row], [c for crow in coefs for c in crow])

    span = None
    if "makespan" in tiers:
        # exactly one option per scheduled job, so its days' rank is sum_k rank_k x_k: one row
        # per job (a reified row per option is ~100x slower to solve on 60 jobs x 64 options)
        n_ranks = max([r for row in terms.makespan for r in row], default=0)
        span = m.NewIntVar(0, n_ranks, "makespan_rank")
        for j, row in enumerate(pick):
            if row:
                m.Add(span >= cp_model.LinearExpr.WeightedSum(row, terms.makespan[j])).WithName(
                    f"makespan[{problem.jobs[j].name}]")
    exprs = {
        "unscheduled": cp_model.LinearExpr.WeightedSum(
            [u for u in left if u is not None], [terms.weight[j] for j, u in enumerate(left) if u is not None]),
        "weighted_days": weighted(terms.weighted_days),
        "cost": weighted(terms.cost),
        "makespan": span,
    }
    return AllocModel(m, pick, left, {t: exprs[t] for t in tiers})


def greedy(problem: Problem, terms: Terms, tiers: tuple[str, ...]) -> list[int | None]:
    """A quick allocation to start the solver from (a hint; the answer only when the time limit
    stops the first tier): the jobs by falling weight, each on its option with the fewest GPUs
    that fits what is left; then each job, in the same order, moved to the option best on the
    first objective tier that still fits."""
    first = next(t for t in tiers if t != "unscheduled")
    key = {"weighted_days": terms.weighted_days, "cost": terms.cost, "makespan": terms.makespan}[first]
    jobs = problem.jobs
    left = {n: [c.gpus, c.nodes] for n, c in problem.types.items()}

    def take(o, sign):
        g = left[o.gpu]
        left[o.gpu] = [None if g[0] is None else g[0] - sign * o.num_gpus,
                       None if g[1] is None else g[1] - sign * o.nodes]

    def fits(o):
        g = left[o.gpu]
        return (g[0] is None or o.num_gpus <= g[0]) and (g[1] is None or o.nodes <= g[1])

    order = sorted(range(len(jobs)), key=lambda j: (-jobs[j].weight, j))
    choice: list[int | None] = [None] * len(jobs)
    for j in order:
        ks = [k for k, o in enumerate(jobs[j].options) if fits(o)]
        if ks:
            choice[j] = min(ks, key=lambda k: (jobs[j].options[k].num_gpus, key[j][k], k))
            take(jobs[j].options[choice[j]], +1)
    for j in order:
        if choice[j] is None:
            continue
        take(jobs[j].options[choice[j]], -1)
        ks = [k for k, o in enumerate(jobs[j].options) if fits(o)]
        choice[j] = min(ks, key=lambda k: (key[j][k], k))
        take(jobs[j].options[choice[j]], +1)
    return choice


def _hint(am: AllocModel, choice: list[int | None]) -> None:
    am.cp.ClearHints()
    for j, row in enumerate(am.pick):
        for k, v in enumerate(row):
            am.cp.AddHint(v, choice[j] == k)
        if am.left_out[j] is not None:
            am.cp.AddHint(am.left_out[j], choice[j] is None)


def solve(problem: Problem, objective: str = "weighted-completion", *, allow_unscheduled: bool = False,
          time_limit_s: float = 10.0) -> AllocationResult:
    """Choose the options (see the module docstring) and pack the result. Raises
    :class:`AllocationInfeasible` when no job has an option, or the pool cannot hold every
    job that has one and ``allow_unscheduled`` is off."""
    t0 = time.perf_counter()
    deadline = t0 + time_limit_s
    tiers = tiers_of(objective, allow_unscheduled)
    terms = integer_terms(problem)
    jobs = problem.jobs
    n_opts = sum(len(j.options) for j in jobs)
    if n_opts == 0:
        shown = "; ".join(f"{j.name}: {_short(j.reason, 300)}" for j in jobs[:3])
        more = f"; and {len(jobs) - 3} more jobs" if len(jobs) > 3 else ""
        raise AllocationInfeasible(f"no job has an option: {shown}{more}")
    from ortools.sat.python import cp_model  # only when there is something to solve (~0.4 s with pandas)

    am = build_model(problem, terms, tiers, allow_unscheduled)
    start = greedy(problem, terms, tiers)
    _hint(am, start)
    choice: list[int | None] | None = None
    values: list[int] = []
    status, proven = "optimal", True
    for tier in tiers:
        expr = am.tiers[tier]
        am.cp.Minimize(expr)
        s = solver_parameters(deadline - time.perf_counter())
        st = s.Solve(am.cp)
        if st == cp_model.INFEASIBLE:
            raise AllocationInfeasible(_infeasible_message(problem))
        if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            status, proven = "feasible", False
            if choice is None:  # not even the first tier: the greedy start, if it places every job it must
                placed = all(k is not None for k, j in zip(start, jobs) if j.options)
                if not (allow_unscheduled or placed):
                    raise AllocationInfeasible(f"no allocation found within the time limit ({time_limit_s:g} s)")
                choice, status = start, "greedy"
            break
        if st == cp_model.FEASIBLE:
            status, proven = "feasible", False
        value = int(round(s.ObjectiveValue()))
        values.append(value)
        choice = [next((k for k, v in enumerate(row) if s.Value(v)), None) for row in am.pick]
        am.cp.Add(expr <= value).WithName(f"tier[{tier}]")
        _hint(am, choice)
    solve_s = time.perf_counter() - t0
    scaling = {
        "weight": f"round(weight / {WEIGHT_QUANTUM:g})",
        "weighted_days": f"round(weight * days / {terms.quanta['weighted_days']:.6g})",
        "cost": f"round(dollars / {terms.quanta['cost']:.6g})",
        "makespan": "ordinal rank of days among all options (exact)",
    }
    info = dict(status=status, proven_optimal=proven and problem.searches_proven,
                searches_proven=problem.searches_proven, time_limited_jobs=[j.name for j in jobs if j.cut],
                tiers=list(tiers), tier_values=values, options=n_opts,
                scaling=scaling, search_s=problem.search_s, solve_s=solve_s)
    return pack_result(problem, choice, objective, allow_unscheduled, info)


def _infeasible_message(problem: Problem) -> str:
    jobs = [j for j in problem.jobs if j.options]
    need = sum(min(o.num_gpus for o in j.options) for j in jobs)
    free = sum(c.gpu_cap for c in problem.types.values())
    pool = ", ".join(f"{c.gpu_cap} {n}" for n, c in problem.types.items())
    if need > free:
        why = f"their smallest options need {need} GPUs together against {free} free ({pool})"
    else:
        why = f"no choice of GPU types fits them into the pool ({pool})"
    none = [j.name for j in problem.jobs if not j.options]
    who = f"all {len(jobs)} jobs" + (f" that have an option ({len(none)} more have none: {', '.join(none)})"
                                     if none else "")
    return (f"the pool cannot run {who} at once: {why}; --allow-unscheduled "
            f"(allow_unscheduled=True) schedules the best subset")


def pack_result(problem: Problem, choice: list[int | None], objective: str, allow_unscheduled: bool,
                info: dict) -> AllocationResult:
    assignments, unscheduled = [], []
    used = {n: [0, 0] for n in problem.types}
    for j, job in enumerate(problem.jobs):
        k = choice[j] if job.options else None
        if k is not None:
            o = job.options[k]
            used[o.gpu][0] += o.num_gpus
            used[o.gpu][1] += o.nodes
            assignments.append(Assignment(job=job.name, weight=job.weight, gpu=o.gpu, num_gpus=o.num_gpus,
                                          nodes=o.nodes, plan=o.plan, days=o.days, cost_usd=o.cost_usd,
                                          deadline_days=job.deadline_days, step_time_s=o.step_time_s, mfu=o.mfu,
                                          memory_gib=o.memory_gib))
            continue
        reason = job.reason
        if reason is None:  # had options, left out by the solver
            small = min(job.options, key=lambda o: (o.num_gpus, o.days))
            cap = problem.types[small.gpu]
            free = cap.gpu_cap - used_after(problem, choice, small.gpu)
            reason = (f"left out: the pool cannot run it alongside the jobs scheduled (its smallest option "
                      f"needs {small.num_gpus} x {small.gpu}; {free} left free by the others)")
        f = job.fastest
        unscheduled.append(Unscheduled(job=job.name, weight=job.weight, reason=reason,
                                       deadline_days=job.deadline_days, fastest_days=f.days if f else None,
                                       fastest_gpu=f.gpu if f else None, fastest_num_gpus=f.num_gpus if f else None))
    pool = [PoolUsage(gpu=n, gpus_per_node=c.gpus_per_node, gpus_free=c.gpus, gpus_used=used[n][0],
                      nodes_free=c.nodes, nodes_used=used[n][1]) for n, c in problem.types.items()]
    totals = Totals(jobs=len(problem.jobs), scheduled=len(assignments), unscheduled=len(unscheduled),
                    unscheduled_weight=sum(u.weight for u in unscheduled),
                    weighted_completion_days=sum(a.weight * a.days for a in assignments),
                    cost_usd=sum(a.cost_usd for a in assignments),
                    makespan_days=max((a.days for a in assignments), default=0.0))
    return AllocationResult(objective=objective, allow_unscheduled=allow_unscheduled, assignments=assignments,
                            unscheduled=unscheduled, pool=pool, totals=totals, solver=SolverInfo(**info))


def used_after(problem: Problem, choice, gpu: str) -> int:
    """GPUs of type ``gpu`` taken by the chosen options."""
    return sum(j.options[k].num_gpus for j, k in zip(problem.jobs, choice)
               if k is not None and j.options and j.options[k].gpu == gpu)


def allocate(pool: Pool | dict, jobs: Jobs | dict | list, *, objective: str = "weighted-completion",
             allow_unscheduled: bool = False, time_limit_s: float = 10.0) -> AllocationResult:
    """Place ``jobs`` on ``pool`` (documents or their dicts; a list is the jobs). Every job is
    searched on every type it allows (``planner.search``), then CP-SAT picks the options."""
    from pydantic import ValidationError

    from plan_search.models.io import InputError, short_repr, validation_message

    if isinstance(time_limit_s, bool) or not isinstance(time_limit_s, (int, float)) \
            or not (math.isfinite(time_limit_s) and 0 < time_limit_s <= 86_400):
        raise InputError(f"time_limit_s: {short_repr(time_limit_s)} must be a number of seconds in (0, 86400]")
    if not isinstance(allow_unscheduled, bool):
        raise InputError(f"allow_unscheduled: {short_repr(allow_unscheduled)} is not true or false")
    if not isinstance(objective, str) or objective not in OBJECTIVE_TIERS:
        raise InputError(f"objective: {short_repr(objective)} is not one of {', '.join(OBJECTIVES)}")
    try:
        p = pool if isinstance(pool, Pool) else Pool.model_validate(pool)
        if isinstance(jobs, list):
            jobs = {"jobs": jobs}
        js = jobs if isinstance(jobs, Jobs) else Jobs.model_validate(jobs)
    except ValidationError as exc:
        raise InputError(validation_message(exc, "allocate")) from None
    # the pool's systems and the jobs' models are resolved first: a typo is refused at once, in the jobs'
    # order, without importing CP-SAT (~0.4 s with pandas) nor searching the heavier jobs first
    from plan_search.models.resolve import resolve_model

    resolve_pool(p)
    for job in js.jobs:
        try:
            resolve_model(job.model)
        except InputError as exc:
            raise InputError(f"job {job.name}: {exc}") from None
    # the searches' and CP-SAT's modules are imported before the clock starts: imports are fixed costs
    # outside the limit (README, "Time limits"). Inside it they took ~0.2 s (numpy, the cost model) before
    # the first search, which at --time-limit 0.3 left the searches nothing, and ~0.4 s (cp_model imports
    # pandas) after the searches' 70 %, past the limit's end
    from ortools.sat.python import cp_model  # noqa: F401
    from plan_search.planner.search import front  # noqa: F401

    t0 = time.perf_counter()
    # one time limit for the whole allocation: the searches get SEARCH_SHARE of it, the solve the rest
    problem = build_problem(p, js, until=t0 + SEARCH_SHARE * time_limit_s)
    # the solve ends REPORT_RESERVE_SHARE before the limit: packing and printing the answer take the rest
    left = max(t0 + (1.0 - REPORT_RESERVE_SHARE) * time_limit_s - time.perf_counter(), MIN_SOLVE_S)
    return solve(problem, objective, allow_unscheduled=allow_unscheduled, time_limit_s=left)
