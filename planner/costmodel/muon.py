"""Muon (MomentUm Orthogonalized by Newton-Schulz): the optimizer states it keeps and the
orthogonalisation it runs every step.

What Muon does (Jordan et al. 2024, kellerjordan.github.io/posts/muon and github.com/KellerJordan/Muon;
Liu et al. 2025, "Muon is Scalable for LLM Training", arXiv 2502.16982, the Moonlight/Kimi recipe):
the two-dimensional weights of the hidden layers keep one momentum buffer (no second moment) and
their update is the momentum orthogonalised by a few Newton-Schulz iterations; embeddings, the
output layer and every vector parameter (norms, biases) are stepped by AdamW. How Megatron-Core
runs it (``--optimizer muon``; OptimizerConfig ``muon_*`` fields: ``muon_num_ns_steps`` 5,
``muon_tp_mode`` "blockwise", ``muon_split_qkv`` True, ``muon_scalar_optimizer`` "adam",
``muon_fp32_matmul_prec`` "medium"): with tensor parallelism in blockwise mode each rank
orthogonalises its own shard of a weight, with no communication; the query, key and value
projections are orthogonalised as separate matrices; with the distributed optimizer, Muon runs
under the layer-wise distributed optimizer (``LayerWiseDistributedOptimizer``: each data-parallel
rank steps whole layers and the updated weights are all-gathered, which a ZeRO-1 plan prices
already). "medium" float32 matmul precision runs the iterations on the bf16 tensor cores.

Formulas (one copy: memory.py and step.py call these):

- states per parameter: a Muon-stepped weight keeps its master weight and one momentum buffer
  (``master + moment`` B: 8 B fp32), an Adam-stepped one two moments (``master + 2 moment``: 12 B);
- one Newton-Schulz iteration on ``X`` (``r x c`` with ``r <= c``; a taller matrix is transposed
  first): ``A = X X^T`` (2 r^2 c), ``B = b A + c A A`` (2 r^3), ``X <- a X + B X`` (2 r^2 c):
  ``4 r^2 c + 2 r^3`` FLOPs; the quintic iteration runs :data:`NS_STEPS` times.
"""

from __future__ import annotations

import numpy as np

from plan_search.models import counting
from plan_search.models.spec import ModelSpec
from plan_search.planner.costmodel.arrays import PlanArrays

#: Newton-Schulz iterations per step (Megatron-Core OptimizerConfig.muon_num_ns_steps = 5; Keller
#: Jordan's Muon ``ns_steps=5``; torch.optim.Muon DEFAULT_NS_STEPS = 5).
NS_STEPS = 5


def ns_flops(rows, cols, steps: int = NS_STEPS):
    """FLOPs of ``steps`` Newton-Schulz iterations on one ``rows x cols`` matrix (see the module)."""
    r = np.minimum(rows, cols).astype(float)
    c = np.maximum(rows, cols).astype(float)
    return steps * (4.0 * r * r * c + 2.0 * r ** 3)


def _attention_matrices(m: ModelSpec) -> list[tuple[int, int, str]]:
    """(output rows, input cols, how tensor parallelism splits it) of one layer's attention weights:
    ``out`` column-parallel (the rows split), ``in`` row-parallel (the columns split), ``none``
    replicated (MLA's down projections, Megatron-Core's MLA keeps them whole on every rank)."""
    h, a, hd, vd = m.hidden_size, m.num_heads, m.head_dim, m.v_head_dim
    if m.is_mla:
        mats = []
        if m.q_lora_rank:
            mats += [(m.q_lora_rank, h, "none"), (a * hd, m.q_lora_rank, "out")]
        else:
            mats += [(a * hd, h, "out")]
        mats += [(m.kv_lora_rank + m.qk_rope_head_dim, h, "none"),
                 (a * (m.qk_nope_head_dim + vd), m.kv_lora_rank, "out")]
        return mats + [(h, a * vd, "in")]
    g = m.num_kv_heads
    # muon_split_qkv: the fused QKV weight is orthogonalised as its three projections
    return [(a * hd, h, "out"), (g * hd, h, "out"), (g * vd, h, "out"), (h, a * vd, "in")]


def _mlp_matrices(m: ModelSpec, ffn: int) -> list[tuple[int, int, str]]:
    """The MLP's weights: Megatron-Core keeps a gated MLP's gate and up projections as one fc1 of
    ``2 ffn`` rows (linear_fc1), orthogonalised as one matrix."""
    return [((2 if m.gated else 1) * ffn, m.hidden_size, "out"), (m.hidden_size, ffn, "in")]


def _shard_flops(mats, split):
    """NS FLOPs of a list of matrices, each split ``split`` ways by tensor parallelism (array)."""
    total = 0.0
    for rows, cols, how in mats:
        r = rows / split if how == "out" else np.full_like(split, rows, dtype=float)
        c = cols / split if how == "in" else np.full_like(split, cols, dtype=float)
        total = total + ns_flops(r, c)
    return total


def _stage_layers(x: PlanArrays, moe_layers: dict):
    """(dense, MoE) layers of the fullest pipeline stage (the stage whose step ends last);
    ``moe_layers``: experts.stage_moe_layers of ``x`` (the caller's: this module imports no pricing)."""
    layers = np.maximum(np.maximum(x.first, x.last), np.where(x.pp > 2, x.mid, 0)).astype(float)
    n_moe = np.maximum(np.maximum(moe_layers["first"], moe_layers["last"]),
                       np.where(x.pp > 2, moe_layers["middle"], 0.0))
    return np.maximum(layers - n_moe, 0.0), np.minimum(n_moe, layers)


def orthogonalization_flops_per_gpu(model: ModelSpec, x: PlanArrays, moe_layers: dict):
    """Newton-Schulz FLOPs one GPU runs per step: the weights of its stage's layers, each shard of
    tensor (expert-tensor) parallelism alone, the layers shared out over the data-parallel (expert
    data-parallel) ranks by the layer-wise distributed optimizer under ZeRO-1 (each rank a 1/dp share,
    whole layers: the share of the busiest rank is taken as the mean). ``moe_layers``: per stage."""
    tp = x.tp.astype(float)
    attn = _shard_flops(_attention_matrices(model), tp)
    dense_mlp = _shard_flops(_mlp_matrices(model, model.ffn_hidden_size), tp) if model.ffn_hidden_size else 0.0
    dense_layers, n_moe = _stage_layers(x, moe_layers)
    dp_group = np.where(x.zero >= 1, (x.shard * x.cp).astype(float), 1.0)
    per_gpu = (dense_layers * (attn + dense_mlp) + n_moe * attn) / dp_group
    if model.is_moe:
        shared = (_shard_flops(_mlp_matrices(model, model.shared_expert_ffn_hidden_size), tp) * model.num_shared_experts
                  if model.num_shared_experts and model.shared_expert_ffn_hidden_size else 0.0)
        local_experts = model.num_experts / x.ep
        expert = _shard_flops(_mlp_matrices(model, model.expert_ffn_hidden_size), x.etp.astype(float))
        edp = np.where(x.zero >= 1, np.maximum(x.tp * x.cp * x.dp // (x.ep * x.etp), 1).astype(float), 1.0)
        per_gpu = per_gpu + n_moe * (shared / dp_group + local_experts * expert / edp)
    return per_gpu


def orthogonalization_s(model: ModelSpec, x: PlanArrays, moe_layers: dict, rate_flops):
    """Seconds of the step's Newton-Schulz iterations on one GPU (zero for Adam rows) at ``rate_flops``:
    the caller's bf16 tensor-core rate (muon_fp32_matmul_prec "medium") at the GEMM efficiency of the
    largest matrices' smaller dimension (the hidden size's tensor-parallel shard)."""
    muon = np.asarray(x.muon, dtype=bool)
    if not np.any(muon):
        return np.zeros(len(x))
    return np.where(muon, orthogonalization_flops_per_gpu(model, x, moe_layers) / rate_flops, 0.0)


def adam_params_local(model: ModelSpec, x: PlanArrays, stage: str):
    """Parameters one GPU of ``stage`` steps with Adam under Muon: the embedding (first stage) and
    the output layer and final norm (last stage), vocabulary-parallel over tp, and every layer's
    norms (replicated). Biases are counted with their weight (under 0.1% of any catalog model)."""
    emb = model.vocab_size * model.hidden_size + (model.seq_len * model.hidden_size if model.position == "learned" else 0)
    out = 0 if (model.tied_embeddings) else model.vocab_size * model.hidden_size
    final_norm = counting.norm_params(model)
    layers = {"first": x.first, "middle": x.mid, "last": x.last}[stage]
    single = x.pp == 1
    has_embed = single | (stage == "first")
    has_output = single | (stage == "last")
    own_output = np.where(single, out, model.vocab_size * model.hidden_size)  # pp > 1: the last stage's own copy
    ends = np.where(has_embed, emb, 0.0) + np.where(has_output, own_output + final_norm, 0.0)
    norms_per_layer = 2 * counting.norm_params(model)
    return ends / x.tp + layers * norms_per_layer
