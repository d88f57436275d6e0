"""torchtitan's op-level selective activation checkpointing (issue 29): ``recompute selective`` under
the torchtitan profile keeps the outputs of the odd matmuls, SDPA and the block input
(memory.op_sac_saved_bytes_per_token) and re-runs the even matmuls and the element-wise work."""

import pytest

import plan_search as ps
from plan_search.hardware.catalog import get_cluster
from plan_search.hardware.profiles import for_framework
from plan_search.models.catalog import get_model
from plan_search.planner.costmodel import compute, memory, recompute
from plan_search.planner.costmodel.arrays import PlanArrays
from plan_search.planner.costmodel.plan import Plan
from plan_search.planner.frameworks import rules as F

KW = dict(num_gpus=8, zero=3, micro_batch=2, global_batch=16, seq_len=8192, precision="bf16",
          reshard_after_forward=True, fp32_grads=True)


def _titan():
    return for_framework(get_cluster("h100-96gb-500w"), "torchtitan")


def test_saved_bytes_are_the_odd_matmuls_sdpa_and_the_input():
    m = get_model("llama3.1-8b")
    x = PlanArrays.from_plans([Plan(recompute="selective", **KW)], m.num_layers)
    h, q, kv, f, a = 4096, 4096, 1024, 14336, 32
    eager = 2 * h + 2 * q + 2 * kv + 2 * q + 4 * a + 2 * f + 2 * h  # input, wq, wv, sdpa+lse, w1, w2
    assert memory.op_sac_saved_bytes_per_token(m, x)[0] == eager
    assert memory.op_sac_saved_bytes_per_token(m, x, compiled=True)[0] == eager - 2 * h
    # wk, wo and w3 of the 7 matmuls are re-run: their FLOP share
    share = (h * kv + q * h + h * f) / (h * (q + 2 * kv) + q * h + 3 * h * f)
    assert recompute.op_sac_recomputed_gemm_share(m) == pytest.approx(share)


def test_op_sac_sits_between_none_and_full_in_memory_and_time():
    c = _titan()
    est = {rc: ps.estimate("llama3.1-8b", c, recompute=rc, **KW) for rc in ("none", "selective", "full")}
    acts = {rc: e.memory.activations_gib for rc, e in est.items()}
    assert acts["full"] < acts["selective"] < acts["none"]
    steps = {rc: e.step_time_s for rc, e in est.items()}
    assert steps["none"] < steps["selective"] < steps["full"]
    # layer activations: 32 layers x 16,384 tokens x the compiled saved bytes, plus the loss-side buffers
    # the three plans share
    layer_gib = 32 * 16384 * (2 * 4096 + 2 * 4096 + 2 * 1024 + 2 * 4096 + 4 * 32 + 2 * 14336) / 2**30
    assert acts["selective"] - acts["full"] == pytest.approx(layer_gib - 32 * 16384 * 2 * 4096 / 2**30, rel=1e-6)
    # the recompute seconds (one micro-batch per step): the re-run matmuls' share of the GEMMs and the forward's memory-bound work
    m = get_model("llama3.1-8b")
    x = PlanArrays.from_plans([Plan(recompute="selective", **KW)], m.num_layers)
    lt = compute.layer_times(m, c, x)
    gemm = compute.layer_gemm_fwd_s(m, c, x)
    want = 32 * (recompute.op_sac_recomputed_gemm_share(m) * gemm + lt["membound_fwd_s"])
    assert est["selective"].time.recompute_s == pytest.approx(float(want[0]), rel=1e-6)


def test_megatron_selective_is_unchanged_and_torchtitan_runs_op_sac_on_dense_models():
    m = get_model("llama3.1-8b")
    meg = ps.estimate("llama3.1-8b", get_cluster("h100-sxm"), recompute="selective", **KW)
    none = ps.estimate("llama3.1-8b", get_cluster("h100-sxm"), recompute="none", **KW)
    assert meg.memory.activations_gib == pytest.approx(none.memory.activations_gib)  # FA: core_attn saves nothing
    p = Plan(recompute="selective", **KW)
    assert "torchtitan-selective" not in [v.rule.id for v in F.check("torchtitan", p, m)]
    assert "torchtitan-selective" in [v.rule.id for v in F.check("torchtitan", p, get_model("mixtral-8x7b"))]
