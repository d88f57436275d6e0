"""The cost model's exact formulas and its monotone behaviour, through the public API."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from plan_search.hardware.catalog import get_cluster
from plan_search.hardware.overrides import apply_overrides
from plan_search.models.catalog import get_model
from plan_search.models.spec import ModelSpec
from plan_search.planner.costmodel import comm
from plan_search.planner.costmodel import memory
from plan_search.planner.costmodel.arrays import PlanArrays
from plan_search.planner.costmodel.estimate import estimate
from plan_search.planner.costmodel.plan import Plan

GPT3 = get_model("megatron-gpt-175b")
A100 = get_cluster("a100-80gb")
H100 = get_cluster("h100-sxm")


def arrays(model: ModelSpec, **kw) -> PlanArrays:
    return PlanArrays.from_plans([Plan(**kw)], model.num_layers)


# ------------------------------------------------------------------ Korthikanti et al. 2022, Table 2
@pytest.mark.parametrize("t", [1, 2, 4, 8])
def test_activation_terms_match_korthikanti_table2(t):
    """Per layer, per micro-batch: sbh(10 + 24/t + 5as/(ht)) without SP, sbh(34 + 5as/h)/t with
    SP, 34sbh/t with selective recomputation (+SP), 2sbh(/t) with full recomputation."""
    m = GPT3
    s, b, h, a = 2048, 2, m.hidden_size, m.num_heads
    base = dict(num_gpus=t, tp=t, micro_batch=b, global_batch=b, seq_len=s, flash_attention=False)
    no_sp, _ = memory.layer_activation_bytes(m, arrays(m, recompute="none", sequence_parallel=False, **base))
    assert no_sp[0] == pytest.approx(s * b * h * (10 + 24 / t + 5 * a * s / (h * t)), rel=1e-12)
    if t > 1:
        sp, _ = memory.layer_activation_bytes(m, arrays(m, recompute="none", sequence_parallel=True, **base))
        assert sp[0] == pytest.approx(s * b * h * (34 + 5 * a * s / h) / t, rel=1e-12)
        sel, _ = memory.layer_activation_bytes(m, arrays(m, recompute="selective", sequence_parallel=True, **base))
        assert sel[0] == pytest.approx(s * b * h * 34 / t, rel=1e-12)
        _, full = memory.layer_activation_bytes(m, arrays(m, recompute="full", sequence_parallel=True, **base))
        assert full[0] == pytest.approx(2 * s * b * h / t, rel=1e-12)
    _, full_nosp = memory.layer_activation_bytes(m, arrays(m, recompute="full", sequence_parallel=False, **base))
    assert full_nosp[0] == pytest.approx(2 * s * b * h, rel=1e-12)


def test_flash_attention_drops_the_score_term():
    m = GPT3
    kw = dict(num_gpus=8, tp=8, micro_batch=1, global_batch=1, seq_len=2048, recompute="none", sequence_parallel=True)
    fa, _ = memory.layer_activation_bytes(m, arrays(m, flash_attention=True, **kw))
    assert fa[0] == pytest.approx(2048 * m.hidden_size * 34 / 8, rel=1e-12)


# ------------------------------------------------------------------ ZeRO model states (Rajbhandari et al. 2020)
@pytest.mark.parametrize("d", [1, 8, 64])
def test_zero_model_state_bytes(d):
    psi = 1e9
    total = lambda z, g32: sum(v for v in memory.model_state_bytes(psi, z, d, g32).values())  # noqa: E731
    assert total(0, False) == pytest.approx(16 * psi)
    assert total(1, False) == pytest.approx(4 * psi + 12 * psi / d)
    assert total(2, False) == pytest.approx(2 * psi + 14 * psi / d)
    assert total(3, False) == pytest.approx(16 * psi / d)
    # Megatron's distributed optimizer: stage 1 with fp32 gradients, 6 psi + 12 psi / d.
    assert total(1, True) == pytest.approx(6 * psi + 12 * psi / d)


# ------------------------------------------------------------------ ring collectives
def test_ring_collective_volumes_inside_one_domain():
    c = A100
    bw = c.node.intra_node_gbps * 1e9 * c.efficiency.intra_bw_eff
    a = c.node.intra_latency_us * 1e-6
    S, n = 1e9, 8
    ar = comm.collective_s(comm.ALL_REDUCE, S, n, n, c)
    rs = comm.collective_s(comm.REDUCE_SCATTER, S, n, n, c)
    assert rs == pytest.approx((n - 1) / n * S / bw + (n - 1) * a, rel=1e-12)
    assert ar == pytest.approx(2 * (n - 1) / n * S / bw + 2 * min(n - 1, 2 * math.log2(n)) * a, rel=1e-12)
    assert comm.collective_s(comm.ALL_REDUCE, S, 1, 1, c) == 0.0


def test_hierarchical_collective_uses_the_nic_for_the_cross_node_part():
    c = A100
    b_in = c.node.intra_node_gbps * 1e9 * c.efficiency.intra_bw_eff
    b_out = c.node.inter_node_gbps * 1e9 * c.efficiency.inter_bw_eff
    S, n, k = 8e9, 64, 8
    got = comm.collective_s(comm.REDUCE_SCATTER, S, n, k, c)
    nodes = n / k
    want = (k - 1) / k * S / b_in + (k - 1) * c.node.intra_latency_us * 1e-6
    want += (nodes - 1) / nodes * (S / k) / b_out + (nodes - 1) * c.node.inter_latency_us * 1e-6
    assert got == pytest.approx(want, rel=1e-12)


# ------------------------------------------------------------------ end-to-end figures
PLAN_175B = dict(num_gpus=1536, tp=8, pp=12, micro_batch=1, global_batch=1536, seq_len=2048,
                 recompute="full", sequence_parallel=False, flash_attention=False, zero=0,
                 fp32_grads=False, precision="fp16", overlap_grad_reduce=False, overlap_param_gather=False)


def test_time_breakdown_sums_to_step_and_memory_breakdown_to_peak():
    e = estimate(GPT3, A100, PLAN_175B, tokens=300e9)
    t = e.time
    parts = [t.compute_s, t.memory_bound_s, t.recompute_s, t.tp_comm_s, t.cp_comm_s, t.pp_comm_s,
             t.bubble_s, t.dp_comm_s, t.optimizer_s, t.overhead_s]
    assert sum(parts) == pytest.approx(e.step_time_s, rel=1e-9)
    mm = e.memory
    assert mm.weights_gib + mm.gradients_gib + mm.optimizer_gib + mm.activations_gib + mm.transient_gib + \
        mm.zero3_gather_buffer_gib + mm.allocator_slack_gib + mm.framework_overhead_gib == pytest.approx(mm.peak_gib, rel=1e-9)
    # Narayanan et al. 2021 Table 2: 141 TFLOP/s (hardware count) -> 20.8 s per step.
    assert e.step_time_s == pytest.approx(20.83, rel=0.10)
    assert e.hardware_tflops_per_gpu == pytest.approx(141, rel=0.10)
    assert e.run.days == pytest.approx(300e9 / (1536 * 2048) * e.step_time_s / 86400 / e.goodput, rel=1e-3)
    assert e.run.cost_usd == pytest.approx(e.run.gpu_hours * A100.price_per_gpu_hour_usd, rel=1e-9)


def test_megatron_hardware_flops_convention():
    """HFU counts the recomputed forward: hardware/model = eq.3 with / without recomputation, with the
    attention term causal (s/(12h) where Narayanan et al. count the full square, s/(6h)): the convention
    Megatron-Bridge's tables and Megatron-LM's logs use, the product's MFU default since issue 23."""
    e = estimate(GPT3, A100, PLAN_175B)
    s, h, l, V = 2048, GPT3.hidden_size, GPT3.num_layers, GPT3.vocab_size
    ratio = (96 * (1 + s / (12 * h) + V / (16 * l * h))) / (72 * (1 + s / (12 * h) + V / (12 * l * h)))
    assert e.hardware_tflops_per_gpu / e.model_tflops_per_gpu == pytest.approx(ratio, rel=1e-9)


MODELS = ["megatron-gpt-175b", "llama3.1-8b", "llama3.1-70b"]
PLANS = [
    dict(num_gpus=64, tp=8, pp=4, micro_batch=1, global_batch=256, recompute="selective", zero=1),
    dict(num_gpus=64, tp=4, pp=2, cp=2, micro_batch=1, global_batch=128, recompute="none", zero=1),
    dict(num_gpus=64, tp=2, pp=1, micro_batch=2, global_batch=256, recompute="full", zero=3),
    dict(num_gpus=128, tp=8, pp=8, vpp=2, micro_batch=1, global_batch=512, recompute="none", zero=0),
]


def _est(model, cluster, plan):
    m = get_model(model)
    return estimate(m, cluster, dict(plan, seq_len=m.seq_len if "cp" not in plan else 8192))


@pytest.mark.parametrize("model,plan", list(itertools.product(MODELS, PLANS)))
def test_more_bandwidth_is_never_slower(model, plan):
    base = _est(model, H100, plan).step_time_s
    for key, val in [("gpu.hbm_bandwidth_gbps", 6700), ("node.inter_node_gbps", 100),
                     ("node.intra_node_gbps", 900)]:
        faster = apply_overrides(H100, [f"{key}={val}"])
        assert _est(model, faster, plan).step_time_s <= base * (1 + 1e-12), key


@pytest.mark.parametrize("model,plan", list(itertools.product(MODELS, PLANS)))
def test_higher_zero_stage_never_needs_more_memory(model, plan):
    # Issue 11: ZeRO 0 -> 1 -> 2 never needs more at the peak; ZeRO-3 never needs more model states
    # than ZeRO-2 but adds gather buffers (the largest module whole) and a torch optimizer's step
    # temporaries, so with a small shard group its peak can exceed ZeRO-2's. Gradients reduced every
    # micro-batch: under pipeline parallelism ZeRO-3's default keeps the whole unsharded gradient.
    est = [_est(model, H100, dict(plan, zero=z, grad_reduce="microbatch")).memory for z in range(4)]
    peaks = [e.peak_gib for e in est[:3]]
    assert all(b <= a + 1e-9 for a, b in zip(peaks, peaks[1:])), peaks
    states = [e.weights_gib + e.gradients_gib + e.optimizer_gib for e in est]
    assert all(b <= a + 1e-9 for a, b in zip(states, states[1:])), states


@pytest.mark.parametrize("model,plan", list(itertools.product(MODELS, PLANS)))
def test_recomputation_never_increases_activation_memory(model, plan):
    acts = [_est(model, H100, dict(plan, recompute=r)).memory.activations_gib for r in ("none", "selective", "full")]
    assert acts[0] >= acts[1] >= acts[2], acts


def test_hbm_starved_gpu_is_slower():
    plan = dict(num_gpus=8, tp=8, micro_batch=1, global_batch=8, seq_len=4096)
    m = get_model("llama3.1-8b")
    fast = estimate(m, H100, plan).step_time_s
    starved = estimate(m, apply_overrides(H100, ["gpu.hbm_bandwidth_gbps=300"]), plan)
    assert starved.step_time_s > 1.2 * fast
    assert starved.time.memory_bound_s > 5 * estimate(m, H100, plan).time.memory_bound_s


def test_fp8_uses_the_fp8_peak_and_is_refused_without_one():
    m = get_model("llama3.1-70b")
    plan = dict(num_gpus=64, tp=4, pp=4, micro_batch=1, global_batch=128, seq_len=8192)
    bf16 = estimate(m, H100, dict(plan, precision="bf16"))
    fp8 = estimate(m, H100, dict(plan, precision="fp8"))
    assert fp8.time.compute_s < 0.8 * bf16.time.compute_s
    with pytest.raises(ValueError, match="precision"):
        estimate(m, A100, dict(plan, precision="fp8"))


def test_interleaving_shrinks_the_bubble_and_grows_p2p():
    m = GPT3
    base = dict(num_gpus=512, tp=8, pp=8, micro_batch=1, global_batch=512, seq_len=2048)
    one = estimate(m, A100, dict(base, vpp=1))
    two = estimate(m, A100, dict(base, vpp=4))
    assert two.time.bubble_s == pytest.approx(one.time.bubble_s / 4, rel=0.05)
    assert two.time.pp_comm_s > one.time.pp_comm_s
    # 1F1B bubble fraction (p-1)/m for balanced stages.
    assert one.time.bubble_fraction == pytest.approx(7 / 64, rel=0.1)


def test_bad_plans_are_refused_with_the_rule():
    with pytest.raises(ValueError, match="num_gpus"):
        Plan(num_gpus=100, tp=8, pp=1, global_batch=64, seq_len=2048)
    with pytest.raises(ValueError, match="global_batch"):
        Plan(num_gpus=64, tp=8, pp=1, micro_batch=3, global_batch=64, seq_len=2048)
    with pytest.raises(ValueError, match="vpp"):
        Plan(num_gpus=64, tp=8, pp=1, vpp=2, global_batch=64, seq_len=2048)
    with pytest.raises(ValueError, match="seq_len"):
        Plan(num_gpus=64, tp=8, cp=4, global_batch=64, seq_len=2050)
    with pytest.raises(ValueError, match="tp"):
        estimate(GPT3, A100, dict(num_gpus=7, tp=7, global_batch=7, seq_len=2048))
    with pytest.raises(ValueError, match="pp"):
        estimate(GPT3, A100, dict(num_gpus=128, pp=128, global_batch=128, seq_len=2048))


def test_memory_infeasible_plan_is_reported_with_memory_as_binding():
    e = estimate(GPT3, A100, dict(num_gpus=8, tp=8, micro_batch=1, global_batch=8, seq_len=2048))
    assert not e.feasible and e.bottleneck == "memory"
    assert "memory" in e.reasons[0] and e.memory.peak_gib > e.memory.usable_gib


def test_vectorised_and_single_plan_evaluations_agree():
    from plan_search.planner.costmodel.evaluate import evaluate

    m = get_model("llama3.1-70b")
    plans = [Plan(**dict(p, seq_len=8192)) for p in PLANS]
    x = PlanArrays.from_plans(plans, m.num_layers)
    r = evaluate(m, H100, x)
    for i, p in enumerate(plans):
        assert r["step_s"][i] == pytest.approx(estimate(m, H100, p).step_time_s, rel=1e-12)
    assert np.all(r["step_s"] > 0)


def test_uneven_split_checks_the_middle_stages():
    """A 1T model split 1 + 18x7 + 1 over 20 stages: the middle stages hold ~27.5B parameters
    per GPU at tp2 (51 GiB of bf16 weights alone); the peak must be theirs, not the ends'."""
    m = get_model("megatron-gpt-1t")
    h200 = get_cluster("h200")
    plan = dict(num_gpus=40, tp=2, pp=20, zero=0, micro_batch=1, global_batch=3072, seq_len=2048,
                recompute="none", first_stage_layers=1, last_stage_layers=1)
    e = estimate(m, h200, plan)
    assert e.memory.worst_stage == "middle"
    per_layer = (12 * m.hidden_size**2 + 13 * m.hidden_size) / 2
    assert e.memory.weights_gib == pytest.approx(7 * per_layer * 2 / 2**30, rel=1e-3)
    assert not e.feasible
