"""Compute and memory-bound time of one transformer layer, one micro-batch, on one GPU.

- Weight GEMMs: FLOPs per local GEMM (``2 * tokens * K * N`` with ``K x N`` the local weight
  shard) at ``peak * efficiency(min(K, N))`` — the calibrated curve of
  :class:`hardware.spec.EfficiencySpec` — and never faster than streaming the operands from HBM
  (roofline: ``max(compute, bytes / achievable HBM bandwidth)``).
- Attention products: ``2 * tokens * span * a * (hd + vd) / tp`` FLOPs forward
  (:func:`models.counting.attention_flops_per_token`; ``4 * tokens * s * a * hd`` for MHA,
  Narayanan et al. 2021); a causal FlashAttention kernel skips the masked half and, on
  sliding-window/chunked layers (GPT-OSS, Gemma, Llama 4), everything outside the window. Without
  FlashAttention the whole ``s x s`` scores are materialised on every layer (a window is only a
  mask) and softmax/dropout are priced as memory-bound work.
- Memory-bound work (norms, residual adds, dropout, activation functions, rotary, softmax without
  FlashAttention) in bytes moved per token, priced at ``hbm_bandwidth * hbm_eff``. With sequence
  parallelism the norm/residual/dropout region is split over ``tp`` (Korthikanti et al. 2022).
- Backward = 2 x forward for GEMMs and element-wise work; FlashAttention's backward does 2.5 x its
  forward matrix work (it recomputes ``QK^T``; Dao 2023, FlashAttention-2, Sec. 3).
- Precision recipes (:data:`RECIPES`, ``Plan.precision``): the transformer-block linears (QKV,
  output projection, MLP up/down; forward, data- and weight-gradient GEMMs) run at the recipe's
  peak; the attention core (``QK^T``, ``AV``, softmax), the embedding, the output layer and the
  loss stay bf16, as Transformer Engine runs them (TE quantizes ``te.Linear`` GEMMs only; the
  NVFP4 recipe, arXiv 2509.25149 Sec. 4, keeps attention, embeddings and the output head in
  bf16), and ``Plan.bf16_layers`` whole layers stay bf16 (``x.bf16_frac`` of them, averaged over
  the layers). Quantizing costs memory-bound time: casting every GEMM input and output gradient
  (:func:`lowp_cast_bytes`) and the weights once per step (:func:`weight_cast_s`); the quantized
  weight copies cost memory (:func:`lowp_weight_copy_bytes`).
All functions return seconds as numpy arrays over the candidates of a :class:`PlanArrays`.
"""

from __future__ import annotations

import numpy as np

from plan_search.hardware.spec import ClusterSpec
from plan_search.models import counting
from plan_search.models.spec import ModelSpec

from plan_search.planner.costmodel.arrays import PlanArrays
from plan_search.planner.costmodel.plan import MASTER_WEIGHT_BYTES

BF16_BYTES = 2
FA_BACKWARD_RATIO = 2.5  # FlashAttention-2 backward / forward matmul work (Dao 2023, Sec. 3)

#: Precision recipes by ``PlanArrays.fp8`` code (``plan.PRECISION_CODES``). Per recipe:
#: ``peak`` the tensor-core peak its GEMMs run at; ``block`` needs hardware block scaling
#: (``gpu.block_scaling``); ``elem_bytes`` bytes per quantized element incl. its scale factors
#: (MXFP8: E4M3 + one E8M0 scale per 32 elements = 1 + 1/32; NVFP4: E2M1 + one E4M3 scale per 16
#: = 0.5 + 1/16, plus one FP32 per tensor; OCP MX spec v1.0; arXiv 2509.25149 Sec. 2);
#: ``cast_fwd``/``cast_bwd`` bytes moved per element to quantize one GEMM input (forward) and one
#: output gradient (backward): read bf16 (2), write the copies -- per-tensor FP8 casts the input once
#: (+1) and the gradient plus its transpose (+2, Hopper's FP8 GEMMs take only the TN layout); current
#: scaling first reads the tensor once more for its amax (+2; TE Float8CurrentScaling), delayed
#: scaling takes the amax from its history inside the cast kernel; MXFP8 and NVFP4 write a row-wise
#: and a column-wise block-scaled copy (blocks run along the reduction dimension, which differs
#: for the wgrad GEMM: TE quantizes both usages); NVFP4 reads the tensor once more for the per-tensor
#: amax of its second-level scale (+2), the Hadamard transform of the wgrad inputs is fused;
#: ``weight_copy`` bytes per parameter of the quantized weight copies TE keeps for the step
#: (per-tensor FP8: the FP8 weight and, on Hopper, its transpose; MX/NV: row- and column-wise).
RECIPES = {
    0: dict(name="bf16", peak="bf16", block=False, elem_bytes=2.0, cast_fwd=0.0, cast_bwd=0.0, weight_copy=0.0),
    1: dict(name="fp8-delayed", peak="fp8", block=False, elem_bytes=1.0, cast_fwd=3.0, cast_bwd=5.0, weight_copy=2.0),
    2: dict(name="fp8-current", peak="fp8", block=False, elem_bytes=1.0, cast_fwd=5.0, cast_bwd=7.0, weight_copy=2.0),
    3: dict(name="mxfp8", peak="fp8", block=True, elem_bytes=1.0 + 1.0 / 32, cast_fwd=2.0 + 2 * (1.0 + 1.0 / 32),
            cast_bwd=2.0 + 2 * (1.0 + 1.0 / 32), weight_copy=2 * (1.0 + 1.0 / 32)),
    4: dict(name="nvfp4", peak="fp4", block=True, elem_bytes=0.5 + 1.0 / 16, cast_fwd=4.0 + 2 * (0.5 + 1.0 / 16),
            cast_bwd=4.0 + 2 * (0.5 + 1.0 / 16), weight_copy=2 * (0.5 + 1.0 / 16)),
}
RECIPE_NEEDS = {"fp8": "fp8", "fp8-delayed": "fp8", "fp8-current": "fp8", "mxfp8": "mxfp8", "nvfp4": "nvfp4"}


def _recipe_table(key: str, codes, cluster: ClusterSpec | None = None):
    """``RECIPES[code][key]`` for an array of codes (per-tensor FP8 weight copies: no transpose on
    Blackwell, whose FP8 GEMMs take every layout)."""
    codes = np.asarray(codes)
    vals = np.array([RECIPES[c][key] for c in range(len(RECIPES))], dtype=float)
    if key == "weight_copy" and cluster is not None and cluster.gpu.block_scaling:
        vals[1] = vals[2] = 1.0
    return vals[np.clip(codes, 0, len(RECIPES) - 1)]


def supports_precision(cluster: ClusterSpec, precision: str) -> bool:
    """Can this GPU run the recipe: fp16/bf16 always; fp8 recipes need an fp8 peak; mxfp8 block
    scaling and fp8; nvfp4 block scaling and an fp4 peak."""
    need = RECIPE_NEEDS.get(precision)
    gpu = cluster.gpu
    if need is None:
        return True
    if need == "fp8":
        return "fp8" in gpu.peak_tflops
    if need == "mxfp8":
        return gpu.block_scaling and "fp8" in gpu.peak_tflops
    return gpu.block_scaling and "fp4" in gpu.peak_tflops


def check_precision(cluster: ClusterSpec, precision: str) -> None:
    """One line naming the catalog GPUs that have the recipe when this one does not."""
    if supports_precision(cluster, precision):
        return
    from plan_search.hardware.catalog import load_catalog
    from plan_search.models.io import InputError

    have = [n for n, c in load_catalog().items() if supports_precision(c, precision)]
    what = {"fp8": "FP8 tensor cores", "mxfp8": "block-scaled (MX) FP8 tensor cores",
            "nvfp4": "FP4 tensor cores with block scaling"}[RECIPE_NEEDS[precision]]
    raise InputError(f"precision: {cluster.name} ({cluster.gpu.name}) has no {what} for {precision}; "
                     f"GPUs with it: {', '.join(have)}; or use bf16")


def gemm_efficiency(dim, cluster: ClusterSpec):
    """Fraction of dense peak a GEMM reaches when its smaller weight dimension is ``dim``."""
    e = cluster.efficiency
    return e.gemm_eff_max * (1.0 - np.exp(-np.asarray(dim, dtype=float) / e.gemm_dim_scale))


def _gemm_s(tokens, k, n, cluster: ClusterSpec, fp8):
    """One local GEMM of ``tokens x k`` by ``k x n`` in recipe ``fp8`` (a ``PlanArrays.fp8``
    code; 0 = bf16): roofline of compute and HBM traffic. Low-precision GEMMs run at their
    recipe's peak times ``fp8_gemm_eff_ratio`` (one ratio for FP8 and FP4: not fitted, no
    published FP4 GEMM efficiency in the calibration data) and read quantized operands."""
    gpu, e = cluster.gpu, cluster.efficiency
    flops = 2.0 * tokens * k * n
    peak_bf16 = gpu.peak("bf16") * 1e12
    if not np.any(fp8):  # all 16-bit (the common case of a search): no recipe tables
        eff = gemm_efficiency(np.minimum(k, n), cluster)
        traffic = (k * n + tokens * (k + n)) * BF16_BYTES
        return np.maximum(flops / (peak_bf16 * eff), traffic / (gpu.hbm_bandwidth_gbps * 1e9 * e.hbm_eff))
    peaks = np.array([peak_bf16] + [gpu.peak_tflops.get(RECIPES[c]["peak"], gpu.peak("bf16")) * 1e12
                                    for c in range(1, len(RECIPES))])
    code = np.clip(np.asarray(fp8), 0, len(RECIPES) - 1)
    eff = gemm_efficiency(np.minimum(k, n), cluster)
    rate = np.where(code > 0, peaks[code] * eff * e.fp8_gemm_eff_ratio, peak_bf16 * eff)
    qbytes = _recipe_table("elem_bytes", code)
    traffic = k * n * qbytes + tokens * (k * qbytes + n * BF16_BYTES)
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
    def linears(code):
        qkv = _gemm_s(T, m.hidden_size, (q + 2 * kv) / t, cluster, code)
        proj = _gemm_s(T, q / t, m.hidden_size, cluster, code)
        fc1 = _gemm_s(T, m.hidden_size, mats_up * m.ffn_hidden_size / t, cluster, code)
        fc2 = _gemm_s(T, m.ffn_hidden_size / t, m.hidden_size, cluster, code)
        return qkv + proj + fc1 + fc2

    low = linears(x.fp8)
    f = np.where(x.fp8 > 0, x.bf16_frac, 0.0)
    if not np.any(f):
        return low
    return np.where(f > 0, (1.0 - f) * low + f * linears(np.zeros_like(x.fp8)), low)


def attention_fwd_flops(model: ModelSpec, x: PlanArrays):
    """FLOPs of ``QK^T`` and ``A V`` of one layer (the mean over the model's layers), one
    micro-batch, one GPU (work done), from :mod:`models.counting` (``2 * span * a * (hd + vd)`` per
    token: ``a * hd`` need not be ``h``, MLA's ``A V`` runs at ``v_head_dim``). FlashAttention
    skips the masked blocks: the causal span, local layers only their window
    (:func:`counting.attention_flops_per_token` with ``causal=True``). Unfused attention computes
    the whole ``s x s`` square on every layer, windowed or not (the window is a mask there;
    :func:`counting.attention_span`)."""
    T = tokens_per_gpu(x)
    fused = counting.attention_flops_per_token(model, x.seq, causal=True) / model.num_layers
    if model.is_sparse_attention:  # DSA's indexer and sparse kernels are fused kernels of their own
        return T * fused / x.tp
    unfused = counting.attention_products_flops_per_token(model, x.seq.astype(float))  # span s: the square
    return T * np.where(x.fa, fused, unfused) / x.tp


#: cuDNN's fused-attention (SDPA) rate on GH100 by release (``Plan.cudnn_sdpa``: 9.1, 9.19), relative to
#: 9.1, the release of the 2024 containers the built-in efficiencies were fitted on (NeMo 24.03-24.07,
#: Megatron-Core r0.8: Transformer Engine 1.x selects cuDNN's FusedAttention on sm90, attention.py "Select
#: FusedAttention on sm90 ... for performance", NVIDIA/TransformerEngine v1.2-v1.8). NVIDIA's own benchmarks,
#: bf16, causal, head dim 128, 8K tokens, on H200: cuDNN 9.1 572.9 / 463.5 TFLOP/s forward / backward
#: (NVIDIA/cudnn-frontend@505fcfe benchmark/benchmark_results.csv, 2024-05, locked clocks, 16 heads);
#: cuDNN 9.19 644 / 541 (@3929da2 benchmark/sdpa_benchmark_training/results/h200_919_only_cudnn/
#: llama3.1_20260227_034703.csv, bfloat16 top_left, Llama-3.1 64/8 heads, 2026-02). Weighted 1 :
#: FA_BACKWARD_RATIO as the cost model prices the backward: 490.3 and 566.9 TFLOP/s, ratio 1.156 (at 16K:
#: 520 and 603, 1.159). The ratio, not either rate, is applied: the absolute rate stays the profile's
#: ``attention_eff`` (the fits' prior), so only a release change moves a prediction.
CUDNN_SDPA_SPEEDUP = (1.0, 1.156)


def cudnn_sdpa_speedup(cluster: ClusterSpec, x: PlanArrays):
    """Factor on the fused-attention rate for the plan's cuDNN release (:data:`CUDNN_SDPA_SPEEDUP`):
    Hopper parts (``GPUSpec.architecture``: the GH100 die the benchmarks ran on) with Transformer Engine's kernels only (profile
    ``kernel_fusion`` fused; torchtitan's SDPA is FlashAttention, not cuDNN); 1 elsewhere (Blackwell has
    no cuDNN 9.1 measurement: its fitted attention rate is already that of the 2025-26 releases)."""
    if cluster.efficiency.kernel_fusion != "fused" or cluster.gpu.architecture != "hopper":
        return 1.0
    return np.asarray(CUDNN_SDPA_SPEEDUP)[x.sdpa]


#: Speed-up of cuDNN's FP8 fused attention over its BF16 one on Blackwell (Plan ``fp8_attention``,
#: Transformer Engine's FP8 dot-product attention), by the sequence length each rank attends over
#: (``seq / cp``): NVIDIA's training SDPA benchmark, FP8 and BF16 rows measured in the same run, causal,
#: 128 query / 8 KV heads, head dim 128, batch 1 (NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/
#: artifacts/sdpa_fp8_benchmark_results_NVIDIA_{B200,GB300}.csv@0b1577c, ..._GB200.csv@d48a60e). Each value
#: is the BF16 forward + backward time over the FP8 one, the mean of the three GPUs (B200 / GB200 / GB300 at
#: 4,096 tokens: 1.146 / 1.068 / 1.212; at 8,192: 1.217 / 1.075 / 1.291): FP8 loses below ~1K tokens (its
#: quantization passes) and gains with the quadratic work. Interpolated in log2 of the length, held at the
#: ends. The other architectures have no published FP8 attention measurement: 1.
FP8_SDPA_SPEEDUP = ((512, 0.874), (1024, 1.006), (2048, 1.046), (4096, 1.142), (8192, 1.195), (16384, 1.218),
                    (32768, 1.260), (65536, 1.290), (131072, 1.367))


def fp8_sdpa_speedup(cluster: ClusterSpec, x: PlanArrays):
    """Factor on the fused-attention rate with Plan ``fp8_attention`` (:data:`FP8_SDPA_SPEEDUP`):
    Blackwell parts with Transformer Engine's kernels (profile ``kernel_fusion`` fused); 1 elsewhere, and
    where no candidate sets the knob (a search's default: no per-row interpolation on its hot path)."""
    if cluster.efficiency.kernel_fusion != "fused" or cluster.gpu.architecture != "blackwell" \
            or not np.any(x.fp8_attn):
        return 1.0
    seqs, ratios = zip(*FP8_SDPA_SPEEDUP)
    per_rank = np.log2(np.maximum(x.seq / np.maximum(x.cp, 1), 1.0))
    return np.where(x.fp8_attn, np.interp(per_rank, np.log2(seqs), ratios), 1.0)


def attention_fwd_s(model: ModelSpec, cluster: ClusterSpec, x: PlanArrays):
    e = cluster.efficiency
    fused = e.attention_eff * cudnn_sdpa_speedup(cluster, x) * fp8_sdpa_speedup(cluster, x)
    rate = cluster.gpu.peak("bf16") * 1e12 * np.where(x.fa, fused, e.bmm_attention_eff)
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
    return replicated + act + rotary + softmax + lowp_cast_bytes(model, x)


def unfused_membound_fwd_bytes(model: ModelSpec, cluster: ClusterSpec, x: PlanArrays):
    """Element-wise bytes a framework moves beyond the fused kernels :func:`layer_membound_fwd_bytes`
    counts (Transformer Engine / Megatron: RMSNorm read+write, fused RoPE and SwiGLU, GQA without
    copies), per layer, forward, one micro-batch, one GPU; by ``efficiency.kernel_fusion``:

    - ``fused``: none.
    - ``compiled`` (torch.compile of each block, torchtitan): Inductor fuses each element-wise chain
      into one kernel, as TE does, but the GQA keys and values are expanded to all heads before SDPA
      (torchtitan ``repeat_kv``: ``expand().reshape()`` copies): values read ``2 kv``, write ``2 q``;
      keys write ``2 q`` instead of ``2 kv`` in the fused RoPE kernel: ``4 q`` bytes per token.
    - ``eager`` (PyTorch ops, each a pass over HBM; torchtitan @9dec370 models/llama/model.py and
      models/norms.py): per RMSNorm ``x.float()`` (read 2h, write 4h), ``pow(2)`` (4h, 4h),
      ``mean`` (4h), ``x * rsqrt`` (4h, 4h), ``type_as`` (4h, 2h), ``* weight`` (2h, 2h): 36h
      bytes where the fused kernel moves 4h (two norms: +64h); RoPE on q and k
      (``apply_rotary_emb``): ``float()`` 6, complex multiply 8, ``type_as`` 6 = 20 bytes per element
      where the fused kernel moves 4 (+16 (q + kv)); ``repeat_kv`` copies of keys and values
      (+4 (q + kv) with GQA); SwiGLU ``silu`` (read 2f, write 2f) then the product (4f, 2f) = 10f
      where the fused kernel moves 6f (+4f). Residual adds are one kernel either way. Models with
      LayerNorm or GELU (single ATen kernels) add none for those. The Float8 casts of an eager
      torchao run are priced as the compiled ones (no eager Float8 run in the calibration data).
    Sequence parallelism splits the norm region over ``tp`` as in :func:`layer_membound_fwd_bytes`."""
    mode = cluster.efficiency.kernel_fusion
    T = tokens_per_gpu(x)
    if mode == "fused":
        return np.zeros_like(T)
    m = model
    t = x.tp.astype(float)
    q = m.num_heads * m.head_dim
    kv = m.num_kv_heads * m.head_dim
    gqa = m.num_kv_heads < m.num_heads
    if mode == "compiled":
        return (4.0 * q / t * T) if gqa else np.zeros_like(T)
    norms = 64.0 * m.hidden_size * T if m.norm == "rmsnorm" else np.zeros_like(T)
    norms = np.where(x.sp, norms / t, norms)
    rope = 16.0 * (q + kv) / t * T if m.position == "rotary" else 0.0
    copies = 4.0 * (q + kv) / t * T if gqa else 0.0
    act = 4.0 * m.ffn_hidden_size / t * T if m.gated else 0.0
    return norms + rope + copies + act


#: Time per query row and head of a sliding-window layer's fused attention (cuDNN SDPA, Transformer
#: Engine's FusedAttention), forward / backward, seconds: NVIDIA's own measurement of GPT-OSS's window
#: layer (NVIDIA/cudnn-frontend@3929da2 benchmark/sdpa_benchmark_training/results/gpt_oss/gb200/
#: gpt_oss_20260424_100011.csv, cuDNN 9.22, bf16, top_left causal, window 128, head dim 64, batch 2 x 128
#: heads x 4,096 tokens, non-deterministic: 0.210 ms forward, 0.465 ms backward; 8,192 tokens 0.414 /
#: 0.911: linear in the rows). That is 161 / 182 TFLOP/s on the window's FLOPs, against 1,408 / 1,148 for a
#: full causal layer at head dim 128 (llama3.1/gb200 in the same run): a 128-token window touches two
#: 128 x 128 key blocks per query block and its time is the blocks' fixed per-tile work, not the FLOPs
#: the window count prices. The other parts are within 6%: GB300 0.202 / 0.442 ms (gpt_oss/gb300), H200
#: 0.358 ms forward + backward for 2 x 64 heads (h200_919_only_cudnn/gpt_oss_20260227_034819.csv, cuDNN
#: 9.19: 6.8e-10 s per row and head against GB200's 6.4e-10). Applied as a floor on a local layer's
#: attention time: it binds only for short windows (a 1,024-token window's FLOPs already take longer).
WINDOW_ROW_FWD_S = 0.210e-3 / (2 * 128 * 4096)
WINDOW_ROW_BWD_S = 0.465e-3 / (2 * 128 * 4096)


def window_floor_s(model: ModelSpec, x: PlanArrays, attn_fwd_s) -> tuple:
    """(forward, backward) seconds the local (sliding-window / chunked) layers' fused attention takes
    beyond their FLOP price (their share of ``attn_fwd_s``, :func:`attention_fwd_s`'s mean per layer;
    backward ``FA_BACKWARD_RATIO`` x), per layer (the mean over the model's layers), one micro-batch, one
    GPU: each local layer at least :data:`WINDOW_ROW_FWD_S` / :data:`WINDOW_ROW_BWD_S` per query row and
    head. Zero without local layers and without FlashAttention-style fused attention
    (``Plan.flash_attention`` off computes the whole square)."""
    n_local = model.num_local_attention_layers
    if not n_local:
        return 0.0, 0.0
    rows = tokens_per_gpu(x) * model.num_heads / x.tp
    local = n_local * counting.attention_span(model, x.seq, causal=True, local=True)
    priced = attn_fwd_s * model.num_layers * local / counting.total_attention_span(model, x.seq, causal=True)
    fa = np.where(x.fa, 1.0 / model.num_layers, 0.0)  # per layer: the mean over the layers
    return (fa * np.maximum(n_local * rows * WINDOW_ROW_FWD_S - priced, 0.0),
            fa * np.maximum(n_local * rows * WINDOW_ROW_BWD_S - FA_BACKWARD_RATIO * priced, 0.0))


#: Bytes per query/key element that Megatron-Core's unfused rotary embedding moves beyond the fused
#: kernel's (read + write, 4 B forward, 8 B backward: :func:`layer_membound_fwd_bytes`' ``rotary`` and the
#: 2x backward rule), bf16 (2 B). Megatron-LM and Megatron-Bridge run RoPE fused only for
#: ``position_embedding_type`` rope: a YaRN model (GPT-OSS, ``yarn``) runs it unfused
#: (NVIDIA/Megatron-LM@core_v0.15.3 and @core_v0.18.0 megatron/training/arguments.py: ``if
#: args.position_embedding_type != 'rope': args.apply_rope_fusion = False``; NVIDIA-NeMo/Megatron-Bridge
#: src/megatron/bridge/utils/fusions.py ``validate_rope_fusion_compatibility``, called by
#: ``GPTModelProvider.provide``, at 0465189 (r0.2.0, NeMo 25.11), 8301abf (r0.3.0), 3743c70 (r0.4.0) and
#: f83545d (r0.5.0, NeMo 26.06), overriding the perf scripts' ``apply_rope_fusion = True``; the gpt_oss
#: provider/bridge sets ``position_embedding_type = "yarn"`` at each). The unfused path,
#: ``_apply_rotary_pos_emb_bshd`` + ``_rotate_half`` (megatron/core/models/common/embeddings/rope_utils.py,
#: identical at core_v0.15.3, core_v0.16.0, core_v0.17.0, core_v0.18.0), on each of q and k: ``t * cos_``
#: (read 2, write 2), ``-x2`` on half the elements (1 + 1), ``torch.cat((-x2, x1))`` (2 + 2), ``* sin_``
#: (2 + 2), the sum (4 + 2), ``torch.cat((t, t_pass))`` with an empty ``t_pass`` (2 + 2): 24 B, 20 more than
#: the fused 4. Autograd's backward: ``grad * sin_`` (4), the negation's (2), ``chunk``'s backward
#: concatenating the halves (4), ``grad * cos_`` (4), the two gradients of ``t`` summed (6): 20 B, 12 more
#: than the 8 priced (the ``cos``/``sin`` tables are per position, not per head: left out; so is the
#: zero-filled gradient of the empty ``t_pass`` slice, which autograd may also materialise). MLA
#: (DeepSeek-V3, Kimi-K2) rotates its own rope heads in its own path (YaRN fused there:
#: transformer_config.py ``MLATransformerConfig``), so this applies outside MLA only.
UNFUSED_ROPE_FWD_BYTES = 20.0
UNFUSED_ROPE_BWD_BYTES = 12.0


def yarn_rope_bytes(model: ModelSpec, cluster: ClusterSpec, x: PlanArrays) -> tuple:
    """(forward, backward) bytes Megatron-Core's unfused YaRN rotary embedding adds to one layer, one
    micro-batch, one GPU (:data:`UNFUSED_ROPE_FWD_BYTES`, :data:`UNFUSED_ROPE_BWD_BYTES` per query and key
    element): zero without ``rope_scaling`` yarn, for MLA, where the plan fuses it (``Plan.yarn_rope_fused``),
    and outside Transformer Engine's fused kernels (``kernel_fusion`` compiled fuses it; eager already
    prices an eager RoPE in :func:`unfused_membound_fwd_bytes`)."""
    if model.rope_scaling != "yarn" or model.is_mla or cluster.efficiency.kernel_fusion != "fused":
        return 0.0, 0.0
    heads = (model.num_heads + model.num_kv_heads) / x.tp
    elems = np.where(x.yarn_fused, 0.0, 1.0) * heads * model.head_dim * tokens_per_gpu(x)
    return UNFUSED_ROPE_FWD_BYTES * elems, UNFUSED_ROPE_BWD_BYTES * elems


def lowp_cast_bytes(model: ModelSpec, x: PlanArrays):
    """Low-precision recipes quantize every GEMM operand: forward, the inputs of QKV, projection,
    up and down projections; backward, the output gradients (``cast_fwd`` / ``cast_bwd`` bytes per
    element, :data:`RECIPES`: 3 and 5 for delayed-scaling FP8). Weights are quantized once per
    step (:func:`weight_cast_s`; Transformer Engine caches them over micro-batches). Per layer,
    one micro-batch, one GPU, bytes of the forward (the backward's share is counted by the 2x
    backward rule), averaged over the layers kept in bf16 (none cast); zero for bf16."""
    m = model
    T = tokens_per_gpu(x)
    t = x.tp.astype(float)
    q = m.num_heads * m.head_dim
    kv = m.num_kv_heads * m.head_dim
    up = (2 if m.gated else 1) * m.ffn_hidden_size
    fwd_in = (2 * m.hidden_size + q + m.ffn_hidden_size) / t
    bwd_out = ((q + 2 * kv) + 2 * m.hidden_size + up) / t
    total = T * (_recipe_table("cast_fwd", x.fp8) * fwd_in + _recipe_table("cast_bwd", x.fp8) * bwd_out)
    lowp = lowp_share(x)
    return lowp * total / 3.0  # /3: the forward share (backward = 2x fwd)


fp8_cast_bytes = lowp_cast_bytes  # the name before issue 12


def lowp_share(x: PlanArrays):
    """Share of the transformer layers whose GEMMs run in the plan's low-precision recipe: ``1 -
    bf16_frac`` under a low-precision recipe (``Plan.bf16_layers`` stay bf16), 0 in bf16."""
    return np.where(x.fp8 > 0, 1.0 - x.bf16_frac, 0.0)


def gemm_input_bytes(x: PlanArrays):
    """Bytes per element of a GEMM input kept for the backward: bf16 (2), or the recipe's quantized
    copy (Transformer Engine saves the quantized input: FP8 1, MXFP8 1 + 1/32, NVFP4 0.5 + 1/16),
    averaged with the layers kept in bf16."""
    if not np.any(x.fp8):
        return BF16_BYTES
    f = np.where(x.fp8 > 0, x.bf16_frac, 1.0)
    return (1.0 - f) * _recipe_table("elem_bytes", x.fp8) + f * BF16_BYTES


def lowp_weight_copy_bytes(params_local, x: PlanArrays, cluster: ClusterSpec):
    """Memory the quantized weight copies of a low-precision recipe add to the bf16 weights, per
    GPU: ``weight_copy`` bytes per parameter (:data:`RECIPES`), less the 2-byte bf16 weight when
    the recipe keeps the weights only in low precision (``Plan.lowp_params``: Megatron
    ``--fp8-param-gather``, set by Megatron-Bridge's FP8 and MXFP8 recipes; not for NVFP4, whose
    recipe sets ``fp8_param_gather=False``), for the parameters this GPU holds (its ``1/dp``
    shard under ZeRO-3/FSDP: gathered copies are transient) outside the bf16 layers. Zero for
    bf16; negative where the copy is smaller than the bf16 weight it replaces (FP8 on Blackwell,
    no transpose)."""
    psi = np.where(x.zero >= 3, params_local / np.maximum(x.dp, 1), params_local)
    lowp = lowp_share(x)
    replaces = np.where(x.lowp_params & (x.fp8 > 0) & (x.fp8 < 4), BF16_BYTES, 0.0)
    return (_recipe_table("weight_copy", x.fp8, cluster) - replaces) * psi * lowp


def weight_cast_s(params_local, cluster: ClusterSpec, x: PlanArrays):
    """Quantizing the weights once per step (after the optimizer): read the bf16 weights (2 B) and
    write the copies; current scaling and NVFP4 read them once more for the amax (+2 B)."""
    psi = np.where(x.zero >= 3, params_local / np.maximum(x.dp, 1), params_local)
    amax = np.where((x.fp8 == 2) | (x.fp8 == 4), 2.0, 0.0)
    per_param = np.where(x.fp8 > 0, 2.0 + amax + _recipe_table("weight_copy", x.fp8, cluster), 0.0)
    return hbm_s(psi * lowp_share(x) * per_param, cluster)


def hbm_s(nbytes, cluster: ClusterSpec):
    """Time to stream ``nbytes`` at achievable HBM bandwidth."""
    return nbytes / (cluster.gpu.hbm_bandwidth_gbps * 1e9 * cluster.efficiency.hbm_eff)


def layer_times(model: ModelSpec, cluster: ClusterSpec, x: PlanArrays) -> dict:
    """Per layer, per micro-batch: forward and backward compute and memory-bound seconds,
    and what recomputation adds (per recomputed layer)."""
    gemm_f = layer_gemm_fwd_s(model, cluster, x)
    attn_f = attention_fwd_s(model, cluster, x)
    rope_f, rope_b = yarn_rope_bytes(model, cluster, x)
    win_f, win_b = window_floor_s(model, x, attn_f)
    attn_f = attn_f + win_f
    mem_f = hbm_s(layer_membound_fwd_bytes(model, x) + unfused_membound_fwd_bytes(model, cluster, x), cluster)
    attn_b = np.where(x.fa, (attn_f - win_f) * FA_BACKWARD_RATIO + win_b, attn_f * 2.0)
    return {
        "compute_fwd_s": gemm_f + attn_f,
        "compute_bwd_s": 2.0 * gemm_f + attn_b,
        "membound_fwd_s": mem_f + hbm_s(rope_f, cluster),
        "membound_bwd_s": 2.0 * mem_f + hbm_s(rope_b, cluster),
        "attn_fwd_s": attn_f,
        # selective recomputation redoes the attention core (and its softmax without FA); a named module set
        # and torchtitan's op-level SAC: recompute.selective_extra_s
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


def optimizer_state_bytes_per_param(moment_bytes, master_bytes=MASTER_WEIGHT_BYTES["fp32"]):
    """Adam's optimizer states per parameter: the master weights (``master_bytes``: 4 fp32, 2 as bf16
    remainders, 0 without)
    plus two moments of ``moment_bytes`` each (``PlanArrays.moment_bytes``: 4 fp32, the Megatron-Core
    default; 2 bf16, ``--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16``, DeepSeek-V3's): 12, 8 or 4 B."""
    return np.asarray(master_bytes, dtype=float) + 2.0 * np.asarray(moment_bytes, dtype=float)


def optimizer_s(params_local, cluster: ClusterSpec, x: PlanArrays):
    """Adam step over the local shard: read the gradient (2 or 4 B), read+write the optimizer
    states (master, momentum, variance: 2 x 12 B, 2 x 8 B with bf16 moments), write the bf16
    weights (2 B; read them too without master weights), and one more gradient read for the norm
    used by clipping."""
    gbytes = np.where(x.fp32_grads, 4.0, 2.0)
    shard = np.where(x.zero >= 1, params_local / x.dp, params_local)
    states = optimizer_state_bytes_per_param(x.moment_bytes, x.master_bytes)
    weights = np.where(x.master_bytes > 0, 2.0, 4.0)
    return hbm_s(shard * (2 * gbytes + 2.0 * states + weights), cluster)
