"""Issue 23 item 4: a HF config.json trains at the request's sequence length, else a stated default (never
max_position_embeddings silently); its name comes from the file; plan-catalog show FILE says what was read;
MFU says its attention convention and JSON carries both counts."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from plan_search.cli.catalog import main as catalog_main
from plan_search.cli.estimate import main as estimate_main
from plan_search.cli.search import main as search_main
from plan_search.models import counting
from plan_search.models.resolve import resolve_model

# Qwen/Qwen3-8B config.json (huggingface.co/Qwen/Qwen3-8B, transformers 4.51): a 40,960-token context window,
# pre-trained at 4,096 (Qwen3 report Sec 3.2)
QWEN3_8B = {
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 12288, "max_position_embeddings": 40960,
    "max_window_layers": 36, "model_type": "qwen3", "num_attention_heads": 32, "num_hidden_layers": 36,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000,
    "sliding_window": None, "tie_word_embeddings": False, "use_sliding_window": False, "vocab_size": 151936,
}


def _write(path, cfg):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cfg))
    return path


def test_qwen3_trains_at_its_pretraining_length_not_its_window(tmp_path):
    m = resolve_model(_write(tmp_path / "config.json", QWEN3_8B))
    assert m.seq_len == 4096
    assert "max_position_embeddings 40,960 is the context window" in m.seq_len_source
    assert "Qwen3 technical report" in m.seq_len_source


@pytest.mark.parametrize("family, window, seq, rule", [
    ("made_up_family", 40960, 4096, "the default 4,096"),
    ("made_up_family", 2048, 2048, "capped at max_position_embeddings 2,048"),
    ("llama", 4096, 4096, "Llama 1/2/3 pre-trained at their whole window"),
    ("llama", 32768, 4096, "the default 4,096"),
])
def test_default_rules(tmp_path, family, window, seq, rule):
    cfg = dict(QWEN3_8B, model_type=family, max_position_embeddings=window)
    m = resolve_model(_write(tmp_path / "m.json", cfg))
    assert m.seq_len == seq and rule in m.seq_len_source


def test_rope_scaling_original_window_and_learned_table(tmp_path):
    cfg = dict(QWEN3_8B, max_position_embeddings=131072,
               rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768})
    m = resolve_model(_write(tmp_path / "y.json", cfg))
    assert m.seq_len == 32768 and "rope_scaling.original_max_position_embeddings" in m.seq_len_source
    gpt2 = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 100, "n_positions": 1024}
    assert resolve_model(_write(tmp_path / "g.json", gpt2)).seq_len == 1024  # learned positions: the table


def test_name_comes_from_the_file(tmp_path):
    named = dict(QWEN3_8B, _name_or_path="Qwen/Qwen3-8B")
    assert resolve_model(_write(tmp_path / "a" / "config.json", named)).name == "Qwen3-8B"
    snap = tmp_path / "hub" / "models--Qwen--Qwen3-8B" / "snapshots" / ("ab" * 20) / "config.json"
    assert resolve_model(_write(snap, QWEN3_8B)).name == "Qwen3-8B"
    assert resolve_model(_write(tmp_path / "qwen3-8b-base.json", QWEN3_8B)).name == "qwen3-8b-base"
    hashed = tmp_path / ("cd" * 20) / "config.json"
    assert resolve_model(_write(hashed, QWEN3_8B)).name == "qwen3"  # model_type when the path names nothing


def test_plan_catalog_show_says_what_was_read(tmp_path):
    path = _write(tmp_path / "snap" / "config.json", dict(QWEN3_8B, _name_or_path="Qwen/Qwen3-8B"))
    r = CliRunner().invoke(catalog_main, ["show", str(path)])
    assert r.exit_code == 0, r.output
    assert r.output.startswith(f"# model Qwen3-8B: 8.19 B parameters, read from {path}")
    assert "model_type qwen3; name from _name_or_path" in r.output
    assert "num_layers <- num_hidden_layers" in r.output and "context window <- max_position_embeddings" in r.output
    assert "seq_len 4,096: qwen3's pre-training length" in r.output
    assert "\nseq_len: 4096\n" in r.output  # the spec itself, as YAML
    d = json.loads(CliRunner().invoke(catalog_main, ["show", str(path), "--format", "json"]).output)
    assert d["read"]["keys"]["num_kv_heads"] == "num_key_value_heads" and d["read"]["model_type"] == "qwen3"
    assert d["model"]["seq_len"] == 4096 and d["model"]["num_layers"] == 36


def test_plan_estimate_states_the_length_and_the_mfu_convention(tmp_path):
    path = str(_write(tmp_path / "config.json", dict(QWEN3_8B, _name_or_path="Qwen/Qwen3-8B")))
    args = ["--model", path, "--gpu", "a100", "--gpus", "64", "--tp", "2", "--tokens", "1T"]
    r = CliRunner().invoke(estimate_main, args)
    assert r.exit_code == 0, r.output
    assert "seq_len 4,096: qwen3's pre-training length" in " ".join(r.output.split())
    assert "seq4096" in r.output
    text = " ".join(r.output.split())
    assert "causal /" in text and "full-attention MFU" in text and "torchtitan's count" in text
    d = json.loads(CliRunner().invoke(estimate_main, args + ["--format", "json"]).output)
    m = resolve_model(path)
    causal = counting.training_flops_per_iteration(m, d["plan"]["global_batch"], 4096, causal=True)
    full = counting.training_flops_per_iteration(m, d["plan"]["global_batch"], 4096, causal=False)
    peak = 312e12  # A100 dense bf16
    assert d["mfu"] == pytest.approx(causal / (d["step_time_s"] * 64 * peak), rel=1e-9)
    assert d["mfu_full_attention"] == pytest.approx(full / (d["step_time_s"] * 64 * peak), rel=1e-9)
    assert "causal" in d["mfu_convention"] and "torchtitan" in d["mfu_convention"]
    # the request's length wins, and then nothing is stated
    r = CliRunner().invoke(estimate_main, args + ["--seq-len", "8192"])
    assert "seq8192" in r.output and "pre-training length" not in r.output


def test_plan_search_states_the_length(tmp_path):
    path = str(_write(tmp_path / "config.json", QWEN3_8B))
    r = CliRunner().invoke(search_main, ["--model", path, "--gpu", "a100", "--gpus", "64", "--tokens", "100B",
                                         "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["inputs"]["seq_len"] == 4096 and "pre-training length" in d["inputs"]["seq_len_source"]
    fp = d["front"][0]
    assert fp["mfu_full_attention"] > fp["mfu"] > 0
