"""Issue 24 floor: a fuzzer over the HF config.json of every supported family.

Each example takes a family's real config.json (tests/data/hf) and changes one to four of the keys that
family's transformers class reads for its shape, or adds another family's spelling of them: dropped,
nulled, set to 0, negative, huge, of the wrong type, or duplicated across families. Every input is then
either refused with one line naming a changed key (a project :class:`InputError`, exit 2 through
plan-estimate), or priced with exactly the parameter count the family's transformers model would hold,
computed by :func:`hand_count` below: written here, from the transformers classes (their config
defaults and module shapes), sharing no code with models/hf.py or models/counting.py.

Parse and count only (no search). The CI profile runs ``HF_FUZZ_EXAMPLES`` examples (default 300, a few
seconds); ``HF_FUZZ_EXAMPLES=10000 python -m pytest tests/test_robustness_hf_fuzz.py`` is the floor's
full run (``bench/hf_fuzz.py`` runs it and prints the tally).
"""

from __future__ import annotations

import collections
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plan_search.models import counting
from plan_search.models.hf import from_hf_config
from plan_search.models.io import InputError

HF = Path(__file__).parent / "data" / "hf"
EXAMPLES = int(os.environ.get("HF_FUZZ_EXAMPLES", "300"))
TALLY: collections.Counter = collections.Counter()

FIXTURES = {
    "llama": "llama3.1-8b", "qwen2": "qwen2.5-7b", "mixtral": "mixtral-8x7b", "qwen2_moe": "qwen1.5-moe-a2.7b",
    "qwen3_moe": "qwen3-30b-a3b", "deepseek_v2": "deepseek-v2-lite", "deepseek_v3": "deepseek-v3",
    "kimi_k2": "kimi-k2", "gpt_oss": "gpt-oss-20b", "llama4": "llama4-scout-17b-16e", "gpt2": "gpt2",
    "gpt_neox": "gpt-neox-20b", "bloom": "bloom-176b",
}


def _load(family: str) -> dict:
    cfg = json.loads((HF / f"{FIXTURES[family]}.json").read_text())
    return cfg


def _text(cfg: dict) -> dict:
    return cfg["text_config"] if "text_config" in cfg and "num_hidden_layers" not in cfg else cfg


# ------------------------------------------------------------------ the hand count (transformers' view)
class MustRefuse(Exception):
    """transformers would not build this (or the value is beyond what the product models): refuse."""


ABSENT = object()
# Config-class defaults of the keys a file may leave out (transformers, the __init__ of each class)
DEFAULTS = {
    "mixtral": {"num_local_experts": 8, "num_experts_per_tok": 2, "intermediate_size": 14336},
    "gpt_oss": {"num_local_experts": 128, "num_experts_per_tok": 4, "intermediate_size": 2880, "head_dim": 64},
    "llama4": {"num_local_experts": 16, "num_experts_per_tok": 1, "intermediate_size": 8192,
               "intermediate_size_mlp": 16384, "interleave_moe_layer_step": 1},
    "qwen2_moe": {"num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
                  "shared_expert_intermediate_size": 5632, "intermediate_size": 5632, "decoder_sparse_step": 1},
    "qwen3_moe": {"num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
                  "intermediate_size": 6144, "decoder_sparse_step": 1},
    "deepseek_v2": {"n_routed_experts": None, "num_experts_per_tok": None, "moe_intermediate_size": 1407,
                    "n_shared_experts": None, "first_k_dense_replace": 0, "moe_layer_freq": 1,
                    "intermediate_size": 11008, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
                    "qk_nope_head_dim": 128, "v_head_dim": 128},
    "deepseek_v3": {"n_routed_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 2048,
                    "n_shared_experts": 1, "first_k_dense_replace": 3, "moe_layer_freq": 1,
                    "intermediate_size": 18432, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
                    "qk_nope_head_dim": 128, "v_head_dim": 128},
}
DEFAULTS["kimi_k2"] = DEFAULTS["deepseek_v3"]  # Kimi-K2 loads DeepseekV3ForCausalLM
LIMITS = {"num_layers": 10_000, "hidden": 1_000_000, "heads": 100_000, "vocab": 100_000_000, "ffn": 10_000_000,
          "experts": 100_000, "rank": 1_000_000}


def _int(v, what, positive=True, zero=False):
    """A count as transformers would use it: an int (a JSON 8.0 read as 8); anything else cannot be built."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v in (float("inf"), float("-inf")):
        raise MustRefuse(what)
    if isinstance(v, float):
        if not v.is_integer():
            raise MustRefuse(what)
        v = int(v)
    if v < 0 or (v == 0 and not zero):
        raise MustRefuse(what)
    return v


def _read(cfg, family, key, *, zero=False, null=ABSENT, limit=None):
    """The value the class holds for ``key``: the file's, else the class default; ``null``: what a null
    means (ABSENT: it cannot be built)."""
    if key in cfg:
        v = cfg[key]
        if v is None:
            if null is ABSENT:
                raise MustRefuse(key)
            return null
    else:
        v = DEFAULTS.get(family, {}).get(key, ABSENT)
        if v is ABSENT:
            raise MustRefuse(f"{key} missing")  # a default this count does not track: the product must refuse
        if v is None:
            if null is ABSENT:
                raise MustRefuse(key)
            return null
    v = _int(v, key, zero=zero)
    if limit is not None and v > limit:
        raise MustRefuse(key)
    return v


STANDARD = ("llama", "qwen2", "mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "kimi_k2",
            "gpt_oss", "llama4")


def hand_count(cfg: dict, family: str) -> int:
    """Parameters of the family's transformers model for ``cfg`` (the text model; MTP layers are not
    part of the main model), or MustRefuse. The product leaves out, by its documented rule, BLOOM's embedding
    LayerNorm and the o_proj bias of configs with attention_bias but no MLP bias: counted here, then taken
    off by name (:data:`PRODUCT_OMITS`)."""
    c = _text(cfg)
    if family in ("gpt2", "bloom", "gpt_neox"):
        return _classic(c, family)
    L = _read(c, family, "num_hidden_layers", limit=LIMITS["num_layers"])
    h = _read(c, family, "hidden_size", limit=LIMITS["hidden"])
    a = _read(c, family, "num_attention_heads", limit=LIMITS["heads"])
    V = _read(c, family, "vocab_size", limit=LIMITS["vocab"])
    deepseek = family in ("deepseek_v2", "deepseek_v3", "kimi_k2")
    if not deepseek:
        g = _read(c, family, "num_key_value_heads", null=a, limit=LIMITS["heads"]) if "num_key_value_heads" in c \
            else a
        if "head_dim" in c or "head_dim" in DEFAULTS.get(family, {}):
            d = _read(c, family, "head_dim", null=0, limit=LIMITS["heads"])
        else:
            d = 0
        if d == 0:
            if h % a:
                raise MustRefuse("head_dim from hidden_size / heads")
            d = h // a
        if a % g:
            raise MustRefuse("num_key_value_heads")
    tied = c.get("tie_word_embeddings", False)
    if not isinstance(tied, bool):
        tied = bool(tied)
    rms = h
    emb = V * h * (1 if tied else 2) + rms  # embeddings, output layer, final norm

    # attention of one layer
    if deepseek:
        kv_r = _read(c, family, "kv_lora_rank", limit=LIMITS["rank"])
        q_r = _read(c, family, "q_lora_rank", null=0, limit=LIMITS["rank"])
        rope = _read(c, family, "qk_rope_head_dim", limit=LIMITS["heads"])
        nope = _read(c, family, "qk_nope_head_dim", limit=LIMITS["heads"])
        v = _read(c, family, "v_head_dim", limit=LIMITS["heads"])
        if kv_r > h or q_r > h:
            raise MustRefuse("MLA rank above hidden_size")  # a latent wider than what it compresses (refused)
        q = (h * q_r + q_r + q_r * a * (nope + rope)) if q_r else h * a * (nope + rope)
        attn = q + h * (kv_r + rope) + kv_r + kv_r * a * (nope + v) + a * v * h
    else:
        attn = h * a * d + 2 * h * g * d + a * d * h
        if family in ("qwen2", "qwen2_moe"):  # Qwen2Attention, Qwen2MoeAttention: q, k, v biases
            attn += a * d + 2 * g * d
        if family == "qwen3_moe":  # q_norm, k_norm over head_dim
            attn += 2 * d
        if family == "gpt_oss":  # biases on q, k, v, o; one sink per head
            attn += a * d + 2 * g * d + h + a

    # MLPs
    def mlp(width):
        return 3 * h * width

    moe_layers, dense_layers, moe = 0, L, 0
    dense_width = None
    if family in ("llama", "qwen2"):
        dense_width = _read(c, family, "intermediate_size", limit=LIMITS["ffn"])
    elif family in ("mixtral", "gpt_oss"):
        E = _read(c, family, "num_local_experts", limit=LIMITS["experts"])
        k = _read(c, family, "num_experts_per_tok", limit=LIMITS["experts"])
        fe = _read(c, family, "intermediate_size", limit=LIMITS["ffn"])
        if k > E:
            raise MustRefuse("num_experts_per_tok above the experts")
        moe_layers, dense_layers = L, 0
        if family == "mixtral":
            moe = h * E + E * 3 * h * fe
        else:  # GptOssTopKRouter (weight, bias); GptOssExperts gate_up (h x 2fe + 2fe), down (fe x h + h)
            moe = h * E + E + E * (h * 2 * fe + 2 * fe + fe * h + h)
    elif family == "llama4":
        E = _read(c, family, "num_local_experts", limit=LIMITS["experts"])
        k = _read(c, family, "num_experts_per_tok", limit=LIMITS["experts"])
        fe = _read(c, family, "intermediate_size", limit=LIMITS["ffn"])
        dense_width = _read(c, family, "intermediate_size_mlp", limit=LIMITS["ffn"])
        if k > E:
            raise MustRefuse("num_experts_per_tok above the experts")
        if c.get("moe_layers") is not None:
            listed = c["moe_layers"]
            if not isinstance(listed, list):
                raise MustRefuse("moe_layers")
            moe_layers = len({i for i in listed if isinstance(i, int) and 0 <= i < L})
        else:
            step = _read(c, family, "interleave_moe_layer_step")
            moe_layers = len(range(step - 1, L, step))
        dense_layers = L - moe_layers
        moe = h * E + E * 3 * h * fe + mlp(fe)  # router, experts, the shared expert (intermediate_size)
    elif family in ("qwen2_moe", "qwen3_moe"):
        E = _read(c, family, "num_experts", zero=True, limit=LIMITS["experts"])
        dense_width = _read(c, family, "intermediate_size", limit=LIMITS["ffn"])
        if E:
            k = _read(c, family, "num_experts_per_tok", limit=LIMITS["experts"])
            fe = _read(c, family, "moe_intermediate_size", limit=LIMITS["ffn"])
            if k > E:
                raise MustRefuse("num_experts_per_tok above the experts")
            step = _read(c, family, "decoder_sparse_step")
            skip = c.get("mlp_only_layers") or []
            if not isinstance(skip, list):
                raise MustRefuse("mlp_only_layers")
            moe_layers = sum(1 for i in range(L) if i not in skip and (i + 1) % step == 0)
            dense_layers = L - moe_layers
            moe = h * E + E * 3 * h * fe
            if family == "qwen2_moe":
                sfe = _read(c, family, "shared_expert_intermediate_size", limit=LIMITS["ffn"])
                moe += mlp(sfe) + h  # shared expert and its sigmoid gate
    else:  # DeepSeek-V2/V3, Kimi-K2
        E = _read(c, family, "n_routed_experts", zero=True, null=0 if family == "deepseek_v2" else ABSENT,
                  limit=LIMITS["experts"])
        dense_width = _read(c, family, "intermediate_size", limit=LIMITS["ffn"])
        if E == 0 and family == "deepseek_v2" and c.get("n_routed_experts") is None:  # null, or absent (None)
            pass  # DeepseekV2DecoderLayer: n_routed_experts None -> every layer dense
        elif E == 0:
            raise MustRefuse("n_routed_experts 0: an MoE block with no expert")
        else:
            k = _read(c, family, "num_experts_per_tok", limit=LIMITS["experts"])
            fe = _read(c, family, "moe_intermediate_size", limit=LIMITS["ffn"])
            if k > E:
                raise MustRefuse("num_experts_per_tok above the experts")
            first = _read(c, family, "first_k_dense_replace", zero=True)
            freq = _read(c, family, "moe_layer_freq")
            shared = _read(c, family, "n_shared_experts", zero=True, null=0 if family == "deepseek_v2" else ABSENT)
            moe_layers = sum(1 for i in range(L) if i >= first and i % freq == 0)
            dense_layers = L - moe_layers
            bias = E if c.get("topk_method") == "noaux_tc" else 0  # e_score_correction_bias (in the checkpoint)
            moe = h * E + bias + E * 3 * h * fe + mlp(fe * shared)
    dense = mlp(dense_width) if dense_layers else 0
    return emb + L * (attn + 2 * rms) + dense_layers * dense + moe_layers * moe


def _classic(c: dict, family: str) -> int:
    """GPT-2, BLOOM, GPT-NeoX: LayerNorms (weight and bias), biases everywhere, multi-head attention."""
    if family == "gpt2":
        L, h, a = (_read(c, family, k, limit=lim) for k, lim in (("n_layer", 10_000), ("n_embd", 1_000_000),
                                                                   ("n_head", 100_000)))
        V = _read(c, family, "vocab_size", limit=LIMITS["vocab"])
        f = _read(c, family, "n_inner", null=4 * h, limit=LIMITS["ffn"]) if "n_inner" in c else 4 * h
        positions = c.get("n_positions", 1024)
        emb = V * h + positions * h + 2 * h  # wte (tied with lm_head), wpe, ln_f
    elif family == "bloom":
        L = _read(c, family, "n_layer", limit=10_000)
        h = _read(c, family, "hidden_size", limit=1_000_000)
        a = _read(c, family, "n_head", limit=100_000)
        V = _read(c, family, "vocab_size", limit=LIMITS["vocab"])
        f = 4 * h  # BloomMLP: 4h whatever the config
        emb = V * h + 2 * h + 2 * h  # word_embeddings (tied), word_embeddings_layernorm, ln_f
    else:
        L = _read(c, family, "num_hidden_layers", limit=10_000)
        h = _read(c, family, "hidden_size", limit=1_000_000)
        a = _read(c, family, "num_attention_heads", limit=100_000)
        V = _read(c, family, "vocab_size", limit=LIMITS["vocab"])
        f = _read(c, family, "intermediate_size", limit=LIMITS["ffn"])
        tied = c.get("tie_word_embeddings", False)
        emb = V * h * (1 if tied else 2) + 2 * h
    if h % a:
        raise MustRefuse("heads do not divide the hidden size")
    layer = 2 * 2 * h + (h * 3 * h + 3 * h) + (h * h + h) + (h * f + f) + (f * h + h)
    return emb + L * layer


def product_omits(cfg: dict, family: str, total: int) -> int:
    """What the product leaves out by its documented rule (models/hf.py: 'Small extras are ignored')."""
    c = _text(cfg)
    if family == "bloom":
        return total - 2 * c["hidden_size"]  # BLOOM's embedding LayerNorm
    return total


# ------------------------------------------------------------------ the mutations
CORE = {
    "gpt2": ["n_layer", "n_embd", "n_head", "n_inner", "vocab_size"],
    "bloom": ["n_layer", "hidden_size", "n_head", "vocab_size"],
    "gpt_neox": ["num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size"],
}
STD_CORE = ["num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
            "intermediate_size", "vocab_size", "tie_word_embeddings"]
OWN = {
    "mixtral": ["num_local_experts", "num_experts_per_tok"],
    "gpt_oss": ["num_local_experts", "num_experts_per_tok"],
    "llama4": ["num_local_experts", "num_experts_per_tok", "intermediate_size_mlp", "interleave_moe_layer_step",
               "moe_layers"],
    "qwen2_moe": ["num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size",
                  "decoder_sparse_step", "mlp_only_layers"],
    "qwen3_moe": ["num_experts", "num_experts_per_tok", "moe_intermediate_size", "decoder_sparse_step",
                  "mlp_only_layers"],
}
_DS = ["n_routed_experts", "num_experts_per_tok", "moe_intermediate_size", "n_shared_experts",
       "first_k_dense_replace", "moe_layer_freq", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim",
       "qk_nope_head_dim", "v_head_dim", "n_group", "topk_group"]
OWN.update(deepseek_v2=_DS, deepseek_v3=_DS, kimi_k2=_DS)
# another family's spellings, added to a standard-key family's file
STRAY = ["num_local_experts", "n_routed_experts", "num_experts", "num_experts_per_tok", "experts_per_token",
         "moe_top_k", "moe_intermediate_size", "n_shared_experts", "shared_expert_intermediate_size", "n_layer",
         "n_embd", "n_head", "kv_channels", "ffn_dim", "kv_lora_rank", "decoder_sparse_step", "first_k_dense_replace",
         "interleave_moe_layer_step"]

VALUES = st.one_of(
    st.sampled_from(["drop", None, 0, -1, -64, 10**12, 2**63, "8", 2.5, True, False, [], {}, [1, 2], 1e308,
                     float("nan")]),
    st.sampled_from([1, 2, 3, 4, 7, 8, 16, 60, 64, 128, 160, 256, 512, 768, 1408, 2048, 4096, 8.0]),
)


@st.composite
def mutated(draw):
    family = draw(st.sampled_from(sorted(FIXTURES)))
    cfg = _load(family)
    keys = CORE.get(family, STD_CORE + OWN.get(family, []))
    pool = keys + (STRAY if family in STANDARD else [])
    changes = draw(st.lists(st.tuples(st.sampled_from(pool), VALUES), min_size=1, max_size=4,
                            unique_by=lambda kv: kv[0]))
    text = _text(cfg)
    for k, v in changes:
        if v == "drop":
            text.pop(k, None)
        else:
            text[k] = v
    return family, cfg, changes


def _outcome(family: str, cfg: dict, changes: list) -> str:
    changed = [k for k, _ in changes]
    try:
        want = product_omits(cfg, family, hand_count(cfg, family))
    except MustRefuse as exc:
        want = exc
    try:
        spec = from_hf_config(cfg, FIXTURES[family])
    except InputError as exc:
        msg = str(exc)
        assert "\n" not in msg, msg
        assert any(k in msg for k in changed), (family, changes, msg)
        return "refused"
    assert not isinstance(want, MustRefuse), (family, changes, f"priced, but transformers cannot build it: {want}")
    got = counting.total_params(spec)
    assert got == want, (family, changes, got, want, got - want)
    return "priced"


def test_hand_count_is_the_products_on_every_unchanged_family():
    """The two counts agree where nothing is changed (and the hand count is checked against published
    totals through the product's own tests: test_models_moe.test_published_totals)."""
    for family in FIXTURES:
        cfg = _load(family)
        assert counting.total_params(from_hf_config(cfg, family)) == product_omits(cfg, family,
                                                                                   hand_count(cfg, family)), family


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(case=mutated())
def test_every_changed_config_is_refused_naming_a_key_or_priced_as_transformers_builds(case):
    family, cfg, changes = case
    TALLY[_outcome(family, cfg, changes)] += 1


@pytest.mark.parametrize("family", sorted(FIXTURES))
def test_the_cli_refuses_in_one_line_with_exit_2(tmp_path, family):
    """Through plan-estimate: a refused file is one line and exit 2, never a traceback."""
    from plan_search.cli.estimate import main

    cfg = _load(family)
    text = _text(cfg)
    key = CORE.get(family, ["num_attention_heads"])[-1] if family in CORE else "num_attention_heads"
    text[key] = -3
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    r = CliRunner().invoke(main, ["--model", str(path), "--gpu", "h100", "--gpus", "8"])
    out = r.output.strip()
    assert r.exit_code == 2 and len(out.splitlines()) == 1 and key in out and "Traceback" not in out, out
