"""Model catalog, HF config import, the --model resolver, and counting against published figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plan_search.models.catalog import get_model, load_catalog, model_names, normalize_name
from plan_search.models.counting import (
    active_params,
    megatron_flops_per_iteration,
    total_params,
    training_flops_per_iteration,
)
from plan_search.models.hf import from_hf_config
from plan_search.models.io import InputError
from plan_search.models.resolve import resolve_model
from plan_search.models.spec import ModelSpec

DATA = Path(__file__).parent / "data"
HF = DATA / "hf"
YAML = DATA / "models"
IDENTITY = {"name", "source", "aliases", "seq_len_source"}


def shape(m: ModelSpec, exclude: set[str] = frozenset()) -> dict:
    return m.model_dump(exclude=IDENTITY | set(exclude))


def one_line_error(excinfo) -> str:
    msg = str(excinfo.value)
    assert "\n" not in msg, msg
    return msg


# ---------------------------------------------------------------- published parameter counts
@pytest.mark.parametrize(
    "name, published",
    [
        ("gpt3-175b", 174.6e9),  # Brown et al. 2020 / Narayanan et al. 2021 Table 2
        ("megatron-gpt-175b", 174.6e9),  # Narayanan et al. 2021 Table 2 (vocab 51200)
        ("llama3.1-8b", 8.03e9),  # Meta model card
        ("llama3.1-70b", 70.6e9),
        ("llama3.1-405b", 405.9e9),  # 405.85B from Meta's shapes
        ("llama2-7b", 6.74e9),
        ("llama2-13b", 13.0e9),
        ("llama2-70b", 69.0e9),
        ("mixtral-8x7b", 46.7e9),  # Jiang et al. 2024
        ("mixtral-8x22b", 141e9),  # Mistral announcement
        ("qwen2.5-7b", 7.61e9),  # Qwen2.5 report Table 1 (7.61B)
        ("qwen2.5-72b", 72.7e9),
        ("bloom-176b", 176.2e9),  # BLOOM paper (176,247M)
        ("gpt-neox-20b", 20.55e9),  # Black et al. 2022
    ],
)
def test_published_total_params(name, published):
    assert total_params(get_model(name)) == pytest.approx(published, rel=5e-3)


@pytest.mark.parametrize(
    "name, published",
    [("mixtral-8x7b", 12.9e9), ("mixtral-8x22b", 39e9)],
)
def test_published_active_params(name, published):
    assert active_params(get_model(name)) == pytest.approx(published, rel=5e-3)


def test_llama_405b_matches_meta_shapes():
    assert total_params(get_model("llama3.1-405b")) == pytest.approx(405.85e9, rel=5e-4)


# Narayanan et al. 2021 Table 1 prints sizes to 0.1B (1008B to 1B): the count must round to them.
MEGATRON_TABLE1 = {
    "megatron-gpt-1.7b": 1.7,
    "megatron-gpt-3.6b": 3.6,
    "megatron-gpt-7.5b": 7.5,
    "megatron-gpt-18.4b": 18.4,
    "megatron-gpt-39.1b": 39.1,
    "megatron-gpt-76.1b": 76.1,
    "megatron-gpt-145.6b": 145.6,
    "megatron-gpt-310.1b": 310.1,
    "megatron-gpt-529.6b": 529.6,
    "megatron-gpt-1t": 1008.0,
}


@pytest.mark.parametrize("name, billions", sorted(MEGATRON_TABLE1.items()))
def test_megatron_table1_sizes(name, billions):
    half_unit = 0.5 if billions >= 1000 else 0.05
    assert abs(total_params(get_model(name)) / 1e9 - billions) <= half_unit + 1e-9


# ---------------------------------------------------------------- Megatron eq. 3 == general count
MEGATRON_FAMILY = [n for n in model_names() if n.startswith("megatron-gpt-")]


def test_megatron_family_complete():
    assert set(MEGATRON_TABLE1) <= set(MEGATRON_FAMILY)


@pytest.mark.parametrize("name", MEGATRON_FAMILY)
def test_megatron_eq3_with_full_recompute(name):
    m = get_model(name)
    assert m.bias and m.ffn_hidden_size == 4 * m.hidden_size and m.num_kv_heads == m.num_heads
    B, s = m.global_batch, m.seq_len
    ours = training_flops_per_iteration(m, B, s, recompute="full", causal=False)
    assert ours == pytest.approx(megatron_flops_per_iteration(m, B, s, recompute=True), rel=1e-12)


@pytest.mark.parametrize("name", MEGATRON_FAMILY)
def test_megatron_no_recompute_form(name):
    m = get_model(name)
    B, s = m.global_batch, m.seq_len
    ours = training_flops_per_iteration(m, B, s, recompute="none", causal=False)
    assert ours == pytest.approx(megatron_flops_per_iteration(m, B, s, recompute=False), rel=1e-12)


@pytest.mark.parametrize(
    "name", [n for n, m in load_catalog().items() if not m.is_moe and not m.gated
             and m.ffn_hidden_size == 4 * m.hidden_size and m.num_kv_heads == m.num_heads]
)
def test_eq3_holds_for_every_gpt_shaped_model(name):
    m = get_model(name)
    ours = training_flops_per_iteration(m, 8, 2048, recompute="full")
    assert ours == pytest.approx(megatron_flops_per_iteration(m, 8, 2048), rel=1e-12)


# ---------------------------------------------------------------- catalog integrity
def test_every_entry_validates_and_is_sourced():
    cat = load_catalog()
    assert len(cat) >= 40
    for name, m in cat.items():
        assert isinstance(m, ModelSpec)
        assert m.name == name
        assert m.source.strip() and m.source != "user supplied", name
        assert name == name.lower() and " " not in name and "_" not in name, name


def test_names_and_aliases_unique():
    seen: dict[str, str] = {}
    for name, m in load_catalog().items():
        for key in (name, *m.aliases):
            k = normalize_name(key)
            assert k not in seen or seen[k] == name, f"{key} used by {seen.get(k)} and {name}"
            seen[k] = name
        assert len(set(map(normalize_name, m.aliases))) == len(m.aliases), name


def test_load_catalog_returns_a_copy():
    cat = load_catalog()
    cat.pop("gpt3-175b")
    assert "gpt3-175b" in load_catalog()


def test_catalog_models_from_published_runs_are_present():
    for name in [
        "mcore-gpt-1.7b", "mcore-gpt-7.1b", "mcore-gpt-16b", "mcore-gpt-32b", "mcore-gpt-70b",
        "mcore-gpt-119b", "mcore-gpt-177b", "mcore-gpt-314b", "mcore-gpt-462b",
        "megatron-gpt-22b", "gpt3-5b", "gpt3-20b", "llama2-7b", "llama2-13b", "llama2-70b",
        "nemotron-8b", "nemotron-22b", "nemotron-340b", "llama3-8b", "llama3-70b",
        "LLAMA3.1 405B", "GPT 22B", "GPT 1T",
    ]:
        get_model(name)
    m = get_model("mcore-gpt-462b")
    assert (m.vocab_size, m.seq_len, m.global_batch) == (131072, 4096, 3072)


def test_catalog_shapes_spot_checks():
    n = get_model("nemotron-4-340b")
    assert (n.activation, n.num_kv_heads, n.ffn_hidden_size, n.position, n.bias) == ("relu2", 8, 73728, "rotary", False)
    q = get_model("qwen2.5-7b")
    assert (q.qkv_bias, q.bias, q.tied_embeddings, q.vocab_size) == (True, False, False, 152064)
    g = get_model("gpt3-175b")
    assert (g.vocab_size, g.global_batch, g.seq_len, g.tied_embeddings) == (50257, 1536, 2048, True)
    assert get_model("bloom-176b").position == "alibi"


# ---------------------------------------------------------------- lookup
@pytest.mark.parametrize("ref", ["gpt3", "GPT3", "gpt-3", "gpt3.yaml", "gpt3.yml", "gpt3.json", " gpt3-175b "])
def test_gpt3_spellings(ref):
    assert get_model(ref).name == "gpt3-175b"
    assert resolve_model(ref).name == "gpt3-175b"


def test_unknown_name_suggests():
    with pytest.raises(InputError) as exc:
        get_model("gpt5")
    msg = one_line_error(exc)
    assert msg.startswith("model: unknown 'gpt5'; closest: gpt3-175b")
    assert "see 'plan-catalog models'" in msg


def test_unknown_name_through_resolver():
    with pytest.raises(InputError) as exc:
        resolve_model("lama3.1-8b")
    assert "closest: llama3.1-8b" in one_line_error(exc)


def test_missing_file_path_is_not_a_catalog_name():
    with pytest.raises(InputError) as exc:
        resolve_model("no/such/dir/gpt3.yaml")
    msg = one_line_error(exc)
    assert "not found" in msg and "no/such/dir/gpt3.yaml" in msg


def test_existing_file_wins_over_catalog(tmp_path, monkeypatch):
    (tmp_path / "gpt3.yaml").write_text("num_layers: 2\nhidden_size: 64\nnum_heads: 4\nvocab_size: 100\n")
    monkeypatch.chdir(tmp_path)
    m = resolve_model("gpt3.yaml")
    assert (m.name, m.num_layers) == ("gpt3", 2)


# ---------------------------------------------------------------- HF config == YAML == catalog
@pytest.mark.parametrize("name", ["llama3.1-8b", "mixtral-8x7b"])
def test_hf_fixture_equals_yaml(name):
    hf = resolve_model(HF / f"{name}.json")
    yml = resolve_model(YAML / f"{name}.yaml")
    assert hf.name == yml.name == name
    assert shape(hf) == shape(yml)


@pytest.mark.parametrize(
    "fixture, catalog, also_differ",
    [
        ("llama3.1-8b", "llama3.1-8b", set()),
        ("mixtral-8x7b", "mixtral-8x7b", set()),
        ("qwen2.5-7b", "qwen2.5-7b", {"seq_len"}),  # HF gives the 131072 context, catalog the 4096 pre-training one
        ("gpt-neox-20b", "gpt-neox-20b", set()),
        ("bloom-176b", "bloom-176b", set()),
    ],
)
def test_hf_fixture_equals_catalog(fixture, catalog, also_differ):
    hf = resolve_model(HF / f"{fixture}.json")
    # global_batch is not in a HF config.
    assert shape(hf, {"global_batch"} | also_differ) == shape(get_model(catalog), {"global_batch"} | also_differ)


def test_hf_from_dict_and_directory(tmp_path):
    cfg = json.loads((HF / "llama3.1-8b.json").read_text())
    direct = from_hf_config(cfg, "llama")
    snapshot = tmp_path / "Llama-3.1-8B"
    snapshot.mkdir()
    (snapshot / "config.json").write_text(json.dumps(cfg))
    via_dir = resolve_model(str(snapshot))
    assert via_dir.name == "Llama-3.1-8B"
    assert shape(direct) == shape(via_dir)


def test_hf_gpt2_spellings():
    m = resolve_model(HF / "gpt2.json")
    assert (m.num_layers, m.hidden_size, m.num_heads, m.seq_len, m.ffn_hidden_size) == (12, 768, 12, 1024, 3072)
    assert (m.position, m.tied_embeddings, m.activation, m.bias, m.dropout) == ("learned", True, "gelu", True, True)
    assert total_params(m) == 124_439_808  # the published GPT-2 small count


def test_hf_opt_spellings():
    cfg = {
        "model_type": "opt", "num_hidden_layers": 96, "hidden_size": 12288, "num_attention_heads": 96,
        "ffn_dim": 49152, "vocab_size": 50272, "max_position_embeddings": 2048, "activation_function": "relu",
        "dropout": 0.1, "attention_dropout": 0.0, "word_embed_proj_dim": 12288, "do_layer_norm_before": True,
        "enable_bias": True,
    }
    m = from_hf_config(cfg, "opt-175b")
    assert shape(m, {"global_batch"}) == shape(get_model("opt-175b"), {"global_batch"})
    with pytest.raises(InputError) as exc:
        from_hf_config({**cfg, "word_embed_proj_dim": 512}, "opt-350m")
    assert "word_embed_proj_dim" in one_line_error(exc)


def test_hf_nemotron_relu2():
    cfg = {
        "model_type": "nemotron", "num_hidden_layers": 96, "hidden_size": 18432, "num_attention_heads": 96,
        "num_key_value_heads": 8, "intermediate_size": 73728, "vocab_size": 256000,
        "max_position_embeddings": 4096, "hidden_act": "relu2", "norm_eps": 1e-5, "rope_theta": 10000,
        "partial_rotary_factor": 0.5, "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
    }
    m = from_hf_config(cfg, "nemotron-4-340b")
    assert shape(m, {"global_batch"}) == shape(get_model("nemotron-4-340b"), {"global_batch"})


def test_hf_qwen_moe():
    m = resolve_model(HF / "qwen1.5-moe-a2.7b.json")
    assert (m.num_experts, m.experts_per_token, m.expert_ffn_hidden_size) == (60, 4, 1408)
    assert (m.num_shared_experts, m.shared_expert_ffn_hidden_size, m.num_moe_layers) == (1, 5632, 24)
    assert m.qkv_bias and not m.bias
    assert total_params(m) == pytest.approx(14.3e9, rel=5e-3)  # Qwen1.5-MoE-A2.7B model card
    assert active_params(m) == pytest.approx(2.7e9, rel=5e-3)


def test_hf_qwen_moe_layer_patterns():
    cfg = json.loads((HF / "qwen1.5-moe-a2.7b.json").read_text())
    every_other = from_hf_config({**cfg, "decoder_sparse_step": 2}, "x")
    assert (every_other.first_dense_layers, every_other.moe_layer_freq, every_other.num_moe_layers) == (1, 2, 12)
    leading = from_hf_config({**cfg, "mlp_only_layers": [0, 1, 2]}, "x")
    assert (leading.first_dense_layers, leading.num_moe_layers) == (3, 21)
    with pytest.raises(InputError) as exc:
        from_hf_config({**cfg, "mlp_only_layers": [5]}, "x")
    assert "mlp_only_layers" in one_line_error(exc)


def test_hf_deepseek_moe():
    m = resolve_model(HF / "deepseek-moe-16b.json")
    assert (m.num_experts, m.experts_per_token, m.num_shared_experts, m.first_dense_layers) == (64, 6, 2, 1)
    assert (m.expert_ffn_hidden_size, m.ffn_hidden_size, m.num_moe_layers) == (1408, 10944, 27)
    assert total_params(m) == pytest.approx(16.4e9, rel=5e-3)  # DeepSeekMoE paper: 16.4B total
    assert active_params(m) == pytest.approx(2.8e9, rel=1.5e-2)  # ~2.8B activated


def test_hf_deepseek_mla_is_imported():
    m = resolve_model(HF / "deepseek-v3.json")
    assert (m.kv_lora_rank, m.q_lora_rank, m.qk_rope_head_dim, m.qk_nope_head_dim) == (512, 1536, 64, 128)
    assert (m.head_dim, m.v_head_dim, m.num_kv_heads, m.mtp_num_layers) == (192, 128, 128, 1)
    assert total_params(m) == pytest.approx(671e9, rel=5e-3)  # DeepSeek-V3 report: 671B (MTP excluded)


# ---------------------------------------------------------------- our YAML schema, base + overrides
def test_yaml_name_defaults_to_stem():
    assert resolve_model(YAML / "mixtral-8x7b.yaml").name == "mixtral-8x7b"


def test_yaml_base_with_overrides():
    m = resolve_model(YAML / "llama-70b-32k.yaml")
    base = get_model("llama3.1-70b")
    assert (m.name, m.seq_len, m.global_batch) == ("llama-70b-32k", 32768, 256)
    assert shape(m, {"seq_len", "global_batch"}) == shape(base, {"seq_len", "global_batch"})
    assert m.aliases == () and "llama3.1-70b" in m.source


def test_yaml_base_recomputes_derived_fields():
    m = resolve_model(YAML / "gpt-wide.yaml")
    assert (m.hidden_size, m.ffn_hidden_size, m.head_dim) == (3072, 4 * 3072, 96)


# ---------------------------------------------------------------- bad input: one line, names the field
@pytest.mark.parametrize(
    "fixture, words",
    [
        ("bad-malformed.yaml", ["bad-malformed.yaml", "not valid YAML"]),
        ("bad-zero-layers.yaml", ["bad-zero-layers.yaml", "num_layers", "greater than 0"]),
        ("bad-negative-hidden.yaml", ["bad-negative-hidden.yaml", "hidden_size"]),
        ("bad-heads.yaml", ["bad-heads.yaml", "num_heads", "does not divide"]),
        ("bad-kv-heads.yaml", ["bad-kv-heads.yaml", "num_kv_heads", "does not divide"]),
        ("bad-unknown-field.yaml", ["bad-unknown-field.yaml", "hiden_size", "did you mean hidden_size"]),
        ("bad-base.yaml", ["bad-base.yaml", "base", "llama9-70b", "closest: llama3.1-70b"]),
    ],
)
def test_bad_model_files(fixture, words):
    with pytest.raises(InputError) as exc:
        resolve_model(YAML / fixture)
    msg = one_line_error(exc)
    for w in words:
        assert w in msg, (w, msg)


def test_hf_missing_num_hidden_layers(tmp_path):
    cfg = json.loads((HF / "llama3.1-8b.json").read_text())
    del cfg["num_hidden_layers"]
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(InputError) as exc:
        resolve_model(path)
    msg = one_line_error(exc)
    assert "broken.json" in msg and "num_hidden_layers" in msg
    with pytest.raises(InputError) as exc:
        from_hf_config(cfg, "broken")
    assert "missing num_hidden_layers" in one_line_error(exc)


@pytest.mark.parametrize(
    "change, words",
    [
        ({"hidden_size": 0}, ["hidden_size", "positive integer"]),
        ({"num_attention_heads": "32"}, ["num_attention_heads", "positive integer"]),
        ({"num_key_value_heads": 6}, ["num_kv_heads", "does not divide"]),
        ({"num_attention_heads": 48}, ["num_heads", "does not divide"]),
        ({"hidden_act": "tanh"}, ["hidden_act", "tanh"]),
        ({"vocab_size": None}, ["missing vocab_size"]),
    ],
)
def test_hf_bad_values(change, words):
    cfg = {**json.loads((HF / "llama3.1-8b.json").read_text()), **change}
    with pytest.raises(InputError) as exc:
        from_hf_config(cfg, "llama")
    msg = one_line_error(exc)
    for w in words:
        assert w in msg, (w, msg)


def test_hf_not_a_mapping():
    with pytest.raises(InputError):
        from_hf_config(["not", "a", "dict"], "x")  # type: ignore[arg-type]


def test_resolver_rejects_empty_and_non_strings():
    for bad in ("", "   "):
        with pytest.raises(InputError):
            resolve_model(bad)
    with pytest.raises(InputError):
        resolve_model(42)  # type: ignore[arg-type]


def test_directory_without_config(tmp_path):
    with pytest.raises(InputError) as exc:
        resolve_model(tmp_path)
    assert "config.json" in one_line_error(exc)
