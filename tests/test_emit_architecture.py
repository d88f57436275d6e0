"""Issue 23 item 5: a launch configuration rebuilds the model. Every catalog model is crossed with every
framework that can run it; the emitted configuration is parsed back the way the framework reads it and every
architecture field is compared with the spec: it is emitted, or the framework's default equals it, or the
configuration's notes name it as not expressible there.

How each configuration is parsed (no framework is installed: torch stays out of CI):

- Megatron-LM: the argparse parser built from the kept flag list (planner/frameworks/data/framework_args/
  megatron.txt: flags, kinds and choices of megatron/training/arguments.py at the commits it names); an absent
  flag takes arguments.py's default (MEGATRON_DEFAULTS below, same commit).
- NeMo 2.0: the ``key=value`` text through :func:`emit.parse_nemo_overrides` (literal_eval, as NeMo's CLI
  parses overrides); an absent key takes Megatron-Core 0.16.1's TransformerConfig / NeMo GPTConfig default.
- torchtitan: tomllib on the emitted TOML, every key checked against torchtitan 0.2.2's JobConfig fields
  (torchtitan.txt); the architecture is torchtitan's model registry's: ``[model] name/flavor``, whose arguments
  (planner/frameworks/data/torchtitan_flavors.yaml, transcribed from torchtitan v0.2.2) are compared with the spec.
- DeepSpeed: json on the emitted config, which carries no architecture; the model AutoTP trains is the emitted
  Hugging Face config.json (planner/frameworks/hf_export.py), read back by models/hf.py (the transformers
  classes' keys) and compared field by field with the spec.
"""

from __future__ import annotations

import ast
import json
import math
import re
import tomllib

import pytest

from plan_search.models.catalog import load_catalog
from plan_search.models.hf import from_hf_config
from plan_search.planner.frameworks.hf_export import hf_model_type, hf_unexpressed
from plan_search.models.io import InputError
from plan_search.planner.costmodel.plan import Plan
from plan_search.planner.frameworks import emit, rules

CATALOG = load_catalog()
FRAMEWORKS = ("megatron", "nemo", "torchtitan", "deepspeed")

#: megatron/training/arguments.py defaults (@000c4ac2; the yarn flags @d98e8a64, argument_utils.py
#: _apply_yarn_config_from_args) of the flags the readback uses.
MEGATRON_DEFAULTS = {
    "position_embedding_type": "learned_absolute", "normalization": "LayerNorm", "norm_epsilon": 1e-5,
    "rotary_base": 10000, "rotary_percent": 1.0, "rope_scaling_factor": 8.0, "rotary_scaling_factor": 1.0,
    "mscale": 1.0, "mscale_all_dim": 0.0, "yarn_original_max_position_embeddings": 4096, "yarn_beta_fast": 32.0,
    "yarn_beta_slow": 1.0, "make_vocab_size_divisible_by": 128, "attention_dropout": 0.1, "hidden_dropout": 0.1,
    "softmax_type": "vanilla", "moe_router_score_function": "softmax", "moe_router_topk": 2,
    "activation_func_clamp_value": None, "glu_linear_offset": 0.0,
}
#: Megatron-Core 0.16.1 TransformerConfig / NeMo 2.7.3 GPTConfig defaults of the keys the readback uses.
NEMO_DEFAULTS = {
    "normalization": "LayerNorm", "layernorm_epsilon": 1e-5, "layernorm_zero_centered_gamma": False,
    "gated_linear_unit": False, "add_bias_linear": True, "add_qkv_bias": False,
    "share_embeddings_and_output_weights": True, "position_embedding_type": "learned_absolute",
    "rotary_base": 10000, "rotary_percent": 1.0, "qk_layernorm": False, "qk_l2_norm": False,
    "softmax_type": "vanilla", "window_size": None, "window_attn_skip_freq": None, "make_vocab_size_divisible_by": 128,
    "hidden_dropout": 0.1, "attention_dropout": 0.1, "activation_func_clamp_value": None, "glu_linear_offset": 0.0,
    "moe_router_score_function": "softmax", "moe_router_pre_softmax": False, "moe_router_topk_scaling_factor": None,
    "moe_router_enable_expert_bias": False, "moe_router_num_groups": None, "moe_router_group_topk": None,
    "moe_shared_expert_gate": False, "moe_router_topk": 2, "mtp_num_layers": None, "q_lora_rank": None,
}


def expected(m) -> dict:
    """The architecture a framework must rebuild, from the spec."""
    e = dict(num_layers=m.num_layers, hidden_size=m.hidden_size, ffn_hidden_size=m.ffn_hidden_size,
             num_heads=m.num_heads, num_kv_heads=m.num_kv_heads, vocab_size=m.vocab_size, norm=m.norm,
             norm_eps=m.norm_eps, layernorm_1p=m.layernorm_1p, gated=m.gated, activation=m.activation,
             activation_clamp=m.activation_clamp, bias=m.bias, qkv_bias=m.qkv_bias, tied_embeddings=m.tied_embeddings,
             dropout=m.dropout, position=m.position, qk_norm=m.qk_norm, qk_l2_norm=m.qk_l2_norm,
             attention_sinks=m.attention_sinks)
    if not m.is_mla:
        e["head_dim"] = m.head_dim
    if m.position == "rotary":
        e.update(rope_theta=m.rope_theta, rotary_percent=m.rotary_percent, rope_scaling=m.rope_scaling)
        if m.rope_scaling == "llama3":
            e.update(rope_factor=m.rope_factor, rope_low_freq_factor=m.rope_low_freq_factor,
                     rope_high_freq_factor=m.rope_high_freq_factor,
                     rope_original_max_position=m.rope_original_max_position)
        if m.rope_scaling == "yarn":
            # HF's YaRN without mscale keys scales attention by 0.1 ln(factor) + 1: Megatron's mscale 1, all-dim 0
            e.update(rope_factor=m.rope_factor, rope_original_max_position=m.rope_original_max_position,
                     rope_beta_fast=m.rope_beta_fast, rope_beta_slow=m.rope_beta_slow,
                     rope_mscale=1.0 if m.rope_mscale is None else m.rope_mscale,
                     rope_mscale_all_dim=0.0 if m.rope_mscale_all_dim is None else m.rope_mscale_all_dim)
    if m.attention_window is not None:
        e.update(attention_window=m.attention_window, attention_window_kind=m.attention_window_kind,
                 global_attention_every=m.global_attention_every)
    if m.is_mla:
        e.update(q_lora_rank=m.q_lora_rank, kv_lora_rank=m.kv_lora_rank, qk_nope_head_dim=m.qk_nope_head_dim,
                 qk_rope_head_dim=m.qk_rope_head_dim, v_head_dim=m.v_head_dim)
        if m.index_topk:  # DeepSeek Sparse Attention
            e.update(index_n_heads=m.index_n_heads, index_head_dim=m.index_head_dim, index_topk=m.index_topk)
    e["mtp_num_layers"] = m.mtp_num_layers
    if m.is_moe:
        e.update(num_experts=m.num_experts, experts_per_token=m.experts_per_token,
                 expert_ffn_hidden_size=m.expert_ffn_hidden_size,
                 shared_ffn=m.num_shared_experts * (m.shared_expert_ffn_hidden_size or 0),
                 moe_layers=[int(m.is_moe_layer(i)) for i in range(m.num_layers)], router_score=m.router_score,
                 router_norm_topk=m.router_norm_topk, router_topk_scaling=m.router_topk_scaling,
                 router_expert_bias=m.router_expert_bias, router_num_groups=m.router_num_groups,
                 router_group_topk=m.router_group_topk, moe_capacity_factor=m.moe_capacity_factor,
                 shared_expert_gate=m.shared_expert_gate, router_bias=m.router_bias)
    return e


def _list_expr(text: str, n: int) -> list[int]:
    """Megatron's --moe-layer-freq: an int (every n-th layer) or a Python list expression of 0/1."""
    if re.fullmatch(r"\d+", text):
        k = int(text)
        return [int(i % k == 0) for i in range(n)]
    assert re.fullmatch(r"[\[\]\d*+() ]+", text), text
    return list(eval(text, {"__builtins__": {}}))  # noqa: S307 - digits, brackets, * and + only (checked)


def megatron_readback(args: list[str], m, tp: int) -> dict:
    """The architecture Megatron-LM builds from ``args`` (absent flags at arguments.py's defaults)."""
    ns, rest = emit.megatron_parser().parse_known_args(args)
    assert not rest, f"flags the kept list does not know: {rest}"
    g = lambda k: getattr(ns, k) if getattr(ns, k, None) is not None else MEGATRON_DEFAULTS.get(k)  # noqa: E731
    pos = g("position_embedding_type")
    div = g("make_vocab_size_divisible_by") * tp
    r = dict(num_layers=ns.num_layers, hidden_size=ns.hidden_size, ffn_hidden_size=ns.ffn_hidden_size,
             num_heads=ns.num_attention_heads,
             num_kv_heads=ns.num_query_groups if ns.group_query_attention else ns.num_attention_heads,
             head_dim=ns.kv_channels or ns.hidden_size // ns.num_attention_heads,
             vocab_size=math.ceil(ns.vocab_size / div) * div,  # the padded vocabulary Megatron builds
             norm={"RMSNorm": "rmsnorm", "LayerNorm": "layernorm"}[g("normalization")], norm_eps=g("norm_epsilon"),
             layernorm_1p=ns.apply_layernorm_1p, gated=bool(ns.swiglu or ns.quick_geglu),
             activation_clamp=g("activation_func_clamp_value"), bias=not ns.disable_bias_linear,
             tied_embeddings=not ns.untie_embeddings_and_output_weights,
             dropout=g("attention_dropout") > 0 or g("hidden_dropout") > 0,
             position={"rope": "rotary", "yarn": "rotary", "learned_absolute": "learned"}.get(pos, pos),
             qk_norm=ns.qk_layernorm, qk_l2_norm=ns.qk_l2_norm, attention_sinks=g("softmax_type") == "learnable",
             mtp_num_layers=ns.mtp_num_layers or 0)
    r["qkv_bias"] = r["bias"] or bool(ns.add_qkv_bias)
    quick = ns.quick_geglu and ns.activation_func_clamp_value is not None and g("glu_linear_offset") == 1.0
    r["activation"] = ("swiglu" if ns.swiglu or quick else "relu2" if ns.squared_relu else
                       "geglu" if ns.quick_geglu else "gelu")  # quick: GPT-OSS's clamped SwiGLU (emit.GPT_OSS_GLU_OFFSET)
    if r["position"] == "rotary":
        r.update(rope_theta=g("rotary_base"), rotary_percent=g("rotary_percent"))
        if ns.use_rope_scaling:
            r.update(rope_scaling="llama3", rope_factor=g("rope_scaling_factor"), **emit.MEGATRON_LLAMA3_ROPE)
        elif pos == "yarn" or ns.multi_latent_attention:  # MLA runs YaRN (rope_type's default for MLA)
            r.update(rope_scaling="yarn", rope_factor=g("rotary_scaling_factor"), rope_mscale=g("mscale"),
                     rope_mscale_all_dim=g("mscale_all_dim"))
            if ns.multi_latent_attention:
                r.update(emit.MEGATRON_MLA_YARN)
            else:
                r.update(rope_original_max_position=g("yarn_original_max_position_embeddings"),
                         rope_beta_fast=g("yarn_beta_fast"), rope_beta_slow=g("yarn_beta_slow"))
        else:
            r["rope_scaling"] = None
    if ns.window_size:
        left, right = (int(v) for v in ns.window_size.strip("()").split(","))
        assert right == 0
        r.update(attention_window=left + 1, attention_window_kind="sliding",
                 global_attention_every=int(ns.window_attn_skip_freq or 0))
    if ns.multi_latent_attention:
        r.update(q_lora_rank=ns.q_lora_rank, kv_lora_rank=ns.kv_lora_rank, qk_nope_head_dim=ns.qk_head_dim,
                 qk_rope_head_dim=ns.qk_pos_emb_head_dim, v_head_dim=ns.v_head_dim)
        r.pop("head_dim")
        if ns.experimental_attention_variant == "dsa":
            r.update(index_n_heads=ns.dsa_indexer_n_heads, index_head_dim=ns.dsa_indexer_head_dim,
                     index_topk=ns.dsa_indexer_topk)
    if ns.num_experts:
        score = g("moe_router_score_function")
        k = ns.moe_router_topk or MEGATRON_DEFAULTS["moe_router_topk"]
        r.update(num_experts=ns.num_experts, experts_per_token=k, expert_ffn_hidden_size=ns.moe_ffn_hidden_size,
                 shared_ffn=ns.moe_shared_expert_intermediate_size or 0,
                 moe_layers=_list_expr(ns.moe_layer_freq or "1", ns.num_layers), router_score=score,
                 # Megatron: softmax after top-k unless --moe-router-pre-softmax; sigmoid renormalized when k > 1
                 # (megatron/core/transformer/moe/moe_utils.py topk_routing_with_score_function)
                 router_norm_topk=(not ns.moe_router_pre_softmax) if score == "softmax" else k > 1,
                 router_topk_scaling=ns.moe_router_topk_scaling_factor,
                 router_expert_bias=ns.moe_router_enable_expert_bias, router_num_groups=ns.moe_router_num_groups or 0,
                 router_group_topk=ns.moe_router_group_topk or 0, moe_capacity_factor=ns.moe_expert_capacity_factor,
                 shared_expert_gate=False, router_bias=False)
    return r


def nemo_readback(text: str, m) -> dict:
    """The architecture NeMo builds from the overrides (absent keys at the config classes' defaults)."""
    o = emit.parse_nemo_overrides(text)
    kept = rules.kept_args("nemo")
    assert set(o) <= set(kept), sorted(set(o) - set(kept))
    c = lambda k: o.get(f"model.config.{k}", NEMO_DEFAULTS.get(k))  # noqa: E731
    tp = int(o["trainer.strategy.tensor_model_parallel_size"])
    div = c("make_vocab_size_divisible_by") * tp
    pos = c("position_embedding_type")
    r = dict(num_layers=c("num_layers"), hidden_size=c("hidden_size"), ffn_hidden_size=c("ffn_hidden_size"),
             num_heads=c("num_attention_heads"), num_kv_heads=c("num_query_groups"), head_dim=c("kv_channels"),
             vocab_size=math.ceil(c("vocab_size") / div) * div,
             norm={"RMSNorm": "rmsnorm", "LayerNorm": "layernorm"}[c("normalization")], norm_eps=c("layernorm_epsilon"),
             layernorm_1p=c("layernorm_zero_centered_gamma"), gated=c("gated_linear_unit"),
             activation_clamp=c("activation_func_clamp_value"), bias=c("add_bias_linear"),
             tied_embeddings=c("share_embeddings_and_output_weights"),
             dropout=c("hidden_dropout") > 0 or c("attention_dropout") > 0,
             position={"rope": "rotary", "yarn": "rotary", "learned_absolute": "learned"}.get(pos, pos),
             qk_norm=c("qk_layernorm"), qk_l2_norm=c("qk_l2_norm"), attention_sinks=c("softmax_type") == "learnable",
             mtp_num_layers=c("mtp_num_layers") or 0)
    r["qkv_bias"] = r["bias"] or c("add_qkv_bias")
    if r["position"] == "rotary":
        r.update(rope_theta=c("rotary_base"), rotary_percent=c("rotary_percent"))
        r["rope_scaling"] = "yarn" if pos == "yarn" or c("multi_latent_attention") else None
    if c("window_size"):
        left, right = c("window_size")
        r.update(attention_window=left + 1, attention_window_kind="sliding",
                 global_attention_every=c("window_attn_skip_freq") or 0)
    if c("multi_latent_attention"):
        r.update(q_lora_rank=c("q_lora_rank"), kv_lora_rank=c("kv_lora_rank"), qk_nope_head_dim=c("qk_head_dim"),
                 qk_rope_head_dim=c("qk_pos_emb_head_dim"), v_head_dim=c("v_head_dim"))
        r.pop("head_dim")
        if c("experimental_attention_variant") == "dsa":
            r.update(index_n_heads=c("dsa_indexer_n_heads"), index_head_dim=c("dsa_indexer_head_dim"),
                     index_topk=c("dsa_indexer_topk"))
    if c("num_moe_experts"):
        score, k = c("moe_router_score_function"), c("moe_router_topk")
        freq = c("moe_layer_freq")
        r.update(num_experts=c("num_moe_experts"), experts_per_token=k, expert_ffn_hidden_size=c("moe_ffn_hidden_size"),
                 shared_ffn=c("moe_shared_expert_intermediate_size") or 0,
                 moe_layers=[int(i % freq == 0) for i in range(r["num_layers"])] if isinstance(freq, int) else freq,
                 router_score=score, router_norm_topk=(not c("moe_router_pre_softmax")) if score == "softmax" else k > 1,
                 router_topk_scaling=c("moe_router_topk_scaling_factor"),
                 router_expert_bias=c("moe_router_enable_expert_bias"), router_num_groups=c("moe_router_num_groups") or 0,
                 router_group_topk=c("moe_router_group_topk") or 0, moe_capacity_factor=c("moe_expert_capacity_factor"),
                 shared_expert_gate=c("moe_shared_expert_gate"), router_bias=False)
    return r


def _plan_for(framework: str, m):
    """A small plan the framework runs for ``m`` (tp 2 where it can, else 1; FSDP and full recomputation where
    the framework needs them), or None when it runs none."""
    variants = [dict(tp=2), dict(tp=1), dict(tp=2, zero=3, recompute="full", sequence_parallel=False),
                dict(tp=1, zero=3, recompute="full")]
    for v in variants:
        kw = dict(ep=min(8, m.num_experts)) if m.is_moe else {}
        try:
            p = Plan(num_gpus=64, pp=1, micro_batch=1, global_batch=512, seq_len=4096, **v, **kw)
            return rules.require(framework, p, m)
        except (InputError, ValueError):
            continue
    return None


CASES = [(name, f) for name in CATALOG for f in FRAMEWORKS]


@pytest.mark.parametrize("name, framework", CASES, ids=[f"{n}-{f}" for n, f in CASES])
def test_launch_configuration_rebuilds_the_model(name, framework):
    m = CATALOG[name]
    p = _plan_for(framework, m)
    if p is None:
        pytest.skip(f"{framework} runs no plan of {name}")
    lc = emit.emit(framework, p, m)
    notes = " | ".join(lc.notes)
    if framework == "megatron":
        got, unexpressed = megatron_readback(list(lc.data), m, p.tp), emit.megatron_unexpressed(m, p.tp)
    elif framework == "nemo":
        got, unexpressed = nemo_readback(lc.text, m), emit.nemo_unexpressed(m, p.tp)
        # the activation function itself is the recipe's callable: GLU or not is read, which one is noted
        got["activation"] = None
        for k in ("rope_factor", "rope_original_max_position", "rope_low_freq_factor", "rope_high_freq_factor",
                  "rope_beta_fast", "rope_beta_slow", "rope_mscale", "rope_mscale_all_dim"):
            got.setdefault(k, None)
        if m.rope_scaling == "llama3":
            got["rope_scaling"] = None  # the recipe's config class (noted)
    elif framework == "torchtitan":
        doc = tomllib.loads(lc.text)
        kept = rules.kept_args("torchtitan")
        assert {f"{s}.{k}" for s, kv in doc.items() for k in kv if not isinstance(kv[k], dict)} <= set(kept)
        assert doc["training"]["seq_len"] == p.seq_len
        flavor = doc.get("model", {})
        if "flavor" not in flavor:  # no torchtitan flavor of this model: the note says so
            assert emit.torchtitan_flavor(m) is None
            assert "[model] name/flavor must be a torchtitan model of this shape" in notes
            return
        # the flavor's arguments (torchtitan v0.2.2, transcribed in data/torchtitan_flavors.yaml) are what it builds
        got = emit.torchtitan_flavor_fields(flavor["name"], flavor["flavor"])
        assert got, f"{flavor} has no recorded arguments"
        spec = {k: getattr(m, k) for k in got}
        wrong = [k for k in got if not _same(spec[k], got[k])]
        unexpressed = emit.torchtitan_unexpressed(m)
        assert sorted(wrong) == sorted(unexpressed), (wrong, unexpressed)
        for k in wrong:
            assert f"the flavor differs: {k}" in notes
        return
    else:
        parts = lc.text.split("\n# ")
        cfg = json.loads(parts[0])
        assert cfg["train_micro_batch_size_per_gpu"] == p.micro_batch
        assert not {"hidden_size", "num_layers", "vocab_size"} & set(cfg)  # no architecture key to contradict
        # the model AutoTP trains: the emitted Hugging Face config.json, read by the project's reader of the
        # transformers classes' keys (models/hf.py), must give the spec back
        hf_text = next(s for s in parts if s.startswith("Hugging Face config.json"))
        back = from_hf_config(json.loads(hf_text.split("\n", 1)[1]), m.name)
        skip = {"name", "aliases", "source", "seq_len_source", "global_batch"}
        if m.position != "learned":  # the length trained at is the script's (a learned table's size is the model's)
            skip.add("seq_len")
        want, got = m.model_dump(exclude=skip), back.model_dump(exclude=skip)
        wrong = {k for k in want if want[k] != got[k]}
        assert wrong <= set(hf_unexpressed(m)), {k: (want[k], got[k]) for k in wrong}
        for k in wrong:
            assert f"not in the config.json: {k}" in notes
        assert lc.as_json()["model_config"]["model_type"] == hf_model_type(m)
        return
    want = expected(m)
    wrong = {k: (want[k], got.get(k, "<absent>")) for k in want if not _same(want[k], got.get(k, "<absent>"))}
    unnamed = {k: v for k, v in wrong.items() if k not in unexpressed}
    assert not unnamed, f"{framework} rebuilds {name} with {unnamed} (spec, read back)"
    for k in wrong:
        assert k in notes, f"{framework}: {k} is not expressible but the notes do not say so"


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and b != "<absent>" and math.isclose(float(a), float(b), rel_tol=1e-12)
    return a == b


def test_the_cases_cover_every_framework():
    """At least one model per framework runs, and the megatron crossing covers every catalog model."""
    ran = {f: [n for n in CATALOG if _plan_for(f, CATALOG[n]) is not None] for f in FRAMEWORKS}
    assert all(ran.values()), {f: len(v) for f, v in ran.items()}
    assert len(ran["megatron"]) >= len(CATALOG) - 2, set(CATALOG) - set(ran["megatron"])


def test_issue_examples():
    """Llama 3's Megatron flags carry --rotary-base 500000 and its RoPE scaling; Qwen3's --qk-layernorm."""
    llama = emit.to_megatron_args(Plan(num_gpus=8, tp=8, micro_batch=1, global_batch=8, seq_len=8192),
                                  CATALOG["llama3.1-70b"])
    text = " ".join(llama)
    assert "--rotary-base 500000" in text and "--use-rope-scaling --rope-scaling-factor 8.0" in text
    assert "--norm-epsilon 1e-05" in text
    qwen = emit.to_megatron_args(Plan(num_gpus=8, ep=8, micro_batch=1, global_batch=8, seq_len=4096),
                                 CATALOG["qwen3-30b-a3b"])
    assert "--qk-layernorm" in qwen and qwen[qwen.index("--rotary-base") + 1] == "1000000"
    assert qwen[qwen.index("--norm-epsilon") + 1] == "1e-06"


def test_a_wrong_flag_is_caught():
    """The readback is not vacuous: a dropped --rotary-base reads back Megatron's 10,000."""
    m = CATALOG["llama3.1-8b"]
    args = emit.to_megatron_args(Plan(num_gpus=8, tp=2, micro_batch=1, global_batch=8, seq_len=8192), m)
    i = args.index("--rotary-base")
    got = megatron_readback(args[:i] + args[i + 2:], m, 2)
    assert got["rope_theta"] == 10000 != expected(m)["rope_theta"]
    assert megatron_readback(args, m, 2)["rope_theta"] == 500000
    ast.literal_eval("1")  # keep ast imported for the literal parsing the NeMo reader relies on


def test_hf_export_round_trips_every_catalog_model():
    """to_hf_config writes what models/hf.py reads back: every field of every catalog model survives."""
    from plan_search.planner.frameworks.hf_export import to_hf_config

    for name, m in CATALOG.items():
        # the length trained at follows models/hf.py's rule (DeepSeek-V3.2's catalog 131,072 is its long-context
        # phase, the config's YaRN window 4,096); a learned position table's size is the model's
        skip = {"name", "aliases", "source", "seq_len_source", "global_batch"} | (
            set() if m.position == "learned" else {"seq_len"})
        back = from_hf_config(to_hf_config(m), name)
        assert back.model_dump(exclude=skip) == m.model_dump(exclude=skip), name
