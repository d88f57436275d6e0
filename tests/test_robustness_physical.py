"""Issue 24: physically impossible inputs are refused, naming the field and the bound.

- a routing imbalance above what the expert ranks can hold: the busiest of ``ep`` ranks receives at
  most ``min(ep, E/k)`` times the mean (plan.max_imbalance); above ``E/k`` no layout holds it;
- MLA latent ranks wider than the hidden size they compress;
- group-limited routing with topk_group above n_group or n_group null (tests/test_robustness_hf.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from plan_search.cli.estimate import main as estimate_main
from plan_search.cli.search import main as search_main
from plan_search.hardware.catalog import get_cluster
from plan_search.models.hf import from_hf_config
from plan_search.models.io import InputError
from plan_search.models.resolve import resolve_model
from plan_search.planner.costmodel.estimate import estimate
from plan_search.planner.costmodel.plan import Plan, max_imbalance

HF = Path(__file__).parent / "data" / "hf"
MIXTRAL = str(HF / "mixtral-8x7b.json")


def _one_line(r) -> str:
    out = r.output.strip()
    assert r.exit_code == 2 and len(out.splitlines()) == 1 and "Traceback" not in out, (r.exit_code, out)
    return out


def test_the_bound_is_min_of_ep_and_experts_over_k():
    assert max_imbalance(8, 2, 8) == 4  # one expert per rank, top-2: at most 4x the mean
    assert max_imbalance(8, 2, 2) == 2  # two ranks: the busiest takes all, 2x the mean
    assert max_imbalance(256, 8, 64) == 32  # DeepSeek-V3 on 64 ranks: E/k
    assert max_imbalance(256, 8, 16) == 16
    assert max_imbalance(8, 8, 8) == 1  # every token uses every expert: balanced by construction


@pytest.mark.parametrize("command", ["estimate", "search"])
def test_imbalance_above_what_the_experts_can_hold_is_refused(command):
    main = estimate_main if command == "estimate" else search_main
    args = ["--model", MIXTRAL, "--gpu", "h100", "--gpus", "64", "--moe-imbalance", "5"]
    args += ["--ep", "8"] if command == "estimate" else ["--time-limit", "5"]
    out = _one_line(CliRunner().invoke(main, args))
    assert "moe_imbalance: 5 exceeds 4" in out and "num_experts 8 / experts_per_token 2" in out, out
    assert "give at most 4" in out, out


def test_imbalance_is_priced_at_most_what_the_ranks_hold():
    """The busiest of 2 ranks cannot take 3x the mean: 3 is priced as 2 (the cap), while 8 ranks take 3."""
    model = resolve_model(MIXTRAL)
    cluster = get_cluster("h100")

    def step(ep, imb):
        plan = Plan(num_gpus=64, tp=1, pp=1, ep=ep, micro_batch=1, global_batch=1024, seq_len=4096, zero=1,
                    moe_imbalance=imb)
        return estimate(model, cluster, plan, tokens=1e9).step_time_s

    assert step(2, 3.0) == step(2, 2.0)
    assert step(2, 2.0) > step(2, 1.5)
    assert step(8, 3.0) > step(8, 2.0)
    assert step(8, 4.0) > step(8, 3.0)


@pytest.mark.parametrize("field", ["kv_lora_rank", "q_lora_rank"])
def test_mla_rank_wider_than_the_hidden_size_is_refused(tmp_path, field):
    cfg = json.loads((HF / "deepseek-v3.json").read_text())
    cfg[field] = 7169
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    out = _one_line(CliRunner().invoke(estimate_main, ["--model", str(path), "--gpu", "h100", "--gpus", "64"]))
    assert f"{field}: 7169 exceeds hidden_size 7168" in out and "give at most 7168" in out, out
    cfg[field] = 7168  # as wide as the hidden size: pointless but buildable
    assert from_hf_config(cfg, "v3").hidden_size == 7168
    spec = tmp_path / "mla.yaml"
    spec.write_text("name: m\nnum_layers: 2\nhidden_size: 512\nnum_heads: 4\nvocab_size: 1000\nkv_lora_rank: 1024\n"
                    "qk_rope_head_dim: 64\nqk_nope_head_dim: 64\n")
    with pytest.raises(InputError, match="kv_lora_rank: 1024 exceeds hidden_size 512"):
        resolve_model(spec)
