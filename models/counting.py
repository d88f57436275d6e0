"""Parameter and FLOP counting: every derived figure of a :class:`~models.spec.ModelSpec`, once.

The cost model, the search and the CLI call these functions; none of them re-derives a count.

Formulas (see ``README`` and ``../shared/reference/cost-model.md``):

- Attention parameters per layer (``a`` query heads, ``g`` key/value heads, query/key head width
  ``hd``, value head width ``vd``): ``h*a*hd + h*g*hd + h*g*vd + a*vd*h`` (= ``4h^2`` for MHA
  with ``a*hd = h``). ``a*hd`` need not equal ``h`` (Qwen3, GPT-OSS). Per-head Q/K RMSNorms
  (Qwen3) add ``2*hd``, attention sinks (GPT-OSS) one logit per head.
- Multi-head latent attention (DeepSeek-V2 arXiv 2405.04434 Sec. 2.1; the projections of HF
  ``modeling_deepseek_v3.DeepseekV3Attention``): queries ``h -> q_lora_rank -> a*hd`` (or one
  ``h -> a*hd`` projection when ``q_lora_rank`` is None), keys/values
  ``h -> kv_lora_rank + qk_rope_head_dim`` then ``kv_lora_rank -> a*(qk_nope_head_dim + vd)``,
  output ``a*vd -> h``; the two latents carry an RMSNorm each. Training computes every projection
  for every token (no weight absorption), so the GEMM FLOPs follow the weights.
- MLP parameters: ``2*h*f`` (GeLU, squared ReLU) or ``3*h*f`` (gated: SwiGLU/GeGLU); one routed
  expert, a shared expert and a dense MLP are all such MLPs. A MoE layer adds the router
  (``h*E`` weights, plus ``E`` for a router bias, plus ``E`` for DeepSeek-V3's aux-loss-free
  balancing bias) and Qwen2-MoE's shared-expert gate (``h``).
- Multi-token prediction (DeepSeek-V3, arXiv 2412.19437 Sec. 2.2): each depth has two RMSNorms,
  a ``2h -> h`` projection, one transformer block (a MoE block in a MoE model) and a final
  RMSNorm; embedding and output head are shared with the main model. MTP parameters are *not*
  in :func:`total_params` (DeepSeek-V3's 671B excludes them), see :func:`mtp_params`.
- Forward FLOPs of a matrix multiply = 2 x (multiply-accumulates); the Megatron-LM count
  (Narayanan et al. 2021, SC21, eq. 3) counts matrix multiplies only: biases, norms and
  element-wise work are priced separately by the cost model as memory-bound work.
- Attention products (``QK^T`` and ``A V``): ``2*span*a*(hd + vd)`` FLOPs per token and layer
  forward, where ``span`` is the number of keys a query is charged for (:func:`attention_span`):
  ``s`` with full (non-causal) counting, as Narayanan et al. count them, ``s/2`` with causal
  counting (the work a causal FlashAttention kernel actually does); local layers (sliding window
  ``w``, chunks of ``c``) are charged their window. Non-causal counting is 2x the causal span
  for every kind, so dense full-attention counts are unchanged. An unfused kernel does not skip
  the window (it masks the whole ``s x s`` square): the cost model charges it the square
  (:func:`attention_span`).
- Backward = 2 x forward. Full recomputation adds one forward of the transformer layers (not the
  logits layer); selective recomputation (Korthikanti et al. 2022) adds the attention products only.
"""

from __future__ import annotations

import math
from typing import Literal, NamedTuple

import numpy as np

from plan_search.models.spec import ModelSpec

Recompute = Literal["none", "selective", "full"]


# ---------------------------------------------------------------- attention shapes
class AttentionWidths(NamedTuple):
    """Per-token activation widths of one attention layer (elements, not bytes).

    ``q``, ``k``, ``v``: the query, key and value tensors the attention kernel reads
    (MLA: the decompressed per-head keys and values); ``out``: the kernel's output (``a*vd``),
    the input of the output projection; ``latent``: MLA's compressed query + key/value latents
    (``q_lora_rank + kv_lora_rank + qk_rope_head_dim``), 0 without MLA.
    """

    q: int
    k: int
    v: int
    out: int
    latent: int


def attention_widths(m: ModelSpec) -> AttentionWidths:
    a, g, hd, vd = m.num_heads, m.num_kv_heads, m.head_dim, m.v_head_dim
    latent = (m.q_lora_rank or 0) + m.kv_lora_rank + m.qk_rope_head_dim if m.is_mla else 0
    return AttentionWidths(q=a * hd, k=g * hd, v=g * vd, out=a * vd, latent=latent)


def attention_gemm_weights(m: ModelSpec) -> int:
    """Weights of one layer's attention projections (what the per-token GEMMs multiply by)."""
    h, a, hd, vd = m.hidden_size, m.num_heads, m.head_dim, m.v_head_dim
    if m.is_mla:
        q = h * m.q_lora_rank + m.q_lora_rank * a * hd if m.q_lora_rank else h * a * hd
        kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank * a * (m.qk_nope_head_dim + vd)
        return q + kv + a * vd * h + indexer_gemm_weights(m)
    g = m.num_kv_heads
    return h * a * hd + h * g * hd + h * g * vd + a * vd * h


def indexer_gemm_weights(m: ModelSpec) -> int:
    """DeepSeek Sparse Attention's lightning indexer (DeepSeek-V3.2 inference/model.py ``Indexer``): ``wq_b``
    from the query latent to ``index_n_heads x index_head_dim``, ``wk`` from the hidden state to one key of
    ``index_head_dim``, ``weights_proj`` from the hidden state to one weight per indexer head. 0 without DSA."""
    if not m.is_sparse_attention:
        return 0
    q_in = m.q_lora_rank or m.hidden_size
    return q_in * m.index_n_heads * m.index_head_dim + m.hidden_size * m.index_head_dim + m.hidden_size * m.index_n_heads


# ---------------------------------------------------------------- parameters
def attention_params(m: ModelSpec) -> int:
    """Q, K, V and output projection weights (+ biases, Q/K norms, sinks, MLA latent norms) of one layer."""
    w = attention_widths(m)
    weights = attention_gemm_weights(m)
    if m.is_mla:
        # HF DeepseekV3Attention: attention_bias on q_a_proj / kv_a_proj_with_mqa (and o_proj).
        in_bias = ((m.q_lora_rank or 0) + m.kv_lora_rank + m.qk_rope_head_dim) if m.qkv_bias else 0
        latent_norms = (m.q_lora_rank or 0) + m.kv_lora_rank
    else:
        in_bias = (w.q + w.k + w.v) if m.qkv_bias else 0
        latent_norms = 0
    out_bias = m.hidden_size if m.bias else 0
    qk_norm = 2 * m.head_dim if m.qk_norm else 0
    sinks = m.num_heads if m.attention_sinks else 0
    index_norm = 2 * m.index_head_dim if m.is_sparse_attention else 0  # the indexer's k_norm (LayerNorm)
    return weights + in_bias + out_bias + latent_norms + qk_norm + sinks + index_norm


def mlp_params(m: ModelSpec, ffn: int) -> int:
    """One MLP (dense, one expert or a shared expert) of inner width ``ffn``."""
    mats = 3 if m.gated else 2
    weights = mats * m.hidden_size * ffn
    biases = ((mats - 1) * ffn + m.hidden_size) if m.bias else 0
    return weights + biases


def norm_params(m: ModelSpec) -> int:
    """One normalisation layer: LayerNorm has a weight and a bias, RMSNorm a weight."""
    return (2 if m.norm == "layernorm" else 1) * m.hidden_size


def expert_params(m: ModelSpec) -> int:
    """One routed expert (0 for a dense model)."""
    return mlp_params(m, m.expert_ffn_hidden_size) if m.is_moe else 0


def routed_expert_params(m: ModelSpec) -> int:
    """All routed experts of one MoE layer: the weights expert parallelism shards."""
    return m.num_experts * expert_params(m)


def router_params(m: ModelSpec) -> int:
    """Router of one MoE layer: ``h*E`` weights, the trained bias, the aux-loss-free bias."""
    if not m.is_moe:
        return 0
    return m.num_experts * (m.hidden_size + int(m.router_bias) + int(m.router_expert_bias))


def shared_expert_params(m: ModelSpec) -> int:
    """Shared (always-on) experts of one MoE layer, with Qwen2-MoE's gate."""
    if not m.num_shared_experts:
        return 0
    gate = m.hidden_size if m.shared_expert_gate else 0
    return m.num_shared_experts * mlp_params(m, m.shared_expert_ffn_hidden_size) + gate


def moe_mlp_params(m: ModelSpec) -> int:
    """Router + routed experts + shared experts of one MoE layer."""
    return router_params(m) + routed_expert_params(m) + shared_expert_params(m)


def moe_active_mlp_params(m: ModelSpec) -> int:
    """MoE-layer MLP parameters one token uses (router, k routed experts, shared experts)."""
    return router_params(m) + m.experts_per_token * expert_params(m) + shared_expert_params(m)


def dense_layer_params(m: ModelSpec) -> int:
    """One transformer block with a dense MLP: attention, MLP, two norms."""
    return attention_params(m) + mlp_params(m, m.ffn_hidden_size) + 2 * norm_params(m)


def moe_layer_params(m: ModelSpec) -> int:
    """One transformer block with a MoE MLP: attention, router, experts, two norms."""
    return attention_params(m) + moe_mlp_params(m) + 2 * norm_params(m)


def block_params(m: ModelSpec, i: int) -> int:
    """Parameters of block ``i`` (0-based): a MoE or a dense block."""
    return moe_layer_params(m) if m.is_moe_layer(i) else dense_layer_params(m)


def moe_layers_between(m: ModelSpec, start: int, stop: int) -> int:
    """MoE blocks among blocks ``start .. stop-1`` (a pipeline stage's share), in O(1)."""
    if not m.is_moe:
        return 0
    first, freq = m.first_dense_layers, m.moe_layer_freq
    lo, hi = max(start, first), min(stop, m.num_layers)
    if hi <= lo:
        return 0
    # MoE indices are first + j*freq: count the j with lo <= first + j*freq < hi.
    return (hi - first + freq - 1) // freq - (lo - first + freq - 1) // freq


def params_between(m: ModelSpec, start: int, stop: int) -> int:
    """Parameters of blocks ``start .. stop-1`` (no embeddings, final norm or MTP)."""
    n = max(0, min(stop, m.num_layers) - max(start, 0))
    n_moe = moe_layers_between(m, start, stop)
    return (n - n_moe) * dense_layer_params(m) + (n_moe * moe_layer_params(m) if n_moe else 0)


def layer_params(m: ModelSpec) -> int:
    """Parameters of all transformer blocks together (no embeddings, no final norm, no MTP)."""
    n_moe = m.num_moe_layers
    return (m.num_layers - n_moe) * dense_layer_params(m) + (n_moe * moe_layer_params(m) if n_moe else 0)


def mean_layer_params(m: ModelSpec) -> float:
    """Average parameters of one block (what a pipeline stage holds per layer)."""
    return layer_params(m) / m.num_layers


def expert_layer_params(m: ModelSpec) -> int:
    """Routed-expert parameters of the whole model (sharded by ``ep x etp``; grads and optimizer
    states by the expert-data-parallel group). Shared experts and routers are not included."""
    return m.num_moe_layers * routed_expert_params(m)


def embedding_params(m: ModelSpec) -> int:
    """Input embedding (+ learned positions) and, when untied, the output layer."""
    emb = m.vocab_size * m.hidden_size
    pos = m.seq_len * m.hidden_size if m.position == "learned" else 0
    out = 0 if m.tied_embeddings else m.vocab_size * m.hidden_size
    return emb + pos + out


def total_params(m: ModelSpec) -> int:
    """Every parameter of the main model: blocks, embeddings, output layer, final norm.

    Multi-token-prediction modules are excluded (as DeepSeek counts its 671B); see :func:`mtp_params`.
    """
    return layer_params(m) + embedding_params(m) + norm_params(m)


def non_expert_params(m: ModelSpec) -> int:
    """:func:`total_params` minus the routed experts (what tensor/pipeline parallelism shards)."""
    return total_params(m) - expert_layer_params(m)


def active_params(m: ModelSpec, input_embedding: bool = True) -> int:
    """Parameters a token uses: :func:`total_params` for a dense model.

    Publishers differ on the input embedding (a table lookup, no FLOPs): Mistral (Mixtral 12.9B /
    39B), Meta (Llama 4 17B) and Qwen (Qwen3 22B / 3.3B) count it; OpenAI (gpt-oss 5.13B / 3.61B,
    model card Table 1), DeepSeek (V2 21B, V3 37B) and Moonshot (Kimi-K2 32B) count the output
    head but not the input embedding: ``input_embedding=False`` gives that figure.
    """
    if not m.is_moe:
        active = total_params(m)
    else:
        n_moe = m.num_moe_layers
        per_moe = attention_params(m) + moe_active_mlp_params(m) + 2 * norm_params(m)
        blocks = (m.num_layers - n_moe) * dense_layer_params(m) + n_moe * per_moe
        active = blocks + embedding_params(m) + norm_params(m)
    return active if input_embedding else active - m.vocab_size * m.hidden_size


def mtp_block_params(m: ModelSpec) -> int:
    """The transformer block of one MTP depth (a MoE block in a MoE model, DeepSeek-V3 layer 61)."""
    return moe_layer_params(m) if m.is_moe else dense_layer_params(m)


def mtp_params(m: ModelSpec) -> int:
    """Multi-token-prediction parameters trained with the model (embedding and head shared, not counted).

    Per depth: ``enorm`` and ``hnorm`` (RMSNorm), the ``2h -> h`` projection ``eh_proj``, one
    transformer block and the final norm (DeepSeek-V3 arXiv 2412.19437 Sec. 2.2, Fig. 3).
    """
    if not m.mtp_num_layers:
        return 0
    per_depth = 3 * norm_params(m) + 2 * m.hidden_size * m.hidden_size + mtp_block_params(m)
    return m.mtp_num_layers * per_depth


def mtp_active_params(m: ModelSpec) -> int:
    """MTP parameters one token uses (k routed experts of the MTP block)."""
    if not m.mtp_num_layers:
        return 0
    unused = (m.num_experts - m.experts_per_token) * expert_params(m) if m.is_moe else 0
    return mtp_params(m) - m.mtp_num_layers * unused


# ---------------------------------------------------------------- attention span
def _scalar_or_array(v):
    """A 0-d result as a Python float (the scalar API), an array as it is."""
    return float(v) if np.ndim(v) == 0 else v


def _local_causal_span(kind: str, window: int, s):
    """Mean keys per query of a causal local layer over a sequence of ``s`` tokens (a number or an
    array of sequence lengths).

    Sliding window ``w`` (query ``i`` sees ``min(i, w)`` keys): ``w - w^2/(2s)`` when ``w < s``;
    chunks of ``c`` (query sees the keys of its chunk up to itself): ``(n*c^2 + r^2) / (2s)``
    with ``n = s // c`` whole chunks and ``r`` tokens left over. Both are ``s/2`` when the window
    covers the sequence (continuous counting, as ``s/2`` for full causal attention).
    """
    s = np.asarray(s, dtype=float)
    if kind == "sliding":
        local = window - window * window / (2 * s)
    else:
        n, r = np.floor_divide(s, window), np.mod(s, window)
        local = (n * window * window + r * r) / (2 * s)
    return np.where(window >= s, s / 2, local)


def attention_span(m: ModelSpec, seq_len, layer: int | None = None, causal: bool = False,
                   local: bool | None = None):
    """Keys each query is charged for in one layer: ``s`` (full, non-causal counting),
    ``s/2`` (causal), or the local window's share for sliding/chunked layers.

    Give ``layer`` (0-based) or ``local`` (True: a local layer, False: a global one). ``seq_len``
    may be a numpy array (the cost model's candidates): the result is then an array. The FLOPs of
    the attention products are ``2 * span * a * (hd + vd)`` per token. The window is work a
    *fused* kernel skips (FlashAttention-2's and cuDNN's ``window_size``); an unfused kernel
    computes and stores the whole ``s x s`` score matrix and applies the window as a mask
    (Megatron-Core ``DotProductAttention.forward``: ``baddbmm`` over ``[b*np, sq, sk]``, the window
    through ``FusedScaleMaskSoftmax(window_size=...)``, megatron/core/transformer/
    dot_product_attention.py @ d98e8a64), so its FLOPs and score memory are the global layer's.
    """
    if local is None:
        local = m.is_local_attention_layer(layer) if layer is not None else False
    s = np.asarray(seq_len, dtype=float)
    causal_span = _local_causal_span(m.attention_window_kind, m.attention_window, s) if (
        local and m.attention_window is not None) else s / 2
    return _scalar_or_array(causal_span if causal else 2.0 * causal_span)


def total_attention_span(m: ModelSpec, seq_len, causal: bool = False):
    """Sum of :func:`attention_span` over all blocks (global and local layers)."""
    n_local = m.num_local_attention_layers
    total = (m.num_layers - n_local) * attention_span(m, seq_len, causal=causal, local=False)
    if n_local:
        total = total + n_local * attention_span(m, seq_len, causal=causal, local=True)
    return total


# ---------------------------------------------------------------- FLOPs
def attention_gemm_flops_per_token(m: ModelSpec) -> float:
    """Forward FLOPs per token of one layer's attention projections."""
    return 2.0 * attention_gemm_weights(m)


def mlp_gemm_flops_per_token(m: ModelSpec, ffn: int) -> float:
    """Forward FLOPs per token of one MLP of inner width ``ffn``."""
    return 2.0 * (3 if m.gated else 2) * m.hidden_size * ffn


def router_flops_per_token(m: ModelSpec) -> float:
    """Forward FLOPs per token of one MoE layer's router GEMM (``h x E``)."""
    return 2.0 * m.hidden_size * m.num_experts if m.is_moe else 0.0


def expert_gemm_flops_per_token(m: ModelSpec) -> float:
    """Forward FLOPs per token of one MoE layer's routed experts (``k`` experts per token, dropless)."""
    return m.experts_per_token * mlp_gemm_flops_per_token(m, m.expert_ffn_hidden_size) if m.is_moe else 0.0


def shared_expert_gemm_flops_per_token(m: ModelSpec) -> float:
    """Forward FLOPs per token of one MoE layer's shared experts (gate GEMV not counted)."""
    if not m.num_shared_experts:
        return 0.0
    return m.num_shared_experts * mlp_gemm_flops_per_token(m, m.shared_expert_ffn_hidden_size)


def dense_layer_gemm_flops_per_token(m: ModelSpec) -> float:
    """Forward weight-GEMM FLOPs per token of one dense block."""
    return attention_gemm_flops_per_token(m) + mlp_gemm_flops_per_token(m, m.ffn_hidden_size)


def moe_layer_gemm_flops_per_token(m: ModelSpec) -> float:
    """Forward weight-GEMM FLOPs per token of one MoE block (router, k experts, shared experts)."""
    return (attention_gemm_flops_per_token(m) + router_flops_per_token(m) + expert_gemm_flops_per_token(m)
            + shared_expert_gemm_flops_per_token(m))


def layer_gemm_flops_per_token(m: ModelSpec) -> float:
    """Forward FLOPs per token of the weight GEMMs of all blocks (active experts only; no MTP)."""
    n_moe = m.num_moe_layers
    dense = (m.num_layers - n_moe) * dense_layer_gemm_flops_per_token(m)
    return dense + (n_moe * moe_layer_gemm_flops_per_token(m) if n_moe else 0.0)


def attention_products_flops_per_token(m: ModelSpec, span):
    """Forward FLOPs per token of one layer's ``QK^T`` and ``A V`` over ``span`` keys."""
    return 2.0 * span * m.num_heads * (m.head_dim + m.v_head_dim)


def sparse_attention_flops_per_token(m: ModelSpec, seq_len, causal: bool = False):
    """Forward FLOPs per token of one DeepSeek Sparse Attention layer (DeepSeek-V3.2-Exp report, Sec. 2.1):

    - the lightning indexer scores every earlier key: ``I(t,s) = sum_j w(t,j) ReLU(q(t,j) . k(s))`` over
      ``index_n_heads`` heads of ``index_head_dim``: ``2 H_I d_I + 2 H_I`` FLOPs per (query, key) pair, over the
      causal span (``s/2`` keys on average; ``s`` when counting non-causally);
    - attention over the ``index_topk`` keys it picks, run as MLA in MQA mode (the report: "we implement DSA
      based on MLA in MQA mode"): every head scores the shared latent key (``kv_lora_rank + qk_rope_head_dim``)
      and reads the shared latent value (``kv_lora_rank``): ``2 a (2 c + r)`` FLOPs per selected key, where a
      query at position ``t`` selects ``min(t, k)`` keys: on average ``k - k^2 / (2 s)`` over ``s >= k``
      positions, ``s / 2`` below (``min(s, k)`` non-causally)."""
    s = np.asarray(seq_len, dtype=float)
    k = float(m.index_topk)
    hi, di = m.index_n_heads, m.index_head_dim
    if causal:
        pairs = s / 2.0
        chosen = np.where(s <= k, s / 2.0, k - k * k / (2.0 * np.maximum(s, 1.0)))
    else:
        pairs, chosen = s, np.minimum(s, k)
    c, r = m.kv_lora_rank, m.qk_rope_head_dim
    out = pairs * 2.0 * hi * (di + 1) + chosen * 2.0 * m.num_heads * (2 * c + r)
    return _scalar_or_array(out)


def attention_flops_per_token(m: ModelSpec, seq_len, causal: bool = False):
    """Forward FLOPs per token of ``QK^T`` and ``A V`` over all blocks (local layers at their window;
    ``seq_len`` a number or a numpy array); DeepSeek Sparse Attention's indexer and top-k attention
    (:func:`sparse_attention_flops_per_token`) where the model has it."""
    if m.is_sparse_attention:
        return m.num_layers * sparse_attention_flops_per_token(m, seq_len, causal)
    return attention_products_flops_per_token(m, total_attention_span(m, seq_len, causal))


def logits_flops_per_token(m: ModelSpec) -> float:
    """Forward FLOPs per token of the output (logits) layer."""
    return 2.0 * m.hidden_size * m.vocab_size


def mtp_flops_terms_per_token(m: ModelSpec, seq_len, causal: bool = False) -> tuple:
    """(block GEMMs, attention products, projection + logits) forward FLOPs per token of all MTP depths.

    The MTP block attends over the full sequence (DeepSeek-V3's MTP block is a global-attention layer).
    """
    d = m.mtp_num_layers
    if not d:
        return 0.0, 0.0, 0.0
    block = moe_layer_gemm_flops_per_token(m) if m.is_moe else dense_layer_gemm_flops_per_token(m)
    attn = (sparse_attention_flops_per_token(m, seq_len, causal) if m.is_sparse_attention else
            attention_products_flops_per_token(m, attention_span(m, seq_len, causal=causal, local=False)))
    head = 2.0 * 2 * m.hidden_size * m.hidden_size + logits_flops_per_token(m)
    return d * block, d * attn, d * head


def mtp_flops_per_token(m: ModelSpec, seq_len: int | None = None, causal: bool = False) -> float:
    """Forward FLOPs per token of the multi-token-prediction depths (0 without MTP)."""
    return sum(mtp_flops_terms_per_token(m, seq_len or m.seq_len, causal))


def forward_flops_per_token(m: ModelSpec, seq_len: int | None = None, causal: bool = False,
                            mtp: bool = True) -> float:
    """Forward FLOPs per token: blocks, attention products, logits (+ MTP depths when ``mtp``)."""
    s = seq_len or m.seq_len
    main = layer_gemm_flops_per_token(m) + attention_flops_per_token(m, s, causal) + logits_flops_per_token(m)
    return main + (mtp_flops_per_token(m, s, causal) if mtp else 0.0)


def training_flops_per_token(
    m: ModelSpec, seq_len: int | None = None, recompute: Recompute = "none", causal: bool = False,
    mtp: bool = True,
) -> float:
    """Training FLOPs per token: forward + backward (2x) + the recomputed forward work.

    ``recompute="none"`` gives *model* FLOPs (MFU, PaLM convention); ``"full"`` gives the
    *hardware* FLOPs Narayanan et al. 2021 report (eq. 3); ``"selective"`` adds the recomputed
    attention products of Korthikanti et al. 2022. MoE layers count the ``k`` routed experts a
    token uses (dropless). ``mtp`` includes the multi-token-prediction depths trained with the
    model (DeepSeek-V3); their block is recomputed like the main blocks.
    """
    s = seq_len or m.seq_len
    gemm = layer_gemm_flops_per_token(m)
    attn = attention_flops_per_token(m, s, causal)
    logits = logits_flops_per_token(m)
    mtp_block, mtp_attn, mtp_head = mtp_flops_terms_per_token(m, s, causal) if mtp else (0.0, 0.0, 0.0)
    gemm, attn = gemm + mtp_block, attn + mtp_attn
    flops = 3.0 * (gemm + attn + logits + mtp_head)
    if recompute == "full":
        flops += gemm + attn
    elif recompute == "selective":
        flops += attn
    elif recompute != "none":
        raise ValueError(f"recompute: unknown value {recompute!r}; use none, selective or full")
    return flops


def training_flops_per_iteration(
    m: ModelSpec,
    global_batch: int | None = None,
    seq_len: int | None = None,
    recompute: Recompute = "none",
    causal: bool = False,
    mtp: bool = True,
) -> float:
    """Training FLOPs of one optimizer step over ``global_batch`` sequences."""
    s = seq_len or m.seq_len
    b = global_batch or m.global_batch
    return b * s * training_flops_per_token(m, s, recompute, causal, mtp)


def megatron_flops_per_iteration(m: ModelSpec, global_batch: int, seq_len: int, recompute: bool = True) -> float:
    """Narayanan et al. 2021 eq. 3 verbatim (GPT, f = 4h, MHA); used to check the general count."""
    B, s, l, h, V = global_batch, seq_len, m.num_layers, m.hidden_size, m.vocab_size
    if recompute:
        return 96.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
    return 72.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))


# ---------------------------------------------------------------- routing
def expert_capacity_tokens(m: ModelSpec, tokens: int) -> int | None:
    """Most tokens one expert processes out of ``tokens`` routed in a MoE layer:
    ``ceil(capacity_factor * tokens * k / E)`` (GShard/Switch capacity; the rest are dropped),
    or None when routing is dropless (the cost model then applies its load-imbalance factor)."""
    if not m.is_moe or m.moe_capacity_factor is None:
        return None
    return math.ceil(m.moe_capacity_factor * tokens * m.experts_per_token / m.num_experts)
