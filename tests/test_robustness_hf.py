"""Issue 24: model files that contradict themselves, and architectures the product does not model.

Each family's keys are read as its transformers class reads them (models.hf._FAMILY_MOE_KEYS): a
stray expert-count key of another family is ignored, a count the class cannot route (Mixtral with 0
or null experts and top-2) is refused naming both keys, and a config.json of a hybrid Mamba/attention,
linear-attention or sparse-attention model is refused in one line naming what the cost model lacks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from plan_search.cli.estimate import main as estimate_main
from plan_search.models import counting as c
from plan_search.models.hf import from_hf_config
from plan_search.models.io import InputError

HF = Path(__file__).parent / "data" / "hf"


def _cfg(fixture: str, **change) -> dict:
    cfg = json.loads((HF / f"{fixture}.json").read_text())
    text = cfg if "num_hidden_layers" in cfg else cfg["text_config"]
    for k, v in change.items():
        if v is ...:
            text.pop(k, None)
        else:
            text[k] = v
    return cfg


def _refused(tmp_path: Path, cfg: dict) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    r = CliRunner().invoke(estimate_main, ["--model", str(path), "--gpu", "h100", "--gpus", "64"])
    out = r.output.strip()
    assert r.exit_code == 2 and len(out.splitlines()) == 1 and "Traceback" not in out, (r.exit_code, out)
    return out


@pytest.mark.parametrize("value, shown", [(0, "0"), (None, "null")])
def test_mixtral_without_experts_is_refused_naming_both_keys(tmp_path, value, shown):
    # was priced as a dense 7.2B model (exit 0)
    out = _refused(tmp_path, _cfg("mixtral-8x7b", num_local_experts=value))
    assert f"num_local_experts: {shown} experts, yet num_experts_per_tok is 2" in out, out
    # the same for the other families whose MoE block is built whatever the count
    out = _refused(tmp_path, _cfg("deepseek-v3", n_routed_experts=value))
    assert f"n_routed_experts: {shown} experts, yet num_experts_per_tok is 8" in out, out
    out = _refused(tmp_path, _cfg("gpt-oss-20b", num_local_experts=value))
    assert f"num_local_experts: {shown} experts, yet num_experts_per_tok is 4" in out, out


def test_dense_when_the_class_builds_a_dense_mlp():
    # Qwen2MoeDecoderLayer / Qwen3MoeDecoderLayer: num_experts 0 -> every layer Qwen*MoeMLP(intermediate_size)
    q = from_hf_config(_cfg("qwen3-30b-a3b", num_experts=0), "q")
    assert not q.is_moe and q.ffn_hidden_size == 6144
    # DeepseekV2DecoderLayer: n_routed_experts None -> dense
    assert not from_hf_config(_cfg("deepseek-v2-lite", n_routed_experts=None), "v2").is_moe


@pytest.mark.parametrize(
    "fixture, stray, total",
    [
        ("deepseek-v3", {"num_local_experts": 64}, 671e9),  # was 180.5B: the stray key won
        ("deepseek-v3", {"num_experts": 16, "experts_per_token": 2}, 671e9),
        ("qwen3-30b-a3b", {"n_routed_experts": 8, "num_local_experts": 4, "n_shared_experts": 2}, 30.5e9),
        ("mixtral-8x7b", {"num_experts": 64, "moe_intermediate_size": 128, "n_shared_experts": 1}, 46.7e9),
        ("kimi-k2", {"num_local_experts": 8}, 1.026e12),  # 1.04T with its 14B MTP and vision-free head
    ],
)
def test_stray_keys_of_another_family_are_ignored_as_transformers_ignores_them(fixture, stray, total):
    m = from_hf_config(_cfg(fixture, **stray), fixture)
    assert m == from_hf_config(_cfg(fixture), fixture)
    assert c.total_params(m) == pytest.approx(total, rel=6e-3)


def test_dense_family_with_an_expert_count_is_refused(tmp_path):
    out = _refused(tmp_path, _cfg("llama3.1-8b", num_local_experts=8, num_experts_per_tok=2))
    assert "num_local_experts: llama's transformers class builds no experts" in out, out
    assert from_hf_config(_cfg("llama3.1-8b", num_local_experts=0), "l").num_experts == 0  # 0 says dense


def test_unknown_family_with_disagreeing_spellings_is_refused(tmp_path):
    cfg = _cfg("deepseek-moe-16b", n_routed_experts=64, num_local_experts=8)
    out = _refused(tmp_path, cfg)
    assert "num_local_experts 8 and n_routed_experts 64 disagree" in out, out
    # the same value twice is no contradiction
    assert from_hf_config(_cfg("deepseek-moe-16b", num_local_experts=64), "d").num_experts == 64


@pytest.mark.parametrize(
    "change, words",
    [
        ({"n_group": None}, ["n_group: null with topk_method noaux_tc", "number of expert groups"]),
        ({"topk_group": None}, ["topk_group: null with topk_method noaux_tc"]),
        ({"topk_group": 9}, ["topk_group: 9 exceeds n_group 8; give at most 8"]),
        ({"n_group": 1, "topk_group": 4}, ["topk_group: 4 exceeds n_group 1; give at most 1"]),
        ({"n_group": 7}, ["n_group: 7 does not divide n_routed_experts 256"]),
    ],
)
def test_group_limited_routing_bounds(tmp_path, change, words):
    out = _refused(tmp_path, _cfg("deepseek-v3", **change))
    for w in words:
        assert w in out, (w, out)


# NVIDIA Nemotron-H-8B-Base-8K config.json keys (huggingface.co/nvidia/Nemotron-H-8B-Base-8K), shortened pattern
NEMOTRON_H = {
    "model_type": "nemotron_h", "architectures": ["NemotronHForCausalLM"], "num_hidden_layers": 52,
    "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 21504,
    "vocab_size": 131072, "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
    "mamba_num_heads": 128, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4,
    "mamba_hidden_act": "silu", "mlp_hidden_act": "relu2", "max_position_embeddings": 8192,
}
# Qwen3-Next-80B-A3B config.json keys (huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct)
QWEN3_NEXT = {
    **_cfg("qwen3-30b-a3b"), "model_type": "qwen3_next", "full_attention_interval": 4, "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
    "linear_value_head_dim": 128, "num_experts": 512, "num_experts_per_tok": 10,
}
# DeepSeek-V3.2-Exp config.json keys (huggingface.co/deepseek-ai/DeepSeek-V3.2-Exp)
DSV32 = {**_cfg("deepseek-v3"), "model_type": "deepseek_v32", "index_head_dim": 128, "index_n_heads": 64,
         "index_topk": 2048}


@pytest.mark.parametrize(
    "cfg, words",
    [
        (NEMOTRON_H, ["model_type nemotron_h (hybrid_override_pattern, mamba_num_heads, mamba_head_dim ...)",
                      "Mamba-2 state-space layers", "not modelled"]),
        ({**NEMOTRON_H, "model_type": "llama"}, ["hybrid_override_pattern, mamba_num_heads", "Mamba-2"]),
        ({k: v for k, v in NEMOTRON_H.items() if k not in ("model_type", "hybrid_override_pattern")},
         ["mamba_num_heads, mamba_head_dim, mamba_hidden_act ...: Mamba-2"]),
        (QWEN3_NEXT, ["model_type qwen3_next", "linear-attention (Gated DeltaNet) layers", "not modelled"]),
        ({**QWEN3_NEXT, "model_type": "qwen3_moe"}, ["linear_key_head_dim", "linear-attention"]),
        ({**DSV32, "model_type": "deepseek_v3"}, ["index_n_heads, index_head_dim, index_topk: DeepSeek Sparse"]),
    ],
)
def test_unmodelled_architectures_are_refused_naming_what_is_lacking(tmp_path, cfg, words):
    out = _refused(tmp_path, cfg)
    for w in words:
        assert w in out, (w, out)
    # plan-search refuses the same file the same way (never priced as a plain transformer)
    from plan_search.cli.search import main as search_main

    r = CliRunner().invoke(search_main, ["--model", str(tmp_path / "config.json"), "--gpu", "h100", "--gpus", "64"])
    assert r.exit_code == 2 and r.output.strip() == out, r.output


def test_an_index_key_given_as_null_is_no_indexer():
    # transformers-style dumps may carry a key as null: no feature declared
    m = from_hf_config({**_cfg("deepseek-v3"), "index_topk": None}, "v3")
    assert c.total_params(m) == pytest.approx(671e9, rel=5e-3)


def test_api_refuses_with_the_project_error():
    with pytest.raises(InputError, match="Mamba-2"):
        from_hf_config(NEMOTRON_H, "nemotron-h")
