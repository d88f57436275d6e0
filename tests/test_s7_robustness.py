"""Issue 13 leftovers around the mixture-of-experts knobs, met as a careless user meets them, through the CLIs
and the public API (each case fails on the code before its fix):

- ``moe_routing round_robin`` with a ``moe_imbalance`` other than 1: round-robin routing is balanced by
  construction, so the imbalance was silently ignored; now one line naming both fields and the fix, from the
  one rule (``plan.routing_imbalance_problem``) that Plan (plan-estimate, ``plan_search.estimate``) and the
  search's knobs (plan-search, requests, sweeps) both give. A round-robin plan says the imbalance it prices (1).
- ``plan-search --framework megatron --moe-grouped-gemm fused`` without an MXFP8/NVFP4 recipe on Blackwell ran
  its whole time limit and ended infeasible (exit 3); now refused up front with the rule, as plan-estimate
  refuses it (``rules.refuse_up_front``).
"""

from __future__ import annotations

import pytest
import yaml
from click.testing import CliRunner

import plan_search as ps
from cli_helpers import one_stderr_line
from plan_search.cli.estimate import main as estimate_main
from plan_search.cli.search import main as search_main
from plan_search.cli.sweep import main as sweep_main
from plan_search.models.io import InputError

H100 = "h100-sxm"
# NeMo AutoModel's Qwen3-30B-A3B benchmark shape (as tests/test_automodel_pricing.py)
QWEN = dict(num_gpus=8, ep=8, global_batch=512, seq_len=4096, micro_batch=4, zero=3, recompute="full",
            moe_dispatcher="flex")
QWEN_ARGS = ["--model", "qwen3-30b-a3b", "--gpu", H100, "--num-gpus", "8", "--ep", "8", "--global-batch", "512",
             "--seq-len", "4096", "--micro-batch", "4", "--zero", "3", "--recompute", "full",
             "--moe-dispatcher", "flex"]
RR_WORDS = ("moe_imbalance: 1.2 with moe_routing round_robin, which is balanced by construction (every expert the "
            "same rows, so the imbalance would be ignored); drop moe_imbalance (or set it to 1), or use moe_routing "
            "topk")


def _refused(result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output)
    return one_stderr_line(result)


# ------------------------------------------------------------------ round-robin routing and moe_imbalance


def test_round_robin_with_an_imbalance_is_one_line_in_both_clis():
    r = CliRunner().invoke(estimate_main, QWEN_ARGS + ["--moe-routing", "round_robin", "--moe-imbalance", "1.2"])
    assert _refused(r) == f"error: {RR_WORDS}"
    r = CliRunner().invoke(search_main, ["--model", "qwen3-30b-a3b", "--gpu", H100, "--gpus", "8",
                                         "--moe-routing", "round_robin", "--moe-imbalance", "1.2"])
    assert _refused(r) == f"error: {RR_WORDS}"
    # a set crossing round_robin with an imbalance is the same refusal (the crossing would ignore it)
    r = CliRunner().invoke(search_main, ["--model", "qwen3-30b-a3b", "--gpu", H100, "--gpus", "8",
                                         "--moe-routing", "topk,round_robin", "--moe-imbalance", "1,1.2"])
    assert _refused(r) == f"error: {RR_WORDS}"


def test_round_robin_with_an_imbalance_is_refused_by_the_api_requests_and_sweeps(tmp_path):
    with pytest.raises(InputError, match=r"^plan: moe_imbalance: 1\.2 with moe_routing round_robin"):
        ps.estimate("qwen3-30b-a3b", H100, moe_routing="round_robin", moe_imbalance=1.2, **QWEN)
    with pytest.raises(InputError, match=r"moe_imbalance: 1\.2 with moe_routing round_robin.*moe_routing topk$"):
        ps.search(model="qwen3-30b-a3b", gpu=H100, gpus=[8], knobs={"moe_routing": "round_robin",
                                                                     "moe_imbalance": 1.2})
    with pytest.raises(ValueError, match="moe_imbalance: 1.2 with moe_routing round_robin"):
        ps.Plan(moe_routing="round_robin", moe_imbalance=1.2, **QWEN)
    sweep = tmp_path / "rr.yaml"
    sweep.write_text(yaml.safe_dump({"base": {"model": "qwen3-30b-a3b", "gpu": H100, "gpus": [8],
                                              "knobs": {"moe_routing": "round_robin"}},
                                     "sweep": {"knobs.moe_imbalance": [1.0, 1.2]}}))
    r = CliRunner().invoke(sweep_main, [str(sweep), "-o", str(tmp_path / "rr.csv"), "--workers", "1", "-q"])
    line = _refused(r)
    assert "moe_imbalance: 1.2 with moe_routing round_robin" in line, line
    assert not (tmp_path / "rr.csv").exists()


def test_a_round_robin_plan_says_the_imbalance_it_prices():
    """Without moe_imbalance a round-robin plan carries 1 (what experts.py prices), so its dump rebuilds (the
    framework's normalisation, a saved front) and an explicit 1 prices the same step."""
    est = ps.estimate("qwen3-30b-a3b", H100, moe_routing="round_robin", **QWEN)
    assert est.plan.moe_imbalance == 1.0 and "moe_imbalance" not in est.plan.model_fields_set
    assert ps.Plan(**est.plan.model_dump()) == est.plan
    one = ps.estimate("qwen3-30b-a3b", H100, moe_routing="round_robin", moe_imbalance=1.0, **QWEN)
    assert one.step_time_s == est.step_time_s
    tt = ps.estimate("qwen3-30b-a3b", H100, moe_routing="round_robin", framework="torchtitan", **QWEN)
    assert tt.plan.moe_imbalance == 1.0 and tt.step_time_s > 0
    # topk keeps its default imbalance, and it still costs time there
    topk = ps.estimate("qwen3-30b-a3b", H100, **QWEN)
    assert topk.plan.moe_imbalance == 1.1
    assert ps.estimate("qwen3-30b-a3b", H100, moe_imbalance=1.0, **QWEN).step_time_s < topk.step_time_s
    res = ps.search(model="qwen3-30b-a3b", gpu=H100, gpus=[16], framework="torchtitan",
                    knobs={"moe_routing": "round_robin"})
    assert res.front and {(p.plan.moe_routing, p.plan.moe_imbalance) for p in res.front} == {("round_robin", 1.0)}


# ------------------------------------------------------------------ megatron's fused grouped MLP, up front


FUSED_RULE = ("error: megatron: megatron-moe-fused-grouped-mlp: the fused grouped MLP (moe_grouped_gemm fused) is "
              "Transformer Engine's CuTe-DSL kernel: an MXFP8 or NVFP4 recipe on Blackwell (sm100), etp 1 and a "
              "gated SiLU or quick-GELU expert MLP ")


@pytest.mark.parametrize("extra, detail", [
    ([], "(moe_grouped_gemm fused with precision bf16 (use mxfp8 or nvfp4, or moe_grouped_gemm loop))"),
    (["--precision", "mxfp8", "--etp", "2"], "(moe_grouped_gemm fused with etp 2 (use etp 1, or moe_grouped_gemm "
                                             "loop))"),
])
def test_megatron_fused_grouped_mlp_is_refused_before_the_search(extra, detail):
    args = ["--model", "qwen3-30b-a3b", "--gpu", "b200", "--framework", "megatron", "--moe-grouped-gemm", "fused"]
    r = CliRunner().invoke(search_main, args + extra)  # was: the whole time limit, then 'infeasible', exit 3
    assert _refused(r) == FUSED_RULE + detail
    r = CliRunner().invoke(estimate_main, args + ["--num-gpus", "8", "--ep", "4"] + extra)
    assert _refused(r) == FUSED_RULE + detail


def test_fused_grouped_mlp_refusal_through_the_api_and_what_still_searches():
    with pytest.raises(InputError, match="^megatron: megatron-moe-fused-grouped-mlp: .* on H100-SXM5-80GB"):
        ps.search(model="qwen3-30b-a3b", gpu=H100, framework="megatron",
                  knobs={"moe_grouped_gemm": "fused", "precision": "mxfp8"})
    # one GPU type or recipe that runs it is enough: the search filters the rest plan by plan
    res = ps.search(model="qwen3-30b-a3b", gpu="b200", gpus=[8], framework="megatron",
                    knobs={"moe_grouped_gemm": "fused", "precision": ["bf16", "mxfp8"]})
    assert res.front and {(p.plan.moe_grouped_gemm, p.plan.precision) for p in res.front} == {("fused", "mxfp8")}


# ------------------------------------------------------------------ which rule a framework refusal names first
# rules.require names first a rule whose detail starts with a knob the user set; these details started with
# something else ('dispatcher flex', 'account_for_*_in_pipeline_split', the GPU's name), so a rule left at a
# default was named instead, the user's knob hidden in '[+N more]'


@pytest.mark.parametrize("args, rule, detail", [
    (["--model", "qwen3-30b-a3b", "--num-gpus", "16", "--ep", "8", "--framework", "deepspeed",
      "--moe-dispatcher", "flex"], "deepspeed-moe-dispatch",  # was deepspeed-recompute
     "(moe_dispatcher flex) [+2 more]"),
    (["--model", "llama3.1-8b", "--num-gpus", "16", "--pp", "2", "--framework", "torchtitan",
      "--account-for-loss-in-pipeline-split", "--account-for-embedding-in-pipeline-split"],
     "torchtitan-split-accounting",  # was torchtitan-zero12
     # [+1 more]: torchtitan-selective no longer refuses the default selective recompute (issue 29 prices op SAC)
     "(account_for_embedding_in_pipeline_split on, account_for_loss_in_pipeline_split on) [+1 more]"),
    (["--model", "llama3.1-8b", "--num-gpus", "16", "--framework", "torchtitan",
      "--gpu", "a100-80gb", "--precision", "fp8"], "torchtitan-fp8-gpu",  # was torchtitan-zero12
     "(precision fp8 on A100-SXM4-80GB, which has no tensor cores for it) [+1 more]"),
])
def test_a_framework_refusal_names_the_rule_about_the_knob_given(args, rule, detail):
    r = CliRunner().invoke(estimate_main, (["--gpu", H100] if "--gpu" not in args else []) + args)
    line = _refused(r)
    assert line.startswith(f"error: {args[args.index('--framework') + 1]}: {rule}: ") and line.endswith(detail), line
