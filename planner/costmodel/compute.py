"""Compute and memory-bound time of one transformer layer, one micro-batch, on one GPU.

- Weight GEMMs: FLOPs per local GEMM (``2 * tokens * K * N`` with ``K x N`` the local weight
  shard) at ``peak * efficiency(min(K, N))`` — the calibrated curve of
  :class:`hardware.spec.EfficiencySpec` — and never faster than streaming the operands from HBM
  (roofline: ``max(compute, bytes / achievable HBM bandwidth)``).
- Attention products: ``4 * tokens * s_kv * a * hd / tp`` FLOPs forward (Narayanan et al. 2021);
  a causal FlashAttention kernel skips the masked half. Without FlashAttention the scores are
  materialised and softmax/dropout are priced as memory-bound work.
- Memory-bound work (norms, residual adds, dropout, activation functions, rotary, softmax without
  FlashAttention) in bytes moved per token, priced at ``hbm_bandwidth * hbm_eff``. With sequence
  parallelism the norm/residual/dropout region is split over ``tp`` (Korthikanti et al. 2022).
- Backward = 2 x forward for GEMMs and element-wise work; FlashAttention's backward does 2.5 x its
  forward matrix work (it recomputes ``QK^T``; Dao 2023, FlashAttention-2, Sec. 3).
All functions return seconds as numpy arrays over the candidates of a :class:`PlanArrays`.
"""

from __future__ import annotations

import numpy as np

from plan_search.hardware.spec import ClusterSpec
from plan_search.models.spec import ModelSpec

from plan_search.planner.costmodel.arrays import PlanArrays

BF16_BYTES = 2
FA_BACKWARD_RATIO = 2.5  # FlashAttention-2 backward / forward matmul work (Dao 2023, Sec. 3)


def gemm_efficiency(dim, cluster: ClusterSpec):
    """Fraction of dense peak a GEMM reaches when its smaller weight dimension is ``dim``."""
    e = cluster.efficiency
    return e.gemm_eff_max * (1.0 - np.exp(-np.asarray(dim, dtype=float) / e.gemm_dim_scale))


def _gemm_s(tokens, k, n, cluster: ClusterSpec, fp8):
    """One local GEMM of ``tokens x k`` by ``k x n``: roofline of compute and HBM traffic."""
    gpu, e = cluster.gpu, cluster.efficiency
    flops = 2.0 * tokens * k * n
    peak_bf16 = gpu.peak("bf16") * 1e12
    peak_fp8 = gpu.peak_tflops.get("fp8", gpu.peak("bf16")) * 1e12
    eff = gemm_efficiency(np.minimum(k, n), cluster)
    rate = np.where(fp8 == 1, peak_fp8 * eff * e.fp8_gemm_eff_ratio, peak_bf16 * eff)
    wbytes = np.where(fp8 == 1, 1.0, 2.0)
    traffic = k * n * wbytes + tokens * (k + n) * BF16_BYTES
    hbm = gpu.hbm_bandwidth_gbps * 1e9 * e.hbm_eff
    return np.maximum(flops / rate, traffic / hbm)


def tokens_per_gpu(x: PlanArrays):
    """Tokens of one micro-batch that one GPU's layer sees (context parallel splits the sequence)."""
    return (x.mb * x.seq // x.cp).astype(float)


def layer_gemm_fwd_s(model: ModelSpec, cluster: ClusterSpec, x: PlanArrays):
    """Weight GEMMs of one dense layer, forward, one micro-batch."""
    m = model
    T = tokens_per_gpu(x)
    t = x.tp.astype(float)
    q = m.num_heads * m.head_dim
    kv = m.num_kv_heads * m.head_dim
    mats_up = 2 if m.gated else 1
    qkv = _gemm_s(T, m.hidden_size, (q + 2 * kv) / t, cluster, x.fp8)
    proj = _gemm_s(T, q / t, m.hidden_size, cluster, x.fp8)
    fc1 = _gemm_s(T, m.hidden_size, mats_up * m.ffn_hidden_size / t, cluster, x.fp8)
    fc2 = _gemm_s(T, m.ffn_hidden_size / t, m.hidden_size, cluster, x.fp8)
    return qkv + proj + fc1 + fc2


def attention_fwd_flops(model: ModelSpec, x: PlanArrays):
    """FLOPs of ``QK^T`` and ``A V`` of one layer, one micro-batch, one GPU (work done)."""
    T = tokens_per_gpu(x)
    full = 4.0 * T * x.seq * model.num_heads * model.head_dim / x.tp
    return np.where(x.fa, 0.5 * full, full)  # causal FlashAttention skips masked blocks


def attention_fwd_s(model: ModelSpec, cluster: ClusterSpec, x: PlanArrays):
    e = cluster.efficiency
    rate = cluster.gpu.peak("bf16") * 1e12 * np.where(x.fa, e.attention_eff, e.bmm_attention_eff)
    return attention_fwd_flops(model, x) / rate


def layer_membound_fwd_bytes(model: ModelSpec, x: PlanArrays):
    """Bytes moved by the element-wise work of one layer, forward, one micro-batch, one GPU."""
    m = model
    T = tokens_per_gpu(x)
    t = x.tp.astype(float)
    h = m.hidden_size
    # 2 norms (read+write h), 2 residual adds (read 2h, write h), 2 dropouts (mask, 1 B/elem).
    replicated = (8 * h + 12 * h + (2 * h if m.dropout else 0)) * T
    replicated = np.where(x.sp, replicated / t, replicated)
    act = (6 if m.gated else 4) * m.ffn_hidden_size / t * T  # activation fn: read, write (bf16)
    rotary = (4 * (m.num_heads + m.num_kv_heads) * m.head_dim / t * T) if m.position == "rotary" else 0.0
    # Softmax (+ dropout) over materialised scores when FlashAttention is off.
    per_score = 9.0 if m.dropout else 4.0
    softmax = np.where(x.fa, 0.0, per_score * m.num_heads * x.seq / t * T)
    return replicated + act + rotary + softmax + fp8_cast_bytes(model, x)


def fp8_cast_bytes(model: ModelSpec, x: PlanArrays):
    """FP8 recipes cast every GEMM operand: forward, the inputs of QKV, projection, up and down
    projections (read bf16, write fp8: 3 B/element); backward, the output gradients, cast and
    transposed (5 B/element). Weights are cast once per step (Transformer Engine caches them over
    micro-batches) and left out. Per layer, one micro-batch, one GPU, bytes of the forward
    (the backward's share is counted by the 2x backward rule); zero for bf16."""
    m = model
    T = tokens_per_gpu(x)
    t = x.tp.astype(float)
    q = m.num_heads * m.head_dim
    kv = m.num_kv_heads * m.head_dim
    up = (2 if m.gated else 1) * m.ffn_hidden_size
    fwd_in = (2 * m.hidden_size + q + m.ffn_hidden_size) / t
    bwd_out = ((q + 2 * kv) + 2 * m.hidden_size + up) / t
    total = T * (3.0 * fwd_in + 5.0 * bwd_out)
    return np.where(x.fp8 == 1, total / 3.0, 0.0)  # /3: the forward share (backward = 2x fwd)


def hbm_s(nbytes, cluster: ClusterSpec):
    """Time to stream ``nbytes`` at achievable HBM bandwidth."""
    return nbytes / (cluster.gpu.hbm_bandwidth_gbps * 1e9 * cluster.efficiency.hbm_eff)


def layer_times(model: ModelSpec, cluster: ClusterSpec, x: PlanArrays) -> dict:
    """Per layer, per micro-batch: forward and backward compute and memory-bound seconds,
    and what recomputation adds (per recomputed layer)."""
    gemm_f = layer_gemm_fwd_s(model, cluster, x)
    attn_f = attention_fwd_s(model, cluster, x)
    mem_f = hbm_s(layer_membound_fwd_bytes(model, x), cluster)
    attn_b = attn_f * np.where(x.fa, FA_BACKWARD_RATIO, 2.0)
    return {
        "compute_fwd_s": gemm_f + attn_f,
        "compute_bwd_s": 2.0 * gemm_f + attn_b,
        "membound_fwd_s": mem_f,
        "membound_bwd_s": 2.0 * mem_f,
        "attn_fwd_s": attn_f,
        # selective recomputation redoes the attention core (and its softmax without FA)
        "selective_extra_s": attn_f + np.where(x.fa, 0.0, mem_f * 0.5),
    }


def logits_times(model: ModelSpec, cluster: ClusterSpec, x: PlanArrays) -> dict:
    """Output layer + cross-entropy (last stage), per micro-batch: forward+backward seconds.

    The output GEMM stays in bf16 under FP8 recipes (Transformer Engine casts only the
    transformer-block linears). Cross-entropy over the vocabulary shard is memory-bound:
    about 10 bytes per logit forward (bf16 write, fp32 softmax) and 8 backward.
    """
    T = tokens_per_gpu(x)
    v_local = model.vocab_size / x.tp
    gemm = _gemm_s(T, model.hidden_size, v_local, cluster, np.zeros_like(x.fp8))
    ce = hbm_s(18.0 * T * v_local, cluster)
    return {"compute_s": 3.0 * gemm, "membound_s": ce}


def embedding_times(model: ModelSpec, cluster: ClusterSpec, x: PlanArrays) -> dict:
    """Embedding lookup and its gradient scatter (first stage): memory-bound, per micro-batch."""
    T = tokens_per_gpu(x)
    return {"compute_s": np.zeros_like(T), "membound_s": hbm_s(3.0 * 2 * T * model.hidden_size, cluster)}


def optimizer_s(params_local, cluster: ClusterSpec, x: PlanArrays):
    """Adam step over the local shard: read the gradient (2 or 4 B), read+write fp32 master,
    momentum, variance (24 B), write bf16 weights (2 B), and one more gradient read for the
    norm used by clipping."""
    gbytes = np.where(x.fp32_grads, 4.0, 2.0)
    shard = np.where(x.zero >= 1, params_local / x.dp, params_local)
    return hbm_s(shard * (2 * gbytes + 24.0 + 2.0), cluster)
