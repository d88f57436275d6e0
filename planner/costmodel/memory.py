"""Memory per GPU: model states by ZeRO stage, activations, buffers, framework overhead.

- Model states (Rajbhandari et al. 2020, ZeRO, Sec. 3 and 5): bf16 weights 2 B/param, gradients
  2 B (4 B with fp32 accumulation, ``fp32_grads``, Megatron's main-grad buffer), fp32 master
  weights + Adam momentum + variance 12 B. Stage 0 ``(2+g+12) psi``; stage 1 ``(2+g) psi + 12 psi/d``
  (Megatron's distributed optimizer with fp32 grads: ``6 psi + 12 psi/d``); stage 2
  ``2 psi + (g+12) psi/d``; stage 3 ``(2+g+12) psi/d`` plus a gather buffer for the layers in
  flight (two layers: the one computing and the one prefetched; one in a one-layer stage).
- Activations per layer and micro-batch (Korthikanti et al. 2022, Table 2, generalised to GQA
  and gated MLPs, bytes per token): the region replicated over tensor-parallel ranks unless
  sequence parallelism splits it — two norm inputs ``4h``, the two norm outputs feeding QKV and
  the MLP ``4h``, dropout masks ``2h`` (1 B each): ``10h`` for GPT; the tensor-parallel region —
  Q ``2 a hd``, K and V ``4 g hd``, the output-projection input ``2 a hd``, the MLP inputs of the
  activation and of the down projection (``4f``, or ``6f`` gated); under FP8 the four GEMM
  inputs are kept as 1-byte FP8 copies (Transformer Engine), halving those terms; the attention scores
  ``5 a s`` (softmax output, dropout mask and output; ``2 a s`` without dropout), removed by
  FlashAttention or selective recomputation. Full recomputation keeps only the layer input
  ``2h`` (``/tp`` with sequence parallelism), plus one layer's full set while it is recomputed.
  GPT with MHA and ``f = 4h`` gives Table 2 exactly: ``sbh(10 + 24/t + 5as/(ht))``.
- In flight (Narayanan et al. 2021; Korthikanti et al. 2022 Sec. 4.2.3): stage ``i`` of 1F1B holds
  ``min(m, p - i)`` micro-batches; interleaved 1F1B holds ``2(p-1) + (v-1)p + 1`` model chunks on
  the first stage, i.e. ``l (1 + (p-1)/(p v))`` layers' worth.
- Logits and cross-entropy on the last stage: ``~4 s b V / t`` bytes (fp32); the embedding output
  on the first stage ``3 s b h`` (bf16 output + mask).
- Framework overhead: ``framework_overhead_gib`` (CUDA context, NCCL and cuBLAS workspaces) and
  ``fragmentation`` x activations (allocator slack), calibrated terms of the hardware spec.
All byte counts are per GPU, numpy arrays over the candidates.
"""

from __future__ import annotations

import numpy as np

from plan_search.hardware.spec import ClusterSpec
from plan_search.models import counting
from plan_search.models.spec import ModelSpec

from plan_search.planner.costmodel import compute
from plan_search.planner.costmodel import experts
from plan_search.planner.costmodel.arrays import PlanArrays

GIB = float(2**30)


def model_state_bytes(params_local, zero, dp, fp32_grads) -> dict:
    """Weights, gradients and optimizer states per GPU for ``params_local`` parameters."""
    psi = np.asarray(params_local, dtype=float)
    d = np.asarray(dp, dtype=float)
    z = np.asarray(zero)
    g = np.where(fp32_grads, 4.0, 2.0)
    weights = np.where(z >= 3, 2.0 * psi / d, 2.0 * psi)
    grads = np.where(z >= 2, g * psi / d, g * psi)
    optim = np.where(z >= 1, 12.0 * psi / d, 12.0 * psi)
    return {"weights": weights, "gradients": grads, "optimizer": optim}


def activation_bytes_per_token(model: ModelSpec, x: PlanArrays) -> dict:
    """Stored bytes per token per layer without recomputation, by region (before /tp)."""
    m = model
    h, f = m.hidden_size, m.ffn_hidden_size
    q = m.num_heads * m.head_dim
    kv = m.num_kv_heads * m.head_dim
    # GEMM inputs kept for the backward: the two norm outputs (QKV and MLP inputs), the
    # output-projection input and the down-projection input. Under FP8 recipes Transformer
    # Engine keeps these as FP8 (1 B) copies instead of bf16.
    gemm_in = compute.gemm_input_bytes(x)  # issue 12: 1 B under FP8, 0.56 under NVFP4
    replicated = 4.0 * h + 2.0 * h * gemm_in + (2.0 * h if m.dropout else 0.0)
    tp_region = 2.0 * q + 4.0 * kv + q * gemm_in + (4.0 if m.gated else 2.0) * f + f * gemm_in
    scores = (5.0 if m.dropout else 2.0) * m.num_heads * (x.seq / x.cp)
    mla_tp, mla_latent = experts.mla_activation_delta_per_token(model, x)  # zeros without MLA
    return {"replicated": replicated + mla_latent, "tp_region": tp_region + mla_tp, "scores": scores}


def layer_activation_bytes(model: ModelSpec, x: PlanArrays):
    """(stored, recomputed) bytes of one layer and one micro-batch on one GPU: ``stored`` is what
    a layer without full recomputation keeps, ``recomputed`` what a fully recomputed one keeps."""
    T = (x.mb * x.seq // x.cp).astype(float)
    t = x.tp.astype(float)
    r = activation_bytes_per_token(model, x)
    replicated = np.where(x.sp, r["replicated"] / t, r["replicated"])
    keep_scores = (~x.fa) & (x.recompute == 0)
    scores = np.where(keep_scores, r["scores"] / t, 0.0)
    stored = T * (replicated + r["tp_region"] / t + scores)
    layer_input = 2.0 * model.hidden_size * np.where(x.sp, 1.0 / t, 1.0)
    recomputed = T * layer_input
    return stored, recomputed


STAGES = ("first", "middle", "last")


def in_flight_chunks(x: PlanArrays, stage: str):
    """Model chunks (of ``layers/vpp`` layers) whose activations a stage holds at its peak:
    stage ``i`` of 1F1B holds ``min(m, p - i)`` micro-batches; of interleaved 1F1B
    ``min(m v, 2 (p - i - 1) + (v - 1) p + 1)`` chunks (Megatron's warm-up count + 1). ``middle``
    is stage 1, the fullest of the middle stages."""
    p, v, m = x.pp, x.vpp, x.m
    i = {"first": np.zeros_like(p), "middle": np.ones_like(p), "last": p - 1}[stage]
    one_f1b = np.minimum(m, p - i)
    inter = np.minimum(m * v, 2 * (p - i - 1) + (v - 1) * p + 1)
    return np.maximum(np.where(v > 1, inter, one_f1b), 1).astype(float)


def stage_params(model: ModelSpec, x: PlanArrays, stage: str):
    """Parameters one GPU of the ``first`` or ``last`` stage holds (after tensor parallelism)."""
    per_layer = experts.nonexpert_layer_params(model)  # routed experts: added below, /(ep*etp)
    h, V = model.hidden_size, model.vocab_size
    emb = V * h + (model.seq_len * h if model.position == "learned" else 0)
    out = V * h
    final_norm = counting.norm_params(model)
    single = x.pp == 1
    if stage == "first":
        layers = x.first
        extra = np.where(single, emb + (0 if model.tied_embeddings else out) + final_norm, emb)
    elif stage == "middle":
        layers, extra = x.mid, 0.0
    else:
        layers = x.last
        # A tied output layer keeps its own copy on the last stage when pp > 1 (Megatron).
        extra = np.where(single, emb + (0 if model.tied_embeddings else out) + final_norm, out + final_norm)
    return (layers * per_layer + extra) / x.tp + experts.stage_expert_params(model, x, stage)


def stage_memory_bytes(model: ModelSpec, cluster: ClusterSpec, x: PlanArrays, stage: str) -> dict:
    """Breakdown of the peak memory of one GPU of the ``first``, ``middle`` or ``last`` stage, bytes."""
    eff = cluster.efficiency
    layers = {"first": x.first, "middle": x.mid, "last": x.last}[stage]
    psi = stage_params(model, x, stage)
    psi_e = experts.stage_expert_params(model, x, stage)  # sharded over the edp group instead
    states = model_state_bytes(psi - psi_e, x.zero, x.dp, x.fp32_grads)
    states_e = model_state_bytes(psi_e, x.zero, x.tp * x.cp * x.dp // (x.ep * x.etp), x.fp32_grads)
    states = {k: states[k] + states_e[k] for k in states}
    # quantized weight copies of a low-precision recipe (issue 12; compute.lowp_weight_copy_bytes).
    lowp = compute.lowp_weight_copy_bytes(psi, x, cluster)
    states["weights"] = states["weights"] + np.where(x.zero >= 3, 0.0, lowp)
    stored, recomputed = layer_activation_bytes(model, x)
    if model.is_moe:  # the stage's MoE layers store more than a dense layer (mean over its layers)
        n_moe = experts.stage_moe_layers(model, x)[stage]
        stored = stored + n_moe / np.maximum(layers, 1) * experts.moe_activation_delta_per_layer(model, x)
    n_rc = np.minimum(x.rc_layers, layers)
    per_chunk_layers = layers / x.vpp
    chunks = in_flight_chunks(x, stage)
    # Fully recomputed layers keep their input; the others keep everything (per chunk, the
    # recomputed layers are the first ones of the stage, Megatron's block method).
    rc_per_chunk = np.minimum(n_rc / x.vpp, per_chunk_layers)
    per_chunk = rc_per_chunk * recomputed + (per_chunk_layers - rc_per_chunk) * stored
    working = np.where(n_rc > 0, stored, 0.0)  # one layer rematerialised during its backward
    T = (x.mb * x.seq // x.cp).astype(float)
    if stage == "first":
        edge = chunks / x.vpp * 3.0 * T * model.hidden_size  # embedding output of in-flight batches
    elif stage == "middle":
        edge = np.zeros_like(T)
    else:
        edge = 4.0 * T * model.vocab_size / x.tp  # fp32 logits / cross-entropy buffer
    activations = chunks * per_chunk + working + edge
    # the layers in flight: the one computing and the one prefetched -- but no more than the
    # stage has (a one-layer stage has nothing to prefetch)
    in_flight = np.minimum(layers, 2)
    gather = np.where((x.zero >= 3) & (x.dp > 1), in_flight * 2.0 * experts.layer_params_local(model, x), 0.0)
    overhead = eff.framework_overhead_gib * GIB + eff.fragmentation * activations
    total = states["weights"] + states["gradients"] + states["optimizer"] + activations + gather + overhead
    return {
        "weights": states["weights"],
        "gradients": states["gradients"],
        "optimizer": states["optimizer"],
        "activations": activations,
        "zero3_gather_buffer": gather,
        "framework_overhead": overhead,
        "total": total,
    }


def peak_memory(model: ModelSpec, cluster: ClusterSpec, x: PlanArrays) -> dict:
    """The worst stage's breakdown (bytes) and which stage it is (``worst_stage``: an index into
    :data:`STAGES`). The middle stages count only with ``pp > 2``; with ``pp == 1`` the one stage
    is the "first" (it carries both ends)."""
    per = [stage_memory_bytes(model, cluster, x, st) for st in STAGES]
    totals = np.stack([per[0]["total"], np.where(x.pp > 2, per[1]["total"], -np.inf),
                       np.where(x.pp > 1, per[2]["total"], -np.inf)])
    worst = np.argmax(totals, axis=0)
    out = {k: np.choose(worst, [per[0][k], per[1][k], per[2][k]]) for k in per[0]}
    out["worst_stage"] = worst
    return out
