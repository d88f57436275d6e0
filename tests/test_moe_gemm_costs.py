"""Costs of the expert GEMMs that issue 13's fidelity work added, through ``plan_search.estimate``
with real numbers: the low-precision recipes' quantization of the routed rows (Transformer Engine's
grouped GEMMs quantize every routed row, ``k`` per token) and the grouped GEMMs' efficiency with the
token rows each local expert receives."""

from __future__ import annotations

import pytest

import plan_search as ps
from plan_search.hardware.catalog import get_cluster
from plan_search.models.catalog import get_model
from plan_search.planner.costmodel import compute, experts
from plan_search.models.io import InputError

B200 = "b200"


def _est(model, precision, **kw):
    base = dict(num_gpus=8, tp=1, pp=1, ep=8, global_batch=8, micro_batch=1, seq_len=4096, recompute="none",
                moe_imbalance=1.0, moe_dispatcher="alltoall", precision=precision, bf16_layers=0)
    return ps.estimate(model, B200, **{**base, **kw}, memory_headroom=0.0)


def test_mxfp8_quantizes_every_routed_row():
    """Qwen3-30B-A3B on 8 B200 (one micro-batch of 4,096 tokens per GPU, 48 MoE layers): going from
    top-4 to top-8 adds 4 x 4,096 routed rows per layer. In bf16 they cost their permutation, the
    dispatch and the activation; under MXFP8 each also has its fc1 input (h) and fc2 input (f_e)
    quantized forward and the fc2 / fc1 output gradients (h, 2 f_e) backward, at 2 + 2 x (1 + 1/32)
    bytes per element (read bf16, write the row-wise and column-wise MXFP8 copies with their scales):
    the difference of the two differences is exactly those bytes at the GPU's achievable HBM rate."""
    m8 = get_model("qwen3-30b-a3b")
    m4 = m8.model_copy(update={"experts_per_token": 4})
    # flex (HybridEP pads the rows in its dispatch): no Transformer Engine row padding under MXFP8
    # (experts.FP8_PAD_BYTES, tests/test_moe_fp8_padding.py), only the casts differ
    f = dict(moe_dispatcher="flex")
    d_fp8 = _est(m8, "mxfp8", **f).time.memory_bound_s - _est(m4, "mxfp8", **f).time.memory_bound_s
    d_bf16 = _est(m8, "bf16", **f).time.memory_bound_s - _est(m4, "bf16", **f).time.memory_bound_s
    h, fe, layers = m8.hidden_size, m8.expert_ffn_hidden_size, m8.num_layers
    per_elem = 2.0 + 2.0 * (1.0 + 1.0 / 32.0)
    assert compute.RECIPES[3]["cast_fwd"] == compute.RECIPES[3]["cast_bwd"] == per_elem
    extra_rows = 4096 * (8 - 4)
    cast_bytes = layers * extra_rows * per_elem * ((h + fe) + (h + 2 * fe))
    c = get_cluster(B200)
    rate = c.gpu.hbm_bandwidth_gbps * 1e9 * c.efficiency.hbm_eff
    assert d_fp8 - d_bf16 == pytest.approx(cast_bytes / rate, rel=1e-9)
    assert cast_bytes / rate == pytest.approx(3.195e-3, rel=1e-3)  # 48 x 16,384 rows x 26.0 kB / 6.4 TB/s


def test_grouped_gemm_slows_with_few_rows_per_expert():
    """Qwen3-30B-A3B, bf16, one micro-batch of 4,096 tokens per GPU: with ep 8 each GPU holds 16 of the
    128 experts and each receives 4,096 x 8 x 8 / 128 = 2,048 rows; without expert parallelism each
    GPU runs all 128 experts on 256 rows each -- the same FLOPs. The grouped GEMMs keep
    ``1 - exp(-rows / grouped_gemm_rows_scale)`` of their efficiency: switching the term off (scale 0)
    speeds up the compute by exactly the routed GEMMs' share of that factor."""
    c = get_cluster(B200)
    s = c.efficiency.grouped_gemm_rows_scale
    assert s > 0  # fitted (hardware/efficiency_profiles.yaml names the rows)
    m = get_model("qwen3-30b-a3b")
    # a flat dense-shape curve, so that only the rows term differs between the runs below
    flat = ["efficiency.gemm_dim_scale=0.001"]
    kw = dict(num_gpus=8, tp=1, pp=1, global_batch=8, micro_batch=1, seq_len=4096, recompute="none",
              moe_imbalance=1.0, moe_dispatcher="alltoall", precision="bf16", memory_headroom=0.0)
    for ep, rows in ((8, 2048), (1, 256)):
        on = ps.estimate(m, B200, ep=ep, sets=flat, **kw)
        off = ps.estimate(m, B200, ep=ep, sets=flat + ["efficiency.grouped_gemm_rows_scale=0"], **kw)
        h, fe = m.hidden_size, m.expert_ffn_hidden_size
        flops = 3 * m.num_layers * 2.0 * (4096 * 8) * (h * 2 * fe + fe * h)  # fwd + 2x bwd, fc1 + fc2
        rate = c.gpu.peak("bf16") * 1e12 * c.efficiency.gemm_eff_max * c.efficiency.grouped_gemm_eff
        routed_off = flops / rate
        keep = experts.rows_efficiency(rows, c)
        assert keep == pytest.approx(1.0 - 2.718281828459045 ** (-rows / s), rel=1e-9)
        assert on.time.compute_s - off.time.compute_s == pytest.approx(routed_off * (1.0 / keep - 1.0), rel=1e-6)
    # fewer rows per expert, slower: the ep 1 plan's routed GEMMs lose more than the ep 8 plan's
    assert experts.rows_efficiency(256, c) < experts.rows_efficiency(2048, c) < 1.0


def test_each_local_experts_gemm_adds_its_call_time():
    """Transformer Engine's GroupedLinear runs one cuBLAS GEMM per local expert (experts.GROUPED_GEMM_CALL_NOTE):
    each costs grouped_gemm_call_s on top of its FLOPs, 2 calls per local expert forward (fc1, fc2) and 4
    backward (data and weight gradients). Qwen3-30B-A3B on 8 GPUs, ep 8: 16 local experts, 48 MoE layers,
    8 micro-batches: 8 x 48 x 6 x 16 calls; ep 4 doubles the local experts and so the calls."""
    from plan_search.hardware.catalog import get_cluster

    c = get_cluster("h100-sxm")
    t = 40e-6

    def at(call_s, ep):
        cl = c.model_copy(update={"efficiency": c.efficiency.model_copy(update={"grouped_gemm_call_s": call_s})})
        return ps.estimate("qwen3-30b-a3b", cl, num_gpus=8, ep=ep, global_batch=64, seq_len=4096,
                           recompute="none", moe_imbalance=1.0).time
    base, on = at(0.0, 8), at(t, 8)
    assert on.compute_s - base.compute_s == pytest.approx(8 * 48 * 6 * 16 * t, rel=1e-6)
    assert at(t, 4).compute_s - at(0.0, 4).compute_s == pytest.approx(8 * 48 * 6 * 32 * t, rel=1e-6)
    assert on.ep_comm_s == pytest.approx(base.ep_comm_s, rel=1e-12)


def test_torchtitan_runs_the_experts_as_one_grouped_kernel():
    """torchtitan's MoE experts are one torch._grouped_mm per GEMM: its plans run moe_grouped_gemm fused
    (rules.MEMORY_KNOBS, the framework's only value), one call per GEMM where Megatron (Transformer Engine's
    GroupedLinear) pays grouped_gemm_call_s for each local expert. The same plan on the same GPU and profile
    differs by exactly the calls saved: 8 micro-batches x 48 layers x 6 GEMMs x (16 - 1) local experts."""
    kw = dict(num_gpus=8, ep=8, global_batch=64, seq_len=4096, recompute="none", moe_imbalance=1.0, zero=3)
    tt = ps.estimate("qwen3-30b-a3b", "h100-sxm", framework="torchtitan", **kw)
    assert tt.plan.moe_grouped_gemm == "fused"
    call_s = tt.efficiency.grouped_gemm_call_s
    assert call_s > 1e-6
    c = get_cluster("h100-sxm")
    as_tt = c.model_copy(update={"efficiency": tt.efficiency})
    loop = ps.estimate("qwen3-30b-a3b", as_tt, moe_grouped_gemm="loop", **kw).time.compute_s
    fused = ps.estimate("qwen3-30b-a3b", as_tt, moe_grouped_gemm="fused", **kw).time.compute_s
    assert fused == pytest.approx(tt.time.compute_s, rel=1e-12)
    assert loop - fused == pytest.approx(8 * 48 * 6 * 15 * call_s, rel=1e-6)
    with pytest.raises(InputError, match=r"torchtitan-moe-grouped-gemm.*torch\._grouped_mm"):
        ps.estimate("qwen3-30b-a3b", "h100-sxm", framework="torchtitan", moe_grouped_gemm="loop", **kw)


def test_fused_grouped_mlp_is_one_call_per_gemm_and_megatron_emits_it():
    """moe_grouped_gemm fused (Transformer Engine's CuTe-DSL fused grouped MLP, rules._TE_FUSED_MLP) saves
    every local expert's call but one: Qwen3-30B-A3B on 8 B200 at MXFP8, ep 8 (16 local experts), 8
    micro-batches of 48 MoE layers and 6 GEMMs each. Megatron-LM gets the op fuser and the GLU interleave
    it needs, and reads them back as the same knob; bf16 (no block-scaled recipe) is refused in a line
    that names the knob, and NeMo 2.7.3's Megatron-Core (0.16.1, no op fuser) breaks its own rule."""
    kw = dict(num_gpus=8, ep=8, global_batch=64, seq_len=4096, recompute="none", moe_imbalance=1.0,
              precision="mxfp8", framework="megatron")
    loop = ps.estimate("qwen3-30b-a3b", "b200", **kw)
    fused = ps.estimate("qwen3-30b-a3b", "b200", moe_grouped_gemm="fused", **kw)
    call_s = loop.efficiency.grouped_gemm_call_s
    assert loop.time.compute_s - fused.time.compute_s == pytest.approx(8 * 48 * 6 * 15 * call_s, rel=1e-6)
    assert fused.time.ep_comm_s == pytest.approx(loop.time.ep_comm_s, rel=1e-12)
    from plan_search.planner.frameworks import emit

    args = emit.to_megatron_args(fused.plan, get_model("qwen3-30b-a3b"))
    i = args.index("--moe-mlp-glu-interleave-size")
    assert "--use-transformer-engine-op-fuser" in args and args[i + 1] == "32"
    assert "--use-transformer-engine-op-fuser" not in emit.to_megatron_args(loop.plan, get_model("qwen3-30b-a3b"))
    with pytest.raises(InputError, match=r"moe_grouped_gemm fused with precision bf16"):
        ps.estimate("qwen3-30b-a3b", "b200", **{**kw, "precision": "bf16"}, moe_grouped_gemm="fused")
    assert emit.from_megatron_args(args, 8).moe_grouped_gemm == "fused"
    from plan_search.planner.frameworks import rules

    broken = [v.rule.id for v in rules.check("nemo", fused.plan, get_model("qwen3-30b-a3b"))]
    assert "nemo-moe-grouped-gemm" in broken and "megatron-moe-fused-grouped-mlp" not in broken
