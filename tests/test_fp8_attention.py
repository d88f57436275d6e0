"""FP8 attention (issue 13: Megatron-Bridge's 26.06 recipes run Transformer Engine's FP8 dot-product
attention): Plan ``fp8_attention`` prices the attention core at NVIDIA's measured cuDNN FP8/BF16 ratio
on Blackwell (compute.FP8_SDPA_SPEEDUP), by the sequence length. Through ``plan_search.estimate``,
plan-estimate and the launch configurations, with real numbers."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import plan_search as ps
from cli_helpers import one_stderr_line
from plan_search.cli.estimate import main as estimate_main
from plan_search.planner.frameworks import emit

BASE = dict(num_gpus=8, global_batch=8, micro_batch=1, recompute="none", precision="mxfp8")


@pytest.mark.parametrize("seq,ratio", [(4096, 1.142), (8192, 1.195), (512, 0.874), (2 ** 20, 1.367)])
def test_fp8_attention_is_bf16_attention_at_the_measured_ratio(seq, ratio):
    """Llama-3-8B on 8 B200 (MXFP8): with fp8_attention the step is exactly the bf16-attention step of
    a GPU whose fused-attention efficiency is ``ratio`` times higher -- the mean of NVIDIA's B200,
    GB200 and GB300 measurements at that length (FP8 is slower at 512 tokens, held at the 128K value
    beyond it)."""
    kw = dict(BASE, seq_len=seq)
    on = ps.estimate("llama-3-8b", "b200", fp8_attention=True, **kw)
    eff = on.efficiency.attention_eff
    same = ps.estimate("llama-3-8b", "b200", sets=[f"efficiency.attention_eff={eff * ratio}"], **kw)
    assert on.step_time_s == pytest.approx(same.step_time_s, rel=1e-12)
    off = ps.estimate("llama-3-8b", "b200", **kw)
    assert (on.step_time_s < off.step_time_s) == (ratio > 1)


def test_fp8_attention_elsewhere_and_refusals():
    """Without a published FP8 attention measurement (H100) the step is the bf16-attention one; in a
    bf16 run the knob is one line naming it and the fix (exit 2); torchtitan refuses it with its rule."""
    kw = dict(BASE, seq_len=4096, precision="fp8")
    h100 = [ps.estimate("llama-3-8b", "h100-sxm", fp8_attention=v, **kw).step_time_s for v in (True, False)]
    assert h100[0] == h100[1]
    args = ["--model", "llama-3-8b", "--gpu", "b200", "--num-gpus", "8", "--fp8-attention", "on"]
    r = CliRunner().invoke(estimate_main, args)
    assert r.exit_code == 2
    line = one_stderr_line(r)
    assert "fp8_attention" in line and "precision bf16" in line and "mxfp8" in line
    r = CliRunner().invoke(estimate_main, args + ["--precision", "fp8", "--framework", "torchtitan", "--zero", "3"])
    assert r.exit_code == 2 and "torchtitan-fp8-attention" in one_stderr_line(r)


def test_megatron_flag_round_trip():
    """Megatron-LM's --fp8-dot-product-attention is emitted with the plan's knob and read back."""
    from plan_search.models.catalog import get_model

    p = ps.Plan(**BASE, seq_len=4096, fp8_attention=True)
    args = emit.to_megatron_args(p, get_model("llama-3-8b"))
    assert "--fp8-dot-product-attention" in args
    back = emit.from_megatron_args(args, num_gpus=8)
    assert back.fp8_attention is True and back.precision == "mxfp8"
    assert "--fp8-dot-product-attention" not in emit.to_megatron_args(ps.Plan(**BASE, seq_len=4096),
                                                                       get_model("llama-3-8b"))
