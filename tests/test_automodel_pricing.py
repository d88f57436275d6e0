"""NeMo AutoModel's MoE benchmarks route with ``fake_balanced_gate`` (NVIDIA-NeMo/Automodel@34f73e9
components/moe/layers.py FakeBalancedGate: token i to experts (i*k + j) mod E): round-robin routing, Plan
``moe_routing``. Each token's k experts are consecutive, so DeepEP (the flex dispatcher) sends it to far fewer
ranks and nodes than uniform routing does (planner.costmodel.dispatch.round_robin_hit). Through the API and
the CLIs, with real numbers."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import plan_search as ps
from plan_search.cli.estimate import main as estimate_cli
from plan_search.cli.search import main as search_cli
from plan_search.hardware.catalog import get_cluster
from plan_search.models.catalog import get_model
from plan_search.models.io import InputError
from plan_search.planner.frameworks import emit

H100 = "h100-sxm"
# Automodel@34f73e9 examples/benchmark/configs/qwen3_moe_30b_te_deepep.yaml: 8 H100, ep 8, FSDP2, local batch 4,
# global 512, seq 4096, activation checkpointing (whole blocks), DeepEP
QWEN = dict(num_gpus=8, ep=8, global_batch=512, seq_len=4096, micro_batch=4, zero=3, recompute="full",
            moe_dispatcher="flex", moe_imbalance=1.0)
# deepseek_v3_te_deepep.yaml: 256 H100, pp 4, ep 64 over 8 nodes, local batch 8 (its 8 virtual stages left out)
DSV3 = dict(num_gpus=256, pp=4, ep=64, global_batch=512, seq_len=4096, micro_batch=1, zero=3,
            recompute="full", moe_dispatcher="flex", moe_imbalance=1.0, reshard_after_forward=False)


def _exchanges(x: dict, layers: int) -> int:
    """Dispatches and combines of a step: 4 per MoE layer and micro-batch, 2 more under full recomputation."""
    micro = x["global_batch"] // (x["num_gpus"] // x.get("pp", 1) * x["micro_batch"])
    return micro * layers * (6 if x["recompute"] == "full" else 4)


def test_round_robin_sends_each_qwen3_token_to_one_rank_where_uniform_routing_reaches_5_25():
    """Qwen3-30B-A3B: 128 experts, top-8, 16 per rank on ep 8: experts 8i..8i+7 sit on one rank, where
    uniform routing reaches 8 (1 - (7/8)^8) = 5.2511 ranks; inside one node the exchange is bytes over NVLink
    plus the intra-node latency, so the bytes part shrinks by exactly that factor."""
    topk = ps.estimate("qwen3-30b-a3b", H100, moe_routing="topk", **QWEN)
    rr = ps.estimate("qwen3-30b-a3b", H100, moe_routing="round_robin", **QWEN)
    n = _exchanges(QWEN, 48)
    lat = get_cluster(H100).node.intra_latency_us * 1e-6
    ratio = (topk.time.ep_comm_s / n - lat) / (rr.time.ep_comm_s / n - lat)
    assert ratio == pytest.approx(8 * (1 - (7 / 8) ** 8), rel=1e-6)
    # nothing else of the step moves
    assert rr.time.compute_s == pytest.approx(topk.time.compute_s, rel=1e-12)
    assert rr.time.memory_bound_s == pytest.approx(topk.time.memory_bound_s, rel=1e-12)
    assert topk.step_time_s - rr.step_time_s == pytest.approx(topk.time.ep_comm_s - rr.time.ep_comm_s, rel=1e-9)
    assert 2.7 < topk.step_time_s - rr.step_time_s < 3.0  # of ~31.8 s


def test_round_robin_keeps_a_deepseek_token_in_one_node():
    """DeepSeek-V3 on ep 64 (8 nodes): experts 8i..8i+7 are 2 ranks of one node, so a token crosses at most
    one NIC (7/8 of tokens do), where group-limited uniform routing (4 of 8 groups) reaches
    4 (1 - (3/4)^8) x 7/8 = 3.15 remote nodes: the NIC-bound exchange carries 3.6x fewer bytes."""
    topk = ps.estimate("deepseek-v3", H100, moe_routing="topk", **DSV3)
    rr = ps.estimate("deepseek-v3", H100, moe_routing="round_robin", **DSV3)
    assert topk.time.ep_comm_s / rr.time.ep_comm_s == pytest.approx(4 * (1 - 0.75 ** 8), rel=0.05)
    assert rr.step_time_s < topk.step_time_s


def test_round_robin_is_balanced_whatever_moe_imbalance_says():
    a = ps.estimate("qwen3-30b-a3b", H100, moe_routing="round_robin", **QWEN)
    # an imbalance given with round_robin is refused (issue 13: it was ignored); left unset, the plan prices 1
    with pytest.raises(InputError, match="moe_imbalance: 1.2 with moe_routing round_robin"):
        ps.estimate("qwen3-30b-a3b", H100, moe_routing="round_robin", **{**QWEN, "moe_imbalance": 1.2})
    b = ps.estimate("qwen3-30b-a3b", H100, moe_routing="round_robin", **{k: v for k, v in QWEN.items()
                                                                         if k != "moe_imbalance"})
    c = ps.estimate("qwen3-30b-a3b", H100, moe_routing="topk", **{**QWEN, "moe_imbalance": 1.2})
    assert a.step_time_s == b.step_time_s
    assert c.step_time_s > ps.estimate("qwen3-30b-a3b", H100, moe_routing="topk", **QWEN).step_time_s


def test_routing_without_expert_parallelism_changes_nothing():
    x = {**QWEN, "ep": 1}
    assert ps.estimate("qwen3-30b-a3b", H100, moe_routing="round_robin", **x).step_time_s == \
        ps.estimate("qwen3-30b-a3b", H100, moe_routing="topk", **x).step_time_s


def test_frameworks_that_route_by_scores_refuse_round_robin_in_one_line():
    args = ["--model", "qwen3-30b-a3b", "--gpu", H100, "--num-gpus", "8", "--ep", "8", "--global-batch", "512",
            "--seq-len", "4096", "--recompute", "full", "--moe-routing", "round_robin"]
    for fw in ("megatron", "nemo"):
        r = CliRunner().invoke(estimate_cli, args + ["--framework", fw], catch_exceptions=False)
        assert r.exit_code == 2, (fw, r.output)
        assert r.output.count("\n") == 1 and "moe_routing round_robin" in r.output and "top-k" in r.output, r.output
    r = CliRunner().invoke(search_cli, ["--model", "qwen3-30b-a3b", "--gpu", H100, "--gpus", "8", "--framework",
                                        "megatron", "--moe-routing", "round_robin"])
    assert r.exit_code == 2 and r.output.startswith("error: moe_routing: megatron cannot run round_robin; use topk"), \
        r.output
    for fw in ("nemo", "deepspeed"):
        with pytest.raises(InputError, match=rf"^moe_routing: {fw} cannot run round_robin; use topk"):
            ps.search(model="qwen3-30b-a3b", gpu=[H100], gpus=[8], framework=fw,
                      knobs={"moe_routing": ["round_robin"]})


def test_torchtitan_writes_and_reads_its_round_robin_switch():
    """torchtitan 0.2.2's [debug] moe_force_load_balance is the same round-robin assignment."""
    plan = ps.Plan(moe_routing="round_robin", **{**QWEN, "recompute": "full"})
    model = get_model("qwen3-30b-a3b")
    text = emit.to_torchtitan_toml(plan, model)
    assert "[debug]\nmoe_force_load_balance = true" in text
    back = emit.from_torchtitan_toml(text, model.num_layers)
    assert back.moe_routing == "round_robin" and back.ep == 8
    plain = emit.to_torchtitan_toml(plan.model_copy(update={"moe_routing": "topk"}), model)
    assert "moe_force_load_balance" not in plain
    assert emit.from_torchtitan_toml(plain, model.num_layers).moe_routing == "topk"
