"""GPT-OSS's YaRN rotary embedding priced as Megatron runs it, through ``plan_search.estimate`` and the
plan-estimate CLI with real numbers: Megatron-LM and Megatron-Bridge turn rope fusion off for YaRN
positions, so q and k go through Megatron-Core's unfused ``_apply_rotary_pos_emb_bshd``
(compute.UNFUSED_ROPE_FWD_BYTES / UNFUSED_ROPE_BWD_BYTES, sources there)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import plan_search as ps
from plan_search.cli.estimate import main as estimate_cli
from plan_search.hardware.catalog import get_cluster
from plan_search.models.catalog import get_model
from plan_search.models.hf import from_hf_config
from plan_search.models.spec import ModelSpec
from plan_search.planner.costmodel import compute

B200 = "b200"


def _est(model, **kw):
    base = dict(num_gpus=8, tp=1, pp=1, ep=8, global_batch=8, micro_batch=1, seq_len=4096, recompute="none",
                moe_imbalance=1.0, moe_dispatcher="alltoall", precision="bf16")
    return ps.estimate(model, B200, **{**base, **kw}, memory_headroom=0.0)


def _rate(gpu=B200):
    c = get_cluster(gpu)
    return c.gpu.hbm_bandwidth_gbps * 1e9 * c.efficiency.hbm_eff


def test_gpt_oss_unfused_yarn_rope_costs_its_eager_passes():
    """GPT-OSS-120B on 8 B200, one micro-batch of 4,096 tokens per GPU: each of the 36 layers rotates
    64 query and 8 key heads of 64 (4,608 elements per token). Unfused, RoPE moves 20 B more forward
    and 12 B more backward per element than the fused kernel: 36 x 4,096 x 4,608 x 32 B = 21.7 GB
    over the step at the GPU's achievable HBM rate. Fused (yarn_rope_fused: NeMo AutoModel's
    rope_fusion) it costs what a plain RoPE costs; no GEMM or attention time changes."""
    m = get_model("gpt-oss-120b")
    assert m.rope_scaling == "yarn"
    plain = m.model_copy(update={"rope_scaling": None})
    on, off, fused = _est(m), _est(plain), _est(m, yarn_rope_fused=True)
    elems = 36 * 4096 * (64 + 8) * 64
    nbytes = elems * (compute.UNFUSED_ROPE_FWD_BYTES + compute.UNFUSED_ROPE_BWD_BYTES)
    assert nbytes == pytest.approx(21.74e9, rel=1e-3)
    assert on.time.memory_bound_s - off.time.memory_bound_s == pytest.approx(nbytes / _rate(), rel=1e-9)
    assert on.time.compute_s == pytest.approx(off.time.compute_s, rel=1e-12)
    assert on.step_time_s > off.step_time_s
    assert fused.time.memory_bound_s == pytest.approx(off.time.memory_bound_s, rel=1e-12)
    assert fused.step_time_s == pytest.approx(off.step_time_s, rel=1e-12)


def test_tensor_parallelism_splits_the_heads_and_full_recompute_repeats_the_forward():
    """With tp 2 each GPU rotates half the heads (2,304 elements per token), over two micro-batches
    (global batch 8 on dp 4); full recomputation runs every layer's forward again, its 20 B per element
    included, once per micro-batch."""
    m = get_model("gpt-oss-120b")
    plain = m.model_copy(update={"rope_scaling": None})
    kw = dict(tp=2, ep=4, recompute="full", sequence_parallel=True)
    on, off = _est(m, **kw), _est(plain, **kw)
    elems = 2 * 36 * 4096 * (64 + 8) * 64 / 2
    assert on.time.memory_bound_s - off.time.memory_bound_s == pytest.approx(
        elems * (compute.UNFUSED_ROPE_FWD_BYTES + compute.UNFUSED_ROPE_BWD_BYTES) / _rate(), rel=1e-9)
    assert on.time.recompute_s - off.time.recompute_s == pytest.approx(
        elems * compute.UNFUSED_ROPE_FWD_BYTES / _rate(), rel=1e-9)


def test_mla_yarn_and_a_compiled_framework_add_nothing():
    """MLA rotates its rope heads in its own (YaRN-fused) path: DeepSeek-V2-Lite, YaRN in its config,
    costs the same with or without it. torch.compile (torchtitan) fuses the rotation: no extra bytes."""
    lite = get_model("deepseek-v2-lite")
    assert lite.rope_scaling == "yarn"
    kw = dict(num_gpus=8, tp=1, pp=1, ep=8, global_batch=8, micro_batch=1, seq_len=4096, moe_imbalance=1.0)
    a = ps.estimate(lite, B200, **kw, memory_headroom=0.0)
    b = ps.estimate(lite.model_copy(update={"rope_scaling": None}), B200, **kw, memory_headroom=0.0)
    assert a.step_time_s == pytest.approx(b.step_time_s, rel=1e-12)
    m = get_model("gpt-oss-20b")
    kw = dict(num_gpus=8, tp=1, pp=1, ep=8, zero=3, global_batch=8, micro_batch=1, seq_len=4096,
              moe_imbalance=1.0, recompute="none", framework="torchtitan")
    a = ps.estimate(m, "h100-sxm", **kw, memory_headroom=0.0)
    b = ps.estimate(m.model_copy(update={"rope_scaling": None}), "h100-sxm", **kw, memory_headroom=0.0)
    assert a.time.memory_bound_s == pytest.approx(b.time.memory_bound_s, rel=1e-12)


def test_hf_import_and_bad_input():
    """The HF import reads rope_scaling's rope_type (or the older type) yarn; other scalings are None;
    YaRN on a model without rotary positions is refused naming the field."""
    base = dict(model_type="gpt_oss", num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, intermediate_size=64, vocab_size=100,
                num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=128, rope_theta=150000)
    yarn = {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 64}
    assert from_hf_config({**base, "rope_scaling": yarn}, "tiny").rope_scaling == "yarn"
    assert from_hf_config({**base, "rope_scaling": {"type": "yarn", "factor": 4.0}}, "tiny").rope_scaling == "yarn"
    assert from_hf_config({**base, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "tiny").rope_scaling == "llama3"
    assert from_hf_config(base, "tiny").rope_scaling is None
    gpt3 = get_model("gpt-3-175b")
    assert gpt3.position == "learned"
    with pytest.raises(ValueError, match="rope_scaling: set only with rotary positions"):
        ModelSpec(**{**gpt3.model_dump(), "rope_scaling": "yarn"})


def test_megatron_refuses_a_fused_yarn_rope():
    """plan-estimate --framework megatron --yarn-rope-fused: Megatron-LM turns the fusion off for yarn
    positions, so the plan is refused with its rule, one line, exit 2."""
    args = ["--model", "gpt-oss-20b", "--gpu", "h100-sxm", "--num-gpus", "8", "--tp", "1", "--pp", "1",
            "--ep", "8", "--micro-batch", "1", "--global-batch", "8", "--seq-len", "4096",
            "--framework", "megatron", "--yarn-rope-fused"]
    r = CliRunner().invoke(estimate_cli, args, catch_exceptions=False)
    assert r.exit_code == 2 and r.output.startswith("error: megatron: megatron-yarn-rope-fused: "), r.output
    assert r.output.count("\n") == 1


def test_window_layers_cost_the_measured_per_row_time(monkeypatch):
    """GPT-OSS-120B's 18 window-128 layers on 8 B200, 4,096 tokens x 64 heads = 262,144 query rows per
    layer: cuDNN's measured 0.210 / 0.465 ms per 2 x 128 x 4,096 rows (compute.WINDOW_ROW_FWD_S / _BWD_S)
    where the window's FLOPs (126 keys per query, 2 x 126 x 64 heads x 128 per token) at the profile's
    attention rate price about a seventh of it. The compute time grows by the difference, forward and
    backward, for each local layer; the global layers keep their FLOP price."""
    m = get_model("gpt-oss-120b")
    assert m.num_local_attention_layers == 18 and m.attention_window == 128
    on = _est(m)
    monkeypatch.setattr(compute, "WINDOW_ROW_FWD_S", 0.0)
    monkeypatch.setattr(compute, "WINDOW_ROW_BWD_S", 0.0)
    off = _est(m)
    c = get_cluster(B200)
    rows = 4096 * 64
    span = 128 - 128 * 128 / (2 * 4096)
    priced = 2 * span * 64 * 128 * 4096 / (c.gpu.peak("bf16") * 1e12 * c.efficiency.attention_eff)
    fwd = rows * 0.210e-3 / (2 * 128 * 4096) - priced
    bwd = rows * 0.465e-3 / (2 * 128 * 4096) - 2.5 * priced
    assert fwd > 5 * priced / 6 and bwd > 0
    assert on.time.compute_s - off.time.compute_s == pytest.approx(18 * (fwd + bwd), rel=1e-9)
    assert on.time.memory_bound_s == pytest.approx(off.time.memory_bound_s, rel=1e-12)
