"""The documents of ``plan-search``: what is asked (:class:`SearchRequest`) and what comes back
(:class:`SearchResult`), as pydantic models whose JSON is the ``plan-search --format json``
output (schema: ``plan-search --schema request|result``).

Units: days and hours of wall-clock training for ``tokens`` tokens, dollars at the system's
``price_per_gpu_hour_usd``, energy in kWh at the wall (TDP x PUE), memory in GiB, power in kW.

When no candidate satisfies the request, :func:`planner.search.search` raises
:class:`NoFeasiblePlan`, which carries the smallest memory footprint found, on which plan,
against what capacity, and the cheapest changes that would make a plan fit — each checked by
evaluating it.
"""

from __future__ import annotations

import itertools
import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, create_model, field_validator, model_validator

from plan_search.models.io import NoBoolNumbers, parse_token_count
from plan_search.planner.costmodel.estimate import Estimate
from plan_search.planner.search.low_precision import LowPrecisionLine
from plan_search.planner.costmodel.memory import DEFAULT_MEMORY_HEADROOM
from plan_search.planner.costmodel.knobs import broadcast_knobs, knob_specs
from plan_search.planner.costmodel.plan import Plan, canonical_choices, routing_imbalance_problem

Objective = Literal["balanced", "fastest", "cheapest", "fewest-gpus", "least-energy", "best-mfu"]
OBJECTIVES: tuple[str, ...] = ("balanced", "fastest", "cheapest", "fewest-gpus", "least-energy", "best-mfu")
RecomputeChoice = Literal["none", "selective", "full", "partial"]
#: The knobs' choices beyond a Plan's own (plan.canonical_choices' ``extra``): the search's "partial"
#: recomputation (recompute full on some layers).
KNOB_EXTRA_CHOICES = {"recompute": ("partial",)}

#: Default cp domain: every rank keeps at least this many tokens of the sequence. 4096 is the
#: shortest chunk of NVIDIA's recipes: NeMo llama3_70b pretrain_recipe, context_parallelism=2 at
#: seq_length 8192 (NVIDIA/NeMo nemo/collections/llm/recipes/llama3_70b.py@0189a3b); below it cp
#: only adds ring latency (cp 2 at a 2,048-token sequence is a divisibility artefact).
MIN_CP_TOKENS = 4096
#: Default threshold of the ``balanced`` objective (see :data:`SearchRequest.min_scaling_efficiency`).
DEFAULT_MIN_SCALING_EFFICIENCY = 0.8

#: Default training tokens when the request gives none: GPT-3's 300B (Brown et al. 2020).
DEFAULT_TOKENS = 300e9


#: The plan's fields on a front row: its shape, then every knob (the one knob description).
_PLAN_KEYS = ("dp", "global_batch", "seq_len") + tuple(k.name for k in knob_specs())

#: Columns of a front row (:meth:`SearchResult.front_rows`): ``plan-search --format csv`` and
#: :func:`front_dataframe` alike.
FRONT_COLUMNS = (
    ("model", "gpu", "num_gpus", "nodes", "grad_accum") + _PLAN_KEYS
    + ("step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "memory_gib", "memory_usable_gib",
       "comm_ratio", "days", "gpu_hours", "cost_usd", "energy_kwh", "power_kw", "scaling_efficiency",
       "bottleneck", "binding", "recommended", "framework", "fitted", "band", "estimate_command")
)


def _int_set_text(name: str, v):
    """A degree knob given as text, as plan-search's option takes it (``"8"``, ``"1,2,4"``,
    ``"1..16"``, ``"64..1024:64"``; in a list too): its integers (models.io.parse_int_set, the one
    parser); anything else unchanged, for the field to judge."""
    from plan_search.models.io import parse_int_set

    items = v if isinstance(v, (list, tuple)) else [v]
    if not any(isinstance(x, str) for x in items):
        return v
    out: list = []
    for x in items:
        try:
            out += parse_int_set(x, KNOB_LIMITS[name]) if isinstance(x, str) else [x]
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}; e.g. 8, \"1,2,4\" or \"1..16\"") from None
    return out


def _cell(v):
    if isinstance(v, (list, tuple)):
        return ",".join(str(x).lower() if isinstance(x, bool) else str(x) for x in v)
    return v



class _Doc(NoBoolNumbers):
    model_config = ConfigDict(frozen=True, extra="forbid")



#: Longest time limit of a search (a day), seconds.
MAX_TIME_LIMIT_S = 86_400
#: Largest GPU count of a plan (:class:`planner.plan.Plan` ``num_gpus``).
MAX_GPUS = 10_000_000
#: Upper bounds of the knob values, those of :class:`planner.plan.Plan` (``recompute_layers``:
#: ``ModelSpec.num_layers``), so that every candidate the space builds is a valid Plan and no
#: product of degrees overflows the space's int64 columns.
KNOB_LIMITS = {"tp": 100_000, "pp": 100_000, "ep": 100_000, "etp": 100_000, "cp": 100_000, "vpp": 10_000, "micro_batch": 1_000_000,
               "recompute_layers": 10_000}
#: Longest value list of ``gpus``; of a knob or ``global_batch`` (each value of those multiplies
#: the space's construction: a few hundred are already more than any search needs).
MAX_LIST = 100_000
#: A --set item: a key, then ``=`` and the value.
SET_PATTERN = r"^\s*[^=\s][^=]*="
MAX_KNOB_LIST = 1024


def _positive_unique(values, name, limit=None, max_len=MAX_LIST):
    if values is None:
        return None
    vals = list(values)
    if not vals:
        raise ValueError(f"{name}: empty list; leave it out for the default domain")
    if len(vals) > max_len:
        raise ValueError(f"{name}: {len(vals)} values; at most {max_len:,}")
    if any(int(v) != v or v <= 0 for v in vals):
        raise ValueError(f"{name}: values must be positive integers (got {vals[:8]})")
    if limit is not None and max(vals) > limit:
        raise ValueError(f"{name}: {max(vals)} is too large (at most {limit:,})")
    return sorted(set(int(v) for v in vals))


class _Strict(_Doc):
    """Input documents: strict types, as the JSON Schema says (``"8"`` is not a count, ``1`` or
    ``"yes"`` is not a boolean, ``true`` is not a number)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class _EnumeratedKnobs(_Strict):
    """User bounds on the plan knobs. ``None`` means the whole default domain:

    - ``tp``: every divisor rule of :meth:`Plan.check_against` (heads, kv-heads, ffn), inside
      the NVLink domain (a divisor of its size) unless ``allow_cross_node_tp`` (then multiples
      of the domain size too, up to the head count);
    - ``pp``: every stage count that divides the layers, and those that do not but split
      unevenly Megatron's way (middle stages ``ceil(l/p)`` layers, first and last share the rest);
    - ``cp``: powers of two dividing ``seq_len/2`` (context parallelism needs FlashAttention,
      which is always on), up to ``max_cp``; by default while every rank keeps at least
      :data:`MIN_CP_TOKENS` tokens of the sequence (``seq_len / cp >= 4096``: 1 at 2k and 4k, 2 at
      8k, 32 at 128k) — a domain choice, not a proof: shorter ring chunks only add latency;
    - ``vpp``: 1 and every divisor of the layers per (middle) stage (up to ``max_vpp`` if set),
      when the micro-batches per step are a multiple of ``pp``;
    - ``micro_batch``: powers of two dividing ``global_batch/dp``, up to ``max_micro_batch``;
    - ``zero`` 0-3 (stages above 0 only when dp > 1: with one replica they shard nothing);
    - ``recompute``: none, selective, full, and ``partial`` (full on ``k`` layers per stage for
      ``k`` in ``recompute_layers``, default a quarter, a half and three quarters of the stage);
    - ``sequence_parallel``: ``[true]`` (on whenever tp > 1); ``[true, false]`` tries both.
    - ``ep``, ``etp`` (mixture of experts; 1 for dense models): ``ep`` powers of two dividing the
      experts with at most 32 experts per rank, ``etp`` 1 (and the row's ``tp`` for experts at least
      as wide as the hidden size); ``etp * ep`` divides the stage's ``tp*cp*dp`` GPUs (Megatron-Core
      parallel folding).

    Every other knob of :class:`Plan` (precision, FlashAttention, the overlaps, ...) is a field
    of :class:`Knobs` too, generated from the Plan (:mod:`plan_search.planner.costmodel.knobs`):
    a value or a list of values, ``None`` meaning the Plan's default; the space crosses them all.
    A single value is accepted wherever a list is (``"tp": 8`` is ``"tp": [8]``).
    """

    @model_validator(mode="before")
    @classmethod
    def _scalars_to_lists(cls, data):
        from plan_search.models.io import from_numpy

        data = from_numpy(data)  # before an array is taken for a scalar: ep=np.array([4, 8]) is [4, 8]
        data = canonical_choices(data, KNOB_EXTRA_CHOICES)  # "FLEX" is flex, as for a Plan
        if isinstance(data, dict) and any(isinstance(data.get(k), (str, list, tuple)) for k in KNOB_LIMITS):
            data = {k: (_int_set_text(k, v) if k in KNOB_LIMITS else v) for k, v in data.items()}
        if isinstance(data, dict):
            listed = {"allow_cross_node_tp", "max_cp", "max_vpp", "max_micro_batch"}
            data = {k: ([v] if k not in listed and v is not None and not isinstance(v, (list, tuple)) else v)
                    for k, v in data.items()}
        return data

    @model_validator(mode="wrap")
    @classmethod
    def _scalar_errors(cls, data, handler):
        """A knob given as one value and refused is named alone: ``"moe_grouped_gemm": "fusde"`` says
        "moe_grouped_gemm: Input should be 'loop' or 'fused' (got 'fusde')", not "moe_grouped_gemm.0: ..." of
        the one-value list it became (as c337a10 made plan-search's options say). Runs before
        :meth:`_scalars_to_lists` (wrap validators run outside the before validators defined earlier)."""
        from pydantic import ValidationError

        try:
            return handler(data)
        except ValidationError as exc:
            if not isinstance(data, dict):
                raise

            def one(e):  # (field, 0, ...) of a field given as one value -> (field, ...)
                loc = tuple(e.get("loc", ()))
                if (len(loc) >= 2 and loc[1] == 0 and isinstance(loc[0], str)
                        and isinstance(data.get(loc[0]), (str, bool, int, float))):
                    return {**e, "loc": (loc[0],) + loc[2:]}
                return e

            errors = [one(e) for e in exc.errors()]
            if all(a is b for a, b in zip(errors, exc.errors())):
                raise
            raise ValidationError.from_exception_data(exc.title, [
                {k: e[k] for k in ("type", "loc", "input", "ctx") if k in e} for e in errors]) from None

    #: The knobs its user gave (a value other than None), as constructed: a copy (the framework's narrowing,
    #: planner.frameworks.rules.Capabilities.knobs) keeps it, so the search knows which recipe knobs are pinned
    #: (planner.search.space.recipe_knobs: a knob the user gives pins it; the others span the recipes' values).
    _user_given: frozenset = PrivateAttr(default=frozenset())

    def model_post_init(self, context) -> None:  # noqa: D102
        self._user_given = frozenset(k for k in self.model_fields_set if getattr(self, k, None) is not None)

    def __eq__(self, other) -> bool:
        """Equal knobs are equal values (who set them, ``_user_given``, is the search's business, not the value's:
        a request read back from its JSON equals the request)."""
        if not isinstance(other, BaseModel):
            return NotImplemented
        return type(self) is type(other) and self.__dict__ == other.__dict__ and \
            self.__pydantic_extra__ == other.__pydantic_extra__

    __hash__ = BaseModel.__hash__

    tp: list[int] | None = None
    pp: list[int] | None = None
    ep: list[int] | None = None
    etp: list[int] | None = None
    cp: list[int] | None = None
    vpp: list[int] | None = None
    micro_batch: list[int] | None = None
    zero: list[int] = Field(default_factory=lambda: [0, 1, 2, 3])
    recompute: list[RecomputeChoice] = Field(default_factory=lambda: ["none", "selective", "full", "partial"])
    recompute_layers: list[int] | None = None
    sequence_parallel: list[bool] = Field(default_factory=lambda: [True])
    first_stage_layers: list[int] | None = Field(default=None, description="fixed first-stage layers (uneven split)")
    last_stage_layers: list[int] | None = Field(default=None, description="fixed last-stage layers (uneven split)")
    allow_cross_node_tp: bool = False
    max_cp: int | None = Field(default=None, ge=1, le=1_000_000,
                               description="default cp domain: powers of two up to this (default seq_len/1024)")
    max_vpp: int | None = Field(default=None, ge=1, le=100_000, description="default vpp domain: divisors up to this")
    max_micro_batch: int = Field(default=8, ge=1, le=1_000_000, description="default micro-batch domain cap")

    @field_validator("tp", "pp", "cp", "vpp", "micro_batch", "recompute_layers", "ep", "etp")
    @classmethod
    def _ints(cls, v, info):
        return _positive_unique(v, info.field_name, KNOB_LIMITS[info.field_name], MAX_KNOB_LIST)

    @field_validator("zero")
    @classmethod
    def _zero(cls, v):
        if not v or any(z not in (0, 1, 2, 3) for z in v):
            raise ValueError(f"zero: stages are 0, 1, 2, 3 (got {v})")
        return sorted(set(v))

    @field_validator("recompute")
    @classmethod
    def _rc(cls, v):
        if not v:
            raise ValueError("recompute: empty; use some of none, selective, full, partial")
        order = ["none", "selective", "full", "partial"]
        return [r for r in order if r in set(v)]

    @field_validator("sequence_parallel")
    @classmethod
    def _sp(cls, v):
        if not v:
            raise ValueError("sequence_parallel: empty; use [true], [false] or [true, false]")
        return sorted(set(v), reverse=True)

    @model_validator(mode="after")
    def _dualpipe_degrees(self):
        """DualPipe alone with pp/vpp bounds it can never use (Plan rule: even pp, vpp 1) is bad
        input naming the knob, not an empty space reported as 'no valid plan'."""
        if getattr(self, "pp_schedule", None) == ["dualpipe"]:
            if self.pp and all(p % 2 for p in self.pp):
                raise ValueError(f"pp_schedule: dualpipe needs an even pp (got pp {self.pp}); "
                                 "add an even pp or use pp_schedule 1f1b")
            if self.vpp and 1 not in self.vpp:
                raise ValueError(f"pp_schedule: dualpipe needs vpp 1 (got vpp {self.vpp}); "
                                 "add vpp 1 or use pp_schedule 1f1b")
        for imbalance in getattr(self, "moe_imbalance", None) or []:  # given: a set crossing round_robin too
            for routing in getattr(self, "moe_routing", None) or []:
                if routing_imbalance_problem(routing, imbalance):
                    raise ValueError(routing_imbalance_problem(routing, imbalance))
        for name in ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split"):
            if True in (getattr(self, name, None) or []):  # the space sets them per row (space.Space.plan)
                raise ValueError(f"{name}: plan-search enumerates the pipeline splits itself (Megatron's accounted "
                                 "splits among them, marked on the plan); drop it and bound the split with pp, "
                                 "first_stage_layers, last_stage_layers, or price one plan with plan-estimate")
        return self


def _broadcast_field(spec):
    if spec.kind == "choice":
        item = Literal[spec.choices]
    else:
        item = {"bool": bool, "int": int, "float": float}[spec.kind]
        if spec.kind in ("int", "float"):  # each value within the Plan field's bounds (no NaN/inf)
            item = Annotated[item, Field(ge=spec.minimum, le=spec.maximum,
                                         **({"allow_inf_nan": False} if spec.kind == "float" else {}))]
    if spec.optional:
        item = item | None
    return (list[item] | None, Field(default=None, min_length=1, max_length=MAX_KNOB_LIST,
                                     description=f"{spec.description} (a value or a set; default {spec.default!r})"))


def _unique(values, info):
    if values is None:
        return None
    out = []
    for v in values:
        if isinstance(v, bool) != (info.field_name in _BOOL_KNOBS):
            raise ValueError(f"{info.field_name}: {v!r} has the wrong type")
        if v not in out:
            out.append(v)
    return out


_BOOL_KNOBS = {k.name for k in broadcast_knobs() if k.kind == "bool"}

#: The search's knobs: the enumerated ones above plus every other Plan knob, generated from
#: :class:`Plan` so that a knob added there is a request field with the same name and default.
Knobs = create_model(
    "Knobs", __base__=_EnumeratedKnobs, __module__=__name__,
    __validators__={"_unique_broadcast": field_validator(*[k.name for k in broadcast_knobs()])(_unique)},
    **{k.name: _broadcast_field(k) for k in broadcast_knobs() if k.name not in _EnumeratedKnobs.model_fields},
)
Knobs.__doc__ = _EnumeratedKnobs.__doc__


def knob_values(knobs, name: str) -> list:
    """The values of broadcast knob ``name`` a search crosses: the given ones or the Plan's default."""
    vals = getattr(knobs, name)
    return list(vals) if vals is not None else [Plan.model_fields[name].default]


def knob_combinations(knobs) -> list[dict]:
    """Every combination of the broadcast knobs' values, in a fixed order (the first is the
    combination of the first values)."""
    names = [k.name for k in broadcast_knobs()]
    out = [dict(zip(names, combo)) for combo in itertools.product(*(knob_values(knobs, n) for n in names))]
    if getattr(knobs, "moe_imbalance", None) is None:  # not given: a round-robin plan's is 1 (Plan rule)
        out = [dict(c, moe_imbalance=1.0) if c.get("moe_routing") == "round_robin" else c for c in out]
    return out


#: Every Plan knob's name: a request accepts each at its top level too (moved into ``knobs``).
_KNOB_NAMES = {k.name for k in knob_specs()}


class SearchRequest(_Strict):
    """A search: one model, one or more GPU types, GPU counts, batch, constraints, objective.

    GPU counts: ``gpus`` lists them; otherwise every multiple of ``gpus_step`` (default: the
    system's GPUs per node) from ``min_gpus`` (default one step) to ``max_gpus``; without
    ``max_gpus`` the range is doubled from 8 nodes until doubling the GPUs stops paying — the
    fastest run shortens by less than a third, a speed-up under 1.5x (see
    :func:`planner.search.default_max_gpus`).
    """

    model: str = Field(min_length=1, description="catalog model name or model file")
    gpu: list[str] = Field(default_factory=lambda: ["a100-80gb"], min_length=1, max_length=32,
                           description="GPU systems (catalog names or cluster files); one front across them")
    sets: list[str] = Field(default_factory=list, max_length=1000,
                            description="--set what-if overrides, applied to every system")
    gpus: list[int] | None = Field(default=None, description="explicit GPU counts")
    min_gpus: int | None = Field(default=None, gt=0, le=MAX_GPUS)
    max_gpus: int | None = Field(default=None, gt=0, le=MAX_GPUS)
    gpus_step: int | None = Field(default=None, gt=0, le=MAX_GPUS, description="default: GPUs per node")
    max_nodes: int | None = Field(default=None, gt=0, le=10_000_000, description="caps GPU counts at nodes x GPUs/node")
    global_batch: list[int] | None = Field(default=None, description="sequences per step; default the model's")
    global_batch_tolerance: float = Field(
        default=0.0, ge=0.0, lt=0.5,
        description="relative tolerance of global_batch: each layout uses the batch nearest the target that "
                    "its dp divides, within target x (1 +- tolerance) (CLI: --global-batch 1536~5%)")
    seq_len: int | None = Field(default=None, gt=0, le=100_000_000, description="default the model's")
    tokens: float = Field(default=DEFAULT_TOKENS, gt=0, lt=1e18, description="training tokens of the run")
    deadline_days: float | None = Field(default=None, gt=0)
    budget_usd: float | None = Field(default=None, gt=0)
    max_power_kw: float | None = Field(default=None, gt=0)
    memory_headroom: float = Field(default=DEFAULT_MEMORY_HEADROOM, ge=0.0, lt=1.0,
                                   description="fraction of GPU memory kept free (plan-estimate's default; "
                                               "why this value: planner.costmodel.memory.DEFAULT_MEMORY_HEADROOM)")
    max_comm_ratio: float | None = Field(default=None, gt=0.0, le=1.0,
                                         description="max exposed communication / step time")
    knobs: Knobs = Field(default_factory=Knobs,
                         description="plan knobs: a value or a set each (any of them may also be given at the top level)")
    checkpoint_interval_h: float | None = Field(
        default=None, gt=0, le=1e6, description="hours between checkpoints; default the interval that maximises "
        "goodput (planner.costmodel.goodput; 1 hour without failures)")
    failure_rate: float | None = Field(
        default=None, ge=0, le=1e6, description="job-interrupting failures per 1,000 GPU-days; 0 turns failures "
        "off; default the cluster file's, else the GPU type's preset (planner.costmodel.goodput.preset_for)")
    restart_minutes: float | None = Field(
        default=None, ge=0, le=1e6, description="minutes to detect a failure and restart, before the checkpoint "
        "is read; default the cluster file's, else 10")
    async_checkpoint: bool = Field(default=True, description="save checkpoints asynchronously (only the "
                                   "device-to-host copy blocks)")
    framework: Literal["megatron", "deepspeed", "torchtitan", "nemo", "none"] | None = Field(
        default=None, description="unset: span every framework (each one's rules filter its plans, its fitted "
        "profile prices them, each point names the frameworks that run it); a framework: only the plans it can run "
        "(planner.frameworks); none: a framework-free what-if (the Plan's knobs as given, priced on the catalog's "
        "terms, run by no framework named)")
    objective: Objective = Field(
        default="balanced",
        description="balanced: with deadline_days the cheapest plan that meets it, else with budget_usd the "
                    "fastest within it, else the fastest plan whose scaling efficiency (cost of the cheapest "
                    "plan / its cost) is at least min_scaling_efficiency")
    min_scaling_efficiency: float = Field(
        default=DEFAULT_MIN_SCALING_EFFICIENCY, gt=0.0, le=1.0,
        description="balanced objective: the lowest scaling efficiency (cheapest plan's dollars / the plan's "
                    "dollars; per GPU type, GPU-hours) accepted for speed")
    allow_unfitted: bool = Field(
        default=False, description="let a GPU type priced on priors (no fitted efficiency terms: plan-estimate's "
        "'defaults (not fitted)') be recommended over a fitted one; its points are on the front, marked, either way")
    solver: Literal["cpsat", "exhaustive"] = "cpsat"
    time_limit_s: float = Field(default=10.0, gt=0, le=MAX_TIME_LIMIT_S, description="seconds for the whole search, "
                                "in (0, 86400]")
    solver_threads: int = Field(default=1, ge=1, le=256, description="CP-SAT worker threads")
    seed: int = Field(default=0, ge=0, le=2**31 - 1)
    max_candidates: int = Field(default=5_000_000, gt=0, le=100_000_000,
                                description="refuse larger spaces per system (about 200 bytes each)")

    format: Literal["json", "table", "csv"] | None = Field(
        default=None, description="output format of plan-search --request (default json for a request file)")

    @model_validator(mode="before")
    @classmethod
    def _as_the_cli_takes_it(cls, data):
        """What the CLI takes: a GPU name or a comma-separated list, token counts with units
        (``"300B"``), and any plan knob at the top level (moved into ``knobs``)."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if isinstance(data.get("gpu"), str):
            data["gpu"] = [g for g in data["gpu"].split(",")] or [data["gpu"]]
        if data.get("tokens") is not None:  # text with units, or a number (a boolean is not a count)
            data["tokens"] = parse_token_count(data["tokens"], "tokens")
        if "workers" in data and "solver_threads" not in data:
            data["solver_threads"] = data.pop("workers")
        top = [k for k in data if k in _KNOB_NAMES]
        if top:
            knobs = data.get("knobs") or {}
            if isinstance(knobs, BaseModel):
                knobs = knobs.model_dump(exclude_unset=True)
            if not isinstance(knobs, dict):
                return data
            knobs = dict(knobs)
            for k in top:
                if k in knobs:
                    raise ValueError(f"{k}: given both at the top level and in knobs; give it once")
                knobs[k] = data.pop(k)
            data["knobs"] = knobs
        return data

    @field_validator("sets")
    @classmethod
    def _sets(cls, v):
        for s in v:
            if not re.match(SET_PATTERN, s):
                raise ValueError(f"sets: {s[:60]!r} is not KEY=VALUE (e.g. node.inter_node_gbps=50)")
        return v

    @field_validator("framework", mode="before")
    @classmethod
    def _framework_case(cls, v):
        # any casing, as plan-estimate --framework and plan_search.estimate(framework=...) take it
        return v.strip().lower() if isinstance(v, str) else v

    @field_validator("gpu")
    @classmethod
    def _gpu(cls, v):
        out = []
        for g in v:
            g = g.strip()
            if not g:
                raise ValueError("gpu: empty name in the list")
            if g not in out:
                out.append(g)
        return out

    @field_validator("gpus", "global_batch")
    @classmethod
    def _lists(cls, v, info):
        if info.field_name == "gpus":
            return _positive_unique(v, "gpus", MAX_GPUS)
        return _positive_unique(v, info.field_name, 100_000_000, MAX_KNOB_LIST)

    @model_validator(mode="after")
    def _bounds(self):
        if self.min_gpus and self.max_gpus and self.min_gpus > self.max_gpus:
            raise ValueError(f"min_gpus: {self.min_gpus} exceeds max_gpus {self.max_gpus}")
        return self

    def flat_row(self) -> dict:
        """One flat row: the fields in declaration order, knob bounds as ``knobs_<name>``; a list
        becomes one comma-joined string, ``None`` stays empty (the default domain)."""
        d = self.model_dump()
        knobs = d.pop("knobs")
        row = {k: _cell(v) for k, v in d.items()}
        row.update({f"knobs_{k}": _cell(v) for k, v in knobs.items()})
        return row

    def to_dataframe(self):
        """One row, knob bounds as ``knobs_*`` columns (pandas is imported here only)."""
        import pandas as pd

        row = self.flat_row()
        return pd.DataFrame([row], columns=list(row))


class FrontPoint(_Doc):
    """One non-dominated (GPU count, days, dollars) point and the plan behind it."""

    gpu: str = Field(description="system name")
    num_gpus: int
    nodes: float
    plan: Plan
    grad_accum: int
    step_time_s: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    mfu: float = Field(description="MFU, attention counted causal (Estimate.mfu_convention)")
    mfu_full_attention: float | None = Field(default=None, description="MFU with attention counted over the full "
                                             "s x s square (torchtitan's logs)")
    memory_gib: float = Field(description="peak memory per GPU (worst stage)")
    memory_usable_gib: float
    comm_ratio: float
    days: float
    gpu_hours: float
    cost_usd: float
    energy_kwh: float
    power_kw: float
    scaling_efficiency: float = Field(
        description="tokens per GPU-hour relative to the most efficient point of the same system on the front "
                    "(its cheapest): 1.0 there, 0.8 when the run takes 25% more GPU-hours")
    bottleneck: str = Field(description="largest share of the step, named by its resource")
    binding: list[str] = Field(
        description="constraints that exclude a faster plan at this GPU count (memory, comm_ratio)")
    estimate_command: str = Field(
        default="", description="the plan-estimate command that reproduces this point's figures")
    framework: list[str] = Field(
        default_factory=list,
        description="the frameworks that run this plan as it is (their rules pass it unchanged), priced with their "
                    "efficiency profile; empty: a framework-free what-if (--framework none)")
    fitted: bool = Field(default=True, description="False: the GPU type's efficiency terms are priors, not fitted "
                                                   "on measured runs (plan-estimate: 'defaults (not fitted)')")
    band: float | None = Field(default=None, description="for a GPU type priced on priors, the relative band (+-) "
                               "of its figures the leave-one-GPU-out error implies (planner/search/fitted.py)")


class SearchStats(_Doc):
    candidates: int = Field(description="plans enumerated (every knob combination that passes the rules)")
    memory_rejected: int = Field(description="over the usable memory")
    evaluated: int = Field(description="plans timed by the cost model")
    comm_rejected: int
    feasible: int = Field(description="plans meeting every constraint")
    pruned: int = Field(description="feasible plans dropped before the solver (dominated at their GPU count)")
    solver_candidates: int = Field(description="plans in the CP-SAT table")
    gpu_counts: int = Field(description="GPU counts considered, over all systems")
    solves: int
    enumerate_s: float
    evaluate_s: float
    solve_s: float
    total_s: float
    proven_optimal: bool
    solver: str
    solver_threads: int
    cut: list[str] = Field(default_factory=list, description="what the time limit (or max_candidates) cut short: "
                           "systems not searched, a default GPU range, candidates not evaluated, an unproven solve")


#: Longer evenly spaced GPU-count lists are echoed as their range (``ResolvedInputs.gpu_counts``).
ECHO_COUNTS_MAX = 10_000


def compact_counts(counts) -> list[int] | str:
    """GPU counts as echoed: the list, or when longer than :data:`ECHO_COUNTS_MAX` and evenly spaced the
    range ``"LO..HI:STEP"`` (the ``--gpus`` syntax): a 10^7-count range echoed as a list made a 169 MB
    result and 1 GB of memory. Takes a list or an integer array (the search's own, not copied to a list)."""
    import numpy as np

    if isinstance(counts, str):
        return counts
    arr = np.asarray(counts)
    if arr.ndim == 1 and len(arr) > ECHO_COUNTS_MAX and arr.dtype.kind in "iu":
        steps = np.diff(arr)
        if steps[0] > 0 and (steps == steps[0]).all():
            return f"{int(arr[0])}..{int(arr[-1])}:{int(steps[0])}"
    return [int(n) for n in arr] if isinstance(counts, np.ndarray) else counts


class ResolvedInputs(_Doc):
    """The request as the search understood it."""

    model: str
    params: int
    moe: bool = Field(default=False, description="a mixture-of-experts model (its front shows the expert layout)")
    systems: list[str]
    gpu_counts: dict[str, list[int] | str] = Field(
        description=f"GPU counts considered, per system: the list, or when longer than {ECHO_COUNTS_MAX} and evenly "
        "spaced the range 'LO..HI:STEP' (the --gpus syntax: every STEP-th count from LO to HI)")

    @field_validator("gpu_counts", mode="before")
    @classmethod
    def _compact(cls, v):
        return {k: compact_counts(c) for k, c in v.items()} if isinstance(v, dict) else v
    global_batch: list[int]
    seq_len: int
    tokens: float
    seq_len_source: str | None = Field(
        default=None, description="where seq_len came from when the request did not give it and the model file "
        "states a rule (HF import: never the context window silently)")


class SearchResult(_Doc):
    """``plan-search`` output: the front (sorted by GPU count, then days, then system order),
    the recommended plan in full (``planner.estimate.Estimate``), the search statistics, and
    the inputs echoed back (``request`` as given, ``inputs`` as resolved)."""

    front: list[FrontPoint]
    recommended: Estimate
    recommended_index: int | None = Field(description="index of the recommended plan in front (None: not on it)")
    recommended_command: str = Field(
        default="", description="the plan-estimate command that reproduces the recommended plan's figures")
    recommended_framework: list[str] = Field(
        default_factory=list, description="the frameworks that run the recommended plan as it is (empty: a "
                                          "framework-free what-if)")
    objective: str
    reason: str
    landmarks: dict[str, int] = Field(
        default_factory=dict,
        description="indices in front of the points a person looks at first: fewest-gpus, cheapest, balanced "
                    "(the fastest at >= min_scaling_efficiency), fastest, recommended")
    other_fronts: list[FrontPoint] = Field(
        default_factory=list,
        description="with several GPU types: each type's own front points that another type dominates "
                    "(so a dominated type can still be drawn and compared)")
    stats: SearchStats
    inputs: ResolvedInputs
    request: SearchRequest
    low_precision: LowPrecisionLine | None = Field(
        default=None, description="a 16-bit answer: the recommended layout in the GPU's best low-precision recipe "
        "(fp8 on Hopper, mxfp8 on Blackwell: planner.frameworks.recipes.low_precision_recipe), its days and dollars "
        "(planner.search.low_precision); None for a low-precision answer or a GPU without such a recipe")

    def front_rows(self) -> list[dict]:
        """The front, one flat row per point in the result's order, columns :data:`FRONT_COLUMNS`
        (``recommended`` True on the recommended point)."""
        rows = []
        for i, fp in enumerate(self.front):
            d = fp.model_dump()
            plan = d.pop("plan")
            d.update({k: plan[k] for k in _PLAN_KEYS})
            d["grad_accum"] = fp.grad_accum
            d["binding"] = "+".join(fp.binding)
            d["framework"] = "+".join(fp.framework) or "none"
            d["recommended"] = self.recommended_index == i
            d["model"] = self.inputs.model
            rows.append({k: d.get(k) for k in FRONT_COLUMNS})
        return rows

    def to_dataframe(self):
        """The front, one row per point, plan knobs as columns (pandas is imported here only)."""
        import pandas as pd

        return pd.DataFrame(self.front_rows(), columns=list(FRONT_COLUMNS))


class Alternative(_Doc):
    """A change that was evaluated to see whether it makes a plan fit."""

    change: str
    fits: bool
    peak_gib: float | None = None
    usable_gib: float | None = None
    plan: Plan | None = None


class NoFeasiblePlan(Exception):
    """Nothing satisfies the request. ``str()`` is the one-line actionable message."""

    def __init__(self, message: str, *, reason: str, smallest_gib: float | None = None,
                 smallest_plan: Plan | None = None, usable_gib: float | None = None,
                 capacity_gib: float | None = None, system: str | None = None,
                 alternatives: list[Alternative] | None = None):
        super().__init__(message)
        self.reason = reason
        self.smallest_gib = smallest_gib
        self.smallest_plan = smallest_plan
        self.usable_gib = usable_gib
        self.capacity_gib = capacity_gib
        self.system = system
        self.alternatives = alternatives or []


JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _tighten(node):
    """Integer floors as ``minimum`` (``exclusiveMinimum: 0`` on an integer reads as a float bound)."""
    if isinstance(node, dict):
        if node.get("type") == "integer" and node.get("exclusiveMinimum") == 0:
            del node["exclusiveMinimum"]
            node["minimum"] = 1
        for v in node.values():
            _tighten(v)
    elif isinstance(node, list):
        for v in node:
            _tighten(v)


def _array_of(schema: dict) -> dict | None:
    for alt in schema.get("anyOf", [schema]):
        if alt.get("type") == "array":
            return alt
    return None


def json_schema(kind: str = "request") -> dict:
    """The JSON Schema of a request or a result, with the constraints the code enforces: item
    bounds of every list, ZeRO stages as 0-3, integer floors, a single value wherever a list
    is taken, token counts with units, a GPU name as a string, and every plan knob accepted at
    the top level of a request (as :meth:`SearchRequest._as_the_cli_takes_it` does)."""
    if kind == "result":
        doc = SearchResult.model_json_schema()
        # plan-search --emit adds the launch configuration of the recommended plan
        doc["properties"]["launch"] = {"type": "object", "description": "with --emit: the launch configuration"}
        _tighten(doc)
        return {"$schema": JSON_SCHEMA_DIALECT, **doc}
    if kind != "request":
        raise ValueError(f"schema: {kind!r}; use request or result")
    doc = SearchRequest.model_json_schema()
    knobs = doc["$defs"]["Knobs"]["properties"]
    int_limits = dict(KNOB_LIMITS, first_stage_layers=10_000, last_stage_layers=10_000)
    for name, prop in knobs.items():
        arr = _array_of(prop)
        if arr is None:
            continue
        arr.setdefault("minItems", 1)
        arr["maxItems"] = MAX_KNOB_LIST
        if name in int_limits:
            arr["items"] = {"type": "integer", "minimum": 1, "maximum": int_limits[name]}
        if name == "zero":
            arr["items"] = {"enum": [0, 1, 2, 3]}
        one = dict(arr["items"])
        alts = [a for a in prop.get("anyOf", [prop]) if a is not arr] if "anyOf" in prop else []
        rest = {k: v for k, v in prop.items() if k not in ("anyOf", "type", "items", "minItems", "maxItems")}
        knobs[name] = {**rest, "anyOf": [one, arr, *alts]}
    props = doc["properties"]
    for name, limit, max_items in (("gpus", MAX_GPUS, MAX_LIST), ("global_batch", 100_000_000, MAX_KNOB_LIST)):
        arr = _array_of(props[name])
        arr["items"] = {"type": "integer", "minimum": 1, "maximum": limit}
        arr["minItems"], arr["maxItems"] = 1, max_items
    props["tokens"] = {"anyOf": [{k: v for k, v in props["tokens"].items() if k not in ("default", "description")},
                                 {"type": "string", "pattern": r"^\s*[0-9]*\.?[0-9]+([eE][+-]?[0-9]+)?\s*[kKmMbBgGtT]?\s*$"}],
                       "default": props["tokens"].get("default"), "description": props["tokens"].get("description")}
    gpu = props["gpu"]
    gpu_list = {k: v for k, v in gpu.items() if k in ("type", "items", "minItems", "maxItems")}
    gpu_list["items"] = {"type": "string", "minLength": 1, "pattern": r"\S"}
    gpu["anyOf"] = [{"type": "string", "minLength": 1, "pattern": r"\S"}, gpu_list]
    for k in ("type", "items", "minItems", "maxItems"):
        gpu.pop(k, None)
    sets = _array_of(props["sets"])
    sets["items"] = {"type": "string", "pattern": SET_PATTERN}
    for name, prop in knobs.items():
        if name in _KNOB_NAMES:
            props.setdefault(name, prop)
    _tighten(doc)
    return {"$schema": JSON_SCHEMA_DIALECT, **doc}
