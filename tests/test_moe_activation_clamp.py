"""GPT-OSS's clamped gated activation (``activation_clamp``, HF ``swiglu_limit``) and its experts'
eager down-projection bias through ``plan_search.estimate`` with real numbers: Megatron-Core clamps in eager passes before its fused
activation (experts.CLAMP_FWD_BYTES / CLAMP_BWD_BYTES / CLAMP_SAVED_BYTES, sources there), NeMo
AutoModel's DeepEP experts clamp inside the compiled activation (``act_clamp_fused``)."""

from __future__ import annotations

import pytest

import plan_search as ps
from plan_search.hardware.catalog import get_cluster
from plan_search.models.catalog import get_model
from plan_search.models.hf import from_hf_config
from plan_search.models.io import InputError
from plan_search.models.spec import ModelSpec
from plan_search.planner.costmodel import experts

B200 = "b200"
GIB = 1024 ** 3


def _est(model, **kw):
    base = dict(num_gpus=8, tp=1, pp=1, ep=8, global_batch=8, micro_batch=1, seq_len=4096, recompute="none",
                moe_imbalance=1.0, moe_dispatcher="alltoall", precision="bf16")
    return ps.estimate(model, B200, **{**base, **kw}, memory_headroom=0.0)


def test_gpt_oss_clamp_costs_its_eager_passes():
    """GPT-OSS-120B on 8 B200, one micro-batch of 4,096 tokens per GPU, balanced top-4: each of the
    36 MoE layers routes 16,384 rows of f_e = 2,880. The clamp adds 16 B forward and 20 B backward
    per row and column (36 B: 61.2 GB over the step) at the GPU's achievable HBM rate, and keeps
    the 4 B of the fc1 output per row and column (6.33 GiB) when moe_act is not recomputed.
    Fused (NeMo AutoModel's DeepEP path) it costs what no clamp costs."""
    m = get_model("gpt-oss-120b")
    assert m.activation_clamp == 7.0
    plain = m.model_copy(update={"activation_clamp": None})
    on, off, fused = _est(m), _est(plain), _est(m, act_clamp_fused=True)
    c = get_cluster(B200)
    rate = c.gpu.hbm_bandwidth_gbps * 1e9 * c.efficiency.hbm_eff
    layers, rows, fe = 36, 4096 * 4, 2880
    nbytes = layers * rows * fe * (experts.CLAMP_FWD_BYTES + experts.CLAMP_BWD_BYTES)
    assert nbytes == pytest.approx(61.15e9, rel=1e-3)
    assert on.time.memory_bound_s - off.time.memory_bound_s == pytest.approx(nbytes / rate, rel=1e-9)
    assert on.time.compute_s == pytest.approx(off.time.compute_s, rel=1e-12)
    assert fused.time.memory_bound_s == pytest.approx(off.time.memory_bound_s, rel=1e-12)
    saved = layers * rows * fe * experts.CLAMP_SAVED_BYTES / GIB
    assert saved == pytest.approx(6.328, rel=1e-3)
    assert on.memory.activations_gib - off.memory.activations_gib == pytest.approx(saved, rel=1e-6)
    assert fused.memory.activations_gib == pytest.approx(off.memory.activations_gib, rel=1e-12)


def test_selective_recompute_reruns_the_forward_clamp_and_keeps_nothing():
    """Under selective recomputation (moe_act in the MoE set) the activation's inputs are not kept,
    and the backward re-runs the forward clamp passes (16 B per row and column) once more."""
    m = get_model("gpt-oss-120b")
    plain = m.model_copy(update={"activation_clamp": None})
    on, off = _est(m, recompute="selective"), _est(plain, recompute="selective")
    c = get_cluster(B200)
    rate = c.gpu.hbm_bandwidth_gbps * 1e9 * c.efficiency.hbm_eff
    rows_fe = 36 * 4096 * 4 * 2880
    assert on.time.recompute_s - off.time.recompute_s == pytest.approx(
        rows_fe * experts.CLAMP_FWD_BYTES / rate, rel=1e-9)
    assert on.memory.activations_gib == pytest.approx(off.memory.activations_gib, rel=1e-12)


def test_hf_swiglu_limit_and_bad_input():
    """The HF import reads ``swiglu_limit``; a clamp on an ungated MLP or a non-positive limit is
    refused with one line naming the field."""
    base = dict(model_type="gpt_oss", num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, intermediate_size=64, vocab_size=100,
                num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=128)
    assert from_hf_config({**base, "swiglu_limit": 7.0}, "tiny").activation_clamp == 7.0
    assert from_hf_config(base, "tiny").activation_clamp is None
    with pytest.raises(InputError, match="swiglu_limit") as e:
        from_hf_config({**base, "swiglu_limit": -1}, "tiny")
    assert "\n" not in str(e.value)
    gpt3 = get_model("gpt-3-175b")
    assert gpt3.activation == "gelu"
    with pytest.raises(ValueError, match="activation_clamp: set only with a gated activation"):
        ModelSpec(**{**gpt3.model_dump(), "activation_clamp": 7.0})


def test_expert_bias_costs_its_eager_passes():
    """GPT-OSS-120B as above: Megatron-Core adds the routed experts' fc2 bias in eager passes,
    12 B forward and 16 B backward per routed row and hidden column (h = 2,880): 36 layers x
    16,384 rows x 2,880 x 28 B = 47.6 GB at the achievable HBM rate. A MoE without expert biases
    (Qwen3-30B-A3B) pays nothing."""
    m = get_model("gpt-oss-120b")
    nobias = m.model_copy(update={"bias": False})
    on, off = _est(m), _est(nobias)
    c = get_cluster(B200)
    rate = c.gpu.hbm_bandwidth_gbps * 1e9 * c.efficiency.hbm_eff
    nbytes = 36 * 4096 * 4 * 2880 * (experts.EXPERT_BIAS_FWD_BYTES + experts.EXPERT_BIAS_BWD_BYTES)
    assert nbytes == pytest.approx(47.56e9, rel=1e-3)
    assert on.time.memory_bound_s - off.time.memory_bound_s == pytest.approx(nbytes / rate, rel=1e-9)
    q = get_model("qwen3-30b-a3b")
    assert not q.bias and experts.expert_bias_bytes(q, 1000.0) == (0.0, 0.0)
