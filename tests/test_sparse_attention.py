"""DeepSeek Sparse Attention (issue 27): the lightning indexer and the top-k attention of DeepSeek-V3.2,
counted as the V3.2-Exp report describes them and checked against hand counts written here; the
catalog entry and its config.json; prices through plan-estimate that move with the sequence length
the way the FLOPs say."""

from __future__ import annotations

import json

from click.testing import CliRunner

from plan_search.cli.catalog import main as catalog
from plan_search.cli.estimate import main as estimate
from plan_search.models import counting
from plan_search.models.catalog import load_catalog

V32 = load_catalog()["deepseek-v3.2"]
V3 = load_catalog()["deepseek-v3"]


def hand_dsa_flops(s: int) -> float:
    """Forward FLOPs per token of one layer at sequence s, causal, position by position: the indexer
    scores the t keys up to query t with 64 heads of 128 (a dot product and one weighted ReLU term per
    head: 2 x 64 x (128 + 1)); the attention reads min(t, 2048) keys, each scored against the shared
    576-wide latent key (512 + 64 rope) and read as a 512-wide latent value by 128 heads."""
    idx = sum(range(1, s + 1)) / s * 2 * 64 * (128 + 1)
    keys = sum(min(t, 2048) for t in range(1, s + 1)) / s
    return idx + keys * 2 * 128 * (576 + 512)


def test_attention_flops_per_token_at_128k_match_the_hand_count():
    for s in (131072, 32768, 4096):
        got = counting.sparse_attention_flops_per_token(V32, s, causal=True)
        want = hand_dsa_flops(s)
        assert abs(got - want) / want < 0.02, (s, got, want)
    # dense MLA at 128K charges 128 heads x (192 + 128) over s/2 keys: DSA is ~3.3x less
    dense = counting.attention_products_flops_per_token(V3, 131072 / 2)
    assert 3.0 < dense / counting.sparse_attention_flops_per_token(V32, 131072, causal=True) < 3.6


def test_the_indexer_adds_its_weights_and_the_config_json_reads_them(tmp_path):
    per_layer = 1536 * 64 * 128 + 7168 * 128 + 7168 * 64 + 2 * 128  # wq_b, wk, weights_proj, k_norm
    assert counting.total_params(V32) - counting.total_params(V3) == 61 * per_layer
    cfg = {"model_type": "deepseek_v32", "hidden_size": 7168, "intermediate_size": 18432,
           "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
           "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256, "kv_lora_rank": 512,
           "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128, "n_group": 8,
           "topk_group": 4, "num_experts_per_tok": 8, "first_k_dense_replace": 3, "vocab_size": 129280,
           "tie_word_embeddings": False, "index_head_dim": 128, "index_n_heads": 64, "index_topk": 2048}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    r = CliRunner().invoke(catalog, ["show", str(p), "--format", "json"])
    assert r.exit_code == 0, r.output
    assert f"{counting.total_params(V32) / 1e9:.1f} B" in CliRunner().invoke(catalog, ["show", str(p)]).stdout
    del cfg["index_topk"]
    p.write_text(json.dumps(cfg))
    r = CliRunner().invoke(catalog, ["show", str(p)])
    assert r.exit_code == 2 and "index_topk" in r.stderr


def step(model, seq):
    r = CliRunner().invoke(estimate, ["--model", model, "--gpu", "h100", "--gpus", "1024", "--tp", "8", "--pp", "16",
                                      "--cp", "8", "--ep", "8", "--global-batch", "64", "--seq-len", str(seq),
                                      "--recompute", "full", "--format", "json"])
    assert r.exit_code == 0, r.output
    return json.JSONDecoder().raw_decode(r.stdout)[0]


def test_price_moves_with_the_sequence_as_the_flops_say():
    """From 32K to 128K tokens the dense model's compute grows with its quadratic attention, V3.2's
    far less (its attention is linear in s past 2,048 keys, the indexer's quadratic term is 7x smaller
    per pair); and V3.2's context-parallel ring passes the 704-wide shared latent, not 128 heads' K/V."""
    v3 = {s: step("deepseek-v3", s) for s in (32768, 131072)}
    v32 = {s: step("deepseek-v3.2", s) for s in (32768, 131072)}
    grow3 = v3[131072]["time"]["compute_s"] / v3[32768]["time"]["compute_s"]
    grow32 = v32[131072]["time"]["compute_s"] / v32[32768]["time"]["compute_s"]
    assert grow32 < 0.7 * grow3, (grow3, grow32)
    assert v32[131072]["step_time_s"] < 0.6 * v3[131072]["step_time_s"]
    assert v32[131072]["time"]["cp_comm_s"] < 0.05 * v3[131072]["time"]["cp_comm_s"] + 0.01
