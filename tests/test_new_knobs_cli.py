"""The session's new plan knobs and MoE degree errors, as a careless user meets them, through the API
and the CLIs (each case fails on the code before its fix):

- ``plan_search.estimate`` names the model's rule a degree breaks (``ep=7`` on Mixtral's 8 experts)
  with plan-estimate's words, through the one path both take (costmodel.estimate.plan_for_model);
- plan-search's empty space explained by the forced etp (``--ep 8 --etp 2048`` on DeepSeek-V3: etp*ep =
  16,384 divides no tp*cp*dp group the space can form with dp dividing the batch), naming etp and what fits;
- ``moe_grouped_gemm fused`` under Megatron on a GPU without MXFP8/NVFP4 (H100) is refused for the GPU, with
  loop as the fix (it said 'use mxfp8 or nvfp4', which H100 has not); without --framework it is priced (torchtitan's
  torch._grouped_mm runs on H100);
- a framework refusal names the rule about the knob the user gave first (``--framework torchtitan
  --moe-grouped-gemm loop`` named the zero left at its default, the knob hidden in '[+3 more]');
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import plan_search
from plan_search.cli.estimate import main as estimate_main
from plan_search.cli.search import main as search_main
from plan_search.models.io import InputError


def _one_line(result) -> str:
    """The one stderr line of a refused command (exit 2, no traceback)."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize("knob, value, words", [
    ("ep", 7, "ep: 7 does not divide num_experts 8; use a divisor"),
    ("etp", 3, "etp: 3 does not divide expert_ffn_hidden_size 14336; use a divisor"),
])
def test_api_names_the_models_rule_as_the_cli(knob, value, words):
    with pytest.raises(InputError) as exc:
        plan_search.estimate("mixtral-8x7b", "h100-sxm", num_gpus=8, **{knob: value})
    assert str(exc.value) == words  # was the GPU-grid arithmetic ('... make tp*cp*dp a multiple of 7')
    r = CliRunner().invoke(estimate_main, ["--model", "mixtral-8x7b", "--gpu", "h100-sxm", "--num-gpus", "8",
                                           f"--{knob}", str(value)])
    assert _one_line(r) == f"error: {words}"


def test_search_names_the_forced_etp_that_empties_the_space():
    r = CliRunner().invoke(search_main, ["--model", "deepseek-v3", "--gpu", "h100", "--ep", "8", "--etp", "2048"])
    assert r.exit_code == 3 and "Traceback" not in r.output
    msg = r.stderr.strip()
    assert len(msg.splitlines()) == 1
    # was: 'tp x pp x cp x dp must equal the GPU count, ...; or loosen the knob bounds' (no knob named)
    assert "etp: etp*ep = 2048*8 = 16384 divides no pipeline stage's tp*cp*dp GPUs" in msg
    assert "dp dividing the global batch 15360" in msg
    assert "use etp of 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024 (dividing expert_ffn_hidden_size 2048)" in msg
    # ep is named when it alone cannot fit: 256 experts over at most 8 x 16 GPUs of a batch of 16
    r = CliRunner().invoke(search_main, ["--model", "deepseek-v3", "--gpu", "h100", "--ep", "256",
                                         "--global-batch", "16"])
    assert r.exit_code == 3
    assert "ep: etp*ep = 1*256 = 256 divides no pipeline stage's" in r.stderr
    assert "use ep of 1, 2, 4, 8, 16, 32, 64, 128 (dividing num_experts 256)" in r.stderr


QWEN_H100 = ["--model", "qwen3-30b-a3b", "--gpu", "h100", "--num-gpus", "8", "--ep", "8"]


def test_fused_grouped_mlp_on_hopper_names_the_gpu_and_loop():
    r = CliRunner().invoke(estimate_main, QWEN_H100 + ["--framework", "megatron", "--moe-grouped-gemm", "fused"])
    line = _one_line(r)
    assert line.startswith("error: megatron: megatron-moe-fused-grouped-mlp: ")
    assert line.endswith("(moe_grouped_gemm fused on H100-SXM5-80GB, which has no MXFP8/NVFP4 block scaling "
                         "(use moe_grouped_gemm loop, or a Blackwell GPU))")
    with pytest.raises(InputError, match="H100-SXM5-80GB, which has no MXFP8/NVFP4"):
        plan_search.estimate("qwen3-30b-a3b", "h100", num_gpus=8, ep=8, moe_grouped_gemm="FUSED", framework="megatron")
    r = CliRunner().invoke(search_main, ["--model", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "64",
                                         "--framework", "megatron", "--moe-grouped-gemm", "fused"])
    assert r.exit_code == 3 and "use moe_grouped_gemm loop, or a Blackwell GPU" in r.stderr
    # no framework: a fused grouped GEMM runs on H100 (torch._grouped_mm), priced with one call per GEMM
    loop = plan_search.estimate("qwen3-30b-a3b", "h100", num_gpus=64, ep=8)
    fused = plan_search.estimate("qwen3-30b-a3b", "h100", num_gpus=64, ep=8, moe_grouped_gemm="fused")
    assert fused.step_time_s < loop.step_time_s


@pytest.mark.parametrize("framework, value, rule", [
    ("torchtitan", "loop", "torchtitan-moe-grouped-gemm"),
    ("deepspeed", "fused", "deepspeed-moe-grouped-gemm"),
])
def test_framework_refusal_names_the_given_knob_first(framework, value, rule):
    r = CliRunner().invoke(estimate_main, QWEN_H100 + ["--framework", framework, "--moe-grouped-gemm", value])
    line = _one_line(r)
    assert line.startswith(f"error: {framework}: {rule}: "), line  # was torchtitan-zero12 / deepspeed-recompute
    assert f"(moe_grouped_gemm {value}) [+" in line
    with pytest.raises(InputError, match=f"^{framework}: {rule}: "):
        plan_search.estimate("qwen3-30b-a3b", "h100", num_gpus=8, ep=8, moe_grouped_gemm=value, framework=framework)
