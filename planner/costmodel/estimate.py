"""``planner.estimate``: every figure of one plan, as a serialisable result.

A thin wrapper over :func:`planner.evaluate.evaluate` (the vectorised cost model) for a single
plan: it validates the plan against the model and the GPU, evaluates it, and packs the arrays
into pydantic documents whose JSON is the ``plan-estimate --format json`` output.
"""

from __future__ import annotations

from typing import Callable, Sequence

from pydantic import BaseModel, ConfigDict, Field

from plan_search.hardware.overrides import apply_overrides
from plan_search.hardware.profiles import for_framework
from plan_search.hardware.resolve import resolve_cluster
from plan_search.hardware.spec import ClusterSpec, EfficiencySpec
from plan_search.models import counting
from plan_search.models.io import InputError, short_repr
from plan_search.models.resolve import resolve_model
from plan_search.models.spec import ModelSpec

from plan_search.planner.costmodel import compute
from plan_search.planner.costmodel import goodput
from plan_search.planner.costmodel.arrays import PlanArrays
from plan_search.planner.costmodel.evaluate import GIB, MFU_CONVENTION, evaluate
from plan_search.planner.costmodel.memory import DEFAULT_MEMORY_HEADROOM, STAGES
from plan_search.planner.costmodel.plan import Plan
from plan_search.planner.costmodel.step import TIME_KEYS


class _Doc(BaseModel):
    model_config = ConfigDict(frozen=True)


class MemoryBreakdown(_Doc):
    """Peak memory of the worst pipeline stage, GiB (:mod:`planner.costmodel.memory`).

    ``allocated_peak_gib`` is what ``torch.cuda.max_memory_allocated`` would read at the peak
    moment; ``reserved_peak_gib`` adds the caching allocator's reserved-but-unused memory as a run
    with memory to spare measures it (``torch.cuda.max_memory_reserved``), ``device_peak_gib`` adds
    what lives outside the allocator (CUDA context, NCCL buffers: the nvidia-smi figure with room).
    ``reserved_at_capacity_gib`` is what the allocator needs when memory runs short: before failing
    it gives its whole free segments back and retries, keeping only the free pieces of segments that
    hold a live tensor (``allocator_slack_gib``; ``releasable_slack_gib`` is the rest).
    ``peak_gib`` = reserved at capacity + outside the allocator is the figure judged against
    ``usable_gib`` (:mod:`planner.costmodel.memory`). The parts (weights ... framework_overhead)
    sum to ``peak_gib``.
    """

    peak_gib: float
    allocated_peak_gib: float
    reserved_peak_gib: float
    device_peak_gib: float
    reserved_at_capacity_gib: float
    releasable_slack_gib: float
    capacity_gib: float
    usable_gib: float
    weights_gib: float
    gradients_gib: float
    optimizer_gib: float
    activations_gib: float
    transient_gib: float
    zero3_gather_buffer_gib: float
    allocator_slack_gib: float
    framework_overhead_gib: float
    worst_stage: str


class TimeBreakdown(_Doc):
    """Seconds of one step by component; they sum to ``step_time_s``. Communication entries are
    the exposed (not hidden) part; ``hidden_comm_s`` is what overlap hid."""

    compute_s: float
    memory_bound_s: float
    recompute_s: float
    tp_comm_s: float
    cp_comm_s: float
    pp_comm_s: float
    ep_comm_s: float = 0.0
    bubble_s: float
    dp_comm_s: float
    optimizer_s: float
    overhead_s: float
    hidden_comm_s: float
    bubble_fraction: float


class RunEstimate(_Doc):
    """A whole training run for a token budget."""

    tokens: float
    steps: int
    days: float
    gpu_hours: float
    cost_usd: float
    energy_kwh: float
    energy_cost_usd: float
    checkpoint_write_s: float
    checkpoint_overhead_fraction: float
    data_read_s_per_step: float
    data_loading_ok: bool
    days_without_failures: float = Field(description="the same run with no failures: training and its "
                                         "checkpoint saves alone")
    cost_usd_without_failures: float
    expected_interruptions: float = Field(description="failures expected over the run's wall time")


class Badput(_Doc):
    """Shares of the run's wall time that do not train, in the categories of Google's ML Productivity
    Goodput; with ``goodput`` they sum to 1 (:mod:`planner.costmodel.goodput`)."""

    checkpoint_save: float
    lost_progress: float
    restart: float
    restore: float


class Recovery(_Doc):
    """What the goodput figure assumed: the failure rate and its source, the job's mean time between
    failures, the restart, restore and save times, and the interval in the frameworks' own terms."""

    failure_rate_per_1000_gpu_days: float
    failure_rate_source: str
    mtbf_h: float | None = Field(description="None without failures")
    restart_s: float
    restore_s: float
    async_checkpoint: bool
    checkpoint_save_blocking_s: float = Field(description="seconds one save stops training (the whole write "
                                              "when synchronous, the device-to-host staging when asynchronous)")
    checkpoint_interval_given: bool = Field(description="the interval was given (checkpoint_interval_h); "
                                            "else it maximises goodput")
    framework_settings: dict[str, str] = Field(description="the interval (and asynchronous saving) in each "
                                               "framework's own terms")


class Estimate(_Doc):
    """The result of :func:`estimate` (and of ``plan-estimate --format json``)."""

    model: str
    cluster: str
    plan: Plan
    params: int
    step_time_s: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    model_tflops_per_gpu: float
    hardware_tflops_per_gpu: float
    mfu: float = Field(description="model FLOPs / (step x GPUs x dense bf16 peak), attention counted causal "
                       "(mfu_convention)")
    mfu_full_attention: float = Field(description="the same MFU with attention counted over the full s x s square "
                                      "(torchtitan's logs)")
    mfu_convention: str = Field(description="which attention count mfu uses, and whose reports use it")
    hfu: float
    flops_convention: str
    feasible: bool
    fits_device: bool = Field(description="the peak fits the GPU's whole memory (no headroom): a plan that is "
                              "not feasible but fits the device is tight, not out of memory")
    bottleneck: str
    reasons: list[str]
    comm_ratio: float
    power_kw: float
    memory: MemoryBreakdown
    time: TimeBreakdown
    goodput: float = Field(description="share of the run's wall time that trains (failures, restarts, restores "
                           "and checkpoint saves priced: planner.costmodel.goodput)")
    checkpoint_interval_s: float = Field(description="training seconds between checkpoints (whole steps)")
    checkpoint_interval_steps: int
    badput: Badput
    recovery: Recovery
    run: RunEstimate | None
    efficiency: EfficiencySpec

    def flat_row(self) -> dict:
        """One flat row: model, cluster, the plan's fields, the headline figures, ``memory_*``
        (GiB), ``time_*`` (seconds per step), ``run_*`` and ``eff_*``; every cell a scalar."""
        d = self.model_dump()
        row = {"model": d["model"], "cluster": d["cluster"], "num_gpus": self.plan.num_gpus}
        plan = d["plan"]
        row.update({k: plan[k] for k in plan if k != "num_gpus"})
        row["grad_accum"] = self.plan.grad_accum
        for k in ("params", "step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu",
                  "hardware_tflops_per_gpu", "mfu", "mfu_full_attention", "hfu", "feasible", "fits_device", "bottleneck", "comm_ratio", "power_kw"):
            row[k] = d[k]
        row["reasons"] = "; ".join(d["reasons"])
        for k, v in d["memory"].items():
            row[f"memory_{k}"] = v
        for k, v in d["time"].items():
            row[f"time_{k}"] = v
        for k in ("goodput", "checkpoint_interval_s", "checkpoint_interval_steps"):
            row[k] = d[k]
        for k, v in d["badput"].items():
            row[f"badput_{k}"] = v
        for k, v in d["recovery"].items():
            if k != "framework_settings":
                row[f"recovery_{k}"] = v
        run = d["run"] or {}
        for k in RunEstimate.model_fields:
            row[f"run_{k}"] = run.get(k)
        for k, v in d["efficiency"].items():
            row[f"eff_{k}"] = v
        return row

    def to_dataframe(self):
        """One row, nested figures flattened (:meth:`flat_row`; pandas is imported here only)."""
        import pandas as pd

        row = self.flat_row()
        return pd.DataFrame([row], columns=list(row))


FLOPS_CONVENTION = (
    "model FLOPs = 6*params-style matmul count with causal attention, no recompute (Megatron-Bridge's "
    "tables, Megatron-LM's logs; mfu_full_attention counts the full square, as torchtitan's logs); hardware "
    "FLOPs add recomputation; MFU/HFU against the dense bf16 peak"
)


def _scalar(v):
    return v.item() if hasattr(v, "item") else v


def _check_api_inputs(model, cluster, plan, memory_headroom, tokens, checkpoint_interval_h) -> None:
    """What plan-estimate's options validate, validated for the Python API too: one InputError
    naming the argument (never an AttributeError or a ZeroDivisionError from deep inside)."""
    import math

    from plan_search.models.io import short_repr

    def number(v) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    if not isinstance(model, (str, ModelSpec)):
        raise InputError(f"model: {short_repr(model)} is not a model name, a model file or a ModelSpec")
    if not isinstance(cluster, (str, ClusterSpec)):
        raise InputError(f"cluster: {short_repr(cluster)} is not a GPU system name, a cluster file or a ClusterSpec")
    if plan is not None and not isinstance(plan, (Plan, dict)):
        raise InputError(f"plan: {short_repr(plan)} is not a Plan or a mapping of its fields")
    if not number(memory_headroom):
        raise InputError(f"memory_headroom: {short_repr(memory_headroom)} is not a fraction in [0, 1)")
    if tokens is not None and not isinstance(tokens, str) and not number(tokens):
        raise InputError(f"tokens: {short_repr(tokens)} is not a token count (e.g. 300e9 or '300B')")
    if checkpoint_interval_h is not None and not (number(checkpoint_interval_h) and 0 < checkpoint_interval_h <= 1e6):
        raise InputError(f"checkpoint_interval_h: {short_repr(checkpoint_interval_h)} must be a number of hours "
                         "in (0, 1e6]")


def check_plan(model: ModelSpec, cluster: ClusterSpec, plan: Plan) -> None:
    """Rules that need the model and the GPU (the plan checked its own arithmetic)."""
    plan.check_against(model)
    compute.check_precision(cluster, plan.precision)  # issue 12: names the GPUs that have it


def estimate(
    model: ModelSpec | str,
    cluster: ClusterSpec | str,
    plan: Plan | dict | None = None,
    *,
    memory_headroom: float = DEFAULT_MEMORY_HEADROOM,
    tokens: float | None = None,
    checkpoint_interval_h: float | None = None,
    failure_rate: float | None = None,
    restart_minutes: float | None = None,
    async_checkpoint: bool = True,
    sets: Sequence[str] = (),
    framework: str | None = None,
    compiled: bool = True,
    plan_defaults: Callable[[Plan, ModelSpec, ClusterSpec], Plan] | None = None,
    **plan_fields,
) -> Estimate:
    """Step time, memory and run figures of one plan, with their breakdowns and the verdict.

    ``model`` and ``cluster`` are specs or names/paths (resolved as ``--model``/``--gpu``);
    ``sets`` are ``--set`` what-if overrides of the cluster. ``framework`` picks its
    kernel-efficiency profile (:func:`plan_search.hardware.profiles.for_framework`; torchtitan
    ``compiled`` or eager; None: the catalog's Megatron/Transformer Engine values). The plan is a :class:`Plan`, a dict
    of its fields, or its fields as keyword arguments (``num_gpus=8, tp=2``); ``global_batch``
    and ``seq_len`` default to the model's, as in ``plan-estimate``. ``plan_defaults(plan, model,
    cluster)`` gives the plan priced, or raises :class:`InputError` (``plan_search.estimate``
    passes the named framework's defaults for the knobs left unset and its rules, which the cost
    model cannot import: :mod:`plan_search.planner.estimate`).
    """
    _check_api_inputs(model, cluster, plan, memory_headroom, tokens, checkpoint_interval_h)
    rec = recovery_of(failure_rate, restart_minutes, async_checkpoint, checkpoint_interval_h)
    if framework is not None and not isinstance(framework, str):  # was an AttributeError deep inside
        raise InputError(f"framework: {short_repr(framework)} is not a framework name (megatron, deepspeed, "
                         "torchtitan, nemo)")
    if isinstance(tokens, str):
        from plan_search.models.io import parse_token_count

        tokens = parse_token_count(tokens, "tokens")
    if isinstance(sets, str):
        sets = [sets]
    m = resolve_model(model) if isinstance(model, str) else model
    if isinstance(cluster, str):
        c = resolve_cluster(cluster)
        c = apply_overrides(for_framework(c, framework, compiled), sets) if sets else for_framework(c, framework, compiled)
    else:
        c = for_framework(cluster, framework, compiled)
    if not 0.0 <= memory_headroom < 1.0:
        raise InputError(f"memory_headroom: {memory_headroom} must be in [0, 1)")
    if tokens is not None and not (0 < tokens < 1e18):
        raise InputError(f"tokens: {tokens} must be a positive token count below 1e18")
    if plan is None or plan_fields or isinstance(plan, dict):
        given = plan.model_dump(exclude_unset=True) if isinstance(plan, Plan) else dict(plan or {})
        both = sorted(set(given) & set(plan_fields))
        if both:
            raise InputError(f"{both[0]}: given in plan and as a keyword argument; give it once")
        fields = {**given, **plan_fields}
        fields.setdefault("global_batch", m.global_batch)
        fields.setdefault("seq_len", m.seq_len)
        plan = fields
    p = plan if isinstance(plan, Plan) else _plan_from_fields(m, plan)
    if plan_defaults is not None:
        p = plan_defaults(p, m, c)
    check_plan(m, c, p)
    x = PlanArrays.from_plans([p], m.num_layers)
    r = evaluate(m, c, x, memory_headroom=memory_headroom, tokens=tokens, recovery=rec)
    return pack(m, c, p, r, 0, tokens)


def recovery_of(failure_rate=None, restart_minutes=None, async_checkpoint=True,
                checkpoint_interval_h=None) -> "goodput.Recovery":
    """The :class:`goodput.Recovery` of the options (``failure_rate`` per 1,000 GPU-days, 0: no
    failures; ``restart_minutes``; ``async_checkpoint``; ``checkpoint_interval_h``, None: the
    optimum), each checked: one InputError naming the option."""
    import math

    def bad(v, hi):
        return isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 <= v <= hi

    if failure_rate is not None and bad(failure_rate, 1e6):
        raise InputError(f"failure_rate: {short_repr(failure_rate)} must be failures per 1,000 GPU-days in "
                         "[0, 1e6] (0 turns failures off)")
    if restart_minutes is not None and bad(restart_minutes, 1e6):
        raise InputError(f"restart_minutes: {short_repr(restart_minutes)} must be minutes in [0, 1e6]")
    if not isinstance(async_checkpoint, bool):
        raise InputError(f"async_checkpoint: {short_repr(async_checkpoint)} must be true or false")
    return goodput.Recovery(
        failures_per_1000_gpu_days=None if failure_rate is None else float(failure_rate),
        restart_s=None if restart_minutes is None else float(restart_minutes) * 60.0,
        async_checkpoint=async_checkpoint, checkpoint_interval_h=checkpoint_interval_h)


def degrees_against_model(model: ModelSpec, fields: dict) -> None:
    """The model's rules (:meth:`Plan.check_against`) on the degrees given (tp, ep, etp), the rest
    at the Plan's defaults: an InputError naming the degree when the model cannot take it. Called
    when the plan's own arithmetic refused it, so ``ep=7`` on 8 experts says "7 does not divide
    num_experts 8" rather than "make the GPUs a multiple of 7" (which would not help)."""
    given = {k: fields[k] for k in ("tp", "ep", "etp")
             if isinstance(fields.get(k), int) and not isinstance(fields.get(k), bool) and fields[k] > 0}
    if given:
        Plan.probe(**given).check_against(model)


def plan_for_model(model: ModelSpec, fields: dict, *, strict: bool = False) -> Plan:
    """The :class:`Plan` of ``fields`` for ``model``: when the plan's own arithmetic refuses it, a
    degree the model cannot take (:func:`degrees_against_model`) is the error given, else the
    plan's. The one path of plan-estimate and ``plan_search.estimate`` (``strict``: validated as
    requests are, for caller-given Python values; the CLI's are click-typed already)."""
    try:
        return Plan.model_validate(fields, strict=strict)
    except ValueError:  # pydantic's ValidationError is one
        degrees_against_model(model, fields)
        raise


def _plan_from_fields(model: ModelSpec, fields: dict) -> Plan:
    """A plan from caller-given fields, validated strictly as requests are (``tp="8"`` is not a
    count, ``True`` is not a number): one InputError naming the field, never a pydantic dump;
    a degree the model cannot take named first, as plan-estimate names it (:func:`plan_for_model`)."""
    from pydantic import ValidationError

    from plan_search.models.io import validation_message

    try:
        return plan_for_model(model, fields, strict=True)
    except ValidationError as exc:
        raise InputError(validation_message(exc, "plan")) from None


def pack(m: ModelSpec, c: ClusterSpec, p: Plan, r: dict, i: int, tokens: float | None) -> Estimate:
    """The ``i``-th candidate of an :func:`evaluate` result as an :class:`Estimate`."""
    g = lambda v: float(_scalar(v[i]))  # noqa: E731
    mem = r["memory"]
    b = r["breakdown"]
    raw = r["raw"]
    exposed = {k: g(b[k]) for k in TIME_KEYS}
    hidden = sum(g(raw[f"{k}_comm_raw_s"]) for k in ("tp", "cp", "pp", "dp", "ep")) - sum(
        exposed[f"{k}_comm_s"] for k in ("tp", "cp", "pp", "dp", "ep")
    )
    time = TimeBreakdown(**exposed, hidden_comm_s=max(hidden, 0.0), bubble_fraction=g(r["bubble_fraction"]))
    memory = MemoryBreakdown(
        peak_gib=g(r["memory_peak_gib"]),
        allocated_peak_gib=g(mem["allocated"]) / GIB,
        reserved_peak_gib=g(mem["reserved"]) / GIB,
        device_peak_gib=g(mem["device"]) / GIB,
        reserved_at_capacity_gib=g(mem["reserved_at_capacity"]) / GIB,
        releasable_slack_gib=g(mem["releasable_slack"]) / GIB,
        capacity_gib=c.gpu.memory_gib,
        usable_gib=g(r["memory_usable_gib"]),
        weights_gib=g(mem["weights"]) / GIB,
        gradients_gib=g(mem["gradients"]) / GIB,
        optimizer_gib=g(mem["optimizer"]) / GIB,
        activations_gib=g(mem["activations"]) / GIB,
        transient_gib=g(mem["transient"]) / GIB,
        zero3_gather_buffer_gib=g(mem["zero3_gather_buffer"]) / GIB,
        allocator_slack_gib=g(mem["allocator_slack"]) / GIB,
        framework_overhead_gib=g(mem["framework_overhead"]) / GIB,
        worst_stage=STAGES[int(mem["worst_stage"][i])] if p.pp > 1 else "only",
    )
    feasible = bool(r["fits"][i])
    reasons = []
    fits_device = memory.peak_gib <= memory.capacity_gib
    if not feasible and fits_device:
        reasons.append(
            f"memory: tight, not out of memory: peak {memory.peak_gib:.1f} GiB on the {memory.worst_stage} stage "
            f"fits the {memory.capacity_gib:.1f} GiB of {c.gpu.name} but not the usable {memory.usable_gib:.1f} GiB "
            f"the memory headroom keeps for the model's error (memory_headroom 0 judges on the device alone)"
        )
    elif not feasible:
        reasons.append(
            f"memory: peak {memory.peak_gib:.1f} GiB on the {memory.worst_stage} stage exceeds the usable "
            f"{memory.usable_gib:.1f} GiB of {c.gpu.name}"
        )
    if not bool(r["data_loading_ok"][i]):
        reasons.append("storage: reading the batch takes longer than the step; data loading stalls")
    if not g(r["goodput"]) > 0:  # failures come faster than a restart recovers: the run never finishes
        feasible = False
        reasons.append(
            f"failure_rate: a failure every {g(r['mtbf_s']):.3g} s on {p.num_gpus:,} GPUs against a restart and "
            f"restore of {g(r['restart_s']) + g(r['restore_s']):.3g} s: the run never finishes (goodput 0); "
            "lower failure_rate or restart_minutes")
    run = None
    if tokens:
        run = RunEstimate(
            tokens=float(tokens),
            steps=int(g(r["steps"])),
            days=g(r["days"]),
            gpu_hours=g(r["gpu_hours"]),
            cost_usd=g(r["cost_usd"]),
            energy_kwh=g(r["energy_kwh"]),
            energy_cost_usd=g(r["energy_cost_usd"]),
            checkpoint_write_s=g(r["checkpoint_write_s"]),
            checkpoint_overhead_fraction=g(r["checkpoint_overhead_fraction"]),
            data_read_s_per_step=g(r["data_read_s"]),
            data_loading_ok=bool(r["data_loading_ok"][i]),
            days_without_failures=g(r["days_without_failures"]),
            cost_usd_without_failures=g(r["cost_usd_without_failures"]),
            expected_interruptions=g(r["expected_interruptions"]),
        )
    steps_iv = int(g(r["checkpoint_interval_steps"]))
    mtbf = g(r["mtbf_s"])
    recovery = Recovery(
        failure_rate_per_1000_gpu_days=float(r["failure_rate_per_1000_gpu_days"]),
        failure_rate_source=str(r["failure_rate_source"]),
        mtbf_h=mtbf / 3600.0 if mtbf < float("inf") else None,
        restart_s=g(r["restart_s"]), restore_s=g(r["restore_s"]), async_checkpoint=bool(r["async_checkpoint"]),
        checkpoint_save_blocking_s=g(r["checkpoint_save_blocking_s"]),
        checkpoint_interval_given=bool(r["checkpoint_interval_given"]),
        framework_settings=goodput.framework_settings(steps_iv, bool(r["async_checkpoint"])),
    )
    return Estimate(
        model=m.name,
        cluster=c.name,
        plan=p,
        params=counting.total_params(m),
        step_time_s=g(r["step_s"]),
        tokens_per_s=g(r["tokens_per_s"]),
        tokens_per_s_per_gpu=g(r["tokens_per_s_per_gpu"]),
        model_tflops_per_gpu=g(r["model_tflops_per_gpu"]),
        hardware_tflops_per_gpu=g(r["hardware_tflops_per_gpu"]),
        mfu=g(r["mfu"]),
        mfu_full_attention=g(r["mfu_full_attention"]),
        mfu_convention=MFU_CONVENTION,
        hfu=g(r["hfu"]),
        flops_convention=FLOPS_CONVENTION,
        feasible=feasible,
        fits_device=fits_device,
        bottleneck=str(r["bottleneck"][i]),
        reasons=reasons,
        comm_ratio=g(r["comm_ratio"]),
        power_kw=g(r["power_kw"]),
        memory=memory,
        time=time,
        goodput=g(r["goodput"]),
        checkpoint_interval_s=g(r["checkpoint_interval_s"]),
        checkpoint_interval_steps=steps_iv,
        badput=Badput(**{k: g(v) for k, v in r["badput"].items()}),
        recovery=recovery,
        run=run,
        efficiency=c.efficiency,
    )
