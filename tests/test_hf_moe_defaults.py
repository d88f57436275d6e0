"""Issue 13: MoE keys missing from a HuggingFace config.json take the default of that model_type's
transformers config class (models.hf._SPEC_KEYS, sources cited there), never another key's value;
without a usable default the import is refused with one line naming the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from plan_search.models import counting as c
from plan_search.models.resolve import resolve_model

HF = Path(__file__).parent / "data" / "hf"


def _write(tmp_path: Path, fixture: str, drop: tuple[str, ...], change: dict | None = None) -> Path:
    cfg = json.loads((HF / f"{fixture}.json").read_text())
    text = cfg["text_config"] if "num_hidden_layers" not in cfg else cfg
    for k in drop:
        del text[k]
    text.update(change or {})
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


@pytest.mark.parametrize(
    "fixture, drop, change, published",
    [
        # the tester's cases: intermediate_size was read as the expert width (233.5B, 5,922.7B),
        # first_k_dense_replace as 0 (703.8B) and n_shared_experts as 0 (668.5B)
        ("qwen3-30b-a3b", ("moe_intermediate_size",), {}, 30.5e9),  # HF model card; Qwen3MoeConfig 768
        ("deepseek-v3", ("moe_intermediate_size",), {}, 671e9),  # arXiv 2412.19437; DeepseekV3Config 2048
        ("deepseek-v3", ("first_k_dense_replace",), {}, 671e9),  # DeepseekV3Config 3
        ("deepseek-v3", ("n_shared_experts",), {}, 671e9),  # DeepseekV3Config 1
        # every MoE key of the family at once: the class defaults are these models' own values
        ("deepseek-v3", ("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size", "n_shared_experts",
                         "first_k_dense_replace", "intermediate_size", "n_group", "topk_group"), {}, 671e9),
        ("qwen3-30b-a3b", ("num_experts", "num_experts_per_tok", "moe_intermediate_size"), {}, 30.5e9),
        # Qwen1.5-MoE-A2.7B model card: 14.3B; Qwen2MoeConfig shared_expert_intermediate_size 5632
        ("qwen1.5-moe-a2.7b", ("num_experts", "moe_intermediate_size", "shared_expert_intermediate_size"), {}, 14.3e9),
        ("mixtral-8x7b", ("num_local_experts", "num_experts_per_tok", "intermediate_size"), {}, 46.7e9),  # Mistral
        ("gpt-oss-20b", ("num_experts_per_tok", "experts_per_token", "intermediate_size"), {}, 20.91e9),  # card
        # DeepSeek-V2-Lite (arXiv 2405.04434 App. B: 15.7B, experts 1408 wide): DeepseekV2Config's 1407
        ("deepseek-v2-lite", ("moe_intermediate_size",), {}, 15.7e9),
    ],
)
def test_missing_moe_key_takes_the_transformers_default(tmp_path, fixture, drop, change, published):
    m = resolve_model(_write(tmp_path, fixture, drop, change))
    assert c.total_params(m) == pytest.approx(published, rel=5e-3)


def test_defaults_are_the_family_values_not_another_key(tmp_path):
    # a dense width unlike the experts': the expert width stays Qwen3MoeConfig's 768
    m = resolve_model(_write(tmp_path, "qwen3-30b-a3b", ("moe_intermediate_size",), {"intermediate_size": 12345}))
    assert (m.expert_ffn_hidden_size, m.ffn_hidden_size) == (768, 12345)
    v3 = resolve_model(_write(tmp_path, "deepseek-v3", ("first_k_dense_replace", "n_shared_experts")))
    assert (v3.first_dense_layers, v3.num_shared_experts, v3.shared_expert_ffn_hidden_size) == (3, 1, 2048)
    kimi = resolve_model(_write(tmp_path, "kimi-k2", ("n_shared_experts", "first_k_dense_replace")))
    assert (kimi.num_shared_experts, kimi.first_dense_layers) == (1, 3)  # read with DeepseekV3Config
    lite = resolve_model(_write(tmp_path, "deepseek-v2-lite", ("n_shared_experts", "first_k_dense_replace")))
    assert (lite.num_shared_experts, lite.first_dense_layers) == (0, 0)  # DeepseekV2Config: None, 0
    scout = resolve_model(_write(tmp_path, "llama4-scout-17b-16e", ("intermediate_size_mlp",)))
    assert (scout.ffn_hidden_size, scout.expert_ffn_hidden_size) == (16384, 8192)  # not the experts' 8192
    oss = resolve_model(_write(tmp_path, "gpt-oss-20b", ("num_local_experts",)))
    assert oss.num_experts == 128  # GptOssConfig's default (gpt-oss-120b's count)


@pytest.mark.parametrize(
    "fixture, drop, words",
    [
        # DeepSeek-MoE 16B (model_type deepseek, remote code): no transformers class, no default
        ("deepseek-moe-16b", ("moe_intermediate_size",), ["missing moe_intermediate_size", "give it in config.json"]),
        # DeepseekV2Config's num_experts_per_tok=None routes to no expert
        ("deepseek-v2-lite", ("num_experts_per_tok",),
         ["missing num_experts_per_tok: deepseek_v2's transformers config has no default",
          "give num_experts_per_tok in config.json"]),
    ],
)
def test_missing_moe_key_without_a_default_is_one_line(tmp_path, fixture, drop, words):
    from plan_search.cli.estimate import main

    r = CliRunner().invoke(main, ["--model", str(_write(tmp_path, fixture, drop)), "--gpu", "h100", "--gpus", "64"])
    out = r.output.strip()
    assert r.exit_code == 2 and len(out.splitlines()) == 1 and "Traceback" not in out, out
    for w in words:
        assert w in out, (w, out)


def test_missing_mla_keys_take_the_deepseek_defaults(tmp_path):
    """kv_lora_rank absent was refused while the MoE keys were filled: both now take DeepseekV2/V3Config's
    defaults (512, 1536, 64, 128, 128); an explicit null q_lora_rank stays a full-rank Q projection."""
    mla = ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
    v3 = resolve_model(_write(tmp_path, "deepseek-v3", mla))
    assert tuple(getattr(v3, f) for f in mla) == (512, 1536, 64, 128, 128)
    assert c.total_params(v3) == pytest.approx(671e9, rel=5e-3)
    lite = resolve_model(_write(tmp_path, "deepseek-v2-lite", ("q_lora_rank",)))
    assert lite.q_lora_rank == 1536  # the Lite config.json says null: full rank
    assert resolve_model(HF / "deepseek-v2-lite.json").q_lora_rank is None
