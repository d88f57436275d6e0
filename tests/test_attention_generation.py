"""The cuDNN release behind Transformer Engine's fused attention (``Plan.cudnn_sdpa``, issue 12).

NVIDIA's cudnn-frontend benchmarks measure cuDNN 9.19's SDPA 1.156x faster than 9.1's on GH100
(``planner.costmodel.compute.CUDNN_SDPA_SPEEDUP``). Checked end to end through ``plan_search.estimate``
and ``plan-estimate``: on an H100 the step's compute falls by exactly the attention time the ratio
removes (recomputed from the FLOP counting and the profile's rate), nothing else moves; on Blackwell and
under torchtitan (FlashAttention through PyTorch SDPA, not cuDNN) the knob changes nothing.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import plan_search as ps
from plan_search.cli.estimate import main
from plan_search.hardware.catalog import get_cluster
from plan_search.models import counting
from plan_search.models.catalog import get_model
from plan_search.planner.costmodel.compute import CUDNN_SDPA_SPEEDUP, FA_BACKWARD_RATIO

# one stage, no recomputation, no context parallelism: compute_s is every layer's forward + backward
PLAN = dict(num_gpus=8, tp=2, pp=1, global_batch=64, seq_len=8192, recompute="none", precision="fp8")


def _attention_s(model: str, cluster) -> float:
    """Seconds one GPU spends in fused attention over a step at the profile's (cuDNN 9.1) rate."""
    m = get_model(model)
    dp = PLAN["num_gpus"] // PLAN["tp"]
    tokens = PLAN["global_batch"] * PLAN["seq_len"] / dp
    flops = tokens * counting.attention_flops_per_token(m, PLAN["seq_len"], causal=True) / PLAN["tp"]
    rate = cluster.gpu.peak("bf16") * 1e12 * cluster.efficiency.attention_eff
    return flops * (1 + FA_BACKWARD_RATIO) / rate


@pytest.mark.parametrize("system", ["h100-sxm", "h200", "h800"])
def test_hopper_attention_at_cudnn_919_saves_its_share(system):
    cluster = get_cluster(system)
    old = ps.estimate("llama3.1-8b", cluster, cudnn_sdpa="9.1", **PLAN)
    new = ps.estimate("llama3.1-8b", cluster, **PLAN)  # today's release is the default
    assert old.plan.cudnn_sdpa == "9.1" and new.plan.cudnn_sdpa == "9.19"
    attn = _attention_s("llama3.1-8b", cluster)
    saved = attn * (1 - 1 / CUDNN_SDPA_SPEEDUP[1])
    assert CUDNN_SDPA_SPEEDUP[1] == pytest.approx(1.156)
    # the attention is a real share of an FP8 8K step: its saving is several percent of the compute
    assert 0.03 < saved / old.time.compute_s < 0.10
    assert old.time.compute_s - new.time.compute_s == pytest.approx(saved, rel=1e-6)
    for term in ("memory_bound_s", "tp_comm_s", "dp_comm_s", "optimizer_s", "overhead_s"):
        assert getattr(new.time, term) == pytest.approx(getattr(old.time, term), rel=1e-9), term
    assert new.step_time_s < old.step_time_s


@pytest.mark.parametrize("system, framework", [("b200", None), ("gb200-nvl72", None), ("a100-80gb", None),
                                               ("h100-sxm", "torchtitan")])
def test_no_effect_without_gh100_cudnn_attention(system, framework):
    plan = dict(PLAN, precision="bf16", zero=3 if framework == "torchtitan" else 1)
    old = ps.estimate("llama3.1-8b", system, framework=framework, **plan)
    new = ps.estimate("llama3.1-8b", system, framework=framework, cudnn_sdpa="9.19", **plan)
    assert new.step_time_s == old.step_time_s


def test_the_architecture_not_the_name_says_hopper(tmp_path):
    """A GPU is Hopper by its spec's ``architecture`` (the catalog states it, with its datasheet), not by
    its name: a cluster file that renames the H100 keeps the speedup; a GPU that states no architecture
    gets none (no Hopper measurement applied to an unknown die)."""
    h100 = get_cluster("h100-sxm")
    renamed = h100.model_copy(update={"gpu": h100.gpu.model_copy(update={"name": "our-lab-accelerator"})})
    unknown = h100.model_copy(update={"gpu": h100.gpu.model_copy(update={"architecture": None})})
    assert h100.gpu.architecture == "hopper" and get_cluster("b200").gpu.architecture == "blackwell"
    saved = _attention_s("llama3.1-8b", h100) * (1 - 1 / CUDNN_SDPA_SPEEDUP[1])
    for cluster, gain in ((renamed, saved), (unknown, 0.0)):
        old = ps.estimate("llama3.1-8b", cluster, cudnn_sdpa="9.1", **PLAN).time.compute_s
        new = ps.estimate("llama3.1-8b", cluster, **PLAN).time.compute_s
        assert old - new == pytest.approx(gain, rel=1e-6, abs=1e-12)
    f = tmp_path / "lab.yaml"
    f.write_text("base: h100-sxm\ngpu:\n  name: our-lab-accelerator\n")
    old = ps.estimate("llama3.1-8b", str(f), cudnn_sdpa="9.1", **PLAN).time.compute_s
    assert old - ps.estimate("llama3.1-8b", str(f), **PLAN).time.compute_s == pytest.approx(
        saved, rel=1e-6)


def _cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_cli_cudnn_sdpa_option():
    base = ["--model", "llama3.1-8b", "--gpu", "h100", "--num-gpus", "8", "--tp", "2", "--pp", "1",
            "--global-batch", "64", "--seq-len", "8192", "--recompute", "none", "--precision", "fp8",
            "--format", "json"]
    old = _cli(*base, "--cudnn-sdpa", "9.1")
    new = _cli(*base)  # the default: today's release
    assert old.exit_code == 0 and new.exit_code == 0, old.output + new.output
    t_old, t_new = json.loads(old.stdout)["step_time_s"], json.loads(new.stdout)["step_time_s"]
    api = ps.estimate("llama3.1-8b", "h100-sxm", cudnn_sdpa="9.19", **PLAN).step_time_s
    assert t_new == pytest.approx(api, rel=1e-9) and t_new < t_old
    bad = _cli(*base, "--cudnn-sdpa", "9.5")
    assert bad.exit_code != 0 and "Traceback" not in bad.output
    lines = [ln for ln in bad.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "cudnn" in lines[0].lower() and "9.19" in lines[0], bad.stderr
