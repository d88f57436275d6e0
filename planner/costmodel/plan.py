"""The execution document: one parallel plan, the single source of truth for its degrees.

Terms (Megatron-LM's, Narayanan et al. 2021; Korthikanti et al. 2022):

- ``tp`` tensor-parallel degree: each layer's matrices split over ``tp`` GPUs (all-reduce or,
  with sequence parallelism, reduce-scatter/all-gather per layer).
- ``cp`` context-parallel degree: the sequence split over ``cp`` GPUs (ring exchange of K/V).
- ``dp`` data-parallel degree: model replicas (or ZeRO shards) over which the batch is split.
- ``pp`` pipeline-parallel degree: layers split into ``pp`` stages; ``vpp`` virtual stages
  (model chunks) per GPU for the interleaved 1F1B schedule (``vpp = 1``: plain 1F1B).
- ``num_gpus = tp * cp * dp * pp``. Ranks are laid out as Megatron does: tp innermost, then cp,
  then dp, then pp; so a tp group occupies consecutive GPUs of a node, and a pp group strides
  ``tp*cp*dp`` ranks.
- ``micro_batch`` sequences per micro-batch per replica; ``global_batch`` sequences per
  optimizer step; ``grad_accum = global_batch / (dp * micro_batch)`` micro-batches per step.
- ``zero``: 0 plain data parallel; 1 optimizer states sharded (Megatron's
  ``--use-distributed-optimizer`` is stage 1, with fp32 gradient accumulation: ``fp32_grads``);
  2 gradients sharded too; 3 parameters sharded too (FSDP / ZeRO-3).
- ``recompute``: ``none``; ``selective`` (the attention core, Korthikanti et al.); ``full``
  (each layer's forward redone in the backward). ``recompute_layers`` limits full recomputation
  to that many layers per pipeline stage (Megatron ``--recompute-method block``).
- ``first_stage_layers`` / ``last_stage_layers``: uneven pipeline split (Megatron
  ``--decoder-first/last-pipeline-num-layers``); the rest are shared evenly by middle stages.
- Mixture of experts (Megatron-Core "parallel folding", Liu et al. 2025, arXiv 2504.14960; MCore
  ``parallel_state.initialize_model_parallel`` builds a second rank grid for the expert layers):
  the ``tp * cp * dp`` GPUs of one pipeline stage are regrouped for the expert MLPs as
  ``etp x ep x edp`` (innermost first): ``ep`` expert-parallel degree (each rank holds
  ``num_experts / ep`` experts), ``etp`` expert tensor-parallel degree (each expert's matrices
  split over ``etp`` GPUs), ``edp = tp*cp*dp / (etp*ep)`` expert data-parallel replicas, over which
  the expert gradients are reduced and the expert optimizer states sharded. Attention and dense
  layers keep ``tp x cp x dp``.
"""

from __future__ import annotations

import typing
from functools import lru_cache
from typing import TYPE_CHECKING, Literal

from pydantic import ConfigDict, Field, model_validator

from plan_search.models.io import InputError, NoBoolNumbers

if TYPE_CHECKING:  # only annotations name it: the command-line options read Plan without it (start-up)
    from plan_search.models.spec import ModelSpec

RECOMPUTE_CODES = {"none": 0, "selective": 1, "full": 2}
#: Precision recipe -> PlanArrays ``fp8`` code (0: 16-bit GEMMs; nonzero: low-precision GEMMs).
#: ``fp8`` is an alias of ``fp8-delayed`` (Transformer Engine's default DelayedScaling recipe and
#: Megatron's ``--fp8-recipe`` default ``delayed``; NeMo 24.07 ran it). The recipes' costs are in
#: :mod:`planner.costmodel.compute` (``RECIPES``).
PRECISION_CODES = {"bf16": 0, "fp16": 0, "fp8": 1, "fp8-delayed": 1, "fp8-current": 2, "mxfp8": 3, "nvfp4": 4}
Precision = Literal["bf16", "fp16", "fp8", "fp8-delayed", "fp8-current", "mxfp8", "nvfp4"]
#: Transformer layers kept in bf16 by default, per recipe (Megatron ``--first-last-layers-bf16``
#: with ``--num-layers-at-start/end-in-bf16``): Megatron-Bridge ``mixed_precision.py`` recipes --
#: ``bf16_with_fp8_current_scaling_mixed`` keeps the first and the last layer in bf16; the delayed
#: recipe cannot (Megatron-Core ``fp8_utils.py`` asserts it), ``bf16_with_mxfp8_mixed`` keeps none;
#: NVFP4: the NVFP4 pretraining recipe keeps ~15% of the linear layers, mostly the last ones, in
#: bf16 (NVIDIA 2025, arXiv 2509.25149 Sec. 4; Megatron-Bridge's Nemotron-3-Super NVFP4 recipe
#: keeps the last 14), so ``ceil(0.15 * layers)``.
BF16_LAYERS_DEFAULT = {"fp8-current": lambda layers: min(2, layers), "nvfp4": lambda layers: -(-15 * layers // 100)}


def bf16_layers_of(precision: str, bf16_layers: int | None, num_layers: int) -> int:
    """Transformer layers whose GEMMs stay in bf16 under ``precision`` (0 for bf16/fp16)."""
    if PRECISION_CODES[precision] == 0:
        return 0
    if bf16_layers is not None:
        return min(bf16_layers, num_layers)
    rule = BF16_LAYERS_DEFAULT.get(precision)
    return rule(num_layers) if rule else 0
#: Megatron-Core's ``--recompute-modules`` (megatron/training/arguments.py; transformer_config.py
#: ``recompute_modules``), in the order Megatron lists them; a plan names a set joined by ``+``.
RECOMPUTE_MODULES = ("core_attn", "mlp", "moe", "moe_act", "layernorm", "mla_up_proj", "shared_experts")
#: The sets ``Plan.recompute_modules`` takes: each module alone and the combinations published recipes run
#: (the MoE README's fine-grained set, the Megatron-MoE-ModelZoo's "layernorm, moe" and "norm, act", NeMo's
#: "core_attn, mlp"), in :data:`RECOMPUTE_MODULES` order.
RECOMPUTE_MODULE_SETS = (
    "core_attn", "mlp", "moe", "moe_act", "layernorm", "mla_up_proj", "shared_experts",
    "core_attn+mlp", "core_attn+layernorm", "mlp+layernorm", "moe+layernorm", "moe_act+layernorm",
    "layernorm+mla_up_proj", "moe_act+layernorm+mla_up_proj", "moe_act+layernorm+shared_experts",
    "moe+layernorm+mla_up_proj", "moe_act+layernorm+mla_up_proj+shared_experts", "core_attn+moe_act+layernorm",
    "core_attn+moe_act+layernorm+mla_up_proj", "core_attn+mlp+layernorm")
RecomputeModules = Literal[RECOMPUTE_MODULE_SETS]  # type: ignore[valid-type]


def canonical_modules(text: str) -> str:
    """A module set in its one spelling: the names split on ``+``, ``,`` or spaces, deduplicated and put in
    :data:`RECOMPUTE_MODULES` order (``moe, layernorm`` -> ``moe+layernorm``); unknown names kept, for the
    field to refuse."""
    import re as _re

    parts = [q for q in _re.split(r"[+,\s]+", text.strip().lower().replace("-", "_")) if q]
    known = [m for m in RECOMPUTE_MODULES if m in parts]
    return "+".join(known + [q for q in dict.fromkeys(parts) if q not in RECOMPUTE_MODULES])


#: Megatron-Core's fine-grained activation offloading (``--fine-grained-activation-offloading
#: --offload-modules``; docs "Fine-grained Activation Offloading": each module's *input* goes to host memory
#: in the forward and comes back before its backward), in Megatron's order; a plan names a set joined by +.
OFFLOAD_MODULES = ("attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act")
OFFLOAD_MODULE_SETS = (
    "attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act",
    "expert_fc1+moe_act", "core_attn+expert_fc1", "core_attn+attn_proj", "core_attn+attn_proj+expert_fc1",
    "core_attn+expert_fc1+moe_act", "core_attn+attn_proj+expert_fc1+moe_act",
    "attn_norm+core_attn+attn_proj+mlp_norm+expert_fc1+moe_act",
    "attn_norm+qkv_linear+core_attn+attn_proj+mlp_norm+expert_fc1+moe_act")
OffloadModules = Literal[OFFLOAD_MODULE_SETS]  # type: ignore[valid-type]


def canonical_offload(text: str) -> str:
    """An offload module set in its one spelling (as :func:`canonical_modules`)."""
    import re as _re

    parts = [q for q in _re.split(r"[+,\s]+", text.strip().lower().replace("-", "_")) if q]
    known = [m for m in OFFLOAD_MODULES if m in parts]
    return "+".join(known + [q for q in dict.fromkeys(parts) if q not in OFFLOAD_MODULES])


def offload_mask(modules: str | None) -> int:
    """``PlanArrays.off_mod`` of an offload module set (bit ``i`` for :data:`OFFLOAD_MODULES` ``[i]``)."""
    if not modules:
        return 0
    parts = modules.split("+")
    return sum(1 << i for i, m in enumerate(OFFLOAD_MODULES) if m in parts)


def module_mask(modules: str | None) -> int:
    """``PlanArrays.rc_mod`` of a module set: bit ``i`` for :data:`RECOMPUTE_MODULES` ``[i]``; 0 for None
    (the model's default set, planner/costmodel/recompute.py)."""
    if not modules:
        return 0
    parts = modules.split("+")
    return sum(1 << i for i, m in enumerate(RECOMPUTE_MODULES) if m in parts)


DISPATCHER_CODES = {"alltoall": 0, "allgather": 1, "flex": 2}
#: Plan.pp_schedule -> PlanArrays ``pp_sched`` (0: 1F1B, interleaved when vpp > 1; 1: DualPipe).
PP_SCHEDULE_CODES = {"1f1b": 0, "dualpipe": 1}
GRAD_REDUCE_CODES = {"default": 0, "step": 1, "microbatch": 2}
#: Bytes of each Adam moment per parameter by Plan.adam_moments_dtype (fp32 4, bf16 2).
MOMENT_BYTES = {"fp32": 4.0, "bf16": 2.0}
#: Bytes per parameter of the optimizer's master weights by Plan.master_weights: fp32 4 (with bf16
#: Adam moments too: DeepSeek-V3 report Sec. 3.3.3 keeps master weights in FP32; Megatron-Core's
#: precision-aware optimizer defaults --main-params-dtype fp32), bf16_remainder 2 (its
#: ``store_param_remainders`` on bf16 weights: megatron/core/optimizer/distrib_optimizer.py@d98e8a64
#: allocates ``master_param`` as int16 when ``store_param_remainders and bf16``; optimizer_config.py:
#: default True), none 0 (the optimizer steps the bf16 parameters).
MASTER_WEIGHT_BYTES = {"fp32": 4.0, "bf16_remainder": 2.0, "none": 0.0}
#: Plan.cross_entropy coded for PlanArrays.ce (memory.LOSS_BYTES_PER_LOGIT is indexed by it).
CROSS_ENTROPY_CODES = {"pytorch": 0, "megatron": 1, "te": 2, "pytorch_bf16": 3}
#: Plan.cudnn_sdpa -> PlanArrays.sdpa (an index of compute.CUDNN_SDPA_SPEEDUP).
CUDNN_SDPA_CODES = {"9.1": 0, "9.19": 1}


def grad_per_microbatch(code, zero, pp):
    """Gradient reduction every micro-batch (else once per step), for ``grad_reduce`` coded as
    :data:`GRAD_REDUCE_CODES` (scalars or numpy arrays). The default by ZeRO stage: 0/1 once per
    step (DDP ``no_sync`` and Megatron's ``no_sync_func`` on all but the last micro-batch;
    DeepSpeed reduces at the accumulation boundary: ``stage_1_and_2.py``
    ``reduce_ready_partitions_and_remove_grads`` reduces only ``if self.partition_gradients or
    self.is_gradient_accumulation_boundary``, DeepSpeed commit 022f2236); 2 every micro-batch (the
    same condition: partitioned gradients are reduced on each backward); 3 every micro-batch
    (FSDP2 reduce-scatters in each backward) except with pipeline parallelism, where
    torch.distributed.pipelining calls ``set_requires_gradient_sync(last_backward)`` so the
    reduce-scatter runs once, on the last backward (``stage.py backward_maybe_with_nosync``)."""
    default = (zero == 2) | ((zero == 3) & (pp == 1))
    return ((code == 0) & default) | (code == 2)


@lru_cache(maxsize=None)
def choice_fields() -> dict[str, tuple[str, ...]]:
    """Plan's choice knobs (its ``Literal`` fields, optional or not) and their values."""
    out = {}
    for name, field in Plan.model_fields.items():
        ann = field.annotation
        if typing.get_origin(ann) is not Literal:  # Literal[...] | None
            ann = next((a for a in typing.get_args(ann) if typing.get_origin(a) is Literal), None)
        if ann is not None:
            out[name] = tuple(typing.get_args(ann))
    return out


def _folded(text: str) -> str:
    return text.strip().lower().replace("-", "_")


@lru_cache(maxsize=None)
def _spellings(name: str, extra: tuple[str, ...] = ()) -> dict[str, str]:
    """Folded spelling -> the one spelling, of choice knob ``name`` (and ``extra`` values): built once
    (every Plan the search rebuilds asks for each of its choice knobs)."""
    return {_folded(c): c for c in choice_fields()[name] + tuple(extra)}


def canonical_choices(data, extra: dict[str, tuple[str, ...]] | None = None):
    """``data`` (a mapping of plan knobs to a value or a list of values) with the text of each choice
    knob in its one spelling: stripped and matched without regard to case or to ``-`` against ``_``
    (``FLEX``, `` Flex `` -> ``flex``; ``BF16-REMAINDER`` -> ``bf16_remainder``, ``fp8_current`` ->
    ``fp8-current``: no two choices differ only so). The one place choice text is normalised: :class:`Plan` (the API, plan-estimate), the
    search's ``Knobs`` (plan-search, JSON requests, sweeps) and the option parser all call it. A text
    that is no choice is left as given, for the field to refuse naming the choices. ``extra``: more
    values of a knob that a caller takes (the search's recompute ``partial``)."""
    if not isinstance(data, dict):
        return data
    fields = choice_fields()
    out = None
    for k, v in data.items():
        if k not in fields:
            continue
        spelled = _spellings(k, (extra or {}).get(k, ()))

        def one(x):
            if k == "recompute_modules" and isinstance(x, str):
                return canonical_modules(x)
            if k == "offload_modules" and isinstance(x, str):
                return canonical_offload(x)
            return spelled.get(_folded(x), x) if isinstance(x, str) else x

        w = [one(x) for x in v] if isinstance(v, (list, tuple)) else one(v)
        if w != v:
            out = dict(data) if out is None else out
            out[k] = w
    return data if out is None else out


def expert_grid_problem(ep: int, etp: int, gpus: int, where: str, more: str) -> str | None:
    """Why ``gpus`` GPUs (``where``: which ones) cannot be regrouped for the expert layers as
    ``etp x ep x edp`` (parallel folding: ``etp * ep`` must divide them), as one line naming the
    fields and the fix (``more``: the caller's other way out); None when they can. The one statement
    of the rule: :class:`Plan` (every plan priced) and the search's empty-space explanation (forced
    ``ep``/``etp``) both give it."""
    prod = ep * etp
    if gpus % prod == 0:
        return None
    how = "exceeds" if prod > gpus else "does not divide"
    fix = (f"lower ep or etp so that etp*ep divides {gpus}" if prod > gpus else
           f"use ep and etp whose product divides {gpus}")
    # the field named is the one at fault: etp when it alone breaks the rule (ep 1, or etp not
    # dividing the GPUs while ep does), else ep
    field = "etp" if etp > 1 and (ep == 1 or (gpus % etp and not gpus % ep)) else "ep"
    return (f"{field}: etp*ep = {etp}*{ep} = {prod} {how} the {gpus} GPUs {where}, which the expert layers "
            f"regroup as etp x ep x edp; {fix}, {more}")


def pad_capacity_problem(model: ModelSpec) -> str | None:
    """Why ``moe_pad_to_capacity`` cannot run on ``model`` (one line naming the knob and the fix), or
    None: padding needs a capacity, the model's ``moe_capacity_factor``. Plan.check_against
    (plan-estimate, ``plan_search.estimate``) and the search's enumeration (plan-search, requests,
    sweeps) give it. On a dense model it changes nothing and is accepted, as every MoE knob is."""
    if not model.is_moe or model.moe_capacity_factor is not None:
        return None
    return (f"moe_pad_to_capacity: {model.name} routes dropless (no moe_capacity_factor), so there is no capacity "
            "to pad to; set moe_capacity_factor in the model or drop moe_pad_to_capacity")


def max_imbalance(num_experts, experts_per_token, ep):
    """The largest ``moe_imbalance`` (busiest expert rank's rows / the mean rank's) that ``ep`` expert
    ranks can hold: the busiest rank holds ``E/ep`` experts and gets at most ``min(k, E/ep)`` of each
    token's ``k`` copies (they go to distinct experts), the mean rank ``k/ep``; so
    ``min(k, E/ep) * ep / k = min(ep, E/k)``. One expert per rank (ep = E), top-2: ``E/2`` (8 experts: 4x);
    ``E/k`` is the most any layout holds. Scalars or arrays (the cost model's :func:`experts.imbalance`
    prices the given imbalance capped at it)."""
    import numpy as np

    return np.minimum(ep, num_experts / experts_per_token)


def imbalance_bound_problem(model: ModelSpec, imbalance: float) -> str | None:
    """Why ``moe_imbalance`` cannot happen on ``model`` (one line naming the field and the bound), or None:
    above ``E/k`` (:func:`max_imbalance` at one expert per rank) no layout's busiest rank can hold it.
    Plan.check_against (plan-estimate, an imbalance its user set) and the search's enumeration (plan-search,
    requests, sweeps: the imbalances given) give it."""
    if not model.is_moe:
        return None
    bound = float(max_imbalance(model.num_experts, model.experts_per_token, model.num_experts))
    if imbalance <= bound:
        return None
    return (f"moe_imbalance: {imbalance:g} exceeds {bound:g}, the most {model.name}'s experts can hold (the busiest "
            f"expert takes every token at most: num_experts {model.num_experts} / experts_per_token "
            f"{model.experts_per_token}); give at most {bound:g}")


def routing_imbalance_problem(routing: str, imbalance: float) -> str | None:
    """Why ``moe_imbalance`` cannot be given with ``moe_routing`` (one line naming both and the fix), or
    None: round-robin routing gives every expert the same rows, so an imbalance other than 1 would be
    ignored. The one statement of the rule: :class:`Plan` (an imbalance its user set) and the search's
    knobs (a set of routings and imbalances: plan-search, requests, sweeps) both give it."""
    if routing != "round_robin" or imbalance == 1.0:
        return None
    return (f"moe_imbalance: {imbalance:g} with moe_routing round_robin, which is balanced by construction (every "
            "expert the same rows, so the imbalance would be ignored); drop moe_imbalance (or set it to 1), or use "
            "moe_routing topk")


class Plan(NoBoolNumbers):
    """A parallel execution plan; validates its own arithmetic on construction."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)  # schema built on first use: fast CLI start

    num_gpus: int = Field(gt=0, le=10_000_000)
    tp: int = Field(default=1, gt=0, le=100_000, description="tensor-parallel degree (GPUs each layer's matrices are split over)")
    pp: int = Field(default=1, gt=0, le=100_000, description="pipeline-parallel degree (stages)")
    dp: int | None = Field(default=None, gt=0, le=10_000_000, description="default num_gpus/(tp*pp*cp)")
    cp: int = Field(default=1, gt=0, le=100_000, description="context-parallel degree (GPUs the sequence is split over)")
    vpp: int = Field(default=1, gt=0, le=10_000, description="virtual pipeline stages per GPU (interleaved 1F1B; 1 = plain 1F1B)")
    zero: int = Field(default=1, ge=0, le=3, description="ZeRO stage: 0 none, 1 optimizer states sharded (Megatron distributed optimizer), 2 +gradients, 3 +parameters (FSDP)")
    micro_batch: int = Field(default=1, gt=0, le=1_000_000, description="sequences per micro-batch per replica")
    global_batch: int = Field(gt=0, le=100_000_000)
    seq_len: int = Field(gt=0, le=100_000_000)
    recompute: Literal["none", "selective", "full"] = Field(default="selective", description="activation recomputation: none, selective (attention core), full (whole layers)")
    recompute_layers: int | None = Field(default=None, ge=0, description="with recompute full: layers per stage recomputed (default all)")
    recompute_modules: RecomputeModules | None = Field(
        default=None, description="with recompute selective: Megatron's --recompute-modules joined by + (core_attn, "
        "mlp, moe, moe_act, layernorm, mla_up_proj, shared_experts); default core_attn on a dense model, "
        "moe_act+layernorm+mla_up_proj on a MoE or MLA one (planner/costmodel/recompute.py)")
    sequence_parallel: bool = Field(default=True, description="sequence parallelism with tp > 1 (Korthikanti et al. 2022)")
    flash_attention: bool = Field(default=True, description="FlashAttention kernels (no stored attention scores)")
    cudnn_sdpa: Literal["9.1", "9.19"] = Field(
        default="9.19", description="cuDNN release behind Transformer Engine's fused attention on Hopper (H100/H200/"
        "H800): 9.19 (TE 2.x containers of 2025-26, today's) or 9.1 (the 2024 TE 1.x containers the H100 "
        "efficiencies were fitted on, whose rows state it; 9.19 runs its attention faster by "
        "planner.costmodel.compute.CUDNN_SDPA_SPEEDUP, NVIDIA's measurement); no effect on other GPUs or outside "
        "TE kernels")
    fp8_attention: bool = Field(
        default=False, description="run the attention core (QK^T, softmax, PV) in FP8: Transformer Engine's FP8 "
        "dot-product attention (Megatron --fp8-dot-product-attention), inside a low-precision recipe; on Blackwell "
        "at NVIDIA's measured cuDNN FP8/BF16 attention ratio for the sequence length "
        "(planner.costmodel.compute.FP8_SDPA_SPEEDUP, 0.87x at 512 tokens to 1.37x at 128K), elsewhere at the "
        "bf16 rate (no published measurement)")
    precision: Precision = Field(
        default="bf16", description="GEMM precision recipe: bf16, fp16, fp8 (= fp8-delayed), fp8-current "
        "(per-tensor current scaling), mxfp8 (block-scaled, Blackwell), nvfp4 (Blackwell)")
    bf16_layers: int | None = Field(
        default=None, ge=0, le=100_000, description="transformer layers whose GEMMs stay bf16 under a low-precision "
        "recipe (Megatron --first-last-layers-bf16); default per recipe: fp8-current 2, nvfp4 15% of layers, else 0")
    lowp_params: bool = Field(
        default=True, description="FP8/MXFP8 recipes keep the weights only as quantized copies (Megatron "
        "--fp8-param-gather, as Megatron-Bridge's recipes do): no bf16 weight buffer beside them; nvfp4 always keeps it")
    fp32_grads: bool = Field(default=True, description="fp32 gradient accumulation/reduction (Megatron)")
    overlap_grad_reduce: bool = Field(default=True, description="overlap the data-parallel gradient reduction with the backward")
    overlap_param_gather: bool = Field(default=True, description="overlap the ZeRO/FSDP parameter all-gather with compute")
    overlap_tp_comm: bool = Field(default=False, description="overlap tensor-parallel communication with GEMMs (TE userbuffers; Megatron-LM default off)")
    first_stage_layers: int | None = Field(default=None, gt=0, description="layers on the first pipeline stage (uneven split; default even)")
    last_stage_layers: int | None = Field(default=None, gt=0, description="layers on the last pipeline stage (uneven split; default even)")
    ep: int = Field(default=1, gt=0, le=100_000,
                    description="expert-parallel degree: GPUs the routed experts are spread over (MoE only)")
    etp: int = Field(default=1, gt=0, le=100_000,
                     description="expert tensor-parallel degree: GPUs each expert's matrices are split over")
    moe_dispatcher: Literal["alltoall", "allgather", "flex"] = Field(
        default="alltoall", description="token dispatcher: alltoall, allgather (AG/RS), flex (DeepEP, NIC-deduplicated)")
    moe_overlap: bool = Field(
        default=False, description="hide dispatch/combine behind other micro-batches' compute (ep_overlap of it)")
    moe_grouped_gemm: Literal["loop", "fused"] = Field(
        default="loop", description="how a MoE layer's local experts' GEMMs run: loop (Transformer Engine's "
        "GroupedLinear, Megatron-Core's --moe-grouped-gemm: one cuBLAS GEMM per local expert, each adding the "
        "efficiency's grouped_gemm_call_s) or fused (one kernel for every local expert: TE's CuTe-DSL fused grouped "
        "MLP, NVTE_CUTEDSL_FUSED_GROUPED_MLP=1 with --use-transformer-engine-op-fuser, Blackwell MXFP8/NVFP4; "
        "torchtitan's torch._grouped_mm)")
    moe_imbalance: float = Field(
        default=1.1, ge=1.0, le=100.0, allow_inf_nan=False,
        description="tokens on the busiest expert rank / mean; 1.0 force-balanced, real routing 1.04-1.20")
    moe_routing: Literal["topk", "round_robin"] = Field(
        default="topk", description="how tokens pick their experts: topk (the router's top-k of its scores; "
        "Megatron's force balancing draws random scores, so each token's k experts are spread uniformly) or "
        "round_robin (token i takes experts (i*k + j) mod E, j < k: k consecutive experts, every expert the same "
        "rows: moe_imbalance 1, another is refused; NeMo AutoModel's fake_balanced_gate, torchtitan's "
        "debug.moe_force_load_balance): a token then reaches ~k/(E/ep) expert-parallel ranks and one NVLink domain")
    moe_pad_to_capacity: bool = Field(
        default=False, description="pad every expert's tokens to its capacity (the model's moe_capacity_factor times "
        "the balanced share; Megatron --moe-pad-expert-input-to-capacity): the padding rows are dispatched and "
        "computed, but the token counts are known without a device-to-host sync, so the local experts' GEMM "
        "launches overlap the GPU's work; needs a moe_capacity_factor, not with moe_dispatcher flex")
    pp_schedule: Literal["1f1b", "dualpipe"] = Field(
        default="1f1b", description="pipeline schedule: 1f1b (interleaved when vpp > 1) or dualpipe (DeepSeek-V3's "
        "bidirectional schedule, arXiv 2412.19437 Sec. 3.2.1: two stages per GPU (2x weights, pp+1 micro-batches of "
        "activations), bubble (pp/2-1)(F&B+B-3W), EP all-to-all and PP sends under the paired micro-batch's compute); "
        "dualpipe needs an even pp, vpp 1 and an even number of micro-batches")
    # (issue 12: pipeline-split accounting and data-parallel knobs)
    account_for_embedding_in_pipeline_split: bool = Field(
        default=False, description="count the input embedding as one layer of the first stage when splitting "
        "(Megatron --account-for-embedding-in-pipeline-split)")
    account_for_loss_in_pipeline_split: bool = Field(
        default=False, description="count the output layer and loss as one layer of the last stage when splitting "
        "(Megatron --account-for-loss-in-pipeline-split)")
    dp_shard: int | None = Field(
        default=None, gt=0, le=10_000_000, description="GPUs per ZeRO/FSDP shard group (HSDP; Megatron distributed-"
        "optimizer instances = dp/dp_shard): the dp/dp_shard replicas all-reduce the shards; default dp (flat)")
    grad_reduce: Literal["default", "step", "microbatch"] = Field(
        default="default", description="gradient reduction under accumulation: once per step or every micro-batch; "
        "default: ZeRO 0/1 per step, 2/3 per micro-batch (ZeRO-3 with pp > 1 per step, as torch pipelining does)")
    # (issue 11: memory knobs)
    reshard_after_forward: bool = Field(
        default=True, description="ZeRO-3/FSDP: free each module's gathered parameters after its forward and "
        "gather them again for the backward (FSDP2 reshard_after_forward); off keeps the stage's bf16 "
        "parameters gathered from forward to backward (+2 B/param of the stage, no backward all-gather)")
    grad_bf16_copy: bool = Field(
        default=False, description="bf16 gradients kept beside the fp32 accumulator (needs fp32_grads; "
        "DeepSpeed BF16_Optimizer / Megatron-DeepSpeed): +2 B/param, sharded like the gradients")
    optimizer_offload: bool = Field(
        default=False, description="optimizer states (fp32 master weights and Adam moments, 12 B/param of the "
        "shard) in host memory, stepped on the CPU (ZeRO-Offload); costs the gradient and parameter copies "
        "over PCIe/C2C and the CPU step every step")
    activation_offload: bool = Field(
        default=False, description="stored layer activations copied to host memory in the forward and back in "
        "the backward (two layers' worth stay on the GPU); costs the copies over PCIe/C2C that compute "
        "does not hide")
    offload_modules: OffloadModules | None = Field(
        default=None, description="Megatron's fine-grained activation offloading: the modules whose inputs go to "
        "host memory in the forward and come back for the backward (attn_norm, qkv_linear, core_attn, attn_proj, "
        "mlp_norm, expert_fc1, moe_act joined by +); two layers' worth stay on the GPU; costs the copies over "
        "PCIe/C2C that compute does not hide (planner/costmodel/offload.py)")
    adam_moments_dtype: Literal["fp32", "bf16"] = Field(
        default="fp32", description="dtype of Adam's two moments: fp32 (Megatron-Core's default, --exp-avg-dtype/"
        "--exp-avg-sq-dtype fp32) or bf16 (its --use-precision-aware-optimizer; DeepSeek-V3 report Sec. 3.3.3): "
        "optimizer states 4 + 2 x 4 = 12 B/param or 4 + 2 x 2 = 8 B/param (fp32 master weights kept)")
    cp_comm_type: Literal["p2p", "a2a", "allgather"] = Field(
        default="p2p", description="how context parallelism exchanges the sequence (Megatron --cp-comm-type): p2p "
        "ring attention passing K/V chunks under the attention (the default), allgather K/V gathered before the "
        "attention, a2a Ulysses all-to-all of Q/K/V and the output (heads split over cp); no effect at cp 1")
    optimizer: Literal["adam", "muon"] = Field(
        default="adam", description="adam (AdamW on every parameter: master weights and two moments) or muon "
        "(Megatron-LM --optimizer muon: the hidden layers' weights keep one momentum buffer and are "
        "orthogonalised by 5 Newton-Schulz iterations every step; embeddings, output layer and norms stay "
        "on Adam; planner/costmodel/muon.py)")
    act_fp8_input_store: bool = Field(
        default=False, description="the gated MLPs' activation (SwiGLU) inputs kept for the backward as FP8, 1 B "
        "instead of 2 B per element, in dense, shared and routed experts' MLPs (Megatron-Core "
        "activation_func_fp8_input_store; DeepSeek-V3 report Sec. 3.3.3); no effect on ungated MLPs")
    act_clamp_fused: bool = Field(
        default=False, description="a clamped gated activation (model activation_clamp, GPT-OSS) clamps inside "
        "the fused activation kernel (NeMo AutoModel's torch.compile'd quick_geglu_deepep) instead of eager "
        "chunk/clamp/cat passes before it (Megatron-Core weighted_bias_quick_geglu_impl: +16 B forward, "
        "+20 B backward per routed row and expert-FFN column); no effect without activation_clamp")
    yarn_rope_fused: bool = Field(
        default=False, description="a YaRN rotary embedding (model rope_scaling yarn, outside MLA: GPT-OSS) runs "
        "in Transformer Engine's fused RoPE kernel (NeMo AutoModel's rope_fusion) instead of Megatron-Core's "
        "unfused PyTorch ops (Megatron-LM and Megatron-Bridge turn rope fusion off for yarn positions: +20 B "
        "forward, +12 B backward per query/key element); no effect without rope_scaling yarn")
    cross_entropy: Literal["pytorch", "pytorch_bf16", "megatron", "te"] = Field(
        default="pytorch", description="loss implementation, bytes per logit at the loss: pytorch (unfused "
        "cross_entropy on fp32 logits, torchtitan's: 4 stored + 8 at its backward), pytorch_bf16 (the same on "
        "bf16 logits: 2 + 4), megatron (Megatron-Core vocab_parallel_cross_entropy, in place on an fp32 copy: "
        "4 + 2), te (Transformer Engine parallel_cross_entropy, gradient written into the bf16 logits: 2 + 0)")
    master_weights: Literal["fp32", "bf16_remainder", "none"] = Field(
        default="fp32", description="the optimizer's master weights, B/param of its shard: fp32 4 (Megatron, "
        "DeepSpeed, FSDP2 on fp32 parameters), bf16_remainder 2 (Megatron-Core's precision-aware optimizer "
        "on bf16 weights: the low 16 bits beside the bf16 weight, store_param_remainders), none 0 (torch Adam "
        "stepping a bf16 model; its moments then bf16: set adam_moments_dtype bf16)")


    @classmethod
    def probe(cls, **fields) -> "Plan":
        """A Plan of ``fields``, every other knob at its default, built without validation: a probe
        that reads one knob's encoding or one rule (it need not be a runnable plan)."""
        return cls.model_construct(**{**{k: f.default for k, f in cls.model_fields.items()}, **fields})

    @model_validator(mode="before")
    @classmethod
    def _choices(cls, data):
        return canonical_choices(data)

    @model_validator(mode="before")
    @classmethod
    def _fill_dp(cls, data):
        if isinstance(data, dict) and data.get("dp") is None:
            try:
                n, t, p, c = (int(data.get(k, 1)) for k in ("num_gpus", "tp", "pp", "cp"))
            except (TypeError, ValueError, OverflowError):  # inf: pydantic names the field
                return data
            if t > 0 and p > 0 and c > 0 and n % (t * p * c) == 0:
                data = dict(data, dp=n // (t * p * c))
        return data

    @model_validator(mode="after")
    def _check_degrees(self) -> "Plan":
        if self.dp is None or self.tp * self.pp * self.dp * self.cp != self.num_gpus:
            raise ValueError(
                f"num_gpus: tp*pp*cp ({self.tp}*{self.pp}*{self.cp}) must divide num_gpus "
                f"{self.num_gpus} and tp*pp*dp*cp must equal it"
                + (f" (dp={self.dp})" if self.dp else "")
            )
        if self.global_batch % (self.dp * self.micro_batch):
            raise ValueError(
                f"global_batch: {self.global_batch} is not divisible by dp*micro_batch "
                f"({self.dp}*{self.micro_batch}); pick a multiple of {self.dp * self.micro_batch}"
            )
        if self.vpp > 1 and self.pp == 1:
            raise ValueError("vpp: interleaved stages need pp > 1; set vpp 1 or raise pp")
        if self.vpp > 1 and self.grad_accum % self.pp:
            raise ValueError(
                f"vpp: the interleaved schedule needs grad_accum ({self.grad_accum}) to be a multiple "
                f"of pp ({self.pp}); change global_batch/micro_batch or use vpp 1"
            )
        if self.pp_schedule == "dualpipe" and (self.pp % 2 or self.vpp > 1 or self.grad_accum % 2):
            broken = [what for what, bad in ((f"an even pp (got {self.pp})", self.pp % 2),
                                             (f"vpp 1 (got {self.vpp})", self.vpp > 1),
                                             (f"an even number of micro-batches (got {self.grad_accum})",
                                              self.grad_accum % 2)) if bad]  # only the conditions it breaks
            raise ValueError(f"pp_schedule: dualpipe needs {' and '.join(broken)}; use pp_schedule 1f1b or "
                             "change " + ("them" if len(broken) > 1 else "it"))
        if self.seq_len % (2 * self.cp) and self.cp > 1:
            raise ValueError(
                f"seq_len: {self.seq_len} must be divisible by 2*cp ({2 * self.cp}) for load-balanced "
                "context parallelism"
            )
        if self.cp > 1 and not self.flash_attention:
            raise ValueError("cp: context parallelism needs flash_attention on")
        if self.sequence_parallel and self.tp == 1:
            object.__setattr__(self, "sequence_parallel", False)
        if self.pp == 1 and (self.first_stage_layers is not None or self.last_stage_layers is not None):
            raise ValueError("first_stage_layers: an uneven split needs pp > 1; drop it or raise pp")
        if self.recompute_layers is not None and self.recompute != "full":
            raise ValueError("recompute_layers: only meaningful with recompute full")
        if self.offload_modules is not None and self.activation_offload:
            raise ValueError("offload_modules: whole-layer activation_offload already offloads every module; "
                             "drop one of the two")
        if self.recompute_modules is not None and self.recompute != "selective":
            raise ValueError("recompute_modules: only meaningful with recompute selective; set recompute selective "
                             "or drop recompute_modules")
        if self.bf16_layers and PRECISION_CODES[self.precision] == 1:
            raise ValueError(
                f"bf16_layers: precision {self.precision} (delayed scaling) cannot keep layers in bf16 "
                "(Megatron-Core fp8_utils.py asserts it); use precision fp8-current or bf16_layers 0"
            )
        if self.grad_bf16_copy and not self.fp32_grads:
            raise ValueError("grad_bf16_copy: a bf16 copy beside an fp32 accumulator needs fp32_grads on")
        if self.moe_routing == "round_robin" and self.moe_imbalance != 1.0:
            if "moe_imbalance" in self.model_fields_set:
                raise ValueError(routing_imbalance_problem(self.moe_routing, self.moe_imbalance))
            object.__setattr__(self, "moe_imbalance", 1.0)  # what it prices (experts.py): dumps and rebuilds say so
        if self.fp8_attention and (self.precision in ("bf16", "fp16") or not self.flash_attention):
            raise ValueError(f"fp8_attention: FP8 attention runs in Transformer Engine's fused attention inside a "
                             f"low-precision recipe, not with precision {self.precision}"
                             f"{'' if self.flash_attention else ' and flash_attention off'}; set precision fp8, "
                             "fp8-current, mxfp8 or nvfp4 (and flash_attention on), or drop fp8_attention")
        if self.moe_pad_to_capacity and self.moe_dispatcher == "flex":
            raise ValueError("moe_pad_to_capacity: the flex dispatcher (DeepEP/HybridEP) cannot pad experts to their "
                             "capacity (Megatron-Core refuses it, transformer_config.py); use moe_dispatcher alltoall "
                             "or allgather, or drop moe_pad_to_capacity")
        if self.master_weights == "bf16_remainder" and self.precision == "fp16":
            raise ValueError("master_weights: bf16_remainder keeps the low 16 bits of bf16 weights (Megatron-Core "
                             "store_param_remainders); with precision fp16 use master_weights fp32")
        group = self.tp * self.cp * self.dp
        problem = expert_grid_problem(
            self.ep, self.etp, group, f"of a pipeline stage (tp*cp*dp = {self.tp}*{self.cp}*{self.dp})",
            f"or make tp*cp*dp (num_gpus / pp) a multiple of {self.ep * self.etp}")
        if problem:
            raise ValueError(problem)
        return self

    @property
    def edp(self) -> int:
        """Expert data-parallel degree: replicas of each expert (``tp*cp*dp / (etp*ep)``)."""
        return self.tp * self.cp * self.dp // (self.etp * self.ep)

    @model_validator(mode="after")
    def _check_dp_shard(self) -> "Plan":
        if self.dp_shard is not None and self.dp is not None and self.dp % self.dp_shard:
            raise ValueError(
                f"dp_shard: {self.dp_shard} must divide dp {self.dp} (shard groups of dp_shard GPUs, "
                f"dp/dp_shard replicas); use a divisor of {self.dp} or leave it unset"
            )
        return self

    @property
    def shard_degree(self) -> int:
        """GPUs a ZeRO/FSDP shard group spans (``dp_shard``, default the whole ``dp``)."""
        return self.dp if self.dp_shard is None else self.dp_shard

    def grad_reduce_per_microbatch(self) -> bool:
        """Whether gradients are reduced after every micro-batch (``grad_reduce``, see the field)."""
        return bool(grad_per_microbatch(GRAD_REDUCE_CODES[self.grad_reduce], self.zero, self.pp))

    def split(self, num_layers: int) -> list[int]:
        """Transformer layers on each pipeline rank, first to last.

        - explicit ``first_stage_layers``/``last_stage_layers``: those, the rest even over the middle;
        - Megatron's accounting (``account_for_embedding/loss_in_pipeline_split``): the embedding
          and the loss count as one layer each, ``(l + e + o) / pp`` per stage, the first stage
          ``e`` fewer and the last ``o`` fewer (Megatron-Core ``get_num_layers_to_build``);
        - ``pp`` dividing the layers: even;
        - otherwise balanced: ``l // pp`` each, one more on the first ``l % pp`` stages
          (torchtitan's ``generate_llm_fqn_per_model_part`` gives leftovers to the first stages;
          DeepSpeed's ``partition_method='uniform'`` balances the same way).
        """
        p, l = self.pp, num_layers
        if p == 1:
            return [l]
        f, la = self.first_stage_layers, self.last_stage_layers
        if f is None and la is None:
            e, o = int(self.account_for_embedding_in_pipeline_split), int(self.account_for_loss_in_pipeline_split)
            if e or o:
                per = (l + e + o) // p
                return [per - e] + [per] * (p - 2) + [per - o] if p > 2 else [per - e, l - per + e]
            per, extra = divmod(l, p)
            return [per + 1 if i < extra else per for i in range(p)]
        a, mid, b = self.stage_layers(num_layers)
        return [a] + [mid] * (p - 2) + [b] if p > 2 else [a, b]

    @property
    def label(self) -> str:
        """One-line summary of the degrees and main knobs, e.g. ``t8 p12 d16 v2 mb1 z1 full``."""
        s = f"t{self.tp} p{self.pp} d{self.dp}"
        s += f" c{self.cp}" if self.cp > 1 else ""
        s += f" v{self.vpp}" if self.vpp > 1 else ""
        s += f" e{self.ep}" if self.ep > 1 else ""
        s += f" et{self.etp}" if self.etp > 1 else ""
        rc = self.recompute + (f"({self.recompute_layers})" if self.recompute_layers else "") + (
            f"({self.recompute_modules})" if self.recompute_modules else "")
        return s + f" mb{self.micro_batch} z{self.zero} {rc}" + (" dualpipe" if self.pp_schedule == "dualpipe" else "")

    @property
    def grad_accum(self) -> int:
        """Micro-batches per optimizer step per pipeline (``m``)."""
        return self.global_batch // (self.dp * self.micro_batch)

    def stage_layers(self, num_layers: int) -> tuple[int, int, int]:
        """(first, middle, last) stage layer counts; ``middle`` is per middle stage (the fullest
        middle stage when the split is balanced but uneven: :meth:`split` has every stage).

        With one of first/last given, the remaining layers are shared by the other stages.
        """
        p, l = self.pp, num_layers
        if p == 1:
            return l, l, l
        f, la = self.first_stage_layers, self.last_stage_layers
        if f is None and la is None:
            s = self.split(l)
            return s[0], (max(s[1:-1]) if p > 2 else s[0]), s[-1]
        if p == 2:
            f = f if f is not None else l - la
            return f, f, l - f
        if f is None:
            f = (l - la) // (p - 1)
        if la is None:
            la = (l - f) // (p - 1)
        return f, (l - f - la) // (p - 2), la

    def check_against(self, model: ModelSpec) -> None:
        """The rules that need the model; raises :class:`InputError` naming the rule."""
        m = model
        if m.is_moe:
            if m.num_experts % self.ep:
                raise InputError(
                    f"ep: {self.ep} does not divide num_experts {m.num_experts}; use a divisor"
                )
            if (m.expert_ffn_hidden_size or 0) % self.etp:
                raise InputError(
                    f"etp: {self.etp} does not divide expert_ffn_hidden_size {m.expert_ffn_hidden_size}; "
                    "use a divisor"
                )
            if self.moe_pad_to_capacity and (problem := pad_capacity_problem(m)):
                raise InputError(problem)
            if "moe_imbalance" in self.model_fields_set and (problem := imbalance_bound_problem(m, self.moe_imbalance)):
                raise InputError(problem)
        elif self.ep > 1 or self.etp > 1:
            field = "ep" if self.ep > 1 else "etp"
            raise InputError(f"{field}: {m.name} is a dense model (no experts); {field} must be 1")
        if m.num_heads % self.tp:
            raise InputError(f"tp: {self.tp} does not divide num_heads {m.num_heads}; use a divisor")
        if m.num_kv_heads % self.tp and self.tp % m.num_kv_heads:
            raise InputError(
                f"tp: {self.tp} and num_kv_heads {m.num_kv_heads} must divide one another"
            )
        if (m.ffn_hidden_size or 0) % self.tp:
            raise InputError(f"tp: {self.tp} does not divide ffn_hidden_size {m.ffn_hidden_size}")
        l = m.num_layers
        uneven = self.first_stage_layers is not None or self.last_stage_layers is not None
        e, o = int(self.account_for_embedding_in_pipeline_split), int(self.account_for_loss_in_pipeline_split)
        acct = self.pp > 1 and (e or o)
        slots = l + e + o if acct else l  # Megatron counts the embedding/loss as layers of the split
        if self.pp * self.vpp > slots:
            raise InputError(
                f"pp: pp*vpp ({self.pp}*{self.vpp}) exceeds num_layers {m.num_layers}"
                + (f" plus the {e + o} accounted embedding/loss layers" if acct else "") + "; lower pp or vpp"
                + ("" if acct else ", or count the embedding and loss as layers "
                   "(account_for_embedding/loss_in_pipeline_split, as Megatron does)")
            )
        if acct:
            if uneven:
                raise InputError("account_for_embedding_in_pipeline_split: not with first_stage_layers/"
                                 "last_stage_layers (Megatron refuses both); drop one")
            if slots % (self.pp * self.vpp):
                raise InputError(
                    f"pp: with the embedding/loss counted as layers, num_layers + {e + o} = {slots} must divide "
                    f"by pp*vpp ({self.pp}*{self.vpp}); change pp or vpp, or drop the accounting"
                )
            if min(self.split(l)) <= 0:
                raise InputError(f"pp: {self.pp} stages leave a stage without layers; lower pp")
        elif self.pp > 1 and not uneven and l % self.pp and self.vpp > 1:
            raise InputError(
                f"vpp: pp {self.pp} does not divide num_layers {l}, so the balanced split {self.split(l)[:2]}... "
                f"cannot be cut into vpp {self.vpp} equal chunks per stage; use vpp 1, a pp dividing {l}, or "
                "account_for_embedding/loss_in_pipeline_split"
            )
        if self.pp > 1 and not acct and uneven:
            # Every stage holds at least one layer: the given ends leave at least one layer to each
            # other stage (then stage_layers sizes none of them 0; first 59 of 61 at pp 4 was priced
            # as [59, 1, 1, 0], and the search built a Plan with last_stage_layers 0 from it).
            given = {k: v for k, v in (("first_stage_layers", self.first_stage_layers),
                                       ("last_stage_layers", self.last_stage_layers)) if v is not None}
            others = self.pp - len(given)
            if others and sum(given.values()) > l - others:
                names = " + ".join(given)
                raise InputError(
                    f"{names}: {' + '.join(str(v) for v in given.values())} "
                    f"{'leave' if len(given) == 2 else 'leaves'} fewer than one layer for each of "
                    f"the other {others} pipeline stage(s) (num_layers {l}, pp {self.pp}); give at most "
                    f"{l - others}{' together' if len(given) == 2 else ''}, or lower pp"
                )
        if self.pp > 1 and not acct:
            f, mid, la = self.stage_layers(l)
            middle_total = l - f - la if self.pp > 2 else 0
            if uneven and self.pp > 2 and (middle_total <= 0 or middle_total % (self.pp - 2)):
                raise InputError(
                    f"first_stage_layers: with first {f} and last {la} layers, the remaining "
                    f"{middle_total} layers do not split evenly over {self.pp - 2} middle stages"
                )
            if uneven and self.pp == 2:  # both given: check both (stage_layers reads the first alone)
                f = f if self.first_stage_layers is None else self.first_stage_layers
                la = la if self.last_stage_layers is None else self.last_stage_layers
                if f <= 0 or la <= 0 or f + la != l:
                    raise InputError(f"first_stage_layers: {f} + {la} must equal num_layers {l}")
            if self.vpp > 1 and mid % self.vpp:
                raise InputError(
                    f"vpp: layers per (middle) stage ({mid}) must be divisible by vpp {self.vpp}"
                )
        if self.bf16_layers is not None and self.bf16_layers > l:
            raise InputError(f"bf16_layers: {self.bf16_layers} exceeds num_layers {l}")
        if self.recompute_layers is not None:
            f, mid, la = self.stage_layers(l)
            if self.recompute_layers > max(f, mid, la):
                raise InputError(
                    f"recompute_layers: {self.recompute_layers} exceeds the layers per stage ({max(f, mid, la)})"
                )
