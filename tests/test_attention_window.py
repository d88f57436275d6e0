"""Sliding-window / chunked attention and MLA head widths in the step time and MFU (issue 13).

The cost model prices the attention products with :mod:`models.counting` (one formula): a fused
(FlashAttention) kernel does the causal span, local layers only their window; an unfused kernel
computes and stores the whole ``s x s`` square on every layer (the window is a mask). Checked end to
end through ``plan_search.estimate`` on GPT-OSS-120B (sliding window 128 on every other layer),
Llama 4 Scout (chunks of 8192 on three layers of four), DeepSeek-V3 (MLA: ``A V`` at
``v_head_dim``) and full-attention models whose figures must not move.
"""

from __future__ import annotations

import pytest

import plan_search as ps
from plan_search.hardware.catalog import get_cluster
from plan_search.models import counting
from plan_search.models.catalog import get_model
from plan_search.models.spec import ModelSpec
from plan_search.planner.costmodel import compute
from plan_search.planner.costmodel.compute import FA_BACKWARD_RATIO
from plan_search.planner.costmodel.plan import CUDNN_SDPA_CODES

H100 = get_cluster("h100-sxm")
#: the fused attention's rate on H100 at the Plan's default cuDNN release (compute.cudnn_sdpa_speedup)
FA_EFF = H100.efficiency.attention_eff * compute.CUDNN_SDPA_SPEEDUP[CUDNN_SDPA_CODES[
    ps.Plan.model_fields["cudnn_sdpa"].default]]
A100 = get_cluster("a100-80gb")


def without_window(m: ModelSpec) -> ModelSpec:
    """The same model with every layer global (validated like a user's spec)."""
    d = m.model_dump()
    d.update(attention_window=None, global_attention_every=0, name=m.name + "-full")
    return ModelSpec.model_validate(d)


# one pipeline stage, no recomputation: the step's compute is every layer's forward + backward
OSS_PLAN = dict(num_gpus=8, tp=1, pp=1, ep=8, global_batch=64, seq_len=4096, recompute="none")


def _attention_seconds_per_step(m: ModelSpec, plan: dict, cluster) -> float:
    """Seconds one GPU spends in FlashAttention over a step, from the counting alone."""
    tokens_per_gpu = plan["global_batch"] * plan["seq_len"] / (plan["num_gpus"] // (plan.get("tp", 1) * plan.get("pp", 1)))
    flops = tokens_per_gpu * counting.attention_flops_per_token(m, plan["seq_len"], causal=True) / plan.get("tp", 1)
    release = compute.CUDNN_SDPA_SPEEDUP[CUDNN_SDPA_CODES[ps.Plan.model_fields["cudnn_sdpa"].default]]
    rate = cluster.gpu.peak("bf16") * 1e12 * cluster.efficiency.attention_eff * (
        release if cluster.gpu.architecture == "hopper" else 1.0)
    return flops * (1.0 + FA_BACKWARD_RATIO) / rate


def test_gpt_oss_window_saves_exactly_the_counted_attention_flops():
    win = get_model("gpt-oss-120b")
    full = without_window(win)
    assert win.num_local_attention_layers == 18 and win.attention_window == 128
    e_win = ps.estimate(win, "h100", **OSS_PLAN)
    e_full = ps.estimate(full, "h100", **OSS_PLAN)
    expected = _attention_seconds_per_step(full, OSS_PLAN, H100) - _attention_seconds_per_step(win, OSS_PLAN, H100)
    # the counting: 18 of 36 layers see w - w^2/(2s) = 126 keys instead of s/2 = 2048
    s, w = 4096, 128
    share = 1 - (18 * (w - w * w / (2 * s)) + 18 * s / 2) / (36 * s / 2)
    assert counting.attention_flops_per_token(win, s, True) == pytest.approx(
        (1 - share) * counting.attention_flops_per_token(full, s, True))
    assert share == pytest.approx(0.46924, abs=1e-5)
    # a window layer's fused kernel takes at least cuDNN's measured time per query row and head
    # (compute.WINDOW_ROW_FWD_S / _BWD_S, NVIDIA's measurement of this very layer): of the counted saving,
    # each of the 18 local layers gives that much back, per micro-batch (64 sequences over dp 8)
    rows, mbs = 4096 * 64, 8
    local = rows / 64 * counting.attention_products_flops_per_token(win, w - w * w / (2 * s)) / (
        H100.gpu.peak("bf16") * 1e12 * FA_EFF)
    floor = 18 * mbs * (max(rows * compute.WINDOW_ROW_FWD_S - local, 0.0)
                        + max(rows * compute.WINDOW_ROW_BWD_S - FA_BACKWARD_RATIO * local, 0.0))
    assert 0 < floor < expected / 4
    expected -= floor
    d_compute = e_full.time.compute_s - e_win.time.compute_s
    assert d_compute == pytest.approx(expected, rel=1e-9)
    assert e_full.step_time_s - e_win.step_time_s == pytest.approx(expected, rel=1e-6)
    # the attention is a real part of this step: the window saves a few per cent of it (5.3% with the
    # 2026-12-01 H100 efficiencies)
    assert 0.02 < (e_full.step_time_s - e_win.step_time_s) / e_full.step_time_s < 0.10
    # everything else is the same plan
    for k in ("memory_bound_s", "ep_comm_s", "optimizer_s", "overhead_s"):
        assert getattr(e_win.time, k) == pytest.approx(getattr(e_full.time, k), rel=1e-12)
    assert e_win.memory.peak_gib == pytest.approx(e_full.memory.peak_gib, rel=1e-12)


def test_model_flops_count_the_window():
    """MFU's numerator is counting's training FLOPs (causal, local layers at their window); the
    full-attention MFU counts the full square (issue 23)."""
    for name in ("gpt-oss-120b", "llama4-scout"):
        m = get_model(name)
        plan = dict(OSS_PLAN, seq_len=32768 if name == "llama4-scout" else 4096)
        e = ps.estimate(m, "h100", **plan)
        model_flops = e.model_tflops_per_gpu * 1e12 * e.step_time_s * plan["num_gpus"]
        assert model_flops == pytest.approx(
            counting.training_flops_per_iteration(m, plan["global_batch"], plan["seq_len"], causal=True), rel=1e-9)
        full = counting.training_flops_per_iteration(m, plan["global_batch"], plan["seq_len"], causal=False)
        assert e.mfu_full_attention / e.mfu == pytest.approx(full / model_flops, rel=1e-9)


def test_unfused_attention_pays_the_full_square_on_windowed_layers():
    """Without FlashAttention the window is a mask: time and stored scores are the global layer's."""
    win = get_model("gpt-oss-120b")
    full = without_window(win)
    plan = dict(OSS_PLAN, flash_attention=False)
    e_win, e_full = ps.estimate(win, "h100", **plan), ps.estimate(full, "h100", **plan)
    assert e_win.step_time_s == pytest.approx(e_full.step_time_s, rel=1e-12)
    assert e_win.memory.activations_gib == pytest.approx(e_full.memory.activations_gib, rel=1e-12)
    # and the scores are stored: much more than with FlashAttention
    e_fa = ps.estimate(win, "h100", **OSS_PLAN)
    assert e_win.memory.activations_gib > 2 * e_fa.memory.activations_gib
    # the MFU still counts only the window (the model's FLOPs, not the kernel's)
    assert e_win.mfu < e_full.mfu


def test_chunked_attention_llama4_scout():
    """Chunks of 8192 on 3 of 4 layers at 32K tokens: the local layers do a quarter of the keys."""
    m = get_model("llama4-scout")
    full = without_window(m)
    plan = dict(num_gpus=8, tp=1, pp=1, ep=8, global_batch=16, seq_len=32768, recompute="full")
    e_win, e_full = ps.estimate(m, "h100", **plan), ps.estimate(full, "h100", **plan)
    # full recomputation redoes one forward: 1 + 2.5 + 1 forward-equivalents of attention
    tokens = 16 * 32768 / 8
    d_flops = tokens * (counting.attention_flops_per_token(full, 32768, True)
                        - counting.attention_flops_per_token(m, 32768, True))
    rate = H100.gpu.peak("bf16") * 1e12 * FA_EFF
    d_compute = (e_full.time.compute_s - e_win.time.compute_s) + (e_full.time.recompute_s - e_win.time.recompute_s)
    assert d_compute == pytest.approx(d_flops * (2.0 + FA_BACKWARD_RATIO) / rate, rel=1e-9)
    assert counting.attention_flops_per_token(m, 32768, True) / counting.attention_flops_per_token(
        full, 32768, True) == pytest.approx((3 * 4096 + 16384) / (4 * 16384))


def test_mla_attention_core_runs_at_v_head_dim():
    """DeepSeek-V3: QK^T at head_dim 192, A V at v_head_dim 128 -> 2 * span * a * 320 per token."""
    m = get_model("deepseek-v3")
    assert (m.head_dim, m.v_head_dim, m.num_heads) == (192, 128, 128)
    assert counting.attention_flops_per_token(m, 4096, causal=True) == pytest.approx(61 * 4096 * 128 * 320)
    plan = dict(num_gpus=1024, tp=2, pp=16, ep=64, global_batch=4096, seq_len=4096, recompute="full")
    e = ps.estimate(m, "h100", **plan)
    model_flops = e.model_tflops_per_gpu * 1e12 * e.step_time_s * plan["num_gpus"]
    # the MFU numerator carries the MTP depth as Megatron's does (training.py num_floating_point_operations)
    assert model_flops == pytest.approx(counting.training_flops_per_iteration(m, 4096, 4096, causal=True), rel=1e-9)
    assert model_flops > counting.training_flops_per_iteration(m, 4096, 4096, causal=True, mtp=False)


def get_gpu_peak(gpu: str) -> float:
    from plan_search.hardware.catalog import get_cluster

    return get_cluster(gpu).gpu.peak("bf16")


@pytest.mark.parametrize("name,gpu,plan", [
    ("gpt3-175b", "a100", dict(num_gpus=1024, tp=8, pp=8)),
    ("llama3.1-70b", "h100", dict(num_gpus=64, tp=8, pp=4, vpp=5, seq_len=8192, global_batch=128)),
    ("llama3.1-70b", "h100", dict(num_gpus=64, tp=8, pp=4, seq_len=4096, global_batch=128,
                                  flash_attention=False, recompute="full")),
    ("qwen3-30b-a3b", "h100", dict(num_gpus=64, tp=2, pp=2, ep=8, global_batch=256)),
])
def test_full_attention_models_unchanged(name, gpu, plan):
    """Full attention keeps the counts the model had before (git 2d26395): the attention products
    ``4 s a hd`` per token and layer (FlashAttention: the causal half), the same step time as with a
    window covering the sequence, and MFU's numerator Narayanan's count. (The step times measured
    before and after the change were identical to the last digit: gpt3-175b 20.31544999937781 s,
    llama3.1-70b 19.413264976042843 s and 14.107928668426796 s, qwen3-30b-a3b 2.392602785876913 s
    with the 2026-12-01 efficiencies; FLOPs are pinned here, as efficiencies get refitted.)"""
    from plan_search.planner.costmodel import compute
    from plan_search.planner.costmodel.arrays import PlanArrays

    m = get_model(name)
    e = ps.estimate(name, gpu, **plan)
    p = e.plan
    x = PlanArrays.from_plans([p], m.num_layers)
    s, T = p.seq_len, p.micro_batch * p.seq_len / p.cp
    old = 4.0 * T * s * m.num_heads * m.head_dim / p.tp * (0.5 if p.flash_attention else 1.0)
    assert compute.attention_fwd_flops(m, x)[0] == pytest.approx(old, rel=1e-12)
    old_model_flops = 3.0 * p.global_batch * s * (counting.layer_gemm_flops_per_token(m) + counting.logits_flops_per_token(m)
                                                 + 4.0 * s * m.num_heads * m.head_dim * m.num_layers)
    # MFU counts attention causal since issue 23 (half the products), the full-attention MFU Narayanan's count
    assert e.mfu_full_attention * e.step_time_s * p.num_gpus == pytest.approx(
        old_model_flops / (get_gpu_peak(gpu) * 1e12), rel=1e-9)
    causal_flops = old_model_flops - 3.0 * p.global_batch * s * 2.0 * s * m.num_heads * m.head_dim * m.num_layers
    assert e.model_tflops_per_gpu * 1e12 * e.step_time_s * p.num_gpus == pytest.approx(causal_flops, rel=1e-9)
    # and a window covering the sequence is the same as no window
    d = m.model_dump()
    d.update(attention_window=p.seq_len, global_attention_every=2)
    same = ps.estimate(ModelSpec.model_validate(d), gpu, **plan)
    assert same.step_time_s == pytest.approx(e.step_time_s, rel=1e-12)
    assert same.mfu == pytest.approx(e.mfu, rel=1e-12)
