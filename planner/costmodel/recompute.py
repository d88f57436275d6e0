"""Which modules selective recomputation re-runs (issue 29): Megatron-Core's ``--recompute-modules``.

``Plan.recompute_modules`` names a set of Megatron-Core's recomputable modules (megatron/training/
arguments.py ``--recompute-modules``; transformer_config.py ``recompute_modules``; the MoE README's
"Fine-grained Recomputation"), coded in ``PlanArrays.rc_mod`` (bit ``i`` for ``RECOMPUTE_MODULES[i]``).
Unset (0), ``recompute selective`` takes the model's default set: the attention core (``core_attn``,
Korthikanti et al. 2022) on a dense model, ``moe_act``, ``layernorm`` and ``mla_up_proj`` on a MoE or MLA
model (planner/costmodel/experts.py). What each module frees and costs, per layer and micro-batch:

- ``core_attn``: the attention scores without FlashAttention (:func:`memory._layer_bytes`); re-runs the
  attention core (:func:`compute.layer_times` ``selective_extra_s``).
- ``mlp``: a dense layer's MLP keeps only its input: its activation inputs and down-projection input go
  (:func:`mlp_saved_bytes_per_token`); re-runs its GEMMs and activation (:func:`mlp_fwd_s`). Dense layers
  only (a MoE layer's MLP is ``moe``).
- ``moe``: a MoE layer keeps only its input (router, dispatch, experts and combine re-run: the whole
  :func:`experts.moe_activation_delta_per_layer` and the dense MLP it replaces go); re-runs the layer's
  forward and its dispatch (planner/costmodel/step.py ``_moe_stage_terms``).
- ``moe_act``, ``layernorm``, ``mla_up_proj``: the fine-grained set of :mod:`experts`.
- ``shared_experts``: the shared experts' MLP inputs go; re-runs their GEMMs.
"""

from __future__ import annotations

import numpy as np

from plan_search.models.spec import ModelSpec
from plan_search.planner.costmodel import compute
from plan_search.planner.costmodel.arrays import PlanArrays
from plan_search.planner.costmodel.plan import RECOMPUTE_MODULES

BITS = {m: 1 << i for i, m in enumerate(RECOMPUTE_MODULES)}


def default_mask(model: ModelSpec) -> int:
    """The set ``recompute selective`` re-runs when ``recompute_modules`` is unset."""
    if model.is_moe or model.is_mla:
        return BITS["moe_act"] | BITS["layernorm"] | BITS["mla_up_proj"]
    return BITS["core_attn"]


def flags(model: ModelSpec, x: PlanArrays) -> dict:
    """Per module, the rows whose selective recomputation re-runs it (``recompute`` selective and the
    module in the plan's set, or in the model's default set when none is given); ``explicit``: the rows
    that name a set."""
    sel = x.recompute == 1
    rc_mod = getattr(x, "rc_mod", None)
    mask = np.zeros(len(x), dtype=np.int64) if rc_mod is None else np.asarray(rc_mod, dtype=np.int64)
    explicit = sel & (mask > 0)
    eff = np.where(mask > 0, mask, default_mask(model))
    out = {m: sel & ((eff & b) > 0) for m, b in BITS.items()}
    out["explicit"] = explicit
    return out


def mlp_saved_bytes_per_token(model: ModelSpec, x: PlanArrays):
    """Bytes per token a dense layer's MLP stores beyond its input (its activation inputs and the down
    projection's input, on one GPU: ``/tp``): what ``mlp`` recomputation frees."""
    from plan_search.planner.costmodel import experts

    f = model.ffn_hidden_size or 4 * model.hidden_size
    return (experts.activation_input_bytes(model, x) * f + f * compute.gemm_input_bytes(x)) / x.tp


def mlp_fwd_s(model: ModelSpec, cluster, x: PlanArrays):
    """Seconds a dense layer's MLP forward takes again (its up and down GEMMs and the activation's
    memory-bound pass: read the up projection's output, write the activation's), one micro-batch."""
    T = compute.tokens_per_gpu(x)
    t = x.tp.astype(float)
    f = model.ffn_hidden_size or 4 * model.hidden_size
    up = (2 if model.gated else 1) * f
    gemm = compute._gemm_s(T, model.hidden_size, up / t, cluster, x.fp8) + compute._gemm_s(
        T, f / t, model.hidden_size, cluster, x.fp8)
    return gemm + compute.hbm_s(T * (2.0 * up + 2.0 * f) / t, cluster)


def shared_fwd_s(model: ModelSpec, cluster, x: PlanArrays):
    """Seconds the shared experts' forward takes again, one MoE layer and micro-batch."""
    sw = model.num_shared_experts * (model.shared_expert_ffn_hidden_size or 0)
    if not sw:
        return np.zeros(len(x))
    T = compute.tokens_per_gpu(x)
    t = x.tp.astype(float)
    up = (2 if model.gated else 1) * sw
    return compute._gemm_s(T, model.hidden_size, up / t, cluster, x.fp8) + compute._gemm_s(
        T, sw / t, model.hidden_size, cluster, x.fp8)


def shared_saved_bytes_per_token(model: ModelSpec, x: PlanArrays):
    """Bytes per token the shared experts' MLP inputs take (what ``shared_experts`` frees)."""
    from plan_search.planner.costmodel import experts

    sw = model.num_shared_experts * (model.shared_expert_ffn_hidden_size or 0)
    return (experts.activation_input_bytes(model, x) * sw + sw * compute.gemm_input_bytes(x)) / x.tp
