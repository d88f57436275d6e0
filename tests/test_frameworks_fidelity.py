"""Issue 12: what separates a framework's step time from Megatron's, from first principles --
torchtitan's eager element-wise passes, the 500 W H100 of its benchmark -- and the
leave-one-source-out machinery of bench/fidelity.py (held-out rows never reach a fit)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import plan_search as ps
from plan_search.hardware.catalog import get_cluster
from plan_search.hardware.profiles import power_limited_clock_ratio

ROOT = Path(__file__).resolve().parents[1]
LIMITED = "h100-96gb-500w"


def _fidelity():
    spec = importlib.util.spec_from_file_location("fidelity_bench", ROOT / "bench" / "fidelity.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_eager_is_slower_than_compiled_by_at_most_its_extra_memory_bound_time():
    # Llama 3.1 8B, FSDP on 8 GPUs, bf16: torchtitan 2024-12 benchmark Table 1's run
    kw = dict(num_gpus=8, zero=3, micro_batch=2, global_batch=16, seq_len=8192, recompute="none",
              precision="bf16")
    comp = ps.estimate("llama3.1-8b", LIMITED, framework="torchtitan", **kw)
    eager = ps.estimate("llama3.1-8b", LIMITED, framework="torchtitan", compiled=False, **kw)
    extra_mem = eager.time.memory_bound_s - comp.time.memory_bound_s
    assert extra_mem > 0
    # only the element-wise passes differ: the step grows by that memory-bound time, no more
    assert 0 < eager.step_time_s - comp.step_time_s <= extra_mem * (1 + 1e-9)
    assert eager.time.compute_s == pytest.approx(comp.time.compute_s)
    # and the eager share is what the benchmark measured: eager/compiled throughput 5,762/6,667 =
    # 0.864 (Table 1), predicted from the bytes counted in torchtitan's model code
    assert comp.step_time_s / eager.step_time_s == pytest.approx(5762 / 6667, abs=0.03)


def test_compiled_torchtitan_adds_only_gqa_copies_over_fused_kernels():
    kw = dict(num_gpus=8, zero=3, micro_batch=1, global_batch=8, seq_len=8192, recompute="none", precision="bf16")
    tt = ps.estimate("llama3.1-8b", LIMITED, framework="torchtitan", **kw)
    tt_eager = ps.estimate("llama3.1-8b", LIMITED, framework="torchtitan", compiled=False, **kw)
    # GELU/LayerNorm MHA model (no GQA, no RMSNorm/SwiGLU/RoPE): eager and compiled move the same bytes
    g = dict(num_gpus=8, zero=3, micro_batch=1, global_batch=8, seq_len=2048, recompute="none", precision="bf16")
    gpt_c = ps.estimate("gpt3-175b", LIMITED, framework="torchtitan", **dict(g, num_gpus=64, global_batch=64))
    gpt_e = ps.estimate("gpt3-175b", LIMITED, framework="torchtitan", compiled=False,
                        **dict(g, num_gpus=64, global_batch=64))
    assert tt_eager.time.memory_bound_s > 2 * tt.time.memory_bound_s
    assert gpt_e.time.memory_bound_s == pytest.approx(gpt_c.time.memory_bound_s)


@pytest.mark.parametrize("precision", ["bf16", "fp8", "fp8-current"])
@pytest.mark.parametrize("shape", [dict(tp=1, cp=1, seq_len=8192), dict(tp=8, cp=1, seq_len=8192),
                                   dict(tp=1, cp=4, seq_len=65536)])
def test_power_limited_gpu_is_never_faster(precision, shape):
    kw = dict(num_gpus=32, zero=3, micro_batch=1, global_batch=32 // shape["cp"], recompute="full",
              precision=precision, **shape)
    from plan_search.hardware.catalog import get_cluster
    from plan_search.hardware.profiles import for_framework

    # like with like: the same efficiency terms on both parts, so only the derated peaks differ
    # (torchtitan's fitted profile lives on the 500 W part; h100-sxm gets its family prior)
    sxm, lim = get_cluster("h100-sxm"), get_cluster(LIMITED)
    for eff in (sxm.efficiency, for_framework(lim, "torchtitan").efficiency):
        full_c, limited_c = (c.model_copy(update={"efficiency": eff}) for c in (sxm, lim))
        full = ps.estimate("llama3.1-8b", full_c, **kw)
        limited = ps.estimate("llama3.1-8b", limited_c, **kw)
        assert limited.step_time_s >= full.step_time_s
        assert limited.time.compute_s > full.time.compute_s  # the clocks, not only the HBM


def test_power_limit_derating_is_the_catalog_figure():
    assert power_limited_clock_ratio(700, 700) == 1.0 and power_limited_clock_ratio(800, 700) == 1.0
    r = power_limited_clock_ratio(500, 700)
    assert 0.85 < r < 0.9
    assert power_limited_clock_ratio(400, 700) < r  # a lower limit, a lower clock
    full, lim = get_cluster("h100-sxm").gpu, get_cluster(LIMITED).gpu
    for p, v in full.peak_tflops.items():
        assert lim.peak_tflops[p] == pytest.approx(v * r, rel=2e-3), p
    assert lim.tdp_w == 500 and lim.hbm_bandwidth_gbps < full.hbm_bandwidth_gbps
    assert lim.memory_gib > full.memory_gib


def test_torchtitan_rows_run_on_their_own_system_with_the_frameworks_defaults():
    from plan_search.planner.calibration import load_all_runs

    recs = [r for r in load_all_runs() if r.group == "torchtitan-2024-12"]
    assert len(recs) == 11 and {r.gpu for r in recs} == {LIMITED}
    for r in recs:
        for p in r.candidates:
            assert p.precision == "fp8-current"  # torchao dynamic (per-tensor) scaling
            assert p.reshard_after_forward == (p.pp == 1)
            if p.pp > 1:  # micro-batches default to the pipeline degree
                assert p.global_batch // p.dp // p.micro_batch == p.pp


def test_loso_refits_never_see_the_held_out_rows():
    fid = _fidelity()
    from plan_search.planner.calibration import load_all_runs

    recs = [r for r in load_all_runs() if r.profile in ("torchtitan", "deepspeed")]
    unit = "torchtitan-2024-12"
    test, preds = fid.loso_predict(recs, unit, iters=4)
    assert {p.record.index for p in preds} == {r.index for r in recs if r.group == unit}
    # the held-out rows' measurements do not move their predictions (they reached no fit) ...
    for r in test:
        r.measured_step_s *= 3.0
    fid._CACHE.clear()
    _, again = fid.loso_predict(recs, unit, iters=4)
    assert [p.predicted_step_s for p in again] == [p.predicted_step_s for p in preds]
    # ... while the in-sample fit does see them
    fits, saw = fid.fit_all(recs, iters=4)
    assert str(test[0].index) in saw[(LIMITED, "torchtitan")][1]
    # a held-out profile is its family prior: compiled kernels on the system's megatron fit
    eff = fid.cluster_of(test[0], fid.fit_all([r for r in recs if r.group != unit], iters=4,
                                              systems={LIMITED})[0]).efficiency
    assert eff.kernel_fusion == "compiled" and "family prior" in eff.source


def test_megatron_bridge_fp8_rows_run_the_perf_scripts_recipe():
    """Megatron-Bridge's performance scripts run per-tensor FP8 as current scaling (fp8_cs) with the
    recipe's bf16 first/last layers turned off from release r0.2.0 (container 25.11) on; the 25.09
    tables (r0.1.0, default --fp8_recipe ds) keep delayed scaling. The recipe reaches the price:
    current scaling's amax passes make the same plan slower than delayed scaling."""
    from plan_search.hardware.catalog import get_cluster
    from plan_search.planner.calibration import load_all_runs, predict

    recs = [r for r in load_all_runs() if r.group == "megatron-bridge"]
    assert len(recs) == 18
    for r in recs:
        said = f"{r.source} {r.notes}"
        precisions = {p.precision for p in r.candidates}
        if "25.09" in said:
            assert precisions == {"fp8"}, r.index
        elif "mxfp8" in precisions:
            assert precisions == {"mxfp8"}, r.index
        else:
            assert precisions == {"fp8-current"}, r.index
            assert all(p.bf16_layers == 0 for p in r.candidates), r.index
    r = next(r for r in recs if r.index == 70)  # Llama 3 8B, FP8-CS, 25.11
    plan = predict(r, get_cluster(r.gpu)).plan
    cs = ps.estimate(r.model, get_cluster(r.gpu), plan=plan).step_time_s
    assert cs == pytest.approx(predict(r, get_cluster(r.gpu)).predicted_step_s, rel=1e-9)
    delayed = ps.estimate(r.model, get_cluster(r.gpu), plan=plan.model_copy(update={"precision": "fp8"})).step_time_s
    assert delayed < cs < 1.05 * delayed  # the amax passes: memory-bound seconds, a few percent
