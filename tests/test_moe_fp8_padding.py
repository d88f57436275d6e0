"""Transformer Engine's row padding around the grouped expert GEMMs under a low-precision recipe
(experts.FP8_PAD_BYTES, sources there), through ``plan_search.estimate`` with real numbers: the
``alltoall`` and ``allgather`` dispatchers leave each expert's rows unaligned and TE copies them in
and out; HybridEP (``flex``) pads in its dispatch; bf16 pads nothing."""

from __future__ import annotations

import pytest

import plan_search as ps
from plan_search.hardware.catalog import get_cluster
from plan_search.models.catalog import get_model
from plan_search.planner.costmodel import experts


def _est(**kw):
    base = dict(num_gpus=8, tp=1, pp=1, ep=8, global_batch=8, micro_batch=1, seq_len=4096,
                recompute="none", moe_imbalance=1.0, bf16_layers=0)
    return ps.estimate(get_model("qwen3-30b-a3b"), "b200", **{**base, **kw}, memory_headroom=0.0)


def test_fp8_padding_copies_every_routed_row_without_flex():
    """Qwen3-30B-A3B on 8 B200, 4,096 tokens per GPU, top-8: each of the 48 MoE layers routes
    32,768 rows of h = 2,048. Under FP8 the allgather dispatcher adds the pad and un-pad copies,
    8 B per row and hidden element forward and 8 B backward (51.5 GB over the step), at the GPU's
    achievable HBM rate; flex (HybridEP) does not, nor does bf16."""
    c = get_cluster("b200")
    rate = c.gpu.hbm_bandwidth_gbps * 1e9 * c.efficiency.hbm_eff
    nbytes = 48 * 4096 * 8 * 2048 * 2 * experts.FP8_PAD_BYTES
    assert nbytes == pytest.approx(51.54e9, rel=1e-3)
    fp8 = dict(precision="fp8-current")
    ag, flex = _est(moe_dispatcher="allgather", **fp8), _est(moe_dispatcher="flex", **fp8)
    assert ag.time.memory_bound_s - flex.time.memory_bound_s == pytest.approx(nbytes / rate, rel=1e-9)
    assert ag.time.compute_s == pytest.approx(flex.time.compute_s, rel=1e-12)
    ag16, flex16 = _est(moe_dispatcher="allgather"), _est(moe_dispatcher="flex")
    assert ag16.time.memory_bound_s == pytest.approx(flex16.time.memory_bound_s, rel=1e-12)
