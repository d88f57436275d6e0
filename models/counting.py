"""Parameter and FLOP counting: every derived figure of a :class:`~models.spec.ModelSpec`, once.

Formulas (see ``README`` and ``../shared/reference/cost-model.md``):

- Attention parameters per layer: ``h*(a*hd) + 2*h*(g*hd) + (a*hd)*h`` (= ``4h^2`` for MHA).
- MLP parameters: ``2*h*f`` (GeLU, squared ReLU) or ``3*h*f`` (gated: SwiGLU/GeGLU).
- Forward FLOPs of a matrix multiply = 2 x (multiply-accumulates); the Megatron-LM count
  (Narayanan et al. 2021, SC21, eq. 3) counts matrix multiplies only: biases, norms and
  element-wise work are priced separately by the cost model as memory-bound work.
- Attention products (``QK^T`` and ``A V``): ``4*s*a*hd`` FLOPs per token forward with full
  (non-causal) counting, as Narayanan et al. count them; causal counting halves it (the work a
  causal FlashAttention kernel actually does).
- Backward = 2 x forward. Full recomputation adds one forward of the transformer layers (not the
  logits layer); selective recomputation (Korthikanti et al. 2022) adds the attention products only.
"""

from __future__ import annotations

from typing import Literal

from plan_search.models.spec import ModelSpec

Recompute = Literal["none", "selective", "full"]


# ---------------------------------------------------------------- parameters
def attention_params(m: ModelSpec) -> int:
    """Q, K, V and output projection weights (+ biases) of one layer."""
    q = m.num_heads * m.head_dim
    kv = m.num_kv_heads * m.head_dim
    weights = m.hidden_size * q + 2 * m.hidden_size * kv + q * m.hidden_size
    biases = (q + 2 * kv if m.qkv_bias else 0) + (m.hidden_size if m.bias else 0)
    return weights + biases


def mlp_params(m: ModelSpec, ffn: int) -> int:
    """One MLP (dense, one expert or a shared expert) of inner width ``ffn``."""
    mats = 3 if m.gated else 2
    weights = mats * m.hidden_size * ffn
    biases = ((mats - 1) * ffn + m.hidden_size) if m.bias else 0
    return weights + biases


def norm_params(m: ModelSpec) -> int:
    """One normalisation layer: LayerNorm has a weight and a bias, RMSNorm a weight."""
    return (2 if m.norm == "layernorm" else 1) * m.hidden_size


def moe_mlp_params(m: ModelSpec) -> int:
    """Router + routed experts + shared experts of one MoE layer."""
    router = m.hidden_size * m.num_experts
    routed = m.num_experts * mlp_params(m, m.expert_ffn_hidden_size)
    shared = m.num_shared_experts * mlp_params(m, m.shared_expert_ffn_hidden_size or 0)
    return router + routed + shared


def moe_active_mlp_params(m: ModelSpec) -> int:
    """MoE-layer MLP parameters one token uses (router, k routed experts, shared experts)."""
    router = m.hidden_size * m.num_experts
    routed = m.experts_per_token * mlp_params(m, m.expert_ffn_hidden_size)
    shared = m.num_shared_experts * mlp_params(m, m.shared_expert_ffn_hidden_size or 0)
    return router + routed + shared


def dense_layer_params(m: ModelSpec) -> int:
    """One transformer block with a dense MLP: attention, MLP, two norms."""
    return attention_params(m) + mlp_params(m, m.ffn_hidden_size) + 2 * norm_params(m)


def moe_layer_params(m: ModelSpec) -> int:
    return attention_params(m) + moe_mlp_params(m) + 2 * norm_params(m)


def layer_params(m: ModelSpec) -> int:
    """Parameters of all transformer blocks together (no embeddings, no final norm)."""
    n_moe = m.num_moe_layers
    return (m.num_layers - n_moe) * dense_layer_params(m) + n_moe * (
        moe_layer_params(m) if n_moe else 0
    )


def mean_layer_params(m: ModelSpec) -> float:
    """Average parameters of one block (what a pipeline stage holds per layer)."""
    return layer_params(m) / m.num_layers


def embedding_params(m: ModelSpec) -> int:
    """Input embedding (+ learned positions) and, when untied, the output layer."""
    emb = m.vocab_size * m.hidden_size
    pos = m.seq_len * m.hidden_size if m.position == "learned" else 0
    out = 0 if m.tied_embeddings else m.vocab_size * m.hidden_size
    return emb + pos + out


def total_params(m: ModelSpec) -> int:
    """Every parameter: blocks, embeddings, output layer, final norm."""
    return layer_params(m) + embedding_params(m) + norm_params(m)


def active_params(m: ModelSpec) -> int:
    """Parameters a token uses: equals :func:`total_params` for a dense model."""
    if not m.is_moe:
        return total_params(m)
    n_moe = m.num_moe_layers
    per_moe = attention_params(m) + moe_active_mlp_params(m) + 2 * norm_params(m)
    blocks = (m.num_layers - n_moe) * dense_layer_params(m) + n_moe * per_moe
    return blocks + embedding_params(m) + norm_params(m)


# ---------------------------------------------------------------- FLOPs
def _matmul_weights_dense_layer(m: ModelSpec) -> int:
    q = m.num_heads * m.head_dim
    kv = m.num_kv_heads * m.head_dim
    attn = m.hidden_size * q + 2 * m.hidden_size * kv + q * m.hidden_size
    return attn + (3 if m.gated else 2) * m.hidden_size * m.ffn_hidden_size


def _matmul_weights_moe_layer_active(m: ModelSpec) -> int:
    q = m.num_heads * m.head_dim
    kv = m.num_kv_heads * m.head_dim
    attn = m.hidden_size * q + 2 * m.hidden_size * kv + q * m.hidden_size
    mats = 3 if m.gated else 2
    routed = m.experts_per_token * mats * m.hidden_size * m.expert_ffn_hidden_size
    shared = m.num_shared_experts * mats * m.hidden_size * (m.shared_expert_ffn_hidden_size or 0)
    return attn + m.hidden_size * m.num_experts + routed + shared


def layer_gemm_flops_per_token(m: ModelSpec) -> float:
    """Forward FLOPs per token of the weight GEMMs of all blocks (active experts only)."""
    n_moe = m.num_moe_layers
    dense = (m.num_layers - n_moe) * _matmul_weights_dense_layer(m)
    moe = n_moe * _matmul_weights_moe_layer_active(m) if n_moe else 0
    return 2.0 * (dense + moe)


def attention_flops_per_token(m: ModelSpec, seq_len: int, causal: bool = False) -> float:
    """Forward FLOPs per token of ``QK^T`` and ``A V`` over all blocks."""
    full = 4.0 * seq_len * m.num_heads * m.head_dim * m.num_layers
    return full / 2 if causal else full


def logits_flops_per_token(m: ModelSpec) -> float:
    """Forward FLOPs per token of the output (logits) layer."""
    return 2.0 * m.hidden_size * m.vocab_size


def forward_flops_per_token(m: ModelSpec, seq_len: int | None = None, causal: bool = False) -> float:
    s = seq_len or m.seq_len
    return layer_gemm_flops_per_token(m) + attention_flops_per_token(m, s, causal) + logits_flops_per_token(m)


def training_flops_per_token(
    m: ModelSpec, seq_len: int | None = None, recompute: Recompute = "none", causal: bool = False
) -> float:
    """Training FLOPs per token: forward + backward (2x) + the recomputed forward work.

    ``recompute="none"`` gives *model* FLOPs (MFU, PaLM convention); ``"full"`` gives the
    *hardware* FLOPs Narayanan et al. 2021 report (eq. 3); ``"selective"`` adds the recomputed
    attention products of Korthikanti et al. 2022.
    """
    s = seq_len or m.seq_len
    gemm = layer_gemm_flops_per_token(m)
    attn = attention_flops_per_token(m, s, causal)
    logits = logits_flops_per_token(m)
    flops = 3.0 * (gemm + attn + logits)
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
) -> float:
    """Training FLOPs of one optimizer step over ``global_batch`` sequences."""
    s = seq_len or m.seq_len
    b = global_batch or m.global_batch
    return b * s * training_flops_per_token(m, s, recompute, causal)


def megatron_flops_per_iteration(m: ModelSpec, global_batch: int, seq_len: int, recompute: bool = True) -> float:
    """Narayanan et al. 2021 eq. 3 verbatim (GPT, f = 4h, MHA); used to check the general count."""
    B, s, l, h, V = global_batch, seq_len, m.num_layers, m.hidden_size, m.vocab_size
    if recompute:
        return 96.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
    return 72.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))
