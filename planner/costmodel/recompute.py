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
  (:func:`experts.mlp_saved_bytes_per_token`); re-runs its GEMMs and activation
  (:func:`experts.dense_mlp_rerun_s`). Dense layers only (a MoE layer's MLP is ``moe``).
- ``moe``: a MoE layer keeps only its input (router, dispatch, experts and combine re-run: the whole
  :func:`experts.moe_activation_delta_per_layer` and the dense MLP it replaces go); re-runs the layer's
  forward and its dispatch (planner/costmodel/step.py ``_moe_stage_terms``).
- ``moe_act``, ``layernorm``, ``mla_up_proj``: the fine-grained set of :mod:`experts`.
- ``shared_experts``: the shared experts' MLP inputs go; re-runs their GEMMs.
- under the torchtitan profiles (``efficiency.selective_ac`` op) ``selective`` is torchtitan's op-level SAC
  instead (:func:`memory.op_sac_saved_bytes_per_token`, :func:`selective_extra_s`).
"""

from __future__ import annotations

import numpy as np

from plan_search.hardware.spec import ClusterSpec
from plan_search.models.spec import ModelSpec
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


def op_sac_recomputed_gemm_share(model: ModelSpec) -> float:
    """Share of a dense layer's forward weight-GEMM FLOPs torchtitan's op-level SAC runs again in the
    backward: the even matmuls of :func:`memory.op_sac_saved_bytes_per_token` (``wk``, ``wo`` and ``w3``;
    ungated ``wk``, ``wo`` and ``w2``)."""
    m = model
    h, f = m.hidden_size, m.ffn_hidden_size or 4 * m.hidden_size
    q = m.num_heads * m.head_dim
    kv = m.num_kv_heads * m.head_dim
    total = h * (q + 2 * kv) + q * h + (3 if m.gated else 2) * h * f
    return (h * kv + q * h + h * f) / total


def op_sac_applies(model: ModelSpec, cluster: ClusterSpec, x: PlanArrays):
    """Rows whose ``selective`` recomputation is torchtitan's op-level SAC (the cluster's
    ``efficiency.selective_ac`` op; dense models only: a MoE or MLA model's set is :mod:`experts`')."""
    if cluster.efficiency.selective_ac != "op" or model.is_moe or model.is_mla:
        return np.zeros(len(x), dtype=bool)
    return x.recompute == 1


def selective_extra_s(model: ModelSpec, cluster: ClusterSpec, x: PlanArrays, lt: dict, mlp_rerun_s=None):
    """Seconds per layer and micro-batch ``recompute selective`` adds (planner/costmodel/step.py): the
    model's default set as :func:`compute.layer_times` ``selective_extra_s`` prices it (the attention core;
    a MoE or MLA model's set is :func:`experts.selective_recompute_fwd_s`'); a named set the attention core
    where ``core_attn`` and the dense layers' MLP where ``mlp`` (``mlp_rerun_s``:
    :func:`experts.dense_mlp_rerun_s`); under ``efficiency.selective_ac`` op torchtitan's op-level SAC --
    the re-run matmuls' share of the weight GEMMs (:func:`op_sac_recomputed_gemm_share`) and the forward's
    memory-bound work (norms, RoPE, activation: none of it is saved)."""
    core = lt["selective_extra_s"]
    if np.any(x.rc_mod):
        f = flags(model, x)
        dense_share = 1.0 - (model.num_moe_layers / model.num_layers if model.is_moe else 0.0)
        mlp = dense_share * mlp_rerun_s if mlp_rerun_s is not None else 0.0
        named = np.where(f["core_attn"], core, 0.0) + np.where(f["mlp"], mlp, 0.0)
        core = np.where(f["explicit"], named, core)
    op = op_sac_applies(model, cluster, x)
    if not np.any(op):
        return core
    gemm_f = lt["compute_fwd_s"] - lt["attn_fwd_s"]
    return np.where(op, op_sac_recomputed_gemm_share(model) * gemm_f + lt["membound_fwd_s"], core)
