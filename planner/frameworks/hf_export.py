"""A model spec as the Hugging Face ``config.json`` that builds it (issue 23): what a DeepSpeed run trains.

DeepSpeed's config carries no architecture: the model is the training script's, and AutoTP (the tensor
parallelism DeepSpeed runs) shards Hugging Face ``transformers`` models. :func:`to_hf_config` writes the
``config.json`` of the transformers class that builds the spec, in the keys that class reads, so that
``models.hf.from_hf_config`` (the project's reader of those keys, each cited to the class there) gives the spec
back; :func:`hf_unexpressed` names what no transformers config of the family carries.

The class is chosen by the spec's features: MLA (DeepSeek-V2/V3), attention sinks (GPT-OSS), chunked attention
(Llama 4), per-head QK norms (Qwen3 / Qwen3-MoE), a shared-expert gate (Qwen2-MoE), other experts (Mixtral),
Q/K/V-only biases (Qwen2), squared ReLU (Nemotron), ALiBi (BLOOM), learned positions (GPT-2), biased LayerNorm
rotary models (GPT-NeoX), else Llama.
"""

from __future__ import annotations

from typing import Any

from plan_search.models.spec import ModelSpec


def hf_model_type(m: ModelSpec) -> str:
    """The transformers ``model_type`` whose class builds ``m``."""
    if m.is_mla:
        if getattr(m, "index_topk", None):  # DeepSeek Sparse Attention (DeepSeek-V3.2)
            return "deepseek_v32"
        return "deepseek_v3" if m.router_score == "sigmoid" else "deepseek_v2"
    if m.attention_sinks:
        return "gpt_oss"
    if m.attention_window is not None and m.attention_window_kind == "chunked":
        return "llama4_text"
    if m.qk_norm:
        return "qwen3_moe" if m.is_moe else "qwen3"
    if m.shared_expert_gate:
        return "qwen2_moe"
    if m.is_moe:
        return "mixtral"
    if m.qkv_bias and not m.bias and m.activation == "swiglu":
        return "qwen2"
    if m.activation == "relu2":
        return "nemotron"
    if m.position == "alibi":
        return "bloom"
    if m.position == "learned":
        return "gpt2"
    if m.norm == "layernorm" and m.bias:
        return "gpt_neox"
    return "llama"


def _rope(m: ModelSpec) -> dict[str, Any] | None:
    if m.rope_scaling == "llama3":
        return {"rope_type": "llama3", "factor": m.rope_factor, "low_freq_factor": m.rope_low_freq_factor,
                "high_freq_factor": m.rope_high_freq_factor,
                "original_max_position_embeddings": m.rope_original_max_position}
    if m.rope_scaling == "yarn":
        out = {"type": "yarn", "factor": m.rope_factor,
               "original_max_position_embeddings": m.rope_original_max_position,
               "beta_fast": m.rope_beta_fast, "beta_slow": m.rope_beta_slow}
        if m.rope_mscale is not None:
            out["mscale"] = m.rope_mscale
        if m.rope_mscale_all_dim is not None:
            out["mscale_all_dim"] = m.rope_mscale_all_dim
        return out
    return None


def to_hf_config(m: ModelSpec, seq_len: int | None = None) -> dict[str, Any]:
    """The ``config.json`` of the transformers class that builds ``m`` (``seq_len``: the context window written as
    ``max_position_embeddings`` where positions are not learned; the spec's own length by default)."""
    t = hf_model_type(m)
    window = max(seq_len or 0, m.seq_len)
    if t == "gpt2":
        cfg: dict[str, Any] = {"model_type": "gpt2", "n_layer": m.num_layers, "n_embd": m.hidden_size,
                               "n_head": m.num_heads, "n_inner": m.ffn_hidden_size, "vocab_size": m.vocab_size,
                               "n_positions": m.seq_len, "activation_function": "gelu_new",
                               "layer_norm_epsilon": m.norm_eps, "tie_word_embeddings": m.tied_embeddings}
        drop = 0.1 if m.dropout else 0.0
        cfg.update(resid_pdrop=drop, embd_pdrop=drop, attn_pdrop=drop)
        return cfg
    if t == "bloom":
        return {"model_type": "bloom", "n_layer": m.num_layers, "hidden_size": m.hidden_size, "n_head": m.num_heads,
                "vocab_size": m.vocab_size, "layer_norm_epsilon": m.norm_eps, "seq_length": m.seq_len,
                "tie_word_embeddings": m.tied_embeddings,
                "attention_dropout": 0.1 if m.dropout else 0.0, "hidden_dropout": 0.1 if m.dropout else 0.0}
    cfg = {"model_type": t, "num_hidden_layers": m.num_layers, "hidden_size": m.hidden_size,
           "num_attention_heads": m.num_heads, "num_key_value_heads": m.num_kv_heads,
           "intermediate_size": m.ffn_hidden_size, "vocab_size": m.vocab_size,
           "max_position_embeddings": window, "tie_word_embeddings": m.tied_embeddings,
           "hidden_act": {"swiglu": "silu", "geglu": "gelu_pytorch_tanh", "relu2": "relu2", "gelu": "gelu"}[m.activation],
           "rope_theta": m.rope_theta, "attention_dropout": 0.1 if m.dropout else 0.0}
    if not m.is_mla and (m.head_dim * m.num_heads != m.hidden_size or t in ("qwen3", "qwen3_moe", "gpt_oss",
                                                                             "llama4_text")):
        cfg["head_dim"] = m.head_dim
    cfg["layer_norm_eps" if m.norm == "layernorm" else "rms_norm_eps"] = m.norm_eps
    rope = _rope(m)
    if rope is not None:
        cfg["rope_scaling"] = rope
    if m.rope_scaling is None and m.position == "rotary":
        cfg["rope_scaling"] = None
    if m.rotary_percent != 1.0:
        cfg["rotary_pct" if t == "gpt_neox" else "partial_rotary_factor"] = m.rotary_percent
    if t in ("llama", "gpt_neox", "nemotron", "mixtral", "qwen2", "qwen3", "qwen3_moe", "qwen2_moe"):
        cfg["attention_bias"] = bool(m.qkv_bias)
        cfg["mlp_bias"] = bool(m.bias)
    if t == "gpt_neox":
        cfg.pop("attention_bias")
        cfg.pop("mlp_bias")
        cfg["use_parallel_residual"] = True
    if m.is_mla:
        cfg.update(kv_lora_rank=m.kv_lora_rank, q_lora_rank=m.q_lora_rank, qk_rope_head_dim=m.qk_rope_head_dim,
                   qk_nope_head_dim=m.qk_nope_head_dim, v_head_dim=m.v_head_dim)
        if t == "deepseek_v32":
            cfg.update(index_n_heads=m.index_n_heads, index_head_dim=m.index_head_dim, index_topk=m.index_topk)
    if m.mtp_num_layers:
        cfg["num_nextn_predict_layers"] = m.mtp_num_layers
    if m.attention_window is not None:
        kind = "chunked_attention" if m.attention_window_kind == "chunked" else "sliding_attention"
        n = m.global_attention_every
        cfg["layer_types"] = [kind if (n == 0 or (i + 1) % n) else "full_attention" for i in range(m.num_layers)]
        cfg["attention_chunk_size" if kind == "chunked_attention" else "sliding_window"] = m.attention_window
    if m.activation_clamp is not None:
        cfg["swiglu_limit"] = m.activation_clamp
    if t == "llama4_text":
        cfg["use_qk_norm"] = m.qk_l2_norm
        cfg["intermediate_size_mlp"] = m.ffn_hidden_size
    if m.is_moe:
        cfg.update(_moe(m, t))
    return cfg


def _moe(m: ModelSpec, t: str) -> dict[str, Any]:
    """The experts in the family's keys (models/hf.py's _SPEC_KEYS and _moe_fields)."""
    k = m.experts_per_token
    if t in ("deepseek_v2", "deepseek_v3", "deepseek_v32"):
        out = {"n_routed_experts": m.num_experts, "num_experts_per_tok": k,
               "moe_intermediate_size": m.expert_ffn_hidden_size, "n_shared_experts": m.num_shared_experts,
               "first_k_dense_replace": m.first_dense_layers, "moe_layer_freq": m.moe_layer_freq,
               "scoring_func": m.router_score, "norm_topk_prob": m.router_norm_topk,
               "routed_scaling_factor": m.router_topk_scaling or 1.0,
               "topk_method": "noaux_tc" if m.router_expert_bias else (
                   "group_limited_greedy" if m.router_num_groups else "greedy"),
               "n_group": m.router_num_groups or 1, "topk_group": m.router_group_topk or 1}
        return out
    if t in ("qwen3_moe", "qwen2_moe"):
        out = {"num_experts": m.num_experts, "num_experts_per_tok": k, "moe_intermediate_size": m.expert_ffn_hidden_size,
               "norm_topk_prob": m.router_norm_topk, "decoder_sparse_step": m.moe_layer_freq,
               "mlp_only_layers": list(range(m.first_dense_layers))}
        if m.num_shared_experts:
            out["shared_expert_intermediate_size"] = m.num_shared_experts * m.shared_expert_ffn_hidden_size
        return out
    if t == "llama4_text":
        return {"num_local_experts": m.num_experts, "num_experts_per_tok": k,
                "intermediate_size": m.expert_ffn_hidden_size,
                "moe_layers": [i for i in range(m.num_layers) if m.is_moe_layer(i)]}
    # mixtral, gpt_oss: every layer MoE, experts intermediate_size wide
    return {"num_local_experts": m.num_experts, "num_experts_per_tok": k, "intermediate_size": m.expert_ffn_hidden_size}


def hf_unexpressed(m: ModelSpec) -> dict[str, str]:
    """The fields the chosen transformers class cannot carry (field -> why)."""
    t = hf_model_type(m)
    out: dict[str, str] = {}
    if t == "mixtral" and (m.num_shared_experts or m.first_dense_layers or m.moe_layer_freq != 1):
        out["num_shared_experts"] = "Mixtral's class has no shared or dense-layer experts"
    if t == "gpt2" and not m.bias:
        out["bias"] = "GPT-2's class always has biases"
    return out
