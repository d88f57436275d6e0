"""HuggingFace ``config.json`` -> :class:`~models.spec.ModelSpec`.

Keys read (first spelling found wins; everything else in the config is ignored):

==================  =======================================================================
spec field          HF keys
==================  =======================================================================
num_layers          num_hidden_layers, n_layer, num_layers, n_layers
hidden_size         hidden_size, n_embd, d_model, n_embed
num_heads           num_attention_heads, n_head, num_heads
num_kv_heads        num_key_value_heads, num_kv_heads, n_head_kv, multi_query_group_num
                    (``multi_query: true`` -> 1); default = heads
head_dim            head_dim, kv_channels; default hidden / heads
ffn_hidden_size     intermediate_size, ffn_dim, n_inner, ffn_hidden_size; default 4h
vocab_size          vocab_size, padded_vocab_size
seq_len             the length it trains at, never the context window silently (issue 23):
                    rope_scaling.original_max_position_embeddings (``rope_parameters`` in
                    transformers-5 dumps); learned positions: max_position_embeddings,
                    n_positions, seq_length, max_sequence_length; else the family's published
                    pre-training length (``PRETRAIN_SEQ_LEN``); else 4,096 capped at the window.
                    ``seq_len_source`` says which (a request's --seq-len overrides it)
name                ``hf_model_name``: _name_or_path, the file's name, the cache repository,
                    the directory, model_type
tied_embeddings     tie_word_embeddings; default by family (HF's base default is tied, but the
                    Llama/Mistral/Qwen/NeoX/Nemotron/DeepSeek config classes default to untied)
activation          hidden_act / activation_function / hidden_activation, gated by family:
                    silu/swish -> swiglu and gelu* -> geglu for gated-MLP families (llama,
                    mistral, mixtral, qwen2, qwen2_moe, qwen3, deepseek, gemma, phi3, olmo ...);
                    relu2 -> relu2; gelu*/relu -> gelu otherwise (ReLU has GeLU's two matrices)
norm                rms_norm_eps / rms_norm_epsilon -> rmsnorm; layer_norm_eps /
                    layer_norm_epsilon / layernorm_epsilon / norm_eps -> layernorm; else by family
position            alibi (bloom, ``alibi: true``) / rotary (rope_theta, rotary_pct,
                    rotary_emb_base, position_embedding_type rotary|rope, or family) / learned
rope_scaling        yarn when rope_scaling (rope_parameters) rope_type / type is yarn, else None
bias, qkv_bias      attention_bias, mlp_bias, bias, use_bias, enable_bias, add_bias_linear,
                    qkv_bias; qwen2 / qwen2_moe have Q/K/V biases only
dropout             any positive attention_dropout, hidden_dropout, resid_pdrop, embd_pdrop,
                    attn_pdrop, dropout, hidden_dropout_prob, attention_probs_dropout_prob
MoE (Mixtral)       num_local_experts, num_experts_per_tok (experts use intermediate_size)
MoE (Qwen-MoE)      num_experts, num_experts_per_tok, moe_intermediate_size,
                    shared_expert_intermediate_size (one shared expert), decoder_sparse_step,
                    mlp_only_layers
MoE (DeepSeek,      n_routed_experts, n_shared_experts, num_experts_per_tok,
Kimi-K2)            moe_intermediate_size, first_k_dense_replace, moe_layer_freq; scoring_func
                    (sigmoid), topk_method ``noaux_tc`` -> aux-loss-free expert bias, n_group /
                    topk_group (group-limited routing when n_group > 1)
MoE (Llama 4)       num_local_experts, num_experts_per_tok, intermediate_size (routed and the one
                    shared expert), intermediate_size_mlp (dense layers), moe_layers else
                    interleave_moe_layer_step (layers step-1, 2*step-1, ...)
MoE (GPT-OSS)       num_local_experts, num_experts_per_tok / experts_per_token, intermediate_size;
                    router and expert biases, attention sinks (family gpt_oss), swiglu_limit
                    (clamped gated activation)
MoE (Qwen2-MoE)     shared_expert_gate (one ``h -> 1`` gate on the shared expert)
MLA (DeepSeek-V2/   q_lora_rank (null = full-rank Q), kv_lora_rank, qk_rope_head_dim,
V3, Kimi-K2)        qk_nope_head_dim, v_head_dim; head_dim = nope + rope, kv heads = heads
v_head_dim          v_head_dim (MLA); default head_dim
qk_norm             families with per-head Q/K RMSNorm: qwen3, qwen3_moe, gemma3 (Llama 4's
                    ``use_qk_norm`` is a weightless L2 norm: no parameters)
local attention     layer_types (sliding_attention / chunked_attention vs full_attention) with
                    sliding_window or attention_chunk_size; Llama 4: attention_chunk_size with
                    no_rope_layers / no_rope_layer_interval (NoPE layers are global); Gemma 2/3:
                    sliding_window with sliding_window_pattern; otherwise a sliding_window below
                    the context makes every layer local unless use_sliding_window is false
                    (Qwen2: layers >= max_window_layers)
MTP                 num_nextn_predict_layers
==================  =======================================================================

Each MoE family reads its own keys only (``_FAMILY_MOE_KEYS``, as its transformers class does: a
DeepSeek-V3 file's stray ``num_local_experts`` is ignored); an expert count of 0 or null is a dense model
where the class then builds a dense MLP (Qwen-MoE: 0; DeepSeek-V2: null) and refused, naming both keys,
where it builds an MoE block that cannot route (Mixtral ``num_local_experts: 0`` with top-2). Dense families
(``DENSE_FAMILIES``) with an expert count are refused; an unknown family's spellings must agree.
Architectures the cost model does not price (``_UNMODELLED``: Mamba-2 hybrids such as Nemotron-H and
Nemotron 3, linear-attention hybrids such as Qwen3-Next, DeepSeek-V3.2's sparse-attention indexer) are
refused in one line naming the keys that declare them.

MoE keys missing from the config take the default of the model_type's transformers config class
(Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V2/V3, Kimi-K2 as DeepSeek-V3, Llama 4, GPT-OSS: the ``hf``
column of ``_SPEC_KEYS``, sources cited there), never another key's value; without such a default
(an unknown family, or transformers' own None) a needed key is refused, naming it.

Not modelled (raises :class:`~models.io.InputError`): OPT's ``word_embed_proj_dim != hidden_size``
projection; MoE layer patterns that are not "the first ``n`` layers dense, then every ``k``-th
layer MoE"; local/global attention patterns that are not "every ``n``-th layer global". Refused
as malformed: experts declared but no MoE layer selected (``first_k_dense_replace`` past the layers,
a step larger than them, ``moe_layers: []``), a step or pattern length of 0, counts that are not
non-negative integers (``n_shared_experts: false``), DeepSeek/Kimi configs with ``kv_lora_rank: null``.
A value the spec refuses is named by its config key first (``num_experts_per_tok (experts_per_token)``).
Small extras are ignored: BLOOM's embedding LayerNorm, the o_proj bias of configs with
``attention_bias`` but no MLP bias, vision towers of multimodal configs (the text model under
``text_config`` is read).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from pydantic import ValidationError

from plan_search.models.io import InputError, short_repr, validation_message
from plan_search.models.spec import MAX_LAYERS, ModelSpec

# Families whose MLP is gated (gate, up, down projections).
GATED_FAMILIES = frozenset(
    {
        "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "deepseek",
        "deepseek_v2", "deepseek_v3", "gemma", "gemma2", "gemma3", "gemma3_text", "phi3",
        "olmo", "olmo2", "olmoe", "granite", "granitemoe", "internlm2", "baichuan", "cohere",
        "yi", "exaone", "minicpm", "stablelm", "jamba", "dbrx", "arctic", "glm", "glm4",
        "hunyuan", "ernie4_5", "smollm3", "llama4_text", "minimax", "mistral3", "gpt_oss", "kimi_k2",
        "deepseek_v32",
    }
)
# Config classes whose ``tie_word_embeddings`` defaults to False (HF's base default is True).
UNTIED_FAMILIES = frozenset(
    {
        "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "deepseek",
        "deepseek_v2", "deepseek_v3", "gpt_neox", "nemotron", "phi3", "olmo", "olmo2", "olmoe",
        "granite", "granitemoe", "internlm2", "baichuan", "falcon", "jamba", "dbrx", "arctic",
        "stablelm", "exaone", "minicpm", "hunyuan", "llama4_text", "mistral3", "gpt_oss", "kimi_k2",
        "deepseek_v32", "llama4",  # HF Llama4Config (the wrapper, read when text_config names no model_type)
    }
)
RMSNORM_FAMILIES = frozenset(
    GATED_FAMILIES - {"stablelm", "cohere", "dbrx"}
)
ROTARY_FAMILIES = frozenset(
    (GATED_FAMILIES - {"jamba"}) | {"gpt_neox", "gptj", "nemotron", "falcon", "starcoder2", "phi", "persimmon"}
)
ALIBI_FAMILIES = frozenset({"bloom", "mpt"})
# Families with biases on every linear layer unless the config says otherwise.
BIASED_FAMILIES = frozenset(
    {"gpt2", "gpt_bigcode", "opt", "bloom", "gpt_neox", "gptj", "phi", "starcoder2", "gpt_neo", "persimmon"}
)
QKV_BIAS_FAMILIES = frozenset({"qwen2", "qwen2_moe", "qwen2_vl"})
# Families whose attention has per-head RMSNorms on Q and K (HF Qwen3Attention.q_norm/k_norm,
# Gemma3Attention); Llama 4's use_qk_norm is a weightless L2 norm and adds no parameter.
QK_NORM_FAMILIES = frozenset({"qwen3", "qwen3_moe", "gemma3", "gemma3_text"})
# GPT-OSS (HF GptOssAttention / GptOssExperts / GptOssTopKRouter): biases on every projection,
# on the experts and on the router, one learned sink logit per head.
SINK_FAMILIES = frozenset({"gpt_oss"})
# DeepSeek-V2/V3-style configs (Kimi-K2 reuses DeepseekV3ForCausalLM with model_type kimi_k2).
DEEPSEEK_FAMILIES = frozenset({"deepseek_v2", "deepseek_v3", "kimi_k2", "deepseek_v32"})

# The training sequence length of a config.json (issue 23): its max_position_embeddings is the context window
# the model serves (often extended after pre-training: Qwen3-8B 40,960, Qwen2.5 131,072), not the length it was
# trained at, so it is taken only where the two are the same. In order: the request's --seq-len (the callers);
# rope_scaling.original_max_position_embeddings (the window before RoPE scaling: Llama 3.1/4, DeepSeek, GPT-OSS,
# Kimi-K2); a learned position table's size (it cannot be extended); the family's published pre-training length
# below; else DEFAULT_SEQ_LEN, capped at the context window.
DEFAULT_SEQ_LEN = 4096
#: model_type -> (pre-training sequence length, or None for "the context window is it", source).
PRETRAIN_SEQ_LEN: dict[str, tuple[int | None, str]] = {
    "qwen3": (4096, "Qwen3 pre-training stages 1-2 ran 4,096 tokens, stage 3 extended to 32,768 (Qwen3 technical "
                    "report, arXiv 2505.09388, Sec 3.2)"),
    "qwen2": (4096, "Qwen2/2.5 pre-training ran 4,096 tokens before a 32,768 extension phase (Qwen2.5 technical "
                    "report, arXiv 2412.15115, Sec 3.1)"),
    "mixtral": (None, "Mixtral was trained at its full context (Jiang et al. 2024, arXiv 2401.04088, Sec 2: "
                      "'a context size of 32k tokens')"),
    "llama4_text": (8192, "Llama 4's pre-RoPE-scaling window (Scout's rope_scaling.original_max_position_embeddings "
                          "8,192; Meta publishes no pre-training length)"),
    "bloom": (2048, "BLOOM trained 2,048-token sequences (BigScience 2022, arXiv 2211.05100, Table 3)"),
}
for _fam, _alias in (("qwen3_moe", "qwen3"), ("qwen2_moe", "qwen2"), ("llama4", "llama4_text")):
    PRETRAIN_SEQ_LEN[_fam] = PRETRAIN_SEQ_LEN[_alias]
#: Llama 1/2/3 (model_type llama, no rope_scaling) pre-trained at their whole window: 2,048 / 4,096 / 8,192
#: (Touvron et al. 2023, arXiv 2307.09288, Sec 2.2; Dubey et al. 2024, arXiv 2407.21783, Table 3).
LLAMA_FULL_WINDOW_MAX = 8192

_DROPOUT_KEYS = (
    "attention_dropout", "hidden_dropout", "resid_pdrop", "embd_pdrop", "attn_pdrop", "dropout",
    "hidden_dropout_prob", "attention_probs_dropout_prob", "ffn_dropout",
)


# The config keys each spec field is read from (first present wins), the one list of each: the readers
# below take their keys from here, and a value the spec refuses is named by the key to fix:
# "num_experts_per_tok (experts_per_token): ...".
#
# ``hf`` holds, for the MoE families, the default of that model_type's transformers config class,
# taken when none of the field's keys is in the config.json (a key given as null is not defaulted);
# a default of None is transformers' own None, which builds no usable model: refused, naming the key.
# A field with no default for the family (or an unknown family) is refused when it is needed, never
# read from another key. Sources (huggingface/transformers, src/transformers/models/<family>/,
# the __init__ signature of each config class):
#   mixtral      MixtralConfig     configuration_mixtral.py@ad467bd7633c63ba3ae55da29ff08a30a47cc008
#   qwen2_moe    Qwen2MoeConfig    configuration_qwen2_moe.py@765e4fbcdf84b2720f98be27665c839cdb579fcf
#   qwen3_moe    Qwen3MoeConfig    configuration_qwen3_moe.py@26f4b0f69f17118549a693ffe600c18e8505b636
#   deepseek_v2  DeepseekV2Config  configuration_deepseek_v2.py@43e8548fef30c2cc98ee475ef3d478b9bb7b616f
#   deepseek_v3  DeepseekV3Config  configuration_deepseek_v3.py@0fc683d1cd949b6c802499b77edd32206dbe86c6
#                (also kimi_k2: Kimi-K2 loads DeepseekV3ForCausalLM)
#   llama4_text  Llama4TextConfig  configuration_llama4.py@b17cfe48c5a9631dcf9f57f3865a055903800f81
#                (also llama4: the multimodal wrapper builds a Llama4TextConfig from text_config)
#   gpt_oss      GptOssConfig      configuration_gpt_oss.py@828a27fd326e49d4a1c4b08210bfd32c107facc9
# Not listed: the layer steps (moe_layer_freq, decoder_sparse_step, interleave_moe_layer_step: 1 in
# every class above, the readers' default) and mlp_only_layers / moe_layers (none: the step rule).
class _Keys(NamedTuple):
    """A spec field's config keys (first present wins) and its transformers default by model_type."""

    keys: tuple[str, ...]
    hf: dict[str, int | None] = {}


_SPEC_KEYS: dict[str, _Keys] = {
    "num_layers": _Keys(("num_hidden_layers", "n_layer", "num_layers", "n_layers")),
    "hidden_size": _Keys(("hidden_size", "n_embd", "d_model", "n_embed")),
    "num_heads": _Keys(("num_attention_heads", "n_head", "num_heads")),
    "num_kv_heads": _Keys(("num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num")),
    "head_dim": _Keys(("head_dim", "kv_channels")),
    # dense MLP width (Llama 4: intermediate_size_mlp, its intermediate_size is the experts'); 4h elsewhere
    "ffn_hidden_size": _Keys(("intermediate_size_mlp", "intermediate_size", "ffn_dim", "n_inner", "ffn_hidden_size"),
                             {"mixtral": 14336, "qwen2_moe": 5632, "qwen3_moe": 6144, "deepseek_v2": 11008,
                              "deepseek_v3": 18432, "llama4_text": 16384, "gpt_oss": 2880}),
    "vocab_size": _Keys(("vocab_size", "padded_vocab_size")),
    "seq_len": _Keys(("max_position_embeddings", "n_positions", "seq_length", "max_sequence_length")),
    # absent: a dense model for families not listed (DeepseekV2Config's n_routed_experts=None is dense too)
    "num_experts": _Keys(("num_local_experts", "n_routed_experts", "num_experts", "moe_num_experts"),
                         {"mixtral": 8, "qwen2_moe": 60, "qwen3_moe": 128, "deepseek_v3": 256,
                          "llama4_text": 16, "gpt_oss": 128}),
    "experts_per_token": _Keys(("num_experts_per_tok", "experts_per_token", "moe_top_k", "top_k"),
                               {"mixtral": 2, "qwen2_moe": 4, "qwen3_moe": 8, "deepseek_v2": None,
                                "deepseek_v3": 8, "llama4_text": 1, "gpt_oss": 4}),
    # moe_intermediate_size; Mixtral, GPT-OSS and Llama 4 experts are intermediate_size wide
    "expert_ffn_hidden_size": _Keys(("moe_intermediate_size", "intermediate_size"),
                                    {"mixtral": 14336, "qwen2_moe": 1408, "qwen3_moe": 768, "deepseek_v2": 1407,
                                     "deepseek_v3": 2048, "llama4_text": 8192, "gpt_oss": 2880}),
    # n_shared_experts (DeepSeek: each moe_intermediate_size wide; DeepseekV2Config's None is none) or
    # Qwen2-MoE's one shared expert of shared_expert_intermediate_size; Llama 4: always one
    "num_shared_experts": _Keys(("n_shared_experts", "shared_expert_intermediate_size"),
                                {"deepseek_v2": 0, "deepseek_v3": 1}),
    "shared_expert_ffn_hidden_size": _Keys(("shared_expert_intermediate_size", "moe_intermediate_size", "intermediate_size"),
                                           {"qwen2_moe": 5632}),
    "first_dense_layers": _Keys(("first_k_dense_replace",), {"deepseek_v2": 0, "deepseek_v3": 3}),
    "router_num_groups": _Keys(("n_group",), {"deepseek_v2": None, "deepseek_v3": 8}),
    "router_group_topk": _Keys(("topk_group",), {"deepseek_v2": None, "deepseek_v3": 4}),
    # MLA (DeepSeek-V2/V3 attention): a null q_lora_rank is a full-rank Q projection, not the default
    "kv_lora_rank": _Keys(("kv_lora_rank",), {"deepseek_v2": 512, "deepseek_v3": 512}),
    "q_lora_rank": _Keys(("q_lora_rank",), {"deepseek_v2": 1536, "deepseek_v3": 1536}),
    "qk_rope_head_dim": _Keys(("qk_rope_head_dim",), {"deepseek_v2": 64, "deepseek_v3": 64}),
    "qk_nope_head_dim": _Keys(("qk_nope_head_dim",), {"deepseek_v2": 128, "deepseek_v3": 128}),
    "v_head_dim": _Keys(("v_head_dim",), {"deepseek_v2": 128, "deepseek_v3": 128}),
    "mtp_num_layers": _Keys(("num_nextn_predict_layers",)),
    "attention_window": _Keys(("sliding_window", "attention_chunk_size")),
    "activation_clamp": _Keys(("swiglu_limit",)),
}
# model_types read with another family's config class
# deepseek_v32 (DeepSeek-V3.2-Exp's config.json, read by its DeepseekV3-based modeling code plus the indexer keys)
_HF_CLASS_OF = {"kimi_k2": "deepseek_v3", "llama4": "llama4_text", "deepseek_v32": "deepseek_v3"}
# Families whose experts are intermediate_size wide (HF MixtralBlockSparseTop2MLP, GptOssExperts,
# Llama4TextExperts); the others' experts are moe_intermediate_size wide.
_EXPERTS_IN_INTERMEDIATE = frozenset({"mixtral", "gpt_oss", "llama4_text"})


def _hf_class(family: str) -> str:
    return _HF_CLASS_OF.get(family, family)


class _MoeKeys(NamedTuple):
    """The MoE keys one family's transformers classes read: its own spelling of each (another family's
    spelling in its config.json is a stray kwarg the class stores and never reads, so here too)."""

    experts: str  # routed experts per MoE layer
    per_token: str  # routed experts each token uses
    width: str  # each routed expert's hidden width
    shared: str | None  # n_shared_experts (a count) or shared_expert_intermediate_size (one expert's width)
    # the decoder layer builds a dense MLP when the expert count is 0 (Qwen2MoeDecoderLayer: ``num_experts > 0``)
    # or null (DeepseekV2DecoderLayer: ``n_routed_experts is not None``); otherwise the MoE block is built
    # whatever the count, and 0 or null experts cannot route a token (top-k of nothing): refused
    dense_when: tuple[Any, ...] = ()


# Sources: the config classes of _SPEC_KEYS' table and each family's modeling_<family>.py decoder layer
# (MixtralDecoderLayer, GptOssDecoderLayer, Llama4TextDecoderLayer and DeepseekV3DecoderLayer build the MoE
# block unconditionally in their MoE layers; Qwen2Moe/Qwen3MoeDecoderLayer test ``num_experts > 0``;
# DeepseekV2DecoderLayer ``n_routed_experts is not None``).
_FAMILY_MOE_KEYS: dict[str, _MoeKeys] = {
    "mixtral": _MoeKeys("num_local_experts", "num_experts_per_tok", "intermediate_size", None),
    "gpt_oss": _MoeKeys("num_local_experts", "num_experts_per_tok", "intermediate_size", None),
    "llama4_text": _MoeKeys("num_local_experts", "num_experts_per_tok", "intermediate_size", None),
    "qwen2_moe": _MoeKeys("num_experts", "num_experts_per_tok", "moe_intermediate_size",
                          "shared_expert_intermediate_size", (0,)),
    "qwen3_moe": _MoeKeys("num_experts", "num_experts_per_tok", "moe_intermediate_size", None, (0,)),
    "deepseek_v2": _MoeKeys("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size", "n_shared_experts",
                            (None,)),
    "deepseek_v3": _MoeKeys("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size", "n_shared_experts"),
}
# Dense families: their transformers classes build no experts, whatever MoE key the file carries (a
# num_local_experts in a llama config.json is stored and never read); an expert count there is refused,
# naming the key, rather than priced as a dense model the file's author did not mean, or as experts the
# class would not build.
DENSE_FAMILIES = frozenset(
    {
        "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "gemma3_text", "phi", "phi3", "gpt2",
        "gpt_neox", "gptj", "gpt_neo", "gpt_bigcode", "bloom", "falcon", "opt", "mpt", "starcoder2", "olmo", "olmo2",
        "nemotron", "stablelm", "persimmon", "cohere", "granite", "smollm3", "exaone", "internlm2", "baichuan",
    }
)

# Architectures whose layers are not (all) softmax-attention transformer blocks: pricing their files as
# plain transformers gives wrong totals (NVIDIA Nemotron-H-56B came out at 83B) and wrong step times, so
# they are refused, naming what the cost model lacks. One row per unmodelled feature: the config keys or
# model_type values that declare it, and what it is. A family modelled later drops its row.
_UNMODELLED: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("Mamba-2 state-space layers in a hybrid layer pattern (Nemotron-H, Nemotron 3)",
     ("hybrid_override_pattern", "mamba_num_heads", "mamba_head_dim", "mamba_hidden_act", "ssm_state_size",
      "mamba_d_state", "mamba_d_conv", "mamba_expand", "mamba_n_heads", "mamba_d_head", "mamba_n_groups",
      "attn_layer_period", "attn_layer_offset", "ssm_cfg", "state_size"),
     ("nemotron_h", "jamba", "mamba", "mamba2", "falcon_h1", "falcon_mamba", "bamba", "zamba", "zamba2",
      "granitemoehybrid", "plamo2")),
    ("linear-attention (Gated DeltaNet) layers in a hybrid layer pattern (Qwen3-Next)",
     ("linear_num_value_heads", "linear_num_key_heads", "linear_key_head_dim", "linear_value_head_dim",
      "linear_conv_kernel_dim", "full_attention_interval"),
     ("qwen3_next", "minimax", "minimax_m1", "lfm2", "rwkv", "rwkv7", "recurrent_gemma", "xlstm")),
)


# Families whose transformers config classes spell the shape with the HF-standard keys (LlamaConfig's
# num_hidden_layers, hidden_size, num_attention_heads, num_key_value_heads, head_dim, intermediate_size,
# vocab_size) and read no other spelling (another family's n_layer / n_embd / kv_channels / ffn_dim ... is a
# stray kwarg the class stores and never reads).
STANDARD_KEY_FAMILIES = frozenset(
    {
        "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "deepseek_v2", "deepseek_v3",
        "kimi_k2", "gpt_oss", "llama4_text", "llama4", "gemma", "gemma2", "gemma3", "gemma3_text", "phi3", "olmo",
        "olmo2", "olmoe", "granite", "granitemoe", "gpt_neox", "nemotron", "starcoder2", "cohere", "smollm3",
        "mistral3",
    }
)
# Multi-head attention only: the class reads no key/value head count and no head width (GPT2Attention,
# BloomAttention, GPTNeoXAttention: hidden_size / num_heads per head, as many key/value heads as heads).
MHA_ONLY_FAMILIES = frozenset({"gpt2", "bloom", "gpt_neox", "gptj", "opt", "gpt_neo"})
# head_dim defaults of config classes whose default is not hidden_size / num_attention_heads (a null head_dim
# is that quotient in each): Qwen3Config 128, GptOssConfig 64, GemmaConfig/Gemma2Config/Gemma3TextConfig 256.
_HEAD_DIM_DEFAULT = {"qwen3": 128, "gpt_oss": 64, "gemma": 256, "gemma2": 256, "gemma3": 256, "gemma3_text": 256}
# The spec fields a standard-key family reads from its one key.
_STANDARD_CORE = {"num_layers": "num_hidden_layers", "hidden_size": "hidden_size", "num_heads": "num_attention_heads",
                  "num_kv_heads": "num_key_value_heads", "head_dim": "head_dim", "vocab_size": "vocab_size"}


def _own_core_keys(cfg: dict[str, Any], family: str, where: str) -> None:
    """A standard-key family's shape keys: another family's spelling of a field is refused when it disagrees
    with the family's own key, or stands in for a missing one (the class would take its own default, not
    that value), naming both keys. Equal duplicates are harmless."""
    if family not in STANDARD_KEY_FAMILIES:
        return
    fields = dict(_STANDARD_CORE, ffn_hidden_size="intermediate_size")
    for field, own in fields.items():
        if family in MHA_ONLY_FAMILIES and field in ("num_kv_heads", "head_dim"):
            continue
        for alias in _SPEC_KEYS[field].keys:
            if alias in (own, "intermediate_size_mlp") or cfg.get(alias) is None:
                continue
            if cfg.get(own) is None:
                raise InputError(f"{where}: {alias}: {family}'s transformers class reads {own}, not {alias} (a key of "
                                 f"another family, stored and never read), and {own} is missing; give {own}")
            if cfg[alias] != cfg[own]:
                raise InputError(f"{where}: {own} {short_repr(cfg[own])} and {alias} {short_repr(cfg[alias])} disagree; "
                                 f"{family} reads {own}: drop {alias}")


def unmodelled_problem(cfg: dict[str, Any], family: str) -> str | None:
    """What of the architecture ``cfg`` declares the cost model does not price (one line naming the keys
    or the model_type and what they are), or None. Only non-null keys count."""
    for what, keys, families in _UNMODELLED:
        found = [k for k in keys if cfg.get(k) not in (None, "", [], {})]
        if found or family in families:
            named = ", ".join(found[:3]) + (" ..." if len(found) > 3 else "")
            said = f"model_type {family}" + (f" ({named})" if named else "") if family in families else named
            return (f"{said}: {what} are not modelled (the cost model prices transformers whose every layer is "
                    "softmax attention plus an MLP or mixture of experts; priced as one, this model would be wrong)")
    return None


def _hf_default(cfg: dict[str, Any], field: str, family: str, keys: tuple[str, ...], where: str) -> int | None:
    """The transformers default of ``field`` for ``family`` when none of ``keys`` is in ``cfg``:
    None when there is none to take (a key given, even as null, or the family not listed); a listed
    default of None (transformers' own None) is refused naming the key."""
    hf = _SPEC_KEYS[field].hf
    cls = _hf_class(family)
    if cls not in hf or any(k in cfg for k in keys):
        return None
    if hf[cls] is None:
        raise InputError(f"{where}: missing {keys[0]}: {cls}'s transformers config has no default for it; "
                         f"give {keys[0]} in config.json")
    return hf[cls]


def _spec_message(message: str, cfg: dict[str, Any], where: str) -> str:
    """``where: field: ...`` of a refused spec with the config key it came from named first."""
    head = f"{where}: "
    rest = message.removeprefix(head)
    field, sep, tail = rest.partition(":")
    entry = _SPEC_KEYS.get(field.split(".")[0]) if sep else None
    keys = entry.keys if entry else ()
    key = next((k for k in keys if cfg.get(k) is not None), None)
    # the other spec fields the reason names, by their config key too ('does not divide hidden_size (n_embd) 1')
    for other, e in _SPEC_KEYS.items():
        used = next((k for k in e.keys if cfg.get(k) is not None), None)
        if other != field and used and used != other and f" {other} " in tail:
            tail = tail.replace(f" {other} ", f" {other} ({used}) ", 1)
    return f"{head}{key} ({field}):{tail}" if key and key != field else f"{head}{rest.partition(':')[0]}:{tail}" \
        if sep else message


def _where(name: str) -> str:
    return f"hf config {name}"


def _get(cfg: dict[str, Any], keys: tuple[str, ...]) -> tuple[str | None, Any]:
    """First key of ``keys`` present with a non-null value."""
    for k in keys:
        if cfg.get(k) is not None:
            return k, cfg[k]
    return None, None


def _as_int(value: Any, key: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{where}: {key} must be a positive integer (got {short_repr(value)})")
    if isinstance(value, float):
        if not value.is_integer():
            raise InputError(f"{where}: {key} must be a positive integer (got {short_repr(value)})")
        value = int(value)
    if value <= 0:
        raise InputError(f"{where}: {key} must be a positive integer (got {short_repr(value)})")
    return value


def _int(cfg, keys, where, required=True, what=""):
    key, value = _get(cfg, keys)
    if key is None:
        if required:
            others = f" (or {', '.join(keys[1:])})" if len(keys) > 1 else ""
            raise InputError(f"{where}: missing {keys[0]}{others}{': ' + what if what else ''}")
        return None
    return _as_int(value, key, where)


def _count(cfg: dict[str, Any], key: str, where: str) -> int:
    """An optional count where absent, null or 0 means none (shared experts, dense layers, MTP
    depths): a non-negative integer, anything else (false, [], "", 1.5, -1) an error naming ``key``."""
    value = cfg.get(key)
    if value is None or (value == 0 and not isinstance(value, bool) and isinstance(value, (int, float))):
        return 0
    try:
        return _as_int(value, key, where)
    except InputError:  # a negative number too: named as a count, not as a positive integer
        raise InputError(f"{where}: {key} must be a non-negative integer (got {short_repr(value)})") from None


def _step(cfg: dict[str, Any], key: str, default: int, where: str) -> int:
    """A positive layer step or pattern length (``moe_layer_freq``, ``decoder_sparse_step`` ...):
    ``default`` when absent; null is an error (the classes take the value as given: ``(i + 1) % None``), as
    are 0 (HF divides by it) and any non-integer."""
    if key in cfg and cfg[key] is None:
        raise InputError(f"{where}: {key} must be a positive integer (got null); give it, or leave it out for "
                         f"the default {default}")
    value = cfg.get(key)
    return default if value is None else _as_int(value, key, where)


def _text(value: Any, key: str | None, where: str) -> str:
    """A string setting, lower-cased ("" when absent); anything but a string is an error."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InputError(f"{where}: {key}: expected a string (got {short_repr(value)})")
    return value.lower()


def _bool(cfg, keys) -> bool | None:
    key, value = _get(cfg, keys)
    return None if key is None else bool(value)


def _activation(cfg: dict[str, Any], family: str, where: str) -> str:
    key, act = _get(cfg, ("hidden_act", "activation_function", "hidden_activation", "activation"))
    act = _text(act, key, where)
    gated = family in GATED_FAMILIES
    if not act:
        return "swiglu" if gated else "gelu"
    if act in ("relu2", "squared_relu", "squared-relu", "relu_squared"):
        return "relu2"
    if act in ("swiglu", "geglu"):
        return act
    if act in ("silu", "swish"):
        # An unknown family with SiLU is almost always a SwiGLU (Llama-style) MLP.
        return "swiglu" if gated or family not in BIASED_FAMILIES | ALIBI_FAMILIES else "gelu"
    if act.startswith("gelu") or act in ("quick_gelu", "fast_gelu", "relu", "relu6", "leaky_relu"):
        return "geglu" if gated and act.startswith("gelu") else "gelu"
    raise InputError(f"{where}: {key}: activation {short_repr(act)} is not modelled; use silu, gelu, relu or relu2")


def _layer_list(cfg: dict[str, Any], key: str, num_layers: int, where: str) -> list[int] | None:
    """A list of layer indices (``mlp_only_layers``, ``moe_layers``), or None when absent."""
    only = cfg.get(key)
    if only is None:
        return None
    if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only):
        raise InputError(f"{where}: {key} must be a list of layer indices (got {short_repr(only)})")
    return only


def _sparse_layers(cfg: dict[str, Any], family: str, num_layers: int, where: str, deepseek: bool) -> list[int]:
    """Indices of the MoE layers by the config's own rule (``deepseek``: DeepSeek-style experts)."""
    if deepseek:  # HF DeepseekV3DecoderLayer
        if family in DEEPSEEK_FAMILIES and "first_k_dense_replace" in cfg and cfg["first_k_dense_replace"] is None:
            raise InputError(f"{where}: first_k_dense_replace: null; DeepseekV3DecoderLayer compares each layer's "
                             "index with it; give the number of leading dense layers (DeepSeek-V3: 3), 0 for none")
        first = _hf_default(cfg, "first_dense_layers", family, ("first_k_dense_replace",), where)
        first = _count(cfg, "first_k_dense_replace", where) if first is None else first
        freq = _step(cfg, "moe_layer_freq", 1, where)
        if first > num_layers:
            raise InputError(f"{where}: first_k_dense_replace: {first} exceeds num_hidden_layers {num_layers}; "
                             "give at most the number of layers")
        return [i for i in range(num_layers) if i >= first and i % freq == 0]
    known = _hf_class(family) in _FAMILY_MOE_KEYS  # a known family's own rule only (strays are not read)
    if family.startswith("llama4") or "interleave_moe_layer_step" in cfg and not known:
        # HF Llama4TextConfig: moe_layers, else range(step - 1, num_layers, step).
        listed = _layer_list(cfg, "moe_layers", num_layers, where)
        if listed is not None:
            return sorted({i for i in listed if 0 <= i < num_layers})
        step = _step(cfg, "interleave_moe_layer_step", 1, where)
        return list(range(step - 1, num_layers, step))
    if family.startswith("qwen") or ("decoder_sparse_step" in cfg or "mlp_only_layers" in cfg) and not known:
        step = _step(cfg, "decoder_sparse_step", 1, where)
        skip = set(_layer_list(cfg, "mlp_only_layers", num_layers, where) or [])  # a set: the list can be long
        return [i for i in range(num_layers) if i not in skip and (i + 1) % step == 0]
    return list(range(num_layers))  # Mixtral / GPT-OSS style: every layer


def _fit_layer_pattern(sparse: list[int], num_layers: int, where: str) -> tuple[int, int]:
    """(first_dense_layers, moe_layer_freq) reproducing exactly the MoE layer set ``sparse``."""
    first = sparse[0]
    freq = sparse[1] - sparse[0] if len(sparse) > 1 else max(1, num_layers - first)
    pattern = [i for i in range(first, num_layers) if (i - first) % freq == 0]
    if pattern != sparse:
        shown = ",".join(str(i) for i in sparse[:12]) + ("..." if len(sparse) > 12 else "")
        raise InputError(
            f"{where}: mlp_only_layers/decoder_sparse_step/moe_layers: MoE layers [{shown}] are not 'first n "
            "dense, then every k-th'; write a YAML spec with first_dense_layers and moe_layer_freq instead"
        )
    return first, freq


def _agreeing(cfg: dict[str, Any], field: str, where: str) -> None:
    """An unknown family's spellings of ``field`` that are present must agree: two expert counts (a
    Mixtral-style and a DeepSeek-style key) that differ are a contradiction no class resolves."""
    given = [(k, cfg[k]) for k in _SPEC_KEYS[field].keys if cfg.get(k) is not None]
    for k, v in given[1:]:
        if v != given[0][1]:
            raise InputError(f"{where}: {given[0][0]} {short_repr(given[0][1])} and {k} {short_repr(v)} disagree; "
                             f"keep one (model_type names the family whose key is read)")


def _own_moe_count(cfg: dict[str, Any], own: _MoeKeys, family: str, where: str) -> int:
    """Routed experts of a known MoE family, from its own key (0: dense where the class builds a dense
    MLP then; refused where it builds an MoE block that cannot route)."""
    key = own.experts
    if key not in cfg:
        return _hf_default(cfg, "num_experts", family, (key,), where) or 0
    value = cfg[key]
    experts = None if value is None else _count(cfg, key, where)
    if value is None and None in own.dense_when or experts == 0 and 0 in own.dense_when:
        return 0
    if not experts:
        k = cfg.get(own.per_token, _SPEC_KEYS["experts_per_token"].hf.get(_hf_class(family)))
        dense = "; for a dense model use the dense model_type" + (
            f" (or {key} 0)" if 0 in own.dense_when else f" (or {key} null)" if None in own.dense_when else "")
        raise InputError(
            f"{where}: {key}: {'null' if value is None else short_repr(value)} experts, yet {own.per_token} is "
            f"{short_repr(k)}: {family}'s "
            f"transformers class builds a mixture-of-experts block in every MoE layer, which cannot route a token "
            f"to no expert; give the expert count{dense}")
    return experts


def _moe_fields(cfg: dict[str, Any], family: str, num_layers: int, where: str) -> dict[str, Any]:
    keys = _SPEC_KEYS["num_experts"].keys
    own = _FAMILY_MOE_KEYS.get(_hf_class(family))
    if own is not None:  # the family's own key; another family's spelling is ignored, as the class ignores it
        key, experts = own.experts, _own_moe_count(cfg, own, family, where)
        if not experts:
            return {}
    elif family in DENSE_FAMILIES:
        key, experts = _get(cfg, keys)
        if key is not None and _count(cfg, key, where):
            raise InputError(f"{where}: {key}: {family}'s transformers class builds no experts (the key is stored, "
                             f"never read); use the model_type of a mixture-of-experts family, or drop {key}")
        return {}
    else:
        _agreeing(cfg, "num_experts", where)
        key, experts = _get(cfg, keys)
        if key is None:
            return {}
        experts = _count(cfg, key, where)
    if experts == 1:  # one expert is a dense MLP; more than one per token cannot be routed to it
        k_key, k = _get(cfg, (own.per_token,) if own else _SPEC_KEYS["experts_per_token"].keys)
        if k_key is not None and _as_int(k, k_key, where) > 1:
            raise InputError(f"{where}: {k_key}: {k} exceeds {key} 1; use at most as many experts per token as experts")
        if own is not None:  # the class builds a router and one expert of its expert width, not a dense MLP
            raise InputError(f"{where}: {key}: 1 expert behind a router is not modelled; give at least 2 experts, "
                             "or use the family's dense model_type")
    if experts <= 1:
        return {}
    # DeepSeek-style keys by the family, or by the experts' own key (a stray n_routed_experts in a
    # Llama 4 config, whose num_local_experts wins, does not make its layer pattern DeepSeek's)
    deepseek = family in DEEPSEEK_FAMILIES or key == "n_routed_experts"
    if own is None:
        _agreeing(cfg, "experts_per_token", where)
    k_keys = (own.per_token,) if own else _SPEC_KEYS["experts_per_token"].keys
    k = _hf_default(cfg, "experts_per_token", family, k_keys, where) or _int(
        cfg, k_keys, where, what="experts used per token")
    if k > experts:  # named by both config keys (the spec would name its own fields)
        k_key = next((kk for kk in k_keys if cfg.get(kk) is not None), k_keys[0])
        raise InputError(f"{where}: {k_key}: {k} exceeds {key} {experts}; use at most as many experts per token as "
                         "experts")
    llama4 = family.startswith("llama4")
    # the experts' width key of the family (Llama 4: the dense MLP is intermediate_size_mlp), never
    # another key's value: an unknown family's Mixtral-style num_local_experts are intermediate_size wide
    in_intermediate = _hf_class(family) in _EXPERTS_IN_INTERMEDIATE or (
        _hf_class(family) not in _SPEC_KEYS["expert_ffn_hidden_size"].hf and key == "num_local_experts"
        and cfg.get("moe_intermediate_size") is None)
    width_key = ("intermediate_size",) if in_intermediate else ("moe_intermediate_size",)
    expert_ffn = _hf_default(cfg, "expert_ffn_hidden_size", family, width_key, where) or _int(
        cfg, width_key, where, what=f"the experts' hidden width, which {family or 'this model_type'} has no "
        "transformers default for; give it in config.json")
    out: dict[str, Any] = {
        "num_experts": experts,
        "experts_per_token": k,
        "expert_ffn_hidden_size": expert_ffn,
    }
    # a known family reads only its own shared-expert key (Qwen3-MoE and Mixtral have none)
    read_n = own is None or own.shared == "n_shared_experts"
    read_ffn = own is None or own.shared == "shared_expert_intermediate_size"
    if read_n and _hf_class(family) == "deepseek_v3" and "n_shared_experts" in cfg and cfg["n_shared_experts"] is None:
        raise InputError(f"{where}: n_shared_experts: null; DeepseekV3MoE builds its shared experts "
                         "moe_intermediate_size x n_shared_experts wide; give a count (DeepSeek-V3: 1), 0 for none")
    shared_n = _hf_default(cfg, "num_shared_experts", family, ("n_shared_experts",), where) if read_n else 0
    shared_n = _count(cfg, "n_shared_experts", where) if shared_n is None else shared_n
    shared_ffn = _hf_default(
        cfg, "shared_expert_ffn_hidden_size", family, ("shared_expert_intermediate_size",), where) if read_ffn else 0
    shared_ffn = _count(cfg, "shared_expert_intermediate_size", where) if shared_ffn is None else shared_ffn
    if family == "qwen2_moe" and not shared_ffn:  # Qwen2MoeSparseMoeBlock builds its shared expert and gate always
        raise InputError(f"{where}: shared_expert_intermediate_size: {short_repr(cfg.get('shared_expert_intermediate_size'))}"
                         "; qwen2_moe's transformers class always builds a shared expert of this width and its gate; "
                         "give the width (Qwen1.5-MoE-A2.7B: 5632)")
    if shared_n:
        out["num_shared_experts"] = shared_n
        out["shared_expert_ffn_hidden_size"] = expert_ffn
    elif shared_ffn:
        out["num_shared_experts"] = 1
        out["shared_expert_ffn_hidden_size"] = shared_ffn
        out["shared_expert_gate"] = family == "qwen2_moe"  # HF Qwen2MoeSparseMoeBlock.shared_expert_gate
    elif llama4:  # HF Llama4TextMoe: one shared expert of intermediate_size
        out["num_shared_experts"] = 1
        out["shared_expert_ffn_hidden_size"] = expert_ffn
    if deepseek:
        score = _text(cfg.get("scoring_func"), "scoring_func", where)
        if score in ("sigmoid", "softmax"):
            out["router_score"] = score
        method = _text(cfg.get("topk_method"), "topk_method", where)
        out["router_expert_bias"] = method == "noaux_tc"  # HF DeepseekV3TopkRouter.e_score_correction_bias
        grouped = method in ("group_limited_greedy", "noaux_tc")
        out.update(_router_groups(cfg, family, experts, k, where) if grouped else {})
    if family in SINK_FAMILIES:
        out["router_bias"] = True  # GptOssTopKRouter has a bias
    sparse = _sparse_layers(cfg, family, num_layers, where, deepseek)
    if not sparse:  # HF would build a dense model: the experts declared are never used
        pattern = [k for k in ("first_k_dense_replace", "moe_layer_freq", "decoder_sparse_step", "mlp_only_layers",
                               "interleave_moe_layer_step", "moe_layers") if cfg.get(k) is not None]
        raise InputError(
            f"{where}: {'/'.join(pattern) or key}: no layer of the num_hidden_layers {num_layers} is a mixture of "
            f"experts, yet "
            f"{key} is {experts}; fix the MoE layer pattern, or set {key} to 0 for a dense model"
        )
    first, freq = _fit_layer_pattern(sparse, num_layers, where)
    out["first_dense_layers"] = first
    out["moe_layer_freq"] = freq
    return out


def _router_groups(cfg: dict[str, Any], family: str, experts: int, k: int, where: str) -> dict[str, int]:
    """Group-limited routing (DeepSeek ``n_group`` / ``topk_group``; DeepseekV3TopkRouter splits the experts into
    ``n_group`` groups and keeps the ``topk_group`` best): both keys required (absent: the family's default,
    null: refused), ``1 <= topk_group <= n_group`` and ``n_group`` dividing the experts."""
    def read(field: str, key: str, what: str) -> int:
        default = _hf_default(cfg, field, family, (key,), where)
        if default is not None:
            return default
        if key in cfg and cfg[key] is None or key not in cfg:
            method = cfg.get("topk_method")
            raise InputError(f"{where}: {key}: {'null' if key in cfg else 'missing'} with topk_method {method} "
                             f"(group-limited routing); give the {what} (DeepSeek-V3: n_group 8, topk_group 4)")
        return _as_int(cfg[key], key, where)

    groups = read("router_num_groups", "n_group", "number of expert groups")
    topk = read("router_group_topk", "topk_group", "groups each token may use")
    if topk > groups:
        raise InputError(f"{where}: topk_group: {topk} exceeds n_group {groups}; give at most {groups}")
    if experts % groups:
        raise InputError(f"{where}: n_group: {groups} does not divide n_routed_experts {experts}; use a divisor")
    if groups > 1 and topk * (experts // groups) < k:
        raise InputError(f"{where}: n_group {groups} and topk_group {topk}: a token reaches {topk * (experts // groups)} "
                         f"of the n_routed_experts {experts} ({topk} groups of {experts // groups}), fewer than "
                         f"num_experts_per_tok {k}; use fewer groups or a larger topk_group")
    return {"router_num_groups": groups, "router_group_topk": topk} if groups > 1 else {}


def _mla_fields(cfg: dict[str, Any], family: str, where: str) -> dict[str, Any]:
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): ranks and head widths, an absent key
    at the family's transformers default."""

    def read(field: str, what: str = "", required: bool = True) -> int | None:
        default = _hf_default(cfg, field, family, (field,), where)
        return default if default is not None else _int(cfg, (field,), where, required=required, what=what)

    rank = read("kv_lora_rank", required=False)
    if rank is None:
        return {}
    out: dict[str, Any] = {
        "kv_lora_rank": rank,
        "q_lora_rank": read("q_lora_rank", required=False),  # null: full-rank Q projection
        "qk_rope_head_dim": read("qk_rope_head_dim", "MLA rotary head width"),
        "qk_nope_head_dim": read("qk_nope_head_dim", "MLA non-rotary head width"),
    }
    for key in ("qk_nope_head_dim", "qk_rope_head_dim"):  # their sum is the head width: name the key, not head_dim
        if out[key] > 100_000:
            raise InputError(f"{where}: {key}: {out[key]:,} is wider than a head can be (at most 100,000)")
    out["head_dim"] = out["qk_nope_head_dim"] + out["qk_rope_head_dim"]
    # an unknown family's missing v_head_dim: the non-rotary width (the spec's own head_dim rule)
    if family in DEEPSEEK_FAMILIES and "v_head_dim" in cfg and cfg["v_head_dim"] is None:
        raise InputError(f"{where}: v_head_dim: null; DeepSeek attention's value heads are v_head_dim wide "
                         "(DeepSeek-V3: 128); give it, or leave it out for the default")
    out["v_head_dim"] = read("v_head_dim", required=False) or out["qk_nope_head_dim"]
    # DeepSeek Sparse Attention (deepseek_v32: its config.json's index_n_heads, index_head_dim, index_topk; the
    # DeepSeek-V3.2-Exp inference code's ModelArgs reads all three, no defaults taken here)
    stray = [k for k in ("index_n_heads", "index_head_dim", "index_topk") if cfg.get(k) is not None]
    if stray and family != "deepseek_v32":
        raise InputError(f"{where}: {', '.join(stray)}: DeepSeek Sparse Attention's keys with model_type {family}, "
                         "whose config class does not read them; set model_type deepseek_v32 or drop them")
    if family == "deepseek_v32":
        for key, what in (("index_n_heads", "lightning-indexer heads"), ("index_head_dim", "lightning-indexer head "
                          "width"), ("index_topk", "keys each query attends to")):
            out[key] = _int(cfg, (key,), where, required=True, what=what)
    return out


def _global_every(local: list[bool], key: str, where: str) -> int:
    """``global_attention_every`` reproducing the per-layer local/global list exactly."""
    n_layers = len(local)
    if all(local):
        return 0
    first_global = local.index(False)
    n = first_global + 1
    if [(i + 1) % n != 0 for i in range(n_layers)] != local:
        raise InputError(
            f"{where}: {key}: local/global attention layers are not 'every n-th layer global'; "
            "write a YAML spec with attention_window and global_attention_every instead"
        )
    return n


def _window_fields(cfg: dict[str, Any], family: str, num_layers: int, seq_len: int, where: str) -> dict[str, Any]:
    """Sliding-window / chunked attention and which layers use it."""
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        if len(types) != num_layers or not all(isinstance(t, str) for t in types):
            raise InputError(f"{where}: layer_types must list one attention type per layer (num_hidden_layers {num_layers})")
        other = sorted(set(types) - {"full_attention", "sliding_attention", "chunked_attention"})
        if other:  # linear attention, Mamba ... (hybrid models: Qwen3-Next, Nemotron-H)
            raise InputError(
                f"{where}: layer_types: {short_repr(other[0])} layers are not modelled (attention layers only: "
                "full_attention, sliding_attention, chunked_attention)"
            )
        local = [t in ("sliding_attention", "chunked_attention") for t in types]
        if not any(local):
            return {}
        chunked = "chunked_attention" in types
        key = "attention_chunk_size" if chunked else "sliding_window"
        window = _int(cfg, (key,), where, what="local attention span")
        return {"attention_window": window, "attention_window_kind": "chunked" if chunked else "sliding",
                "global_attention_every": _global_every(local, "layer_types", where)}
    if family.startswith("llama4") and cfg.get("attention_chunk_size"):
        # HF Llama4TextConfig: RoPE layers (no_rope_layers[i] == 1) use chunked attention, NoPE layers are global.
        window = _as_int(cfg["attention_chunk_size"], "attention_chunk_size", where)
        flags = cfg.get("no_rope_layers")
        if isinstance(flags, list) and flags:
            if len(flags) != num_layers:
                raise InputError(f"{where}: no_rope_layers must have one entry per layer (num_hidden_layers {num_layers})")
            local = [bool(f) for f in flags]
        else:
            n = _step(cfg, "no_rope_layer_interval", 4, where)
            local = [(i + 1) % n != 0 for i in range(num_layers)]
        if not any(local):
            return {}
        return {"attention_window": window, "attention_window_kind": "chunked",
                "global_attention_every": _global_every(local, "no_rope_layers", where)}
    window = cfg.get("sliding_window")
    if window is None or isinstance(window, bool) or cfg.get("use_sliding_window") is False:
        return {}
    window = _as_int(window, "sliding_window", where)
    if window >= seq_len:
        return {}
    if family.startswith("gemma2") or family.startswith("gemma3"):
        # Gemma 2: every other layer local; Gemma 3: sliding_window_pattern (5 local : 1 global).
        default = 6 if family.startswith("gemma3") else 2
        n = _step(cfg, "sliding_window_pattern", default, where)
        return {"attention_window": window, "global_attention_every": n}
    if cfg.get("use_sliding_window") is True and cfg.get("max_window_layers"):  # Qwen2: layers >= max_window_layers
        first_local = _as_int(cfg["max_window_layers"], "max_window_layers", where)
        if first_local >= num_layers:
            return {}
        if first_local > 0:
            raise InputError(
                f"{where}: max_window_layers: {first_local} full-attention layers before the sliding ones is "
                "not modelled; write a YAML spec with attention_window instead"
            )
    return {"attention_window": window}


def _training_seq_len(cfg: dict[str, Any], rope_scaling: dict, family: str, position: str, window_key: str | None,
                      context: int | None, where: str) -> tuple[int, str]:
    """The sequence length a config.json's model trains at by default, and the rule that gave it (the order
    above ``DEFAULT_SEQ_LEN``); the context window (``window_key``: ``context``) only where it is that length."""
    said = f"{window_key} {context:,}" if context else "no context window"
    original = rope_scaling.get("original_max_position_embeddings")
    if original is not None:
        n = _as_int(original, "original_max_position_embeddings", where)
        return n, f"rope_scaling.original_max_position_embeddings {n:,} (the window before RoPE scaling; {said})"
    if position == "learned" and context:
        return context, f"{window_key} {context:,} (the learned position table)"
    if family in PRETRAIN_SEQ_LEN:
        n, why = PRETRAIN_SEQ_LEN[family]
        if n is None and context:
            return context, f"{said}: {why}"
        if n is not None:
            return n, f"{family}'s pre-training length: {why}" + (f"; {said} is the context window" if context else "")
    if family == "llama" and context and context <= LLAMA_FULL_WINDOW_MAX:
        return context, (f"{said}: Llama 1/2/3 pre-trained at their whole window (Touvron et al. 2023 Sec 2.2; "
                         "Dubey et al. 2024 Table 3)")
    n = min(DEFAULT_SEQ_LEN, context) if context else DEFAULT_SEQ_LEN
    return n, (f"the default {DEFAULT_SEQ_LEN:,}" + (f" capped at {said}" if n < DEFAULT_SEQ_LEN else "") +
               f": no published pre-training length for model_type {family or '(none)'}" +
               (f"; {said} is the context window" if context and n == DEFAULT_SEQ_LEN else ""))


# Architecture fields a launch configuration carries (issue 23; no parameter or FLOP count depends on them).
# Absent keys take the family's transformers config class default (the __init__ signatures of
# LlamaConfig, MistralConfig, Qwen2Config, Qwen2MoeConfig, Qwen3Config, Qwen3MoeConfig, DeepseekV2Config,
# DeepseekV3Config: rms_norm_eps 1e-6; MixtralConfig rope_theta 1e6; GptOssConfig rope_theta 150000;
# Llama4TextConfig rope_theta 500000, use_qk_norm True; GPTNeoXConfig rotary_pct 0.25; NemotronConfig
# partial_rotary_factor 0.5; Qwen2MoeConfig/Qwen3MoeConfig/DeepseekV2Config norm_topk_prob False,
# DeepseekV3Config True; DeepseekV2Config routed_scaling_factor 1.0, DeepseekV3Config 2.5), else the spec's.
_ARCH_DEFAULTS: dict[str, dict[str, Any]] = {
    **{f: {"norm_eps": 1e-6} for f in ("llama", "mistral", "qwen2", "qwen3", "deepseek_v2")},
    "qwen2_moe": {"norm_eps": 1e-6, "router_norm_topk": False},
    "qwen3_moe": {"norm_eps": 1e-6, "router_norm_topk": False},
    "deepseek_v3": {"norm_eps": 1e-6, "router_norm_topk": True, "router_topk_scaling": 2.5},
    "mixtral": {"rope_theta": 1e6},
    "gpt_oss": {"rope_theta": 150000.0},
    "llama4_text": {"rope_theta": 500000.0, "qk_l2_norm": True},
    "gpt_neox": {"rotary_percent": 0.25},
    "nemotron": {"rotary_percent": 0.5},
}
_ARCH_DEFAULTS["deepseek_v2"]["router_norm_topk"] = False


def _float(cfg: dict[str, Any], keys: tuple[str, ...], where: str) -> float | None:
    key, value = _get(cfg, keys)
    if key is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value in (
            float("inf"), float("-inf")):
        raise InputError(f"{where}: {key} must be a number (got {short_repr(value)})")
    return float(value)


def _arch_fields(cfg: dict[str, Any], family: str, position: str, rope: dict, where: str) -> dict[str, Any]:
    """Rotary base and scaling, norm epsilon, LayerNorm1p, Llama 4's L2 QK norm, the router's top-k
    normalization and scaling: the fields a launch configuration needs to rebuild the model."""
    dflt = _ARCH_DEFAULTS.get(_hf_class(family), {})
    out: dict[str, Any] = {}
    eps = _float(cfg, ("rms_norm_eps", "rms_norm_epsilon", "layer_norm_eps", "layer_norm_epsilon",
                       "layernorm_epsilon", "norm_epsilon", "norm_eps"), where)
    if eps is not None or "norm_eps" in dflt:
        out["norm_eps"] = eps if eps is not None else dflt["norm_eps"]
    if family == "nemotron":  # HF NemotronLayerNorm1P
        out["layernorm_1p"] = True
    if family.startswith("llama4"):
        qk = cfg.get("use_qk_norm")
        out["qk_l2_norm"] = bool(qk) if qk is not None else dflt.get("qk_l2_norm", False)
    if position == "rotary":
        theta = _float({**rope, **cfg}, ("rope_theta", "rotary_emb_base"), where)
        if theta is not None or "rope_theta" in dflt:
            out["rope_theta"] = theta if theta is not None else dflt["rope_theta"]
        pct = _float(cfg, ("rotary_pct", "partial_rotary_factor"), where)
        if pct is not None or "rotary_percent" in dflt:
            out["rotary_percent"] = pct if pct is not None else dflt["rotary_percent"]
        kind = rope.get("rope_type") or rope.get("type")
        if kind in ("yarn", "llama3"):
            out["rope_scaling"] = kind
            out["rope_factor"] = _float(rope, ("factor",), where)
            out["rope_original_max_position"] = _int(rope, ("original_max_position_embeddings",), where,
                                                      required=False)
            if kind == "llama3":
                out["rope_low_freq_factor"] = _float(rope, ("low_freq_factor",), where)
                out["rope_high_freq_factor"] = _float(rope, ("high_freq_factor",), where)
            else:  # transformers' _compute_yarn_parameters: beta_fast or 32, beta_slow or 1
                out["rope_beta_fast"] = _float(rope, ("beta_fast",), where) or 32.0
                out["rope_beta_slow"] = _float(rope, ("beta_slow",), where) or 1.0
                out["rope_mscale"] = _float(rope, ("mscale",), where)
                out["rope_mscale_all_dim"] = _float(rope, ("mscale_all_dim",), where)
    if cfg.get("norm_topk_prob") is not None:
        out["router_norm_topk"] = bool(cfg["norm_topk_prob"])
    elif "router_norm_topk" in dflt:
        out["router_norm_topk"] = dflt["router_norm_topk"]
    elif family.startswith("llama4"):  # HF Llama4Router: sigmoid of the top score, not renormalized
        out["router_norm_topk"] = False
    if family.startswith("llama4"):
        out["router_score"] = "sigmoid"
    scale = _float(cfg, ("routed_scaling_factor",), where)
    scale = scale if scale is not None else dflt.get("router_topk_scaling")
    if scale is not None and scale != 1.0:
        out["router_topk_scaling"] = scale
    return out


def keys_read(cfg: dict[str, Any], spec: ModelSpec) -> dict[str, str]:
    """Spec field -> the config.json key it was read from (the first of ``_SPEC_KEYS`` present; the language
    model under ``text_config`` for multimodal wrappers), for ``plan-catalog show config.json``: the fields
    ``spec`` (the import of ``cfg``) sets. ``seq_len`` is listed as ``context window``: the key is the window,
    ``spec.seq_len_source`` the rule that gave seq_len. Fields read by family rule rather than from one key
    (activation, norm, position, biases ...) are not listed."""
    if isinstance(cfg.get("text_config"), dict) and not any(k in cfg for k in _SPEC_KEYS["num_layers"].keys):
        cfg = cfg["text_config"]
    out = {}
    for field, entry in _SPEC_KEYS.items():
        key, _ = _get(cfg, entry.keys)
        if key is None:
            continue
        if field == "seq_len":
            out["context window"] = key
        elif getattr(spec, field, None) not in (None, 0, False):
            out[field] = key
    for field, key in (("tied_embeddings", "tie_word_embeddings"), ("mtp_num_layers", "num_nextn_predict_layers")):
        if key in cfg:
            out[field] = key
    return out


def hf_model_name(cfg: dict[str, Any], path=None) -> str | None:
    """The model's name as the file gives it: ``_name_or_path`` (its last component), else the file's own
    name when it is not ``config.json``, else the repository of a Hugging Face cache snapshot
    (``models--<org>--<name>/snapshots/<hash>/config.json``), else the directory's name when it is not a
    snapshot hash, else ``model_type``; None when nothing names it."""
    import re
    from pathlib import PurePath

    given = cfg.get("_name_or_path") if isinstance(cfg, dict) else None
    if isinstance(given, str) and given.strip().strip("/\\"):
        return re.split(r"[/\\]", given.strip().rstrip("/\\"))[-1]
    if path is not None:
        p = PurePath(path)
        if p.stem and p.name != "config.json":
            return p.stem
        for part in reversed(p.parts[:-1]):
            m = re.fullmatch(r"models--[^-].*?--(.+)", part)
            if m:
                return m.group(1)
        parent = p.parent.name
        if parent and not re.fullmatch(r"[0-9a-f]{40}", parent) and parent != "snapshots":
            return parent
    text = cfg.get("text_config") if isinstance(cfg, dict) else None
    family = cfg.get("model_type") if isinstance(cfg, dict) else None
    if not family and isinstance(text, dict):
        family = text.get("model_type")
    return family if isinstance(family, str) and family.strip() else None


def from_hf_config(cfg: dict, name: str, *, where: str | None = None) -> ModelSpec:
    """Build a :class:`ModelSpec` from a HuggingFace ``config.json`` mapping.

    ``name`` becomes the spec's name; ``where`` prefixes error messages (default
    ``"hf config <name>"``; :func:`models.resolve.resolve_model` passes the file name).
    """
    where = where or _where(name)
    if not isinstance(cfg, dict):
        raise InputError(f"{where}: expected a JSON object, got {type(cfg).__name__}")
    if not any(k in cfg for k in _SPEC_KEYS["num_layers"].keys):
        nested = cfg.get("text_config")
        if isinstance(nested, dict):  # multimodal wrappers keep the LM under text_config
            # a null model_type there is the wrapper's (llama4 -> Llama 4's shared expert and layer rules)
            cfg = {**nested, "model_type": nested.get("model_type") or cfg.get("model_type")}
            where = f"{where}: text_config"
        elif nested is not None:
            raise InputError(f"{where}: text_config: expected a mapping holding the language model's config "
                             f"(num_hidden_layers, hidden_size ...), got {short_repr(nested)}")
    family = _text(cfg.get("model_type") or None, "model_type", where)
    if problem := unmodelled_problem(cfg, family):
        raise InputError(f"{where}: {problem}")
    _own_core_keys(cfg, family, where)

    layers = _int(cfg, _SPEC_KEYS["num_layers"].keys, where, what="number of layers")
    if layers > MAX_LAYERS:  # before the MoE layer pattern walks them
        key, _ = _get(cfg, _SPEC_KEYS["num_layers"].keys)
        raise InputError(f"{where}: {key}: {short_repr(layers)} layers; at most {MAX_LAYERS:,}")
    hidden = _int(cfg, _SPEC_KEYS["hidden_size"].keys, where, what="hidden size")
    heads = _int(cfg, _SPEC_KEYS["num_heads"].keys, where, what="attention heads")
    vocab = _int(cfg, _SPEC_KEYS["vocab_size"].keys, where, what="vocabulary size")
    kv = _int(cfg, _SPEC_KEYS["num_kv_heads"].keys, where, required=False)
    if kv is None and cfg.get("multi_query") is True and not cfg.get("new_decoder_architecture"):
        kv = 1
    head_dim = _int(cfg, _SPEC_KEYS["head_dim"].keys, where, required=False)
    if head_dim is None and not any(k in cfg for k in _SPEC_KEYS["head_dim"].keys):
        head_dim = _HEAD_DIM_DEFAULT.get(family)  # absent: the class's default (null: hidden / heads)
    if family in MHA_ONLY_FAMILIES:  # the class reads neither: every stray value ignored, as it ignores them
        kv, head_dim = None, None
    ffn_keys = ("intermediate_size", "ffn_dim", "n_inner", "ffn_hidden_size")
    if family == "gpt2":  # GPT2MLP: n_inner, else 4h (GPT2Config has no other width key)
        ffn_keys = ("n_inner",)
    ffn = _int(cfg, ffn_keys, where, required=False) or _hf_default(cfg, "ffn_hidden_size", family, ffn_keys, where)
    if family == "bloom":  # BloomMLP is 4h wide whatever the config says
        ffn = 4 * hidden
    if ffn is None and family in STANDARD_KEY_FAMILIES and not family.startswith("llama4"):
        # LlamaConfig's 11008, GPTNeoXConfig's 24576 ...: not 4h, and not known here for every class
        raise InputError(f"{where}: missing intermediate_size: the MLP width of {family}, whose transformers "
                         "default is not 4 x hidden_size; give intermediate_size in config.json")
    ffn = ffn or 4 * hidden

    proj = cfg.get("word_embed_proj_dim")
    if proj is not None and proj != hidden:
        raise InputError(
            f"{where}: word_embed_proj_dim: {short_repr(proj)} != hidden_size {hidden}; OPT's embedding projection is not modelled"
        )

    # transformers >= 5 writes rope_parameters (rope_theta and the scaling keys) instead of rope_scaling.
    rope_key = "rope_scaling" if isinstance(cfg.get("rope_scaling"), dict) else "rope_parameters"
    rope_scaling = cfg.get(rope_key) if isinstance(cfg.get(rope_key), dict) else {}
    window_key, window_value = _get(cfg, _SPEC_KEYS["seq_len"].keys)
    context = _as_int(window_value, window_key, where) if window_key else None

    tied = _bool(cfg, ("tie_word_embeddings",))
    if tied is None:
        tied = family not in UNTIED_FAMILIES

    if any(k in cfg for k in ("rms_norm_eps", "rms_norm_epsilon")):
        norm = "rmsnorm"
    elif any(k in cfg for k in ("layer_norm_eps", "layer_norm_epsilon", "layernorm_epsilon", "norm_eps")):
        norm = "layernorm"
    else:
        norm = "rmsnorm" if family in RMSNORM_FAMILIES else "layernorm"

    pos_type = _text(cfg.get("position_embedding_type") or None, "position_embedding_type", where)
    if family in ALIBI_FAMILIES or cfg.get("alibi") is True:
        position = "alibi"
    elif (
        pos_type in ("rotary", "rope")
        or _get(cfg, ("rope_theta", "rotary_pct", "rotary_emb_base", "rotary_dim", "rope_scaling", "rope_parameters"))[0]
        or family in ROTARY_FAMILIES
    ):
        position = "rotary"
    else:
        position = "learned"

    seq_len, seq_len_source = _training_seq_len(cfg, rope_scaling, family, position, window_key, context, where)

    default_bias = family in BIASED_FAMILIES or family in SINK_FAMILIES
    any_bias = _bool(cfg, ("bias", "use_bias", "enable_bias", "add_bias_linear"))
    if any_bias is None:
        any_bias = default_bias
    attn_bias = _bool(cfg, ("attention_bias",))
    mlp_bias = _bool(cfg, ("mlp_bias",))
    bias = mlp_bias if mlp_bias is not None else any_bias
    qkv_bias = _bool(cfg, ("qkv_bias",))
    if qkv_bias is None:
        qkv_bias = attn_bias if attn_bias is not None else (bias or family in QKV_BIAS_FAMILIES)

    dropout = any(
        isinstance(cfg.get(k), (int, float)) and not isinstance(cfg.get(k), bool) and cfg[k] > 0
        for k in _DROPOUT_KEYS
    )

    fields: dict[str, Any] = {
        "name": name,
        "num_layers": layers,
        "hidden_size": hidden,
        "num_heads": heads,
        "num_kv_heads": kv,
        "head_dim": head_dim,
        "ffn_hidden_size": ffn,
        "vocab_size": vocab,
        "seq_len": seq_len,
        "seq_len_source": seq_len_source,
        "activation": _activation(cfg, family, where),
        "position": position,
        # YaRN / llama3: rope_scaling.rope_type (transformers >= 4.45; "type" before it), with its parameters
        **_arch_fields(cfg, family, position, rope_scaling, where),
        "tied_embeddings": tied,
        "norm": norm,
        "bias": bias,
        "qkv_bias": qkv_bias,
        "dropout": dropout,
        "source": f"HF config {name}" + (f" (model_type {family})" if family else ""),
    }
    if family in DENSE_FAMILIES | set(_FAMILY_MOE_KEYS) - DEEPSEEK_FAMILIES and cfg.get("kv_lora_rank") is not None:
        raise InputError(f"{where}: kv_lora_rank: {family}'s transformers class has no multi-head latent attention "
                         "(the key is stored, never read); use model_type deepseek_v3, or drop kv_lora_rank")
    mla = _mla_fields(cfg, family, where)
    if not mla and family in DEEPSEEK_FAMILIES:  # HF DeepseekV2/V3Attention is MLA only
        raise InputError(f"{where}: missing kv_lora_rank: {family} attention is multi-head latent attention "
                         "(DeepSeek-V3 and Kimi-K2: 512)")
    if mla:
        fields.update(mla)
        fields["num_kv_heads"] = heads  # MLA decompresses one key/value per query head
    if family in QK_NORM_FAMILIES:
        fields["qk_norm"] = True
    if family in SINK_FAMILIES:
        fields["attention_sinks"] = True
        fields["bias"] = True if mlp_bias is None else mlp_bias  # GptOssExperts carry biases
        limit = cfg.get("swiglu_limit")  # GptOssExperts clamps gate/up at swiglu_limit (7.0)
        if limit is not None:
            if isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit <= 0:
                raise InputError(f"{where}: swiglu_limit: {limit!r} is not a positive number; fix the config")
            fields["activation_clamp"] = float(limit)
    if family.startswith("llama4"):  # dense layers use intermediate_size_mlp
        fields["ffn_hidden_size"] = _int(cfg, ("intermediate_size_mlp",), where, required=False) or _hf_default(
            cfg, "ffn_hidden_size", family, ("intermediate_size_mlp",), where) or ffn
    fields.update(_window_fields(cfg, family, layers, context or seq_len, where))
    mtp = _count(cfg, "num_nextn_predict_layers", where)
    if mtp:
        fields["mtp_num_layers"] = mtp
    fields.update(_moe_fields(cfg, family, layers, where))
    try:
        return ModelSpec(**fields)
    except ValidationError as exc:
        raise InputError(_spec_message(validation_message(exc, where=where), cfg, where)) from None
