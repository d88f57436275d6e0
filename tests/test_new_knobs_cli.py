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
- a request's (and a sweep's) knob given as one value and refused is named alone (``moe_grouped_gemm: ...``,
  not ``moe_grouped_gemm.0``); a sweep's misplaced or misspelt knob axis gets an example of its own values
  and the nearest knob name; a sweep over moe_grouped_gemm loop, fused on B200 MXFP8 prices two step times;
- a fused plan's Megatron launch flags carry the op fuser and the GLU interleave, and the notes say the env
  variable and that those flags need Megatron-LM core_v0.18.0 (the header names Megatron-Core 0.16.1);
  torchtitan's search front carries moe_grouped_gemm fused;
- the plan line of plan-estimate and plan-search says a MoE plan's kernel knobs when not at their defaults
  (``fused-experts``, ``round-robin``): fused and loop plans printed the same line.
"""

from __future__ import annotations

import csv
import json

import pytest
from click.testing import CliRunner

import plan_search
from cli_helpers import one_stderr_line
from plan_search.cli.estimate import main as estimate_main
from plan_search.cli.search import main as search_main
from plan_search.cli.sweep import main as sweep_main
from plan_search.models.io import InputError


def _one_line(result) -> str:
    """The one stderr line of a refused command (exit 2, no traceback)."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    return one_stderr_line(result)


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
    assert "or --cp 2;" in msg  # tp 8 x cp 2 x dp 1024 holds 16,384 (the default cp domain at 4,096 tokens is 1)
    r = CliRunner().invoke(search_main, ["--model", "deepseek-v3", "--gpu", "h100", "--ep", "8", "--etp", "2048",
                                         "--cp", "2", "--gpus", "16384", "--format", "json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["front"][0]["plan"]["etp"] == 2048
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
    assert "use moe_grouped_gemm loop, or a Blackwell GPU" in _one_line(r)  # refused up front (was exit 3)
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


@pytest.mark.parametrize("doc, words", [
    ({"moe_grouped_gemm": "fusde"}, "error: moe_grouped_gemm: Input should be 'loop' or 'fused' (got 'fusde')"),
    ({"knobs": {"moe_routing": "round robin"}},
     "error: moe_routing: Input should be 'topk' or 'round_robin' (got 'round robin')"),
    ({"yarn_rope_fused": "yes"}, "error: yarn_rope_fused: Input should be a valid boolean (got 'yes')"),
    # a list keeps the index of the value refused
    ({"moe_grouped_gemm": ["fused", "x"]}, "error: moe_grouped_gemm.1: Input should be 'loop' or 'fused' (got 'x')"),
])
def test_request_names_a_refused_one_value_knob_alone(tmp_path, doc, words):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"model": "qwen3-30b-a3b", "gpu": "b200", "gpus": [64], **doc}))
    assert _one_line(CliRunner().invoke(search_main, ["--request", str(path)])) == words
    with pytest.raises(InputError) as exc:
        plan_search.search(model="qwen3-30b-a3b", gpu="b200", gpus=[64], **doc)
    assert str(exc.value) == "request: " + words.removeprefix("error: ")


def _sweep(tmp_path, axes: str, *extra):
    path = tmp_path / "s.yaml"
    # the recipe knobs a search spans (issue 23) pinned to the Plan's defaults: the sweep's rows are then the plans
    # plan_search.estimate prices with the swept knob alone
    path.write_text("base: {model: qwen3-30b-a3b, gpu: b200, gpus: [64], knobs: {precision: [mxfp8], ep: [8], "
                    "moe_dispatcher: [alltoall], moe_overlap: [false], fp8_attention: [false], pp_schedule: [1f1b]}}\n"
                    f"sweep:\n{axes}")
    return CliRunner().invoke(sweep_main, [str(path), "-o", str(tmp_path / "s.csv"), "-q", "--workers", "1", *extra])


@pytest.mark.parametrize("axis, words", [
    ("moe_grouped_gemm", "a plan knob is swept as knobs.moe_grouped_gemm, e.g. knobs.moe_grouped_gemm: [loop, fused]"),
    ("yarn_rope_fused", "e.g. knobs.yarn_rope_fused: [false, true]"),  # was '[1, 2]' for every knob
    ("knobs.moe_grouped_gem", "sweep.knobs.moe_grouped_gem: no such knob; did you mean knobs.moe_grouped_gemm?"),
])
def test_sweep_axis_errors_name_the_knob_and_its_values(tmp_path, axis, words):
    assert words in _one_line(_sweep(tmp_path, f"  {axis}: [loop, fused]\n"))


def test_sweep_over_grouped_gemm_prices_fused_faster(tmp_path):
    r = _sweep(tmp_path, "  knobs.moe_grouped_gemm: [loop, FUSED]\n")
    assert r.exit_code == 0, r.output
    rows = [x for x in csv.DictReader(open(tmp_path / "s.csv")) if x["recommended"] == "True"]
    step = {x["knobs.moe_grouped_gemm"]: float(x["step_time_s"]) for x in rows}
    assert set(step) == {"loop", "fused"}
    # Qwen3-30B-A3B at ep 8: 16 local experts, one GEMM call each under loop (grouped_gemm_call_s)
    assert step["fused"] < 0.95 * step["loop"]
    assert step["fused"] == pytest.approx(plan_search.estimate(
        "qwen3-30b-a3b", "b200", **{k: (int(v) if v.isdigit() else v) for k, v in rows[1].items()
                                    if k in ("num_gpus", "tp", "pp", "dp", "cp", "vpp", "ep", "etp", "micro_batch",
                                             "zero", "recompute")},
        global_batch=int(rows[1]["plan_global_batch"]), precision="mxfp8", moe_grouped_gemm="fused",
        sequence_parallel=rows[1]["sequence_parallel"] == "True").step_time_s, rel=1e-9)


def test_fused_megatron_launch_names_what_it_needs():
    r = CliRunner().invoke(estimate_main, ["--model", "qwen3-30b-a3b", "--gpu", "b200", "--num-gpus", "64", "--ep", "8",
                                           "--precision", "mxfp8", "--moe-grouped-gemm", "fused",
                                           "--framework", "megatron", "--emit", "--format", "json"])
    assert r.exit_code == 0, r.output
    launch = json.loads(r.stdout)["launch"]
    argv = launch["config"]
    assert "--use-transformer-engine-op-fuser" in argv and "--moe-grouped-gemm" in argv
    assert argv[argv.index("--moe-mlp-glu-interleave-size") + 1] == "32"
    notes = " | ".join(launch["notes"])
    assert "export NVTE_CUTEDSL_FUSED_GROUPED_MLP=1" in notes
    assert "need Megatron-LM core_v0.18.0 or newer" in notes  # the header says Megatron-Core 0.16.1


def test_torchtitan_front_runs_fused_grouped_gemm():
    r = CliRunner().invoke(search_main, ["--model", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "64",
                                         "--framework", "torchtitan", "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["front"] and {p["plan"]["moe_grouped_gemm"] for p in doc["front"]} == {"fused"}
    assert "--moe-grouped-gemm fused" in doc["recommended_command"]


def test_plan_lines_say_fused_experts_and_round_robin():
    base = ["--model", "qwen3-30b-a3b", "--gpu", "b200", "--num-gpus", "64", "--ep", "8", "--precision", "mxfp8"]
    r = CliRunner().invoke(estimate_main, base + ["--moe-grouped-gemm", "fused", "--moe-routing", "round_robin"])
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[1].endswith(" mxfp8 ep8 etp1 alltoall fused-experts round-robin")
    r = CliRunner().invoke(estimate_main, base)
    assert r.stdout.splitlines()[1].endswith(" mxfp8 ep8 etp1 alltoall")  # the defaults say nothing
    r = CliRunner().invoke(estimate_main, ["--model", "llama3-8b", "--gpu", "b200", "--num-gpus", "8",
                                           "--moe-grouped-gemm", "fused"])
    assert "fused-experts" not in r.stdout  # a dense model: accepted, no experts, nothing said
    r = CliRunner().invoke(search_main, ["--model", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "64",
                                         "--framework", "torchtitan"])
    # torchtitan's DeepEP backend (flex) where it is faster: the search spans its dispatchers (issue 23)
    assert r.exit_code == 0 and " ep8 etp1 flex fused-experts" in r.stdout.replace("\n  ", " ")


def test_fused_grouped_mlp_refusals_all_offer_loop():
    r = CliRunner().invoke(estimate_main, ["--model", "mixtral-8x7b", "--gpu", "b200", "--num-gpus", "64", "--ep", "8",
                                           "--tp", "2", "--etp", "2", "--precision", "mxfp8",
                                           "--moe-grouped-gemm", "fused", "--framework", "megatron"])
    assert _one_line(r).endswith("(moe_grouped_gemm fused with etp 2 (use etp 1, or moe_grouped_gemm loop))")
    moe_file = {"name": "relu-moe", "num_layers": 4, "hidden_size": 1024, "num_heads": 8, "vocab_size": 32000,
                "ffn_hidden_size": 4096, "activation": "gelu", "num_experts": 8, "experts_per_token": 2,
                "expert_ffn_hidden_size": 1024, "seq_len": 2048, "global_batch": 64}
    with pytest.raises(InputError, match=r"\(moe_grouped_gemm fused with activation gelu \(use moe_grouped_gemm loop\)\)$"):
        plan_search.estimate(_spec(moe_file), "b200", num_gpus=8, ep=8, precision="mxfp8", moe_grouped_gemm="fused",
                             framework="megatron")


def _spec(doc: dict):
    from plan_search.models.spec import ModelSpec

    return ModelSpec(**doc)
