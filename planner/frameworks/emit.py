"""Launch configurations: a plan as Megatron-LM flags, a DeepSpeed config, a torchtitan TOML or NeMo 2.0
recipe overrides, and the readers that turn each back into the plan.

Every writer first asks :func:`planner.frameworks.require` whether the framework can run the plan and
refuses with :class:`~models.io.InputError` (``framework: rule-id: text (detail)``) when it cannot; it then
writes the *normalized* plan (:func:`planner.frameworks.normalize`: knobs without effect set the
framework's way) and checks every name it wrote against the framework's kept argument list
(:func:`planner.frameworks.kept_args`). The readers give back that normalized plan:
``from_x(to_x(p)) == normalize(x, p, model.num_layers)``.

=============  ==============================  ===============================================
framework      writer                          reader
=============  ==============================  ===============================================
megatron       :func:`to_megatron_args`        :func:`from_megatron_args` (args, num_gpus)
deepspeed      :func:`to_deepspeed_config`,    :func:`from_deepspeed_config` (cfg, num_gpus,
               :func:`to_deepspeed_pipeline`   seq_len, pipeline=..., flash_attention=...)
torchtitan     :func:`to_torchtitan_toml`      :func:`from_torchtitan_toml` (text, num_layers)
nemo           :func:`to_nemo_overrides`,      :func:`from_nemo_overrides` (dict or text)
               :func:`nemo_overrides_text`
=============  ==============================  ===============================================

:func:`emit` wraps the four for the CLI: a :class:`LaunchConfig` with the ready-to-paste text, the data
and the notes the configuration cannot carry (what stays the model code's or the user's).
"""

from __future__ import annotations

import argparse
import dataclasses
import ast
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from pydantic import ValidationError

from plan_search.models.io import InputError, validation_message
from plan_search.models.spec import ModelSpec

from plan_search.planner.frameworks import rules as fw
from plan_search.planner.costmodel.experts import has_moe_selective_set
from plan_search.planner.costmodel.plan import Plan

# ------------------------------------------------------------------ helpers


def _plan(**kw) -> Plan:
    try:
        return Plan(**kw)
    except ValidationError as exc:
        raise InputError(f"plan: {validation_message(exc)}") from None


def _unknown(framework: str, names: Iterable[str]) -> None:
    """Guard: the writers only write names of the kept list (a failure here is a bug of this module)."""
    known = fw.kept_args(framework)
    bad = [n for n in names if n not in known]
    if bad:
        raise RuntimeError(f"{framework}: emitted {bad} which the kept argument list does not have")


def _uneven_pair(p: Plan) -> tuple[int | None, int | None]:
    return p.first_stage_layers, p.last_stage_layers


# ------------------------------------------------------------------ Megatron-LM

_ACT_FLAG = {"swiglu": "--swiglu", "relu2": "--squared-relu", "geglu": "--quick-geglu"}
_POS = {"learned": "learned_absolute", "rotary": "rope"}
_NORM = {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}
_FSDP_STRATEGY = {2: "optim_grads", 3: "optim_grads_params"}


def megatron_parallel_args(p: Plan, num_layers: int) -> list[str]:
    """The plan's flags (parallelism, batch, recomputation, precision, overlaps) for a normalized plan."""
    a = ["--tensor-model-parallel-size", str(p.tp), "--pipeline-model-parallel-size", str(p.pp),
         "--context-parallel-size", str(p.cp)]
    if p.vpp > 1:
        a += ["--num-virtual-stages-per-pipeline-rank", str(p.vpp)]
    f, la = _uneven_pair(p)
    if f is not None:
        a += ["--decoder-first-pipeline-num-layers", str(f)]
    if la is not None:
        a += ["--decoder-last-pipeline-num-layers", str(la)]
    if p.pp > 1 and f is None and la is None:
        if p.account_for_embedding_in_pipeline_split:
            a.append("--account-for-embedding-in-pipeline-split")
        if p.account_for_loss_in_pipeline_split:
            a.append("--account-for-loss-in-pipeline-split")
    if p.sequence_parallel:
        a.append("--sequence-parallel")
    if p.zero == 1:
        a.append("--use-distributed-optimizer")
        if p.dp_shard is not None and p.dp_shard < p.dp:  # partial sharding: dp/dp_shard optimizer instances
            a += ["--num-distributed-optimizer-instances", str(p.dp // p.dp_shard)]
    elif p.zero >= 2:
        # Megatron-FSDP's required flags (Megatron-Core developer guide, Megatron-FSDP user guide).
        a += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", _FSDP_STRATEGY[p.zero],
              "--use-distributed-optimizer", "--no-gradient-accumulation-fusion", "--ckpt-format", "fsdp_dtensor"]
    a += ["--micro-batch-size", str(p.micro_batch), "--global-batch-size", str(p.global_batch),
          "--seq-length", str(p.seq_len)]
    if p.recompute == "selective":
        a += ["--recompute-granularity", "selective", "--recompute-modules", "core_attn"]
    elif p.recompute == "full":
        if p.recompute_layers is None:
            a += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
        else:
            a += ["--recompute-granularity", "full", "--recompute-method", "block",
                  "--recompute-num-layers", str(p.recompute_layers // p.vpp)]
    a += ["--attention-backend", "flash" if p.flash_attention else "unfused"]
    if p.precision == "fp16":
        a.append("--fp16")
        if p.fp32_grads:
            a.append("--accumulate-allreduce-grads-in-fp32")
    else:
        a.append("--bf16")
        a.append("--accumulate-allreduce-grads-in-fp32" if p.fp32_grads else "--grad-reduce-in-bf16")
        a += megatron_precision_args(p, num_layers)
    if p.overlap_grad_reduce:
        a.append("--overlap-grad-reduce")
    if p.overlap_param_gather:
        a.append("--overlap-param-gather")
    if p.overlap_tp_comm:
        a.append("--tp-comm-overlap")
    if p.cp > 1 and p.cp_comm_type != "p2p":  # p2p is Megatron's default
        a += ["--cp-comm-type", p.cp_comm_type]
    return a


def megatron_memory_args(p: Plan) -> list[str]:
    """The memory knobs' flags (issue 11; which values Megatron runs: ``rules.MEMORY_KNOBS`` and the
    ``megatron-optimizer-precision`` rule, with their sources): Transformer Engine's loss
    (``--cross-entropy-loss-fusion --cross-entropy-fusion-impl te``; ``megatron``, Megatron-Core's vocab-parallel
    cross entropy, is the default and writes nothing) and the precision-aware optimizer for bf16 Adam moments
    or bf16 master remainders (``--use-precision-aware-optimizer``, ``--exp-avg-dtype``/``--exp-avg-sq-dtype``;
    the remainders are its default on bf16 and FP8 delayed scaling, ``--main-params-dtype`` stays fp32)."""
    a = []
    if p.cross_entropy == "te":
        a += ["--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl", "te"]
    if fw.precision_aware_optimizer(p):
        a.append("--use-precision-aware-optimizer")
        if p.adam_moments_dtype != "fp32":
            a += ["--exp-avg-dtype", p.adam_moments_dtype, "--exp-avg-sq-dtype", p.adam_moments_dtype]
    if p.optimizer == "muon":  # Megatron-Core's Muon at its defaults (planner/costmodel/muon.py)
        a += ["--optimizer", "muon"]
    return a


def _megatron_memory_knobs(ns, precision: str) -> dict:
    """The memory knobs of Megatron-LM flags (the inverse of :func:`megatron_memory_args`)."""
    fused = bool(getattr(ns, "cross_entropy_loss_fusion", False))
    out = {"cross_entropy": "te" if fused and getattr(ns, "cross_entropy_fusion_impl", None) == "te" else "megatron",
           "adam_moments_dtype": "fp32", "master_weights": "fp32"}
    opt = getattr(ns, "optimizer", None) or "adam"
    if opt not in ("adam", "muon"):
        raise InputError(f"megatron: --optimizer {opt} is not a plan (optimizer: adam or muon)")
    out["optimizer"] = opt
    if getattr(ns, "use_precision_aware_optimizer", False):
        ea, eas = ns.exp_avg_dtype or "fp32", ns.exp_avg_sq_dtype or "fp32"
        if ea != eas or ea not in ("fp32", "bf16"):
            raise InputError(f"megatron: --exp-avg-dtype {ea} with --exp-avg-sq-dtype {eas} is not a plan "
                             "(adam_moments_dtype: both fp32 or both bf16)")
        if (ns.main_params_dtype or "fp32") != "fp32" or (ns.main_grads_dtype or "fp32") != "fp32":
            raise InputError("megatron: --main-params-dtype/--main-grads-dtype other than fp32 is not a plan")
        out["adam_moments_dtype"] = ea
        # Megatron-Core keeps bf16 remainders of the fp32 masters without an FP8 recipe or with delayed scaling
        # (store_param_remainders, default on: rules.MEMORY_KNOBS' sources)
        out["master_weights"] = "bf16_remainder" if precision in fw.MCORE_REMAINDER_PRECISIONS else "fp32"
    return out


#: Plan precision recipe -> Megatron-LM flags (arguments.py _add_transformer_engine_args:
#: --fp8-recipe delayed|tensorwise|mxfp8, --fp4-format e2m1 --fp4-recipe nvfp4).
_MEGATRON_RECIPES = {"fp8": ["--fp8-format", "hybrid", "--fp8-recipe", "delayed"],
                     "fp8-delayed": ["--fp8-format", "hybrid", "--fp8-recipe", "delayed"],
                     "fp8-current": ["--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"],
                     "mxfp8": ["--fp8-format", "e4m3", "--fp8-recipe", "mxfp8"],
                     "nvfp4": ["--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"]}


def megatron_precision_args(p: Plan, num_layers: int) -> list[str]:
    """The low-precision recipe's flags (issue 12): the recipe, its bf16 layers (the first one and the
    rest at the end, --first-last-layers-bf16) and --fp8-param-gather for ``lowp_params``."""
    from plan_search.planner.costmodel.plan import bf16_layers_of

    a = list(_MEGATRON_RECIPES.get(p.precision, []))
    if not a:
        return a
    n = bf16_layers_of(p.precision, p.bf16_layers, num_layers)
    if n:
        start = 1 if n >= 2 else 0
        a += ["--first-last-layers-bf16", "--num-layers-at-start-in-bf16", str(start),
              "--num-layers-at-end-in-bf16", str(n - start)]
    if p.lowp_params and p.precision != "nvfp4":
        a.append("--fp8-param-gather")
    if p.fp8_attention:
        a.append("--fp8-dot-product-attention")
    return a


#: Megatron-LM's Llama 3.1 RoPE scaling (--use-rope-scaling): only the factor is a flag; low/high frequency factors
#: and the original window are apply_scaling's defaults (megatron/core/models/common/embeddings/rope_utils.py and
#: rotary_pos_embedding.py @000c4ac2: low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 8192).
MEGATRON_LLAMA3_ROPE = {"rope_low_freq_factor": 1.0, "rope_high_freq_factor": 4.0, "rope_original_max_position": 8192}
#: MLATransformerConfig's YaRN fields without a flag at 000c4ac2 (transformer_config.py: original_max_position_embeddings
#: 4096, beta_fast 32, beta_slow 1); the --yarn-* flags of @d98e8a64 reach the non-MLA config only.
MEGATRON_MLA_YARN = {"rope_original_max_position": 4096, "rope_beta_fast": 32.0, "rope_beta_slow": 1.0}
#: GPT-OSS's clamped SwiGLU is x * sigmoid(1.702 x) on the clamped gate times (up + 1) (HF GptOssExperts, alpha
#: 1.702): Megatron's quick GeGLU with a clamp and a GLU offset, as Megatron-Bridge's GPT-OSS bridge sets it
#: (src/megatron/bridge/models/gpt_oss/gpt_oss_bridge.py @067f987d: quick_gelu, clamp 7.0, glu_linear_offset 1.0).
GPT_OSS_GLU_OFFSET = 1.0


def megatron_vocab_divisor(vocab: int, tp: int) -> int | None:
    """``--make-vocab-size-divisible-by`` that keeps the vocabulary exact (Megatron pads it up to a multiple of this
    x tp, 128 by default: arguments.py _vocab_size_with_padding); None when 128 already does, or when no divisor can
    (a vocabulary not divisible by tp: the padded rows are then the framework's)."""
    if vocab % (128 * tp) == 0:
        return None
    d = 64
    while d >= 1 and vocab % (d * tp):
        d //= 2
    return d if d >= 1 else None


def _vocab_unexpressed(m: ModelSpec, tp: int) -> dict[str, str]:
    if m.vocab_size % (128 * tp) and megatron_vocab_divisor(m.vocab_size, tp) is None:
        pad = 128 * tp
        return {"vocab_size": f"{m.vocab_size:,} is padded to {-(-m.vocab_size // pad) * pad:,} (a multiple of "
                              f"--make-vocab-size-divisible-by x tp; no divisor keeps it at tp {tp})"}
    return {}


def _chunked_unexpressed(m: ModelSpec, who: str) -> dict[str, str]:
    if m.attention_window is None or m.attention_window_kind != "chunked":
        return {}
    why = f"{m.attention_window}-token chunked attention, every {m.global_attention_every}th layer global (Llama 4): {who}"
    return {"attention_window": why, "attention_window_kind": why, "global_attention_every": why}


def megatron_unexpressed(m: ModelSpec, tp: int = 1) -> dict[str, str]:
    """The model's fields Megatron-LM's flags cannot set to the spec's value (field -> why), named in the notes."""
    out: dict[str, str] = _vocab_unexpressed(m, tp)
    out.update(_chunked_unexpressed(m, "no Megatron-LM flag (the NoPE global layers are --no-rope-freq)"))
    if m.position == "rotary" and m.rope_scaling == "llama3":
        for k, v in MEGATRON_LLAMA3_ROPE.items():
            if getattr(m, k) is not None and getattr(m, k) != v:
                out[k] = f"{getattr(m, k):g} (Megatron-LM's --use-rope-scaling fixes {v:g})"
    if m.position == "rotary" and m.rope_scaling == "yarn" and m.is_mla:
        for k, v in MEGATRON_MLA_YARN.items():
            if getattr(m, k) is not None and getattr(m, k) != v:
                out[k] = f"{getattr(m, k):g} (MLATransformerConfig's {v:g}, no flag)"
    if m.position == "rotary" and float(m.rope_theta) != int(m.rope_theta):
        out["rope_theta"] = f"{m.rope_theta:g} (--rotary-base takes an integer)"
    if m.shared_expert_gate:
        out["shared_expert_gate"] = "Qwen2-MoE's shared-expert gate has no flag at the kept commit"
    if m.router_bias:
        out["router_bias"] = "the router's trained bias (GPT-OSS) has no flag at the kept commit"
    if m.activation == "geglu":
        out["activation"] = "geglu is written as --quick-geglu (x * sigmoid(1.702 x)), not the tanh-GELU GLU"
    return out


def megatron_model_args(m: ModelSpec, seq_len: int, tp: int = 1) -> list[str]:
    """The model's flags: shape, positions (rotary base, share and scaling), norm and its epsilon, activation,
    biases, embeddings, attention variants (QK norms, sinks, windows) and the vocabulary kept exact at ``tp``."""
    a = ["--num-layers", str(m.num_layers), "--hidden-size", str(m.hidden_size),
         "--ffn-hidden-size", str(m.ffn_hidden_size), "--num-attention-heads", str(m.num_heads)]
    if m.num_kv_heads != m.num_heads:
        a += ["--group-query-attention", "--num-query-groups", str(m.num_kv_heads)]
    if m.head_dim * m.num_heads != m.hidden_size:
        a += ["--kv-channels", str(m.head_dim)]
    yarn_gpt = m.position == "rotary" and m.rope_scaling == "yarn" and not m.is_mla
    a += ["--max-position-embeddings", str(max(seq_len, m.seq_len)),
          "--position-embedding-type", "yarn" if yarn_gpt else _POS[m.position], "--normalization", _NORM[m.norm],
          "--norm-epsilon", repr(float(m.norm_eps))]
    if m.layernorm_1p:
        a.append("--apply-layernorm-1p")
    if m.position == "rotary":
        a += ["--rotary-base", str(int(m.rope_theta))]
        if m.rotary_percent != 1.0:
            a += ["--rotary-percent", repr(float(m.rotary_percent))]
        if m.rope_scaling == "llama3":
            a += ["--use-rope-scaling", "--rope-scaling-factor", repr(float(m.rope_factor or 8.0))]
        elif m.rope_scaling == "yarn":
            a += ["--rotary-scaling-factor", repr(float(m.rope_factor or 1.0))]
            if m.rope_mscale is not None:
                a += ["--mscale", repr(float(m.rope_mscale))]
            if m.rope_mscale_all_dim is not None:
                a += ["--mscale-all-dim", repr(float(m.rope_mscale_all_dim))]
            if yarn_gpt:
                a += ["--yarn-original-max-position-embeddings", str(m.rope_original_max_position or 4096),
                      "--yarn-beta-fast", repr(float(m.rope_beta_fast or 32.0)),
                      "--yarn-beta-slow", repr(float(m.rope_beta_slow or 1.0))]
                if m.attention_sinks:  # GPT-OSS: rope_scaling truncate false (Megatron-Bridge's bridge sets it)
                    a.append("--no-yarn-correction-range-round-to-int")
        if m.attention_window is not None and m.attention_window_kind == "chunked" and m.global_attention_every:
            a += ["--no-rope-freq", str(m.global_attention_every)]  # Llama 4: the global layers are NoPE
    if m.activation_clamp is not None:  # GPT-OSS (GPT_OSS_GLU_OFFSET)
        a += ["--quick-geglu", "--activation-func-clamp-value", repr(float(m.activation_clamp)),
              "--glu-linear-offset", repr(GPT_OSS_GLU_OFFSET)]
    elif m.activation in _ACT_FLAG:
        a.append(_ACT_FLAG[m.activation])
    if not m.bias:
        a.append("--disable-bias-linear")
        if m.qkv_bias:
            a.append("--add-qkv-bias")
    if m.qk_norm:
        a.append("--qk-layernorm")
    if m.qk_l2_norm:
        a.append("--qk-l2-norm")
    if m.attention_sinks:
        a += ["--softmax-type", "learnable"]
    if m.attention_window is not None and m.attention_window_kind == "sliding":
        # HF sliding_window W attends W tokens, the query's own included: Megatron's window (W-1, 0)
        # (Megatron-Bridge gpt_oss_bridge.py @067f987d: window_size = (sliding_window - 1, 0))
        a += ["--window-size", f"{m.attention_window - 1},0"]
        if m.global_attention_every:
            a += ["--window-attn-skip-freq", str(m.global_attention_every)]
    if not m.tied_embeddings:
        a.append("--untie-embeddings-and-output-weights")
    if not m.dropout:
        a += ["--attention-dropout", "0.0", "--hidden-dropout", "0.0"]
    a += ["--vocab-size", str(m.vocab_size)]
    d = megatron_vocab_divisor(m.vocab_size, tp)
    if d is not None:
        a += ["--make-vocab-size-divisible-by", str(d)]
    return a


def moe_layer_pattern(m: ModelSpec) -> str:
    """Megatron's ``--moe-layer-freq`` list expression of the model's MoE layers (1 MoE, 0 dense), e.g.
    ``([0]*3+[1]*58)`` for DeepSeek-V3; the plain frequency ``1`` when every layer is MoE."""
    f, k, l = m.first_dense_layers, m.moe_layer_freq, m.num_layers
    if f == 0 and k == 1:
        return "1"
    body = "+".join(p for p in (f"[0]*{f}" if f else "", f"([1]+[0]*{k - 1})*{(l - f) // k}" if k > 1
                                 else f"[1]*{l - f}") if p)
    rest = (l - f) % k if k > 1 else 0
    if rest:
        body += f"+[1]+[0]*{rest - 1}" if rest > 1 else "+[1]"
    return f"({body})"


def selective_modules(p: Plan, m: ModelSpec) -> list[str] | None:
    """Megatron-Core ``--recompute-modules`` of the planner's selective recomputation of a MoE or MLA
    model (``planner.costmodel.experts``: norms, expert activation, MLA up-projections -- the MoE
    README's fine-grained set; the attention core only without FlashAttention; arguments.py@000c4ac2
    lists these choices); None for dense models (core_attn)."""
    if p.recompute == "selective" and p.recompute_modules:  # a named set (issue 29), as Megatron spells it
        return p.recompute_modules.split("+")
    if p.recompute != "selective" or not has_moe_selective_set(m):
        return None
    mla = m.is_mla
    return ([] if p.flash_attention else ["core_attn"]) + ["layernorm"] + (["moe_act"] if m.is_moe else []) + (
        ["mla_up_proj"] if mla else [])


#: The module lists the writer gives for the planner's default selective sets (:func:`selective_modules`,
#: ``--recompute-modules core_attn`` on a dense model): read back as no ``recompute_modules`` (the default).
_DEFAULT_MODULE_LISTS = {"core_attn", "layernorm", "moe_act+layernorm", "layernorm+mla_up_proj",
                         "moe_act+layernorm+mla_up_proj", "core_attn+layernorm", "core_attn+moe_act+layernorm",
                         "core_attn+layernorm+mla_up_proj", "core_attn+moe_act+layernorm+mla_up_proj"}


def _read_recompute_modules(mods) -> str | None:
    """``Plan.recompute_modules`` of a ``--recompute-modules`` list: None for the planner's default sets
    (:data:`_DEFAULT_MODULE_LISTS`), else the set in its one spelling; a set the plan cannot name is
    refused in one line."""
    from plan_search.planner.costmodel.plan import RECOMPUTE_MODULE_SETS, canonical_modules

    if not mods:
        return None
    text = canonical_modules("+".join(mods if isinstance(mods, (list, tuple)) else [str(mods)]))
    if text in _DEFAULT_MODULE_LISTS:
        return None
    if text not in RECOMPUTE_MODULE_SETS:
        raise InputError(f"megatron: --recompute-modules {' '.join(mods)} is not a module set the plan prices; use one "
                         f"of {', '.join(RECOMPUTE_MODULE_SETS)}")
    return text


def megatron_moe_args(p: Plan, m: ModelSpec) -> list[str]:
    """MoE and MLA flags (Megatron-LM ``_add_moe_args`` / ``_add_mla_args`` at the kept commit): the
    expert layout (always explicit: Megatron's ``--expert-tensor-parallel-size`` defaults to tp, the
    plan's etp to 1), the routed/shared experts, the router, the dispatcher and its overlap."""
    a: list[str] = []
    if m.is_mla:
        a += ["--multi-latent-attention", "--kv-lora-rank", str(m.kv_lora_rank),
              "--qk-head-dim", str(m.qk_nope_head_dim), "--qk-pos-emb-head-dim", str(m.qk_rope_head_dim),
              "--v-head-dim", str(m.v_head_dim or m.head_dim)]
        if m.q_lora_rank:
            a += ["--q-lora-rank", str(m.q_lora_rank)]
        if getattr(m, "index_topk", None):  # DeepSeek Sparse Attention (Megatron-LM@d98e8a64 TransformerConfig)
            a += ["--experimental-attention-variant", "dsa", "--dsa-indexer-n-heads", str(m.index_n_heads),
                  "--dsa-indexer-head-dim", str(m.index_head_dim), "--dsa-indexer-topk", str(m.index_topk)]
    if getattr(m, "mtp_num_layers", 0):
        a += ["--mtp-num-layers", str(m.mtp_num_layers)]
    if not m.is_moe:
        return a
    a += ["--expert-model-parallel-size", str(p.ep), "--expert-tensor-parallel-size", str(p.etp),
          "--num-experts", str(m.num_experts), "--moe-router-topk", str(m.experts_per_token),
          "--moe-ffn-hidden-size", str(m.expert_ffn_hidden_size), "--moe-layer-freq", moe_layer_pattern(m)]
    if m.num_shared_experts:
        a += ["--moe-shared-expert-intermediate-size",
              str(m.num_shared_experts * (m.shared_expert_ffn_hidden_size or m.expert_ffn_hidden_size))]
    if getattr(m, "router_score", "softmax") == "sigmoid":
        a += ["--moe-router-score-function", "sigmoid"]
    elif not m.router_norm_topk:  # the softmax before top-k, not renormalized (Qwen2-MoE, DeepSeek-V2)
        a.append("--moe-router-pre-softmax")
    if m.router_topk_scaling is not None:
        a += ["--moe-router-topk-scaling-factor", repr(float(m.router_topk_scaling))]
    if getattr(m, "router_expert_bias", False):
        a.append("--moe-router-enable-expert-bias")
    if getattr(m, "router_num_groups", 0):
        a += ["--moe-router-num-groups", str(m.router_num_groups), "--moe-router-group-topk", str(m.router_group_topk)]
    if getattr(m, "moe_capacity_factor", None) is not None:
        a += ["--moe-expert-capacity-factor", str(m.moe_capacity_factor)]
    if p.moe_pad_to_capacity:
        a.append("--moe-pad-expert-input-to-capacity")
    a += ["--moe-grouped-gemm", "--moe-permute-fusion", "--moe-router-dtype", "fp32",
          "--moe-token-dispatcher-type", p.moe_dispatcher]
    if p.moe_dispatcher == "flex":
        a.append("--moe-enable-deepep")
    if p.moe_overlap:
        a.append("--overlap-moe-expert-parallel-comm")
    if p.moe_grouped_gemm == "fused":  # TE's CuTe-DSL fused grouped MLP and the GLU interleave it needs
        a += ["--use-transformer-engine-op-fuser", "--moe-mlp-glu-interleave-size", str(fw.FUSED_MLP_GLU_INTERLEAVE)]
    return a


def to_megatron_args(plan: Plan, model: ModelSpec, cluster=None) -> list[str]:
    """Megatron-LM ``pretrain_gpt.py`` flags for the plan and the model's shape.

    Tokenizer, data, optimizer, schedule, checkpoint and logging flags stay the user's. ZeRO 2/3 are
    Megatron-FSDP (with its required ``--ckpt-format fsdp_dtensor``).
    """
    p = fw.require("megatron", plan, model, cluster)
    args = (megatron_parallel_args(p, model.num_layers) + megatron_memory_args(p)
            + megatron_model_args(model, p.seq_len, p.tp))
    args += megatron_moe_args(p, model)
    mods = selective_modules(p, model)
    if mods:
        i = args.index("--recompute-modules")
        args[i + 1:i + 2] = mods
    _unknown("megatron", [a for a in args if a.startswith("--")])
    megatron_parser().parse_args(args)  # the flags take the values they are given (kinds and choices)
    return args


def megatron_parser() -> argparse.ArgumentParser:
    """An argparse parser of the kept Megatron-LM flags (kinds and choices as in arguments.py)."""
    ps = argparse.ArgumentParser(prog="pretrain_gpt.py", add_help=False, allow_abbrev=False)
    for spec in fw.kept_args("megatron").values():
        dest = spec.name[2:].replace("-", "_")
        if spec.kind == "flag":
            ps.add_argument(spec.name, dest=dest, action="store_true")
        elif spec.kind == "list":
            ps.add_argument(spec.name, dest=dest, nargs="*")
        else:
            typ = {"int": int, "float": float}.get(spec.kind, str)
            ps.add_argument(spec.name, dest=dest, type=typ, choices=[typ(c) for c in spec.choices] or None)
    return ps


def _megatron_dp_knobs(ns, dp: int, zero: int) -> dict:
    """Partial sharding (--num-distributed-optimizer-instances) and the split's embedding/loss
    accounting, as plan knobs."""
    out = {}
    inst = getattr(ns, "num_distributed_optimizer_instances", None) or 1
    if inst > 1 and zero == 1:
        if dp % inst:
            raise InputError(f"megatron: --num-distributed-optimizer-instances {inst} does not divide dp {dp}")
        out["dp_shard"] = dp // inst
    if getattr(ns, "account_for_embedding_in_pipeline_split", False):
        out["account_for_embedding_in_pipeline_split"] = True
    if getattr(ns, "account_for_loss_in_pipeline_split", False):
        out["account_for_loss_in_pipeline_split"] = True
    return out


def from_megatron_args(args: Sequence[str], num_gpus: int) -> Plan:
    """The plan of Megatron-LM flags (``num_gpus``: the world size, which the flags do not carry).

    Flags outside the kept list are ignored; the ones a plan needs must be there (micro/global batch,
    sequence length).
    """
    try:
        ns, _ = megatron_parser().parse_known_args(list(args))
    except SystemExit:
        raise InputError("megatron: the flags do not parse (a value is missing or not one of its choices)") from None
    return from_megatron_namespace(ns, num_gpus)


def from_megatron_namespace(ns, num_gpus: int) -> Plan:
    """:func:`from_megatron_args` of flags already parsed (an ``argparse.Namespace`` with every kept flag's
    attribute, as :func:`megatron_parser` gives; ``planner.frameworks.read`` records which it reads)."""
    for need in ("micro_batch_size", "global_batch_size", "seq_length"):
        if getattr(ns, need) is None:
            raise InputError(f"megatron: --{need.replace('_', '-')} is missing")
    tp, pp, cp = ns.tensor_model_parallel_size or 1, ns.pipeline_model_parallel_size or 1, ns.context_parallel_size or 1
    if num_gpus % (tp * pp * cp):
        raise InputError(f"megatron: num_gpus {num_gpus} is not a multiple of tp*pp*cp ({tp}*{pp}*{cp})")
    vpp = ns.num_virtual_stages_per_pipeline_rank or 1
    if ns.num_layers_per_virtual_pipeline_stage:
        if not ns.num_layers:
            raise InputError("megatron: --num-layers-per-virtual-pipeline-stage needs --num-layers")
        vpp = ns.num_layers // pp // ns.num_layers_per_virtual_pipeline_stage
    if ns.use_megatron_fsdp:
        strategy = ns.data_parallel_sharding_strategy or "no_shard"
        zero = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}[strategy]
    else:
        zero = 1 if ns.use_distributed_optimizer else 0
    recompute, rc_layers = "none", None
    gran = "selective" if ns.recompute_activations else ns.recompute_granularity
    rc_modules = None
    if gran == "selective":
        recompute = "selective"
        rc_modules = _read_recompute_modules(getattr(ns, "recompute_modules", None))
    elif gran == "full":
        recompute = "full"
        if ns.recompute_method == "block":
            rc_layers = (ns.recompute_num_layers or 0) * vpp
        elif ns.recompute_method == "uniform" and (ns.recompute_num_layers or 1) != 1:
            raise InputError("megatron: --recompute-method uniform with --recompute-num-layers > 1 is not a plan "
                             "(the plan recomputes each layer, or k layers per stage with block)")
    precision = "fp16" if ns.fp16 else "bf16"
    bf16_layers, lowp_params = None, True
    if ns.fp8_format or ns.fp4_format:
        recipe = "nvfp4" if ns.fp4_format else (ns.fp8_recipe or "delayed")
        names = {"delayed": "fp8", "tensorwise": "fp8-current", "mxfp8": "mxfp8", "nvfp4": "nvfp4"}
        if recipe not in names:
            raise InputError(f"megatron: --fp8-recipe {recipe} is not a plan recipe; plans run delayed, "
                             "tensorwise, mxfp8 or nvfp4")
        precision = names[recipe]
        if ns.first_last_layers_bf16:
            start = 1 if ns.num_layers_at_start_in_bf16 is None else ns.num_layers_at_start_in_bf16
            bf16_layers = start + (1 if ns.num_layers_at_end_in_bf16 is None else ns.num_layers_at_end_in_bf16)
        elif precision in ("fp8-current", "nvfp4"):
            bf16_layers = 0  # the recipe's default keeps some in bf16; these flags keep none
        if bf16_layers is not None and ns.num_layers:
            from plan_search.planner.costmodel.plan import bf16_layers_of

            if bf16_layers == bf16_layers_of(precision, None, ns.num_layers):
                bf16_layers = None  # the recipe's default
        lowp_params = bool(ns.fp8_param_gather) or precision == "nvfp4"
    if precision == "fp16":
        fp32_grads = bool(ns.accumulate_allreduce_grads_in_fp32)
    else:
        fp32_grads = not ns.grad_reduce_in_bf16
    backend = ns.attention_backend or "auto"
    memory = _megatron_memory_knobs(ns, precision)
    moe = {}
    if ns.num_experts:
        # Megatron's default --expert-tensor-parallel-size is tp (arguments.py validate_args)
        moe = dict(ep=ns.expert_model_parallel_size or 1,
                   etp=ns.expert_tensor_parallel_size if ns.expert_tensor_parallel_size else tp,
                   moe_dispatcher=ns.moe_token_dispatcher_type or "allgather",
                   moe_overlap=bool(ns.overlap_moe_expert_parallel_comm),
                   moe_grouped_gemm="fused" if ns.use_transformer_engine_op_fuser else "loop",
                   moe_pad_to_capacity=bool(ns.moe_pad_expert_input_to_capacity))
    return _plan(**moe, **memory, **_megatron_dp_knobs(ns, num_gpus // (tp * pp * cp), zero),
        num_gpus=num_gpus, tp=tp, pp=pp, cp=cp, vpp=vpp, zero=zero, micro_batch=ns.micro_batch_size,
        global_batch=ns.global_batch_size, seq_len=ns.seq_length, recompute=recompute, recompute_layers=rc_layers,
        recompute_modules=rc_modules,
        sequence_parallel=bool(ns.sequence_parallel) and tp > 1, flash_attention=backend not in ("unfused", "local"),
        precision=precision, bf16_layers=bf16_layers, lowp_params=lowp_params, fp32_grads=fp32_grads,
        fp8_attention=bool(ns.fp8_dot_product_attention) and precision not in ("bf16", "fp16"),
        overlap_grad_reduce=bool(ns.overlap_grad_reduce),
        overlap_param_gather=bool(ns.overlap_param_gather), overlap_tp_comm=bool(ns.tp_comm_overlap),
        first_stage_layers=ns.decoder_first_pipeline_num_layers, last_stage_layers=ns.decoder_last_pipeline_num_layers,
        cp_comm_type=_megatron_cp_comm_type(ns),
    )


def _nemo_cp_comm_type(value) -> str:
    """Plan.cp_comm_type of NeMo's model.config.cp_comm_type (None: Megatron-Core's default p2p)."""
    if value is None:
        return "p2p"
    if value not in ("p2p", "a2a", "allgather"):
        raise InputError(f"nemo: model.config.cp_comm_type {value!r} is not a plan (cp_comm_type: p2p, a2a or allgather; "
                         "hierarchical a2a+p2p and per-layer lists are not modelled)")
    return value


def _megatron_cp_comm_type(ns) -> str:
    """Plan.cp_comm_type of ``--cp-comm-type`` (one value for every layer; hierarchical a2a+p2p is not a plan)."""
    kinds = getattr(ns, "cp_comm_type", None) or ["p2p"]
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if len(set(kinds)) > 1 or kinds[0] not in ("p2p", "a2a", "allgather"):
        raise InputError(f"megatron: --cp-comm-type {' '.join(map(str, kinds))} is not a plan (cp_comm_type: one of "
                         "p2p, a2a, allgather for every layer; hierarchical a2a+p2p is not modelled)")
    return kinds[0]


# ------------------------------------------------------------------ DeepSpeed

#: DeepSpeed 0.19.8 DeepSpeedZeroConfig.prefetch_bucket_size default (runtime/zero/config.py).
DS_PREFETCH_BUCKET = 50_000_000
_DS_DTYPE = {"bf16": "bf16", "fp16": "fp16"}


def _flatten(d: dict, prefix: str = "") -> list[str]:
    out = []
    for k, v in d.items():
        key = f"{prefix}{k}"
        out.append(key)
        if isinstance(v, dict):
            out += _flatten(v, key + ".")
    return out


def to_deepspeed_config(plan: Plan, model: ModelSpec, cluster=None) -> dict:
    """The DeepSpeed config (the JSON given to ``deepspeed.initialize``) for the plan.

    With ``pp > 1`` the model must be a ``PipelineModule``; :func:`to_deepspeed_pipeline` has its arguments.
    The sequence length, the attention kernel and the layers' checkpoint calls are the model code's.
    """
    p = fw.require("deepspeed", plan, model, cluster)
    cfg: dict[str, Any] = {
        "train_batch_size": p.global_batch,
        "train_micro_batch_size_per_gpu": p.micro_batch,
        "gradient_accumulation_steps": p.grad_accum,
    }
    if p.precision == "fp16":
        cfg["fp16"] = {"enabled": True, "loss_scale": 0}
    else:
        cfg["bf16"] = {"enabled": True}
    zero: dict[str, Any] = {"stage": p.zero}
    if p.zero >= 1:
        zero["overlap_comm"] = p.overlap_grad_reduce
        zero["reduce_scatter"] = True
        zero["contiguous_gradients"] = p.zero >= 2
        if p.zero == 3:
            zero["stage3_prefetch_bucket_size"] = DS_PREFETCH_BUCKET if p.overlap_param_gather else 0
    cfg["zero_optimization"] = zero
    if p.zero >= 1:
        cfg["data_types"] = {"grad_accum_dtype": "fp32" if p.fp32_grads else _DS_DTYPE[p.precision]}
    if p.tp > 1:
        cfg["tensor_parallel"] = {"autotp_size": p.tp, "tp_overlap_comm": p.overlap_tp_comm}
    if p.recompute == "full":
        cfg["activation_checkpointing"] = {"partition_activations": False, "contiguous_memory_optimization": False,
                                           "cpu_checkpointing": False}
    _unknown("deepspeed", _flatten(cfg))
    return cfg


def to_deepspeed_pipeline(plan: Plan, model: ModelSpec, layer_class: str = "TransformerLayer",
                          cluster=None) -> dict | None:
    """What the pipeline engine needs when ``pp > 1`` (None otherwise): the ``deepspeed.pipe.PipelineModule``
    keyword arguments and its topology (``PipeModelDataParallelTopology(num_pp, num_mp, num_dp)``).

    ``partition_method`` ``type:<layer_class>`` balances the transformer layers only (the embedding and
    head layers of the layer list weigh nothing), which splits them evenly as the plan does.
    """
    p = fw.require("deepspeed", plan, model, cluster)
    if p.pp == 1:
        return None
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", layer_class):
        raise InputError(f"layer_class: {layer_class!r} is not a Python class name")
    out = {
        "num_stages": p.pp,
        "topology": {"num_pp": p.pp, "num_mp": p.tp, "num_dp": p.dp},
        "partition_method": f"type:{layer_class}",
        "activation_checkpoint_interval": 1 if p.recompute == "full" else 0,
    }
    _unknown("deepspeed", ["PipelineModule." + k for k in out] +
             ["PipeModelDataParallelTopology." + k for k in out["topology"]])
    return out


def to_deepspeed_moe(plan: Plan, model: ModelSpec, cluster=None) -> dict | None:
    """The ``deepspeed.moe.layer.MoE`` keyword arguments of each MoE layer (None for a dense model):
    ``num_experts``, ``ep_size``, ``k``; dropless as the plan prices it (``drop_tokens`` off);
    ``enable_expert_tensor_parallelism`` when the plan splits experts over the tp ranks (etp = tp > 1)."""
    p = fw.require("deepspeed", plan, model, cluster)
    m = model
    if not m.is_moe:
        return None
    out = {"num_experts": m.num_experts, "ep_size": p.ep, "k": m.experts_per_token, "drop_tokens": False,
           "use_residual": False, "enable_expert_tensor_parallelism": p.etp > 1}
    if getattr(m, "moe_capacity_factor", None) is not None:
        out.update(drop_tokens=True, capacity_factor=float(m.moe_capacity_factor))
    _unknown("deepspeed", ["MoE." + k for k in out])
    return out


def from_deepspeed_config(cfg: dict, num_gpus: int, seq_len: int, pipeline: dict | None = None,
                          flash_attention: bool = True, moe: dict | None = None,
                          cross_entropy: str = "pytorch") -> Plan:
    """The plan of a DeepSpeed config (+ the pipeline arguments when pp > 1).

    ``num_gpus`` is the world size; ``seq_len``, ``flash_attention`` and ``cross_entropy`` (the loss on fp32
    or bf16 logits) are the model code's, which the config does not carry.
    """
    if not isinstance(cfg, dict):
        raise InputError("deepspeed: the config is not a mapping")
    try:
        gb, mb = int(cfg["train_batch_size"]), int(cfg["train_micro_batch_size_per_gpu"])
        gas = int(cfg.get("gradient_accumulation_steps", 1))
    except (KeyError, TypeError, ValueError):
        raise InputError("deepspeed: train_batch_size and train_micro_batch_size_per_gpu are needed") from None
    if gb % (mb * gas):
        raise InputError(f"deepspeed: train_batch_size {gb} is not micro {mb} x accumulation {gas} x dp")
    dp = gb // (mb * gas)
    pipe = pipeline or {}
    pp = int(pipe.get("num_stages", 1))
    tp = int((cfg.get("tensor_parallel") or {}).get("autotp_size") or 0) or int(
        (pipe.get("topology") or {}).get("num_mp", 1))
    tp = max(tp, 1)
    if tp * pp * dp != num_gpus:
        raise InputError(f"deepspeed: tp*pp*dp ({tp}*{pp}*{dp}) is not num_gpus {num_gpus}")
    precision = "fp16" if (cfg.get("fp16") or {}).get("enabled") else "bf16"
    zcfg = cfg.get("zero_optimization") or {}
    zero = int(zcfg.get("stage", 0))
    if zero == 0:
        fp32_grads = pp > 1 and precision != "fp16"
        ovl_grad = False
        ovl_param = False
    else:
        gad = (cfg.get("data_types") or {}).get("grad_accum_dtype")
        fp32_grads = gad in ("fp32", "float32", "float", "torch.float32")
        ovl_grad = bool(zcfg.get("overlap_comm", zero == 3))
        ovl_param = zero == 3 and int(zcfg.get("stage3_prefetch_bucket_size",
                                               zcfg.get("prefetch_bucket_size", DS_PREFETCH_BUCKET))) > 0
    if pp > 1:
        recompute = "full" if int(pipe.get("activation_checkpoint_interval", 0)) > 0 else "none"
    else:
        recompute = "full" if "activation_checkpointing" in cfg else "none"
    tpc = cfg.get("tensor_parallel") or {}
    ex = {}
    if moe:
        ex = dict(ep=int(moe.get("ep_size", 1)), etp=tp if moe.get("enable_expert_tensor_parallelism") else 1)
    return _plan(**ex,
        num_gpus=num_gpus, tp=tp, pp=pp, dp=dp, cp=1, vpp=1, zero=zero, micro_batch=mb, global_batch=gb,
        seq_len=seq_len, recompute=recompute, sequence_parallel=False, flash_attention=flash_attention,
        precision=precision, fp32_grads=fp32_grads, overlap_grad_reduce=ovl_grad, overlap_param_gather=ovl_param,
        overlap_tp_comm=bool(tpc.get("tp_overlap_comm", False)) and tp > 1, cross_entropy=cross_entropy,
    )


# ------------------------------------------------------------------ torchtitan


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(type(v).__name__)


def torchtitan_flavor(m: ModelSpec) -> tuple[str, str] | None:
    """The torchtitan ``[model] name, flavor`` that builds ``m`` (torchtitan_flavors.py's FLAVORS, the one table of
    the reader and this writer), or None when torchtitan v0.2.2 has no flavor of it."""
    from plan_search.planner.frameworks.torchtitan_flavors import FLAVORS

    return next((key for key, target in FLAVORS.items() if target == m.name), None)


def torchtitan_flavor_fields(name: str, flavor: str) -> dict[str, Any]:
    """The spec fields torchtitan v0.2.2's flavor sets (data/torchtitan_flavors.yaml, transcribed with its source)."""
    import yaml
    from pathlib import Path

    doc = yaml.safe_load((Path(__file__).with_name("data") / "torchtitan_flavors.yaml").read_text(encoding="utf-8"))
    return dict((doc.get(name) or {}).get(flavor) or {})


def torchtitan_unexpressed(m: ModelSpec) -> dict[str, str]:
    """Where torchtitan builds another model than ``m``: every recorded field of its flavor that differs from the
    spec (field -> the flavor's value), or, without a flavor, the model itself."""
    key = torchtitan_flavor(m)
    if key is None:
        return {"model": "torchtitan v0.2.2 has no flavor of this model: [model] name/flavor must name one of this "
                         "shape (the shape is not a TOML key)"}
    out = {}
    for k, v in torchtitan_flavor_fields(*key).items():
        mine = getattr(m, k)
        same = (mine == v) if not isinstance(v, float) or mine is None else math.isclose(float(mine), v, rel_tol=1e-9)
        if not same:
            out[k] = f"{v} in torchtitan's {key[0]} {key[1]} flavor, {mine} in the model"
    return out


def torchtitan_sections(plan: Plan, model: ModelSpec, cluster=None) -> dict[str, dict[str, Any]]:
    """The TOML sections as data (section -> key -> value)."""
    p = fw.require("torchtitan", plan, model, cluster)
    L = model.num_layers
    fsdp = p.zero == 3 and (p.dp > 1 or p.cp > 1)
    shard = p.shard_degree if fsdp else 1  # HSDP: replicate x shard (issue 12)
    par: dict[str, Any] = {
        "data_parallel_replicate_degree": p.dp // shard,
        "data_parallel_shard_degree": shard,
    }
    if fsdp:
        par["fsdp_reshard_after_forward"] = "always" if p.reshard_after_forward else "never"
    par["tensor_parallel_degree"] = p.tp
    if p.tp > 1:
        par["enable_async_tensor_parallel"] = p.overlap_tp_comm
    par["pipeline_parallel_degree"] = p.pp
    if p.pp > 1:
        iw, ow, lps = fw.titan_layout(p, L)
        par["pipeline_parallel_schedule"] = "Interleaved1F1B" if p.vpp > 1 else "1F1B"
        par["pipeline_parallel_microbatch_size"] = p.micro_batch
        par["pipeline_parallel_first_stage_less_layers"] = iw
        par["pipeline_parallel_last_stage_less_layers"] = ow
        if lps is not None:
            par["pipeline_parallel_layers_per_stage"] = lps
    par["context_parallel_degree"] = p.cp
    if model.is_moe:
        par["expert_parallel_degree"] = p.ep
        par["expert_tensor_parallel_degree"] = p.etp
        par["expert_parallel_comm_backend"] = "deepep" if p.moe_dispatcher == "flex" else "standard"
    training = {
        "local_batch_size": p.micro_batch * (p.grad_accum if p.pp > 1 else 1),
        "global_batch_size": p.global_batch,
        "seq_len": p.seq_len,
        "mixed_precision_param": "bfloat16",
        "mixed_precision_reduce": "float32",
    }
    if p.recompute == "none":
        ac = {"mode": "none"}
    elif p.recompute_layers is None:
        ac = {"mode": "full"} if p.recompute == "full" else {"mode": "selective", "selective_ac_option": "op"}
    else:
        ac = {"mode": "selective", "selective_ac_option": str(fw.titan_ac_freq(p, L))}
    out: dict[str, dict[str, Any]] = {"training": training, "parallelism": par, "activation_checkpoint": ac}
    flavor = torchtitan_flavor(model)
    if flavor is not None:  # the model torchtitan builds (issue 23)
        out["model"] = {"name": flavor[0], "flavor": flavor[1]}
    if p.tp > 1 and p.overlap_tp_comm:
        out["compile"] = {"enable": True, "components": ["model", "loss"]}
    if p.precision == "fp8":
        out.setdefault("model", {})["converters"] = ["quantize.linear.float8"]
        out["quantize.linear.float8"] = {"recipe_name": "tensorwise"}
    if model.is_moe and p.moe_routing == "round_robin":  # round-robin routing (rules._TT_ROUTER)
        out["debug"] = {"moe_force_load_balance": True}
    _unknown("torchtitan", [f"{s}.{k}" for s, kv in out.items() for k in kv])
    return out


def to_torchtitan_toml(plan: Plan, model: ModelSpec, cluster=None) -> str:
    """The torchtitan (0.2.x) job TOML sections for the plan: ``[training]``, ``[parallelism]``,
    ``[activation_checkpoint]``, and ``[compile]`` / ``[model]`` + ``[quantize.linear.float8]`` when async TP
    or float8 need them. The model itself (``[model] name/flavor``, its shape) is torchtitan's registry."""
    secs = torchtitan_sections(plan, model, cluster)
    lines = ["# torchtitan job config sections (plan-search); merge into the job's TOML"]
    for name, kv in secs.items():
        lines += ["", f"[{name}]"] + [f"{k} = {_toml_value(v)}" for k, v in kv.items()]
    return "\n".join(lines) + "\n"


def _parse_toml(text: str) -> dict:
    try:
        import tomllib  # Python 3.11+
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10: the subset this module writes
        return _parse_toml_subset(text)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"torchtitan: not valid TOML ({exc})") from None


def _parse_toml_subset(text: str) -> dict:
    root: dict = {}
    cur = root
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip() if not raw.strip().startswith('"') else raw.strip()
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            cur = root
            for part in line[1:-1].strip().split("."):
                cur = cur.setdefault(part.strip(), {})
            continue
        if "=" not in line:
            raise InputError(f"torchtitan: line {n} is not key = value")
        k, v = (s.strip() for s in line.split("=", 1))
        v = v.replace("true", "True").replace("false", "False")
        try:
            cur[k] = ast.literal_eval(v)
        except (ValueError, SyntaxError):
            raise InputError(f"torchtitan: line {n}: value {v!r} is not understood") from None
    return root


def from_torchtitan_toml(text: str, num_layers: int) -> Plan:
    """The plan of a torchtitan job TOML (``num_layers``: the model's, to read the pipeline split); ``text`` may
    be the parsed sections (``planner.frameworks.read`` records which keys this reads)."""
    d = _parse_toml(text) if isinstance(text, str) else text
    par, tr = d.get("parallelism") or {}, d.get("training") or {}
    ac = d.get("activation_checkpoint") or {}
    rep = int(par.get("data_parallel_replicate_degree", 1))
    shard = int(par.get("data_parallel_shard_degree", -1))
    if shard < 1:
        raise InputError("torchtitan: give data_parallel_shard_degree explicitly (-1 depends on the world size)")
    # HSDP (replicate and shard both > 1): shard groups of `shard` GPUs, `rep` replicas (issue 12)
    hsdp = {"dp_shard": shard} if rep > 1 and shard > 1 else {}
    tp, pp, cp = (int(par.get(k, 1)) for k in ("tensor_parallel_degree", "pipeline_parallel_degree",
                                                 "context_parallel_degree"))
    dp = rep * shard
    zero = 3 if (shard > 1 or cp > 1) else 0
    lb = int(tr.get("local_batch_size", 8))
    gb = int(tr.get("global_batch_size", -1))
    if gb < 0:
        gb = lb * dp
    schedule = str(par.get("pipeline_parallel_schedule", "1F1B"))
    vpp, first, last = 1, None, None
    totals = [num_layers]
    if pp > 1:
        mb = int(par.get("pipeline_parallel_microbatch_size", 1))
        iw = int(par.get("pipeline_parallel_first_stage_less_layers", 1))
        ow = int(par.get("pipeline_parallel_last_stage_less_layers", 1))
        lps = par.get("pipeline_parallel_layers_per_stage")
        single = schedule.lower() in ("1f1b", "gpipe", "pipelineschedulesingle")
        if lps is not None:
            stages = math.ceil((num_layers + iw + ow) / int(lps))
        else:
            stages = pp * (1 if single else 2)
        if stages % pp:
            raise InputError(f"torchtitan: {stages} virtual stages do not divide over pp {pp}")
        vpp = stages // pp
        split = fw.titan_split(stages, num_layers, iw, ow)
        if split is None or sum(split) != num_layers:
            raise InputError("torchtitan: the pipeline split does not place every layer")
        totals = fw._rank_totals(split, pp)
        if len(set(totals)) > 1:
            first, last = totals[0], totals[-1]
    else:
        mb = lb
    recompute, rc_layers = "none", None
    mode = ac.get("mode", "selective")
    option = str(ac.get("selective_ac_option", "2"))
    if mode == "full":
        recompute = "full"
    elif mode == "selective":
        if option == "op":
            recompute = "selective"
        elif option.isdigit() and int(option) > 0:
            recompute = "full"
            n = int(option)
            rc_layers = max(t // n for t in totals)  # layer SAC: every n-th block of a rank
        else:
            raise InputError(f"torchtitan: selective_ac_option {option!r} is neither 'op' nor a positive integer")
    elif mode != "none":
        raise InputError(f"torchtitan: activation_checkpoint.mode {mode!r} is not a plan (none, full, selective)")
    moe = {}
    if "expert_parallel_degree" in par:
        moe = dict(ep=int(par.get("expert_parallel_degree", 1)), etp=int(par.get("expert_tensor_parallel_degree", 1)),
                   moe_dispatcher="flex" if par.get("expert_parallel_comm_backend") == "deepep" else "alltoall")
        if (d.get("debug") or {}).get("moe_force_load_balance"):
            moe["moe_routing"] = "round_robin"
    converters = (d.get("model") or {}).get("converters") or []
    precision = "fp8" if any("float8" in c for c in converters) else "bf16"
    if tr.get("mixed_precision_param", "bfloat16") != "bfloat16" and precision != "fp8":
        raise InputError("torchtitan: mixed_precision_param float32 is not a plan (bf16 or fp8)")
    policy = str(par.get("fsdp_reshard_after_forward", "default"))
    if policy not in ("default", "always", "never"):
        raise InputError(f"torchtitan: fsdp_reshard_after_forward {policy!r} is not default, always or never")
    if zero == 3:  # torchtitan's default: reshard after forward unless pipeline parallel
        hsdp["reshard_after_forward"] = policy == "always" or (policy == "default" and pp == 1)
    return _plan(
        **moe, **hsdp, num_gpus=dp * tp * pp * cp, tp=tp, pp=pp, dp=dp, cp=cp, vpp=vpp, zero=zero, micro_batch=mb,
        global_batch=gb, seq_len=int(tr.get("seq_len", 2048)), recompute=recompute, recompute_layers=rc_layers,
        sequence_parallel=tp > 1, flash_attention=True, precision=precision, fp32_grads=True,
        overlap_grad_reduce=True, overlap_param_gather=True,
        overlap_tp_comm=bool(par.get("enable_async_tensor_parallel", False)) and tp > 1,
        first_stage_layers=first, last_stage_layers=last,
        moe_grouped_gemm=fw.memory_defaults("torchtitan")["moe_grouped_gemm"],  # its only value: torch._grouped_mm
    )


# ------------------------------------------------------------------ NeMo 2.0


def to_nemo_overrides(plan: Plan, model: ModelSpec, cluster=None, gpus_per_node: int | None = None) -> dict:
    """NeMo 2.0 overrides of a pretraining recipe (``nemo llm pretrain --factory <recipe> k=v ...`` or
    ``recipe.<path> = value`` in Python): trainer size, ``MegatronStrategy`` and its DDP config, the
    precision plugin, the optimizer's distributed flag, the data module's batch and the model config's
    shape and recomputation. Use a recipe of the model's family: activation, norm, position embedding
    and tokenizer stay the recipe's.
    """
    p = fw.require("nemo", plan, model, cluster)
    g = gpus_per_node or (cluster.node.gpus_per_node if cluster is not None else 8)
    devices = min(p.num_gpus, g)
    if p.num_gpus % devices:
        raise InputError(f"nemo: nemo-devices: {p.num_gpus} GPUs are not whole nodes of {devices}")
    o: dict[str, Any] = {
        "trainer.num_nodes": p.num_gpus // devices,
        "trainer.devices": devices,
        "trainer.strategy.tensor_model_parallel_size": p.tp,
        "trainer.strategy.pipeline_model_parallel_size": p.pp,
        "trainer.strategy.virtual_pipeline_model_parallel_size": p.vpp if p.vpp > 1 else None,
        "trainer.strategy.context_parallel_size": p.cp,
        "model.config.cp_comm_type": p.cp_comm_type if p.cp > 1 and p.cp_comm_type != "p2p" else None,
        "trainer.strategy.sequence_parallel": p.sequence_parallel,
        "trainer.strategy.num_layers_in_first_pipeline_stage": p.first_stage_layers,
        "trainer.strategy.num_layers_in_last_pipeline_stage": p.last_stage_layers,
        "trainer.strategy.account_for_embedding_in_pipeline_split": p.account_for_embedding_in_pipeline_split or None,
        "trainer.strategy.account_for_loss_in_pipeline_split": p.account_for_loss_in_pipeline_split or None,
        "trainer.strategy.ddp.num_distributed_optimizer_instances": (p.dp // p.dp_shard if p.zero == 1 and p.dp_shard
                                                                     and p.dp_shard < p.dp else None),
        "trainer.strategy.ddp.overlap_grad_reduce": p.overlap_grad_reduce,
        "trainer.strategy.ddp.overlap_param_gather": p.overlap_param_gather,
        "trainer.strategy.ddp.grad_reduce_in_fp32": p.fp32_grads,
    }
    if p.zero >= 2:
        o["trainer.strategy.fsdp"] = "megatron"
        o["trainer.strategy.ddp.data_parallel_sharding_strategy"] = _FSDP_STRATEGY[p.zero]
        o["trainer.strategy.ddp.average_in_collective"] = False
        o["trainer.strategy.save_ckpt_format"] = "fsdp_dtensor"
        o["model.config.gradient_accumulation_fusion"] = False
    else:
        o["trainer.strategy.fsdp"] = None
    o["optim.config.use_distributed_optimizer"] = p.zero >= 1
    o["trainer.plugins.precision"] = "16-mixed" if p.precision == "fp16" else "bf16-mixed"
    o["trainer.plugins.grad_reduce_in_fp32"] = p.fp32_grads
    o["trainer.plugins.fp8"] = "hybrid" if p.precision == "fp8" else None
    if p.precision == "fp8":
        o["trainer.plugins.fp8_recipe"] = "delayed"
    o["trainer.plugins.fp8_dot_product_attention"] = p.fp8_attention or None
    o["data.seq_length"] = p.seq_len
    o["data.micro_batch_size"] = p.micro_batch
    o["data.global_batch_size"] = p.global_batch
    m = model
    o.update({
        "model.config.num_layers": m.num_layers,
        "model.config.hidden_size": m.hidden_size,
        "model.config.ffn_hidden_size": m.ffn_hidden_size,
        "model.config.num_attention_heads": m.num_heads,
        "model.config.num_query_groups": m.num_kv_heads,
        "model.config.kv_channels": m.head_dim,
        "model.config.seq_length": p.seq_len,
    })
    if p.recompute == "none":
        o.update({"model.config.recompute_granularity": None, "model.config.recompute_method": None,
                  "model.config.recompute_num_layers": None})
    elif p.recompute == "selective":
        o.update({"model.config.recompute_granularity": "selective", "model.config.recompute_method": None,
                  "model.config.recompute_num_layers": None})
    elif p.recompute_layers is None:
        o.update({"model.config.recompute_granularity": "full", "model.config.recompute_method": "uniform",
                  "model.config.recompute_num_layers": 1})
    else:
        o.update({"model.config.recompute_granularity": "full", "model.config.recompute_method": "block",
                  "model.config.recompute_num_layers": p.recompute_layers // p.vpp})
    o.update(nemo_model_overrides(m, p.tp))
    o.update(nemo_moe_overrides(p, m))
    o.update(nemo_memory_overrides(p))
    _unknown("nemo", o)
    return o


#: torch dtype names of the optimizer's state dtypes (OptimizerConfig's fields are torch.dtype).
_TORCH_DTYPE = {"fp32": "torch.float32", "bf16": "torch.bfloat16"}


def nemo_memory_overrides(p: Plan) -> dict:
    """The memory knobs (issue 11) as NeMo overrides of Megatron-Core's configs: Transformer Engine's loss
    (``model.config.cross_entropy_loss_fusion`` + ``cross_entropy_fusion_impl te``; ``megatron`` is the
    recipe's own and writes nothing), the precision-aware optimizer (``optim.config.use_precision_aware_optimizer``,
    the moments' torch dtypes, ``store_param_remainders`` for bf16 master remainders) and the FP8 store of the
    SwiGLU inputs (``model.config.activation_func_fp8_input_store``)."""
    o: dict[str, Any] = {}
    if p.cross_entropy == "te":
        o.update({"model.config.cross_entropy_loss_fusion": True, "model.config.cross_entropy_fusion_impl": "te"})
    if fw.precision_aware_optimizer(p):
        o.update({"optim.config.use_precision_aware_optimizer": True,
                  "optim.config.exp_avg_dtype": _TORCH_DTYPE[p.adam_moments_dtype],
                  "optim.config.exp_avg_sq_dtype": _TORCH_DTYPE[p.adam_moments_dtype],
                  "optim.config.store_param_remainders": p.master_weights == "bf16_remainder"})
    if p.act_fp8_input_store:
        o["model.config.activation_func_fp8_input_store"] = True
    return o


def _nemo_memory_knobs(g) -> dict:
    """The memory knobs of NeMo overrides (the inverse of :func:`nemo_memory_overrides`; ``g(key, default)``)."""
    te = g("model.config.cross_entropy_fusion_impl") == "te" and bool(g("model.config.cross_entropy_loss_fusion"))
    out = {"cross_entropy": "te" if te else "megatron", "adam_moments_dtype": "fp32", "master_weights": "fp32",
           "act_fp8_input_store": bool(g("model.config.activation_func_fp8_input_store", False))}
    if g("optim.config.use_precision_aware_optimizer", False):
        names = {v: k for k, v in _TORCH_DTYPE.items()}
        ea, eas = g("optim.config.exp_avg_dtype", "torch.float32"), g("optim.config.exp_avg_sq_dtype", "torch.float32")
        if ea != eas or ea not in names:
            raise InputError(f"nemo: optim.config.exp_avg_dtype {ea} with exp_avg_sq_dtype {eas} is not a plan "
                             "(adam_moments_dtype: both torch.float32 or both torch.bfloat16)")
        out["adam_moments_dtype"] = names[ea]
        # OptimizerConfig.store_param_remainders defaults to True (megatron/core/optimizer/optimizer_config.py)
        out["master_weights"] = "bf16_remainder" if g("optim.config.store_param_remainders", True) else "fp32"
    return out


def nemo_unexpressed(m: ModelSpec, tp: int = 1) -> dict[str, str]:
    """The model's fields NeMo's overrides cannot carry (field -> why): the recipe's config class sets them."""
    out = _vocab_unexpressed(m, tp)
    out.update(_chunked_unexpressed(m, "the recipe's"))
    if m.position == "rotary" and m.rope_scaling == "llama3":
        out["rope_scaling"] = "llama3: Llama 3.1 RoPE scaling is the recipe's config class's (Llama31Config)"
    keys = {"llama3": ("rope_factor", "rope_original_max_position", "rope_low_freq_factor", "rope_high_freq_factor"),
            "yarn": ("rope_factor", "rope_original_max_position", "rope_beta_fast", "rope_beta_slow", "rope_mscale",
                     "rope_mscale_all_dim")}.get(m.rope_scaling or "", ()) if m.position == "rotary" else ()
    for k in keys:
        v = getattr(m, k)
        out[k] = (f"{'default' if v is None else format(v, 'g')}: {m.rope_scaling} RoPE scaling is the recipe's "
                  "config class's (Llama31Config, DeepSeekV3Config, GPTOSSConfig), not a TransformerConfig override")
    out["activation"] = (f"{m.activation}: activation_func is a Python callable, the recipe's "
                         "(gated_linear_unit is written)")
    if m.router_bias:
        out["router_bias"] = "the router's trained bias (GPT-OSS) is the recipe's"
    return out


def nemo_model_overrides(m: ModelSpec, tp: int = 1) -> dict:
    """The architecture as Megatron-Core TransformerConfig / GPTConfig overrides (the fields of
    :func:`megatron_model_args` under their config names: rotary base and share, norm and epsilon, GLU,
    biases, tying, QK norms, sinks, windows, vocabulary kept exact at ``tp``; what a config cannot carry is
    :func:`nemo_unexpressed`)."""
    o: dict[str, Any] = {
        "model.config.normalization": _NORM[m.norm],
        "model.config.layernorm_epsilon": float(m.norm_eps),
        "model.config.layernorm_zero_centered_gamma": m.layernorm_1p,
        "model.config.gated_linear_unit": m.gated,
        "model.config.add_bias_linear": m.bias,
        "model.config.add_qkv_bias": bool(m.qkv_bias) and not m.bias,
        "model.config.share_embeddings_and_output_weights": m.tied_embeddings,
        "model.config.position_embedding_type": ("yarn" if m.rope_scaling == "yarn" and not m.is_mla
                                                 else _POS.get(m.position, m.position)),
        "model.config.qk_layernorm": m.qk_norm,
        "model.config.qk_l2_norm": m.qk_l2_norm,
        "model.config.vocab_size": m.vocab_size,
    }
    if m.position == "rotary":
        o["model.config.rotary_base"] = int(m.rope_theta)
        o["model.config.rotary_percent"] = float(m.rotary_percent)
        if m.attention_window is not None and m.attention_window_kind == "chunked" and m.global_attention_every:
            o["model.config.no_rope_freq"] = m.global_attention_every
    d = megatron_vocab_divisor(m.vocab_size, tp)
    if d is not None:
        o["model.config.make_vocab_size_divisible_by"] = d
    if m.activation_clamp is not None:  # GPT-OSS (GPT_OSS_GLU_OFFSET)
        o["model.config.activation_func_clamp_value"] = float(m.activation_clamp)
        o["model.config.glu_linear_offset"] = GPT_OSS_GLU_OFFSET
    if m.attention_sinks:
        o["model.config.softmax_type"] = "learnable"
    if m.attention_window is not None and m.attention_window_kind == "sliding":
        o["model.config.window_size"] = [m.attention_window - 1, 0]
        if m.global_attention_every:
            o["model.config.window_attn_skip_freq"] = m.global_attention_every
    if not m.dropout:
        o["model.config.hidden_dropout"] = 0.0
        o["model.config.attention_dropout"] = 0.0
    if m.is_moe:
        o["model.config.moe_router_score_function"] = m.router_score
        o["model.config.moe_router_pre_softmax"] = m.router_score == "softmax" and not m.router_norm_topk
        o["model.config.moe_router_topk_scaling_factor"] = m.router_topk_scaling
        o["model.config.moe_router_enable_expert_bias"] = m.router_expert_bias
        o["model.config.moe_router_num_groups"] = m.router_num_groups or None
        o["model.config.moe_router_group_topk"] = m.router_group_topk or None
        o["model.config.moe_shared_expert_gate"] = m.shared_expert_gate
    return o


def nemo_moe_overrides(p: Plan, m: ModelSpec) -> dict:
    """MoE/MLA overrides (Megatron-Core 0.16.1 TransformerConfig fields through ``model.config``; the
    layout through ``MegatronStrategy``, as Megatron-Bridge's MoE recipes set them)."""
    o: dict[str, Any] = {}
    if m.is_mla:
        o.update({"model.config.multi_latent_attention": True, "model.config.q_lora_rank": m.q_lora_rank,
                  "model.config.kv_lora_rank": m.kv_lora_rank, "model.config.qk_head_dim": m.qk_nope_head_dim,
                  "model.config.qk_pos_emb_head_dim": m.qk_rope_head_dim,
                  "model.config.v_head_dim": m.v_head_dim or m.head_dim})
        if getattr(m, "index_topk", None):  # DeepSeek Sparse Attention
            o.update({"model.config.experimental_attention_variant": "dsa",
                      "model.config.dsa_indexer_n_heads": m.index_n_heads,
                      "model.config.dsa_indexer_head_dim": m.index_head_dim,
                      "model.config.dsa_indexer_topk": m.index_topk})
    if getattr(m, "mtp_num_layers", 0):
        o["model.config.mtp_num_layers"] = m.mtp_num_layers
    mods = selective_modules(p, m)
    if mods:
        o["model.config.recompute_modules"] = mods
    if not m.is_moe:
        return o
    o.update({
        "trainer.strategy.expert_model_parallel_size": p.ep,
        "trainer.strategy.expert_tensor_parallel_size": p.etp,
        "model.config.num_moe_experts": m.num_experts,
        "model.config.moe_router_topk": m.experts_per_token,
        "model.config.moe_ffn_hidden_size": m.expert_ffn_hidden_size,
        # TransformerConfig.moe_layer_freq: an int (1 = every layer) or the per-layer 0/1 list
        "model.config.moe_layer_freq": 1 if moe_layer_pattern(m) == "1" else [
            int(i >= m.first_dense_layers and (i - m.first_dense_layers) % m.moe_layer_freq == 0)
            for i in range(m.num_layers)],
        "model.config.moe_shared_expert_intermediate_size":
            m.num_shared_experts * (m.shared_expert_ffn_hidden_size or m.expert_ffn_hidden_size)
            if m.num_shared_experts else None,
        "model.config.moe_grouped_gemm": True,
        "model.config.moe_permute_fusion": True,
        "model.config.moe_router_dtype": "fp32",
        "model.config.moe_token_dispatcher_type": p.moe_dispatcher,
        "model.config.moe_flex_dispatcher_backend": "deepep" if p.moe_dispatcher == "flex" else None,
        "model.config.overlap_moe_expert_parallel_comm": p.moe_overlap,
        "model.config.moe_expert_capacity_factor": m.moe_capacity_factor,
        "model.config.moe_pad_expert_input_to_capacity": p.moe_pad_to_capacity,
    })
    return o


def _cli_value(v) -> str:
    if v is None or isinstance(v, (bool, int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):  # a list literal without spaces: one token of the key=value text
        return "[" + ",".join(_cli_value(x) for x in v) + "]"
    s = str(v)
    return s if re.fullmatch(r"[A-Za-z0-9_.\-]+", s) else repr(s)


def nemo_overrides_text(overrides: dict) -> str:
    """The overrides as ``key=value`` tokens for ``nemo llm pretrain --factory <recipe> ...``."""
    return " ".join(f"{k}={_cli_value(v)}" for k, v in overrides.items())


def parse_nemo_overrides(text: str) -> dict:
    out = {}
    for tok in text.split():
        if "=" not in tok:
            continue  # the command words (nemo llm pretrain --factory x)
        k, v = tok.split("=", 1)
        try:
            out[k] = ast.literal_eval(v)
        except (ValueError, SyntaxError):
            out[k] = v
    return out


def from_nemo_overrides(overrides: dict | str) -> Plan:
    """The plan of NeMo 2.0 recipe overrides (a dict of dotted paths, or their ``key=value`` text)."""
    o = parse_nemo_overrides(overrides) if isinstance(overrides, str) else overrides  # read only (a recording dict stays one)
    g = lambda k, d=None: o.get(k, d)  # noqa: E731
    s = "trainer.strategy."
    try:
        num_gpus = int(g("trainer.num_nodes", 1)) * int(g("trainer.devices"))
        mb, gb, seq = int(g("data.micro_batch_size")), int(g("data.global_batch_size")), int(g("data.seq_length"))
    except (TypeError, ValueError):
        raise InputError("nemo: trainer.devices, data.micro_batch_size, data.global_batch_size and "
                         "data.seq_length are needed") from None
    if g(s + "fsdp") == "megatron":
        zero = {"optim_grads": 2, "optim_grads_params": 3, "optim": 1, "no_shard": 0}[
            g(s + "ddp.data_parallel_sharding_strategy", "optim_grads_params")]
    else:
        zero = 1 if g("optim.config.use_distributed_optimizer", True) else 0
    gran = g("model.config.recompute_granularity")
    recompute, rc_layers = "none", None
    vpp = int(g(s + "virtual_pipeline_model_parallel_size") or 1)
    if gran == "selective":
        recompute = "selective"
    elif gran == "full":
        recompute = "full"
        if g("model.config.recompute_method") == "block":
            rc_layers = int(g("model.config.recompute_num_layers")) * vpp
    precision = "fp16" if g("trainer.plugins.precision") == "16-mixed" else "bf16"
    if g("trainer.plugins.fp8"):
        precision = "fp8"
    tp = int(g(s + "tensor_model_parallel_size", 1))
    moe = {}
    if g("model.config.num_moe_experts"):
        moe = dict(ep=int(g(s + "expert_model_parallel_size", 1)),
                   etp=int(g(s + "expert_tensor_parallel_size") or tp),
                   moe_dispatcher=g("model.config.moe_token_dispatcher_type", "allgather"),
                   moe_overlap=bool(g("model.config.overlap_moe_expert_parallel_comm", False)),
                   moe_pad_to_capacity=bool(g("model.config.moe_pad_expert_input_to_capacity", False)))
    dpk = {}  # issue 12: the split's embedding/loss accounting and the distributed optimizer's instances
    if g(s + "account_for_embedding_in_pipeline_split"):
        dpk["account_for_embedding_in_pipeline_split"] = True
    if g(s + "account_for_loss_in_pipeline_split"):
        dpk["account_for_loss_in_pipeline_split"] = True
    inst = int(g(s + "ddp.num_distributed_optimizer_instances") or 1)
    if inst > 1 and zero == 1:
        dp_all = num_gpus // (tp * int(g(s + "pipeline_model_parallel_size", 1)) * int(g(s + "context_parallel_size", 1)))
        if dp_all % inst:
            raise InputError(f"nemo: num_distributed_optimizer_instances {inst} does not divide dp {dp_all}")
        dpk["dp_shard"] = dp_all // inst
    return _plan(**moe, **dpk, **_nemo_memory_knobs(g),
        num_gpus=num_gpus, tp=tp, pp=int(g(s + "pipeline_model_parallel_size", 1)),
        cp=int(g(s + "context_parallel_size", 1)), vpp=vpp, zero=zero, micro_batch=mb, global_batch=gb,
        cp_comm_type=_nemo_cp_comm_type(g("model.config.cp_comm_type", None)), seq_len=seq, recompute=recompute, recompute_layers=rc_layers,
        sequence_parallel=bool(g(s + "sequence_parallel", False)) and tp > 1, flash_attention=True,
        precision=precision, fp32_grads=bool(g(s + "ddp.grad_reduce_in_fp32", g("trainer.plugins.grad_reduce_in_fp32", True))),
        fp8_attention=bool(g("trainer.plugins.fp8_dot_product_attention", False)) and precision == "fp8",
        overlap_grad_reduce=bool(g(s + "ddp.overlap_grad_reduce", False)),
        overlap_param_gather=bool(g(s + "ddp.overlap_param_gather", False)), overlap_tp_comm=False,
        first_stage_layers=g(s + "num_layers_in_first_pipeline_stage"),
        last_stage_layers=g(s + "num_layers_in_last_pipeline_stage"),
    )


# ------------------------------------------------------------------ one entry point


@dataclass(frozen=True)
class LaunchConfig:
    """One framework's launch configuration of a plan."""

    framework: str
    version: str
    kind: str  # argv | json | toml | overrides
    text: str
    data: Any
    extra: Any = None  # DeepSpeed: the PipelineModule arguments when pp > 1
    notes: tuple[str, ...] = field(default_factory=tuple)
    moe: Any = None  # DeepSpeed: the deepspeed.moe.layer.MoE arguments of a MoE model
    model_config: Any = None  # DeepSpeed: the Hugging Face config.json of the model (hf_export.to_hf_config)

    def as_json(self) -> dict:
        out = {"framework": self.framework, "version": self.version, "kind": self.kind, "config": self.data,
               "pipeline_module": self.extra, "notes": list(self.notes), "text": self.text}
        if self.moe is not None:
            out["moe_layer"] = self.moe
        if self.model_config is not None:
            out["model_config"] = self.model_config
        return out


def _notes(framework: str, p: Plan, m: ModelSpec) -> list[str]:
    n = []
    if framework == "megatron":
        if (p.tp > 1 or p.cp > 1) and p.zero < 2:
            n.append("export CUDA_DEVICE_MAX_CONNECTIONS=1 (arguments.py asserts it with tp or cp > 1 before "
                     "Blackwell)")
        if p.zero >= 2:
            n.append("leave CUDA_DEVICE_MAX_CONNECTIONS unset (arguments.py asserts it is not 1 with Megatron-FSDP)")
        for k, why in megatron_unexpressed(m, p.tp).items():
            n.append(f"not expressible as a flag: {k} {why}")
        if m.position == "rotary" and m.rope_scaling == "yarn" and not m.is_mla:
            n.append("--position-embedding-type yarn and --yarn-* need Megatron-LM after core_v0.18.0 "
                     "(arguments.py @d98e8a64)")
        if getattr(m, "index_topk", None):
            n.append("--experimental-attention-variant dsa and --dsa-indexer-* need Megatron-LM after core_v0.18.0 "
                     "(TransformerConfig @d98e8a64)")
        n.append("tokenizer, data, optimizer, schedule, checkpoint and logging flags are yours")
        if fw.precision_aware_optimizer(p):
            n.append("--use-precision-aware-optimizer runs Transformer Engine's FusedAdam (TE >= 2.1 for the bf16 "
                     "master remainders) with --optimizer adam")
        if m.is_moe:
            n.append("MoE: the step time assumes moe_imbalance x the balanced load on the busiest expert rank; "
                     "--moe-router-load-balancing-type and --moe-aux-loss-coeff are yours")
            if p.moe_grouped_gemm == "fused":
                n.append("export NVTE_CUTEDSL_FUSED_GROUPED_MLP=1 before Transformer Engine is imported (TE >= 2.17 "
                         "runs the fused grouped MLP only with it)")
                n.append("--use-transformer-engine-op-fuser and --moe-mlp-glu-interleave-size need Megatron-LM "
                         "core_v0.18.0 or newer (TransformerConfig fields there; the other flags are the header's)")
    elif framework == "deepspeed":
        from plan_search.planner.frameworks.hf_export import hf_model_type, hf_unexpressed

        n.append("the model is the training script's: the Hugging Face config.json written with the config builds "
                 f"it with transformers' {hf_model_type(m)} class (AutoTP shards transformers models)")
        for k, why in hf_unexpressed(m).items():
            n.append(f"not in the config.json: {k} ({why})")
        n.append("seq_len and the attention kernel are the model code's (the config does not carry them)")
        n.append("the loss is the model code's: torch cross_entropy on " + (
            "bf16 logits (cross_entropy pytorch_bf16)" if p.cross_entropy == "pytorch_bf16"
            else "fp32 logits (logits.float(); cross_entropy pytorch)"))
        if p.recompute == "full" and p.pp == 1:
            n.append("the model code must wrap each layer in deepspeed.checkpointing.checkpoint")
        if p.tp > 1:
            n.append("tensor parallelism is AutoTP: the model must be one AutoTP can shard (e.g. Hugging Face)")
        if p.pp > 1:
            n.append("build the model as deepspeed.pipe.PipelineModule(layers, **pipeline_module, "
                     "topology=PipeModelDataParallelTopology(**topology)); the layer class name sets partition_method")
        if m.is_moe:
            n.append("MoE: wrap each MoE layer's experts in deepspeed.moe.layer.MoE(hidden_size, expert, "
                     "**moe_layer); the optimizer needs its MoE parameter groups "
                     "(deepspeed.moe.utils.split_params_into_different_moe_groups_for_optimizer)")
    elif framework == "torchtitan":
        key = torchtitan_flavor(m)
        if key is None:
            n.append("[model] name/flavor must be a torchtitan model of this shape; the shape is not a TOML key")
        else:
            n.append(f"[model] {key[0]} {key[1]}: torchtitan v0.2.2's flavor of this model "
                     "(its arguments: planner/frameworks/data/torchtitan_flavors.yaml)")
            for k, why in torchtitan_unexpressed(m).items():
                n.append(f"the flavor differs: {k} {why}")
        if p.cp > 1:
            n.append("context parallelism exchanges K/V by all-gather (context_parallel_rotate_method)")
    elif framework == "nemo":
        n.append("apply to a pretraining recipe of the model's family, e.g. nemo llm pretrain --factory <recipe> "
                 "<overrides>; the tokenizer is the recipe's")
        for k, why in nemo_unexpressed(m, p.tp).items():
            n.append(f"not an override: {k} {why}")
        if fw.precision_aware_optimizer(p):
            n.append("optim.config.exp_avg_dtype/exp_avg_sq_dtype are torch dtypes: in Python, "
                     "recipe.optim.config.exp_avg_dtype = torch.bfloat16")
    return n


def emit(framework: str, plan: Plan, model: ModelSpec, cluster=None) -> LaunchConfig:
    """The launch configuration of ``plan`` for ``framework`` (refused with the rule when it cannot run)."""
    f = fw._known(framework)
    p = fw.require(f, plan, model, cluster)
    ver = fw.VERSIONS[f]
    notes = tuple(_notes(f, p, model))
    if f == "megatron":
        args = to_megatron_args(plan, model, cluster)
        lines, i = [], 0
        while i < len(args):
            if i + 1 < len(args) and not args[i + 1].startswith("--"):
                lines.append(f"{args[i]} {args[i + 1]}")
                i += 2
            else:
                lines.append(args[i])
                i += 1
        text = " \\\n".join(lines)
        return LaunchConfig(f, ver, "argv", text, args, None, notes)
    if f == "deepspeed":
        cfg = to_deepspeed_config(plan, model, cluster)
        pipe = to_deepspeed_pipeline(plan, model, cluster=cluster)
        moe = to_deepspeed_moe(plan, model, cluster)
        text = json.dumps(cfg, indent=2)
        if pipe is not None:
            text += "\n# PipelineModule arguments (pp > 1):\n" + json.dumps(pipe, indent=2)
        if moe is not None:
            text += "\n# deepspeed.moe.layer.MoE arguments (each MoE layer):\n" + json.dumps(moe, indent=2)
        from plan_search.planner.frameworks.hf_export import to_hf_config

        hf = to_hf_config(model, plan.seq_len)  # the model AutoTP trains (issue 23)
        text += "\n# Hugging Face config.json of the model:\n" + json.dumps(hf, indent=2)
        return LaunchConfig(f, ver, "json", text, cfg, pipe, notes, moe, hf)
    if f == "torchtitan":
        text = to_torchtitan_toml(plan, model, cluster)
        return LaunchConfig(f, ver, "toml", text, torchtitan_sections(plan, model, cluster), None, notes)
    o = to_nemo_overrides(plan, model, cluster)
    text = " \\\n".join(f"{k}={_cli_value(v)}" for k, v in o.items())
    return LaunchConfig(f, ver, "overrides", text, o, None, notes)


def with_checkpointing(launch: LaunchConfig, interval_steps: int, async_save: bool) -> LaunchConfig:
    """``launch`` with the checkpoint interval that maximises goodput (issue 25:
    :mod:`planner.costmodel.goodput`) and asynchronous saving where the framework has it: Megatron-LM
    ``--save-interval`` and ``--async-save`` (with ``--ckpt-format torch_dist``), torchtitan's
    ``[checkpoint]`` ``interval`` and ``async_mode = "async"``, NeMo 2.0's ``log.ckpt.every_n_train_steps``
    and ``trainer.strategy.ckpt_async_save``; DeepSpeed's config has no interval key (a note says when to
    call ``save_checkpoint``)."""
    n = int(interval_steps)
    notes = list(launch.notes)
    f = launch.framework
    if f == "megatron":
        args = list(launch.data) + ["--save-interval", str(n)]
        fmt = args[args.index("--ckpt-format") + 1] if "--ckpt-format" in args else None
        if async_save and fmt in (None, "torch_dist"):
            args += ["--async-save"] + ([] if fmt else ["--ckpt-format", "torch_dist"])
        elif async_save:
            notes.append(f"--async-save is not written: Megatron-LM saves asynchronously only with --ckpt-format "
                         f"torch_dist (this plan needs {fmt}); the goodput figure assumed it")
        text = launch.text + " \\\n" + " \\\n".join(
            [f"--save-interval {n}"] + (["--async-save"] if "--async-save" in args else [])
            + (["--ckpt-format torch_dist"] if "--async-save" in args and not fmt else []))
        return dataclasses.replace(launch, text=text, data=args, notes=tuple(notes))
    if f == "torchtitan":
        sec = {"enable": True, "interval": n}
        if async_save:
            sec["async_mode"] = "async"
        data = {**launch.data, "checkpoint": {**launch.data.get("checkpoint", {}), **sec}}
        body = "\n".join(f"{k} = {_toml_value(v)}" for k, v in data["checkpoint"].items())
        text = launch.text.rstrip("\n") + "\n\n[checkpoint]\n" + body + "\n"
        return dataclasses.replace(launch, text=text, data=data)
    if f == "nemo":
        add = {"log.ckpt.every_n_train_steps": n}
        if async_save:
            add["trainer.strategy.ckpt_async_save"] = True
        data = {**launch.data, **add}
        text = launch.text + " \\\n" + " \\\n".join(f"{k}={_cli_value(v)}" for k, v in add.items())
        return dataclasses.replace(launch, text=text, data=data)
    notes.append(f"checkpoint: call engine.save_checkpoint every {n} steps (the interval that maximises goodput)"
                 + ("; asynchronously with DeepSpeed's decoupled checkpoint engine" if async_save else ""))
    return dataclasses.replace(launch, notes=tuple(notes))
